/* os_posix.c -- the real operating-system table: every system call keel
** makes, on Linux and other POSIX systems.
**
** This is the only file that includes <fcntl.h>, <sys/mman.h> or
** <sys/file.h>, and the only place with #ifdefs on the operating system.
** Each function returns 0 (or a count) or -errno; none records a message.
*/
#include "base/internal.h"
#include "os/os.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <pthread.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>
#include <dirent.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#ifdef __linux__
#include <linux/userfaultfd.h>
#endif

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14; older kernels answer EINVAL */
#endif

static int
os_open(const char *path, int flags)
{
    int f = (flags & KEEL_OPEN_WRITE) ? O_RDWR : O_RDONLY;
    if (flags & KEEL_OPEN_CREATE)
        f |= O_CREAT | O_EXCL;
    int fd;
    do {
        fd = open(path, f | O_CLOEXEC | O_NONBLOCK,
                  (flags & KEEL_OPEN_PRIVATE) ? 0600 : 0644);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0)
        return -errno;
    /* Only a regular file goes back to blocking: anything else is refused
     * by the caller's stat before a read could wait on it. */
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
        int fl = fcntl(fd, F_GETFL);
        if (fl >= 0)
            (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    }
    return fd;
}

/* --- writer locks a forked child does not keep ------------------------
**
** flock belongs to the open file description, and a child made by fork()
** shares every description of its parent, through its copies of the
** descriptors and through its copies of the mappings (a mapping holds the
** description it was made from). A child that lives on (a worker pool,
** multiprocessing) would keep the parent's writer lock after the parent
** closes the index. So:
**
**   - the lock is taken on a description of its own, opened again through
**     /proc/self/fd, close-on-exec and never mapped, and a fork handler
**     closes it in the child (without /proc the lock is taken on the
**     descriptor itself, which the child's handle still owns);
**   - the parent's close unlocks that description (LOCK_UN) before closing
**     it: a child that still holds a copy -- one whose handler has not run
**     yet, or one forked without the handlers (vfork, clone) -- then holds
**     an unlocked description, and the lock lives exactly as long as the
**     parent holds it;
**   - a fork never falls between the open of a lock descriptor and its
**     entry in the list: os_lock opens, locks and lists it (or closes it)
**     under locked_mutex, which fork_prepare takes, with room for the entry
**     made before the open, so nothing can fail between lock and insert.
**
** Invariant: every locked description is listed here with the descriptor
** it locks for, from the lock until that one's close; a child's list is
** empty, so nothing a child closes unlocks its parent's lock. */

typedef struct locked_fd {
    int fd;        /* the caller's descriptor */
    int lock_fd;   /* the description that holds the lock; fd without /proc */
} locked_fd;

static pthread_mutex_t locked_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t locked_once = PTHREAD_ONCE_INIT;
static locked_fd *locked;
static size_t nlocked, locked_cap;

static void
fork_prepare(void)
{
    pthread_mutex_lock(&locked_mutex);
}

static void
fork_parent(void)
{
    pthread_mutex_unlock(&locked_mutex);
}

/* The child: one thread, async-signal-safe calls only. */
static void
fork_child(void)
{
    for (size_t i = 0; i < nlocked; i++)
        if (locked[i].lock_fd != locked[i].fd)
            close(locked[i].lock_fd);
    nlocked = 0;
    pthread_mutex_unlock(&locked_mutex);
}

