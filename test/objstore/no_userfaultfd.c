/* no_userfaultfd.c -- runs a command the way a container's default seccomp
** profile (Docker, containerd, Kubernetes RuntimeDefault) would: the
** userfaultfd system call fails with EPERM, everything else is allowed.
**
**   no_userfaultfd CMD [ARG ...]
**
** A classic BPF filter installed with prctl(PR_SET_SECCOMP) after
** PR_SET_NO_NEW_PRIVS (so no privilege is needed); exec keeps it for the
** command and all its children. A test tool: it calls the system
** directly, as nothing in src/ may.
*/
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__)
#define ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define ARCH AUDIT_ARCH_AARCH64
#else
#error "no_userfaultfd: add this machine's AUDIT_ARCH"
#endif

int
main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: no_userfaultfd CMD [ARG ...]\n"
                        "runs CMD with the userfaultfd system call "
                        "refused (EPERM)\n");
        return 2;
    }
    struct sock_filter f[] = {
        /* Another architecture's calls: refused, as they could dodge the
         * number test below. */
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ARCH, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_userfaultfd, 0, 1),
        BPF_STMT(BPF_RET | BPF_K,
                 SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {sizeof f / sizeof f[0], f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
        fprintf(stderr, "no_userfaultfd: cannot install the filter: %s\n",
                strerror(errno));
        return 2;
    }
    /* The filter works: userfaultfd is refused here. */
    if (syscall(SYS_userfaultfd, 0) >= 0 || errno != EPERM) {
        fprintf(stderr, "no_userfaultfd: the filter did not refuse "
                        "userfaultfd\n");
        return 2;
    }
    execvp(argv[1], argv + 1);
    fprintf(stderr, "no_userfaultfd: cannot run %s: %s\n", argv[1],
            strerror(errno));
    return 127;
}
