/* interrupt.c -- Ctrl-C (SIGINT) and SIGTERM during a command that writes
** an index (keel build): what the command had written is put back, the user
** is told "interrupted" and what was kept, and the exit status is 128 plus
** the signal's number (130 for SIGINT, 143 for SIGTERM), as a shell reports
** a command a signal stopped.
**
** The command moves through phases (cli_interrupt_phase). In a phase where
** keel works (linking, flushing) the handler only notes the signal: the
** library's cancel callback (cli_interrupt_cancel) stops linking at its
** next look, about twenty times a second, and the command cleans up in
** ordinary code. In a phase that waits for input (reading a file, standard
** input), which no callback would interrupt, the handler finishes the
** command itself with async-signal-safe calls only: it removes the file
** this build created (unlink), writes the message the command prepared for
** the phase (write) and exits (_exit). A second signal in a keel phase does
** the same at once, for a user who does not want to wait.
**
** Invariants:
**   (1) The handler touches only volatile sig_atomic_t words and the
**       message and path buffers, which are written only while the signals
**       are blocked (cli_interrupt_phase), so it never reads one half-made.
**   (2) The file is removed by the handler only if the command created it
**       (the path was empty before the build), never an index it appends to.
*/
#define _POSIX_C_SOURCE 200809L

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static volatile sig_atomic_t phase = CLI_PHASE_OFF;
static volatile sig_atomic_t caught; /* the signal's number, 0 if none */
static volatile sig_atomic_t remove_on_exit;
static char path_buf[4096];
static char msg_buf[1024];
static size_t msg_len;

static void
write_all(const char *s, size_t n)
{
    while (n > 0) {
        ssize_t w = write(STDERR_FILENO, s, n);
        if (w <= 0)
            return;
        s += w;
        n -= (size_t)w;
    }
}

static void
on_signal(int sig)
{
    int again = caught != 0;

    caught = sig;
    if (phase == CLI_PHASE_KEEL && !again)
        return; /* the cancel callback and the command take it from here */
    if (remove_on_exit)
        (void)unlink(path_buf);
    write_all(msg_buf, msg_len);
    _exit(128 + sig);
}

void
cli_interrupt_install(void)
{
    struct sigaction sa;

    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, SIGINT);
    sigaddset(&sa.sa_mask, SIGTERM);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

void
cli_interrupt_phase(int p, const char *path, int created, const char *fmt,
                    ...)
{
    sigset_t block, old;
    va_list ap;
    int n;

    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    sigprocmask(SIG_BLOCK, &block, &old);
    phase = p;
    if (path != NULL) {
        snprintf(path_buf, sizeof path_buf, "%s", path);
        remove_on_exit = created && path_buf[0] != '\0';
    }
    va_start(ap, fmt);
    n = vsnprintf(msg_buf, sizeof msg_buf, fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    msg_len = (size_t)n < sizeof msg_buf ? (size_t)n : sizeof msg_buf - 1;
    sigprocmask(SIG_SETMASK, &old, NULL);
}

int
cli_interrupted(void)
{
    return caught;
}

int
cli_interrupt_cancel(void *arg)
{
    (void)arg;
    return caught != 0;
}