static void
locked_init(void)
{
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

/* Makes room for one more entry (locked_mutex held). */
static int
locked_reserve(void)
{
    if (nlocked < locked_cap)
        return 0;
    size_t cap = locked_cap ? 2 * locked_cap : 8;
    locked_fd *l = realloc(locked, cap * sizeof *l);
    if (!l)
        return -ENOMEM;
    locked = l;
    locked_cap = cap;
    return 0;
}

/* Unlocks and closes the lock descriptor listed for fd, if any (fd itself
** is only unlocked: the caller closes it). */
static void
locked_remove(int fd)
{
    pthread_mutex_lock(&locked_mutex);
    for (size_t i = 0; i < nlocked; i++)
        if (locked[i].fd == fd) {
            int l = locked[i].lock_fd;
            while (flock(l, LOCK_UN) < 0 && errno == EINTR) {
            }
            if (l != fd)
                close(l);
            locked[i] = locked[--nlocked];
            break;
        }
    pthread_mutex_unlock(&locked_mutex);
}

/* A new description of the file fd is open on, or fd itself without /proc
** (locked_mutex held: the descriptor is unlisted until the caller lists it). */
static int
reopen_for_lock(int fd)
{
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    int l;
    do {
        l = open(proc, O_RDONLY | O_CLOEXEC);
    } while (l < 0 && errno == EINTR);
    struct stat a, b;
    if (l >= 0 && (fstat(fd, &a) != 0 || fstat(l, &b) != 0 ||
                   a.st_dev != b.st_dev || a.st_ino != b.st_ino)) {
        close(l);
        l = -1;
    }
    return l >= 0 ? l : fd;
}

static int
os_close(int fd)
{
    locked_remove(fd);
    return close(fd) == 0 ? 0 : -errno;
}

static ssize_t
os_pread(int fd, void *buf, size_t n, uint64_t off)
{
    size_t done = 0;
    while (done < n) {
        ssize_t r = pread(fd, (char *)buf + done, n - done, (off_t)(off + done));
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (r == 0)
            break;
        done += (size_t)r;
    }
    return (ssize_t)done;
}

static ssize_t
os_pwrite(int fd, const void *buf, size_t n, uint64_t off)
{
    size_t done = 0;
    while (done < n) {
        ssize_t r = pwrite(fd, (const char *)buf + done, n - done,
                           (off_t)(off + done));
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (r == 0)
            return -EIO;
        done += (size_t)r;
    }
    return (ssize_t)done;
}

static int
os_sync(int fd)
{
#if defined(__APPLE__)
    if (fcntl(fd, F_FULLFSYNC) == 0)
        return 0;
    return -errno;
#else
    return fdatasync(fd) == 0 ? 0 : -errno;
#endif
}

static int
os_sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rc = fsync(fd) == 0 ? 0 : -errno;
    close(fd);
    return rc;
}

static int
os_truncate(int fd, uint64_t len)
{
    int r;
    do {
        r = ftruncate(fd, (off_t)len);
    } while (r < 0 && errno == EINTR);
    return r == 0 ? 0 : -errno;
}

static int
os_allocate(int fd, uint64_t off, uint64_t len)
{
    if (len == 0)
        return 0;
    /* posix_fallocate returns the error instead of setting errno; on file
     * systems without fallocate glibc writes a byte per block, which is
     * harmless here because keel only reserves ranges it has not written. */
    int r;
    do {
        r = posix_fallocate(fd, (off_t)off, (off_t)len);
    } while (r == EINTR);
    return -r;
}

static void
fill_info(const struct stat *st, keel_file_info *out)
{
    out->size = (uint64_t)st->st_size;
    out->allocated = (uint64_t)st->st_blocks * 512u;
    out->dev = (uint64_t)st->st_dev;
    out->ino = (uint64_t)st->st_ino;
    out->is_regular = S_ISREG(st->st_mode) ? 1 : 0;
    out->type = S_ISREG(st->st_mode)    ? KEEL_FILE_REGULAR
                : S_ISDIR(st->st_mode)  ? KEEL_FILE_DIRECTORY
                : S_ISFIFO(st->st_mode) ? KEEL_FILE_FIFO
                : S_ISCHR(st->st_mode)  ? KEEL_FILE_CHAR_DEVICE
                : S_ISBLK(st->st_mode)  ? KEEL_FILE_BLOCK_DEVICE
                : S_ISSOCK(st->st_mode) ? KEEL_FILE_SOCKET
                                        : KEEL_FILE_OTHER;
    out->mtime_ns = (int64_t)st->st_mtim.tv_sec * 1000000000 +
                    st->st_mtim.tv_nsec;
    out->uid = (uint32_t)st->st_uid;
    out->mode = (uint32_t)st->st_mode & 07777;
}

