/* os.h -- the only door from keel to the operating system.
**
** Every system call keel makes goes through the table below, so tests can
** replace it: fail a call with EIO or ENOSPC, shorten a write, or record
** writes and syncs to compose power-loss images. os_posix.c holds the real
** table; keel__os points at it unless a test swaps it (before any index is
** opened, or between indexes).
**
** Every function returns 0 (or a non-negative count) on success and -errno on
** failure. None of them records an error message: the caller knows which
** value it was working on and says so.
*/
#ifndef KEEL_OS_H
#define KEEL_OS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* What kind of file a path names (keel_file_info.type). */
enum keel_file_type {
    KEEL_FILE_REGULAR,
    KEEL_FILE_DIRECTORY,
    KEEL_FILE_FIFO,
    KEEL_FILE_CHAR_DEVICE,
    KEEL_FILE_BLOCK_DEVICE,
    KEEL_FILE_SOCKET,
    KEEL_FILE_OTHER
};

typedef struct keel_file_info {
    uint64_t size;      /* bytes */
    uint64_t allocated; /* bytes the file system holds (st_blocks * 512) */
    uint64_t dev, ino;  /* identity, to notice a file replaced by rename */
    int is_regular;     /* 1 for a regular file */
    int type;           /* enum keel_file_type */
    int64_t mtime_ns;   /* last modification, ns since the epoch */
    uint32_t uid;       /* the owner's user id */
    uint32_t mode;      /* permission bits (07777) */
} keel_file_info;

/* Advice kinds for madvise_range. */
enum keel_advice {
    KEEL_ADV_POPULATE_READ, /* read pages in now (falls back to WILLNEED) */
    KEEL_ADV_WILLNEED,
    KEEL_ADV_HUGEPAGE,
    KEEL_ADV_RANDOM,
    KEEL_ADV_NORMAL,
    KEEL_ADV_DONTFORK       /* a child made by fork() does not get the range */
};

/* Flags for open. */
#define KEEL_OPEN_READ   0   /* read-only */
#define KEEL_OPEN_WRITE  1   /* read and write */
#define KEEL_OPEN_CREATE 2   /* with WRITE: create; fails if it exists */
#define KEEL_OPEN_PRIVATE 4  /* with CREATE: mode 0600, not 0644 */

typedef struct keel_os {
    /* Opens a file (close-on-exec); returns the descriptor. Created files get
     * mode 0644 less the umask. The open never blocks: a FIFO or a device
     * at the path opens at once (non-blocking; the caller's stat refuses
     * it), where a blocking open of a FIFO would wait for a writer forever.
     * A regular file's descriptor is left blocking. */
    int (*open)(const char *path, int flags);
    int (*close)(int fd);
    /* Whole reads and writes: they loop over short transfers and return the
     * byte count (a short count only at end of file for pread). */
    ssize_t (*pread)(int fd, void *buf, size_t n, uint64_t off);
    ssize_t (*pwrite)(int fd, const void *buf, size_t n, uint64_t off);
    /* Makes the file's data durable (fdatasync; F_FULLFSYNC on Apple). */
    int (*sync)(int fd);
    /* Makes the directory entries under dir durable. */
    int (*sync_dir)(const char *dir);
    /* Sets the file's length (only ever grows it in keel). */
    int (*truncate)(int fd, uint64_t len);
    /* Reserves disk blocks for [off, off+len) so writes through a mapping
     * never meet a full disk. */
    int (*allocate)(int fd, uint64_t off, uint64_t len);
    int (*stat)(int fd, keel_file_info *out);
    int (*stat_path)(const char *path, keel_file_info *out);
    /* Maps [off, off+len) of fd shared; writable if write. *out = address. */
    int (*map)(int fd, uint64_t off, size_t len, int write, void **out);
    int (*unmap)(void *addr, size_t len);
    int (*advise)(void *addr, size_t len, enum keel_advice advice);
    /* Exclusive, non-blocking advisory lock on the whole file (flock).
     * -EWOULDBLOCK when another descriptor holds it. Held until close(fd);
     * a child made by fork() does not keep it (on Linux). */
    int (*lock)(int fd);
    /* Which process holds the lock (lock) on fd's file, as the system lists
     * it (Linux: /proc/locks): 0 and *pid, with *pid 0 when it is this
     * process; -ENOENT when the system does not say. */
    int (*lock_holder)(int fd, long *pid);
    /* The canonical path of an existing file (symbolic links resolved), in
     * out (out_len bytes). */
    int (*resolve)(const char *path, char *out, size_t out_len);
    int (*unlink)(const char *path);
    int (*rename)(const char *from, const char *to);
    /* Drops the file's clean pages from the page cache (tests, benchmarks). */
    int (*evict)(int fd);
    /* Resident pages of a mapping: vec gets one byte per page (mincore). */
    int (*resident)(void *addr, size_t len, unsigned char *vec);
    /* n random bytes from the system (getrandom). */
    int (*random)(void *buf, size_t n);
    /* An anonymous file in memory, read-write and close-on-exec, with no
     * name in any directory (memfd_create; else an unnamed file in
     * /dev/shm): the backing of an index opened as ":memory:". It goes
     * away with its last descriptor and mapping. name labels it in
     * /proc/PID/fd only. */
    int (*memfd)(const char *name);

    /* The page cache of a published index (cache/): */
    /* Waits up to timeout_ms for fd to be readable: 1, 0 on timeout. */
    int (*wait_readable)(int fd, int timeout_ms);
    /* A userfaultfd for this process's own faults (user mode only, so no
     * privilege is needed), non-blocking and close-on-exec, its API agreed
     * with no extra features. */
    int (*uffd_open)(void);
    /* Registers [addr, addr+len) for missing-page faults. */
    int (*uffd_register)(int uffd, void *addr, size_t len);
    /* The next fault of uffd: 1 and its address, 0 if none is waiting (or
     * the message was another event), or -errno. */
    int (*uffd_next)(int uffd, uintptr_t *addr);
    /* Wakes the threads waiting on faults in [addr, addr+len). */
    int (*uffd_wake)(int uffd, void *addr, size_t len);
    /* Frees the bytes [off, off+len) of fd (a hole; reads give zeros). */
    int (*punch)(int fd, uint64_t off, uint64_t len);
    /* The offset of the first byte at or after off that is not in a hole
     * of fd (lseek SEEK_DATA): 0 and *data, or -ENXIO when only holes
     * follow. A read through a mapping of a memfd's hole fills it. */
    int (*seek_data)(int fd, uint64_t off, uint64_t *data);
    /* Creates a directory (mode 0700); an existing one is not an error. */
    int (*mkdir)(const char *path);
    /* Calls fn for each entry of dir but . and ..; stops at fn's first
     * nonzero answer and returns it. */
    int (*list_dir)(const char *dir, int (*fn)(const char *name, void *arg),
                    void *arg);
    /* Sets a file's modification time to now. */
    int (*touch)(const char *path);
} keel_os;

/* The table in use. Tests may point it at their own table. */
extern const keel_os *keel__os;
/* The real one. */
extern const keel_os keel__os_posix;

/* The user id this process acts as (its effective uid). */
uint32_t keel__euid(void);

/* The system page size, and 2 MiB huge pages where the system has them. */
size_t keel__page_size(void);

#endif /* KEEL_OS_H */