uint32_t
keel__euid(void)
{
    return (uint32_t)geteuid();
}

static int
os_stat(int fd, keel_file_info *out)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return -errno;
    fill_info(&st, out);
    return 0;
}

static int
os_stat_path(const char *path, keel_file_info *out)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return -errno;
    fill_info(&st, out);
    return 0;
}

#define HUGE_BYTES ((size_t)2 << 20)

/* Maps a region so that its address and its file offset agree modulo
** 2 MiB: then every 2 MiB-aligned piece of the file sits at a 2 MiB-aligned
** address, and the system can map it with one huge page when asked
** (KEEL_HUGE_PAGES) and the page cache holds it as one folio. Regions under
** 2 MiB are mapped wherever the system likes. */
static int
os_map(int fd, uint64_t off, size_t len, int write, void **out)
{
    int prot = PROT_READ | (write ? PROT_WRITE : 0);
    if (len < HUGE_BYTES) {
        void *p = mmap(NULL, len, prot, MAP_SHARED, fd, (off_t)off);
        if (p == MAP_FAILED)
            return -errno;
        *out = p;
        return 0;
    }
    size_t span = len + HUGE_BYTES;
    char *r = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (r == MAP_FAILED)
        return -errno;
    uintptr_t want = (uintptr_t)(off % HUGE_BYTES);
    uintptr_t a = ((uintptr_t)r & ~(uintptr_t)(HUGE_BYTES - 1)) + want;
    if (a < (uintptr_t)r)
        a += HUGE_BYTES;
    void *p = mmap((void *)a, len, prot, MAP_SHARED | MAP_FIXED, fd, (off_t)off);
    if (p == MAP_FAILED) {
        int err = errno;
        munmap(r, span);
        return -err;
    }
    /* Give back the reservation around the mapping. */
    if (a > (uintptr_t)r)
        munmap(r, a - (uintptr_t)r);
    uintptr_t end = a + len, rend = (uintptr_t)r + span;
    size_t page = keel__page_size();
    end = (end + page - 1) & ~(uintptr_t)(page - 1);
    if (rend > end)
        munmap((void *)end, rend - end);
    *out = p;
    return 0;
}

static int
os_unmap(void *addr, size_t len)
{
    return munmap(addr, len) == 0 ? 0 : -errno;
}

static int
os_advise(void *addr, size_t len, enum keel_advice advice)
{
    int a;
    switch (advice) {
    case KEEL_ADV_POPULATE_READ:
        if (madvise(addr, len, MADV_POPULATE_READ) == 0)
            return 0;
        if (errno != EINVAL)
            return -errno;
        a = MADV_WILLNEED; /* before Linux 5.14 */
        break;
    case KEEL_ADV_WILLNEED: a = MADV_WILLNEED; break;
#ifdef MADV_HUGEPAGE
    case KEEL_ADV_HUGEPAGE: a = MADV_HUGEPAGE; break;
#else
    case KEEL_ADV_HUGEPAGE: return -EINVAL;
#endif
    case KEEL_ADV_RANDOM: a = MADV_RANDOM; break;
    case KEEL_ADV_DONTFORK: a = MADV_DONTFORK; break;
    default: a = MADV_NORMAL; break;
    }
    return madvise(addr, len, a) == 0 ? 0 : -errno;
}

static int
os_lock(int fd)
{
    pthread_once(&locked_once, locked_init);
    /* Held from before the open of the lock descriptor until it is listed
     * or closed: no fork copies it unlisted (see the banner above). */
    pthread_mutex_lock(&locked_mutex);
    int err = locked_reserve();
    if (err) {
        pthread_mutex_unlock(&locked_mutex);
        return err;
    }
    int l = reopen_for_lock(fd), r;
    do {
        r = flock(l, LOCK_EX | LOCK_NB);
    } while (r < 0 && errno == EINTR);
    err = r == 0 ? 0 : -errno;
    if (!err)
        locked[nlocked++] = (locked_fd){fd, l};
    else if (l != fd)
        close(l);
    pthread_mutex_unlock(&locked_mutex);
    return err;
}

/* /proc/locks lists each flock as "N: FLOCK ADVISORY WRITE PID MAJ:MIN:INO
** START END" (major and minor in hex); a waiter's line has "->" after N:. */
static int
os_lock_holder(int fd, long *pid)
{
    struct stat sb;
    if (fstat(fd, &sb) != 0)
        return -errno;
    FILE *f = fopen("/proc/locks", "re");
    if (!f)
        return -ENOENT;
    char line[256];
    int err = -ENOENT;
    while (fgets(line, sizeof line, f)) {
        char kind[16], mode[16], rw[16];
        long p;
        unsigned maj, min;
        unsigned long long ino;
        if (sscanf(line, "%*d: %15s %15s %15s %ld %x:%x:%llu", kind, mode, rw,
                   &p, &maj, &min, &ino) != 7 ||
            strcmp(kind, "FLOCK") != 0)
            continue;
        if (ino == (unsigned long long)sb.st_ino &&
            maj == major(sb.st_dev) && min == minor(sb.st_dev)) {
            *pid = p == (long)getpid() ? 0 : p;
            err = 0;
            break;
        }
    }
    fclose(f);
    return err;
}

static int
os_random(void *buf, size_t n)
{
    uint8_t *p = buf;
    while (n) {
        ssize_t got = getrandom(p, n, 0);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return got < 0 ? -errno : -EIO;
        p += got;
        n -= (size_t)got;
    }
    return 0;
}

static int
os_resolve(const char *path, char *out, size_t out_len)
{
    char *r = realpath(path, NULL);
    if (!r)
        return -errno;
    size_t n = strlen(r);
    int rc = n < out_len ? 0 : -ENAMETOOLONG;
    if (!rc)
        memcpy(out, r, n + 1);
    free(r);
    return rc;
}

static int
os_unlink(const char *path)
{
    return unlink(path) == 0 ? 0 : -errno;
}

static int
os_rename(const char *from, const char *to)
{
    return rename(from, to) == 0 ? 0 : -errno;
}

static int
os_evict(int fd)
{
    fdatasync(fd);
    int r = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    return -r;
}

static int
os_resident(void *addr, size_t len, unsigned char *vec)
{
    return mincore(addr, len, vec) == 0 ? 0 : -errno;
}

static int
os_memfd(const char *name)
{
    int fd;
#if defined(__linux__) && defined(MFD_CLOEXEC)
    fd = memfd_create(name, MFD_CLOEXEC);
    if (fd >= 0 || errno != ENOSYS)
        return fd >= 0 ? fd : -errno;
#else
    (void)name;
#endif
#ifdef O_TMPFILE
    fd = open("/dev/shm", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    return fd >= 0 ? fd : -errno;
#else
    return -ENOSYS;
#endif
}

static int
os_wait_readable(int fd, int timeout_ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int r = poll(&p, 1, timeout_ms);
    return r > 0 ? 1 : r == 0 ? 0 : -errno;
}

#if defined(__linux__) && defined(UFFD_USER_MODE_ONLY)
static int
os_uffd_open(void)
{
    int fd = (int)syscall(SYS_userfaultfd,
                          O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);
    if (fd < 0)
        return -errno;
    struct uffdio_api api = {.api = UFFD_API, .features = 0};
    if (ioctl(fd, UFFDIO_API, &api) != 0) {
        int err = errno;
        close(fd);
        return -err;
    }
    return fd;
}

static int
os_uffd_register(int uffd, void *addr, size_t len)
{
    struct uffdio_register r = {
        .range = {.start = (uintptr_t)addr, .len = len},
        .mode = UFFDIO_REGISTER_MODE_MISSING};
    return ioctl(uffd, UFFDIO_REGISTER, &r) == 0 ? 0 : -errno;
}

static int
os_uffd_next(int uffd, uintptr_t *addr)
{
    struct uffd_msg m;
    ssize_t n = read(uffd, &m, sizeof m);
    if (n < 0)
        return errno == EAGAIN ? 0 : -errno;
    if (n != (ssize_t)sizeof m || m.event != UFFD_EVENT_PAGEFAULT)
        return 0;
    *addr = (uintptr_t)m.arg.pagefault.address;
    return 1;
}

static int
os_uffd_wake(int uffd, void *addr, size_t len)
{
    struct uffdio_range r = {.start = (uintptr_t)addr, .len = len};
    return ioctl(uffd, UFFDIO_WAKE, &r) == 0 ? 0 : -errno;
}
#else
static int os_uffd_open(void) { return -ENOSYS; }
static int
os_uffd_register(int uffd, void *addr, size_t len)
{
    (void)uffd, (void)addr, (void)len;
    return -ENOSYS;
}
static int
os_uffd_next(int uffd, uintptr_t *addr)
{
    (void)uffd, (void)addr;
    return -ENOSYS;
}
static int
os_uffd_wake(int uffd, void *addr, size_t len)
{
    (void)uffd, (void)addr, (void)len;
    return -ENOSYS;
}
#endif

static int
os_punch(int fd, uint64_t off, uint64_t len)
{
#ifdef FALLOC_FL_PUNCH_HOLE
    return fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                     (off_t)off, (off_t)len) == 0 ? 0 : -errno;
#else
    (void)fd, (void)off, (void)len;
    return -EOPNOTSUPP;
#endif
}

static int
os_seek_data(int fd, uint64_t off, uint64_t *data)
{
#ifdef SEEK_DATA
    off_t r = lseek(fd, (off_t)off, SEEK_DATA);
    if (r < 0)
        return -errno;
    *data = (uint64_t)r;
    return 0;
#else
    (void)fd, (void)off, (void)data;
    return -EOPNOTSUPP;
#endif
}

static int
os_mkdir(const char *path)
{
    return mkdir(path, 0700) == 0 || errno == EEXIST ? 0 : -errno;
}

static int
os_list_dir(const char *dir, int (*fn)(const char *name, void *arg), void *arg)
{
    DIR *d = opendir(dir);
    if (!d)
        return -errno;
    int rc = 0;
    struct dirent *e;
    while (!rc && (e = readdir(d)))
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            rc = fn(e->d_name, arg);
    closedir(d);
    return rc;
}

static int
os_touch(const char *path)
{
    return utimensat(AT_FDCWD, path, NULL, 0) == 0 ? 0 : -errno;
}

const keel_os keel__os_posix = {
    .open = os_open,
    .close = os_close,
    .pread = os_pread,
    .pwrite = os_pwrite,
    .sync = os_sync,
    .sync_dir = os_sync_dir,
    .truncate = os_truncate,
    .allocate = os_allocate,
    .stat = os_stat,
    .stat_path = os_stat_path,
    .map = os_map,
    .unmap = os_unmap,
    .advise = os_advise,
    .lock = os_lock,
    .lock_holder = os_lock_holder,
    .resolve = os_resolve,
    .unlink = os_unlink,
    .rename = os_rename,
    .evict = os_evict,
    .resident = os_resident,
    .random = os_random,
    .memfd = os_memfd,
    .wait_readable = os_wait_readable,
    .uffd_open = os_uffd_open,
    .uffd_register = os_uffd_register,
    .uffd_next = os_uffd_next,
    .uffd_wake = os_uffd_wake,
    .punch = os_punch,
    .seek_data = os_seek_data,
    .mkdir = os_mkdir,
    .list_dir = os_list_dir,
    .touch = os_touch,
};

const keel_os *keel__os = &keel__os_posix;

size_t
keel__page_size(void)
{
    long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? (size_t)p : 4096u;
}
