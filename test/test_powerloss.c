/* test_powerloss.c -- simulated power loss at every sync, and proof that the
** suite catches broken commit protocols.
**
** A recording OS layer (os.h) watches the index file and its undo log. At
** every sync of either, and between operations, it composes crash images:
** the bytes durable at the last sync plus each change since then kept,
** dropped, or torn (per 512-byte sector, and within a torn sector per
** aligned 8-byte word), with the length old or new, and the undo log present
** or not where its creation or removal was not yet durable. Changes made
** through the index's mappings are found by comparing the file with its last
** durable image, so they count as writes too.
**
** Each image is checked three ways:
**   1. a reader opens it as found (no recovery) and sees an accepted state:
**      the last completed flush or the one in progress, with every live id's
**      vector byte-exact, and searches that return only live ids at their
**      true distances;
**   2. a writer opens it (recovery; recovery's own syncs are crash points
**      too, checked with 1 and 3) and lands on an accepted state, with every
**      committed vector found by searching for itself;
**   3. one more add, delete and flush, then a reopen, shows exactly that.
** Then the same workload runs under each protocol mutant (format.h) in a
** child process, and each must be caught.
*/
#include "test.h"
#include "lib/testdata.h"

#include <fcntl.h>
#include <sys/wait.h>

#include "store/format.h"
#include "os/os.h"

#define DIM 32
#define MAXID 400
#define SECTOR 512

/* Thousands of small image files: keep them in memory. */
TEST_PREFER_MEMORY_FS()

/* --- states -------------------------------------------------------------- */

typedef struct state {
    uint8_t live[MAXID];
    uint64_t next_id;
    int none;                 /* no index yet (creation in progress) */
} state;

static int
state_eq(const state *a, const state *b)
{
    if (a->none || b->none)
        return a->none == b->none;
    return a->next_id == b->next_id && memcmp(a->live, b->live, MAXID) == 0;
}

/* --- the recording OS layer ------------------------------------------------ */

typedef struct sim_file {
    char path[700];
    uint8_t *durable;
    size_t dlen;
    int dexists;
} sim_file;

struct sim;
typedef void (*crash_fn)(struct sim *s, int file, const char *where);

typedef struct sim {
    sim_file f[2];            /* index, undo log */
    crash_fn crash;
    int depth;                /* 0: the workload; 1: a recovery under test */
} sim;

static sim *active[2];
static int nactive;
static signed char fd_sim[8192], fd_file[8192];
static uint64_t rng = 0x1234567;

typedef struct tally {
    long points, images, reader_fail, writer_fail, after_fail, misses,
         nested_points, strict_images;
} tally;
static tally T;
static int quiet;

/* A failure. Under a mutant (quiet) the first one is enough: the child
** exits, reporting it caught. */
static void
complain(const char *what, const char *path, long n)
{
    if (quiet)
        _exit(1);
    fprintf(stderr, "%s: %s (%ld)\n", what, path, n);
}

static int
read_all(const char *path, uint8_t **buf, size_t *len)
{
    int fd = keel__os_posix.open(path, KEEL_OPEN_READ);
    if (fd < 0) {
        *buf = NULL;
        *len = 0;
        return 0;
    }
    keel_file_info fi;
    keel__os_posix.stat(fd, &fi);
    *len = (size_t)fi.size;
    *buf = malloc(*len ? *len : 1);
    keel__os_posix.pread(fd, *buf, *len, 0);
    keel__os_posix.close(fd);
    return 1;
}

static void
make_durable(sim_file *f)
{
    free(f->durable);
    f->dexists = read_all(f->path, &f->durable, &f->dlen);
}

static int
rec_open(const char *path, int flags)
{
    int fd = keel__os_posix.open(path, flags);
    if (fd >= 0 && fd < 8192) {
        fd_sim[fd] = -1;
        for (int s = 0; s < nactive; s++)
            for (int i = 0; i < 2; i++)
                if (strcmp(active[s]->f[i].path, path) == 0) {
                    fd_sim[fd] = (signed char)s;
                    fd_file[fd] = (signed char)i;
                }
    }
    return fd;
}

static int
rec_close(int fd)
{
    if (fd >= 0 && fd < 8192)
        fd_sim[fd] = -1;
    return keel__os_posix.close(fd);
}

static int
rec_sync(int fd)
{
    if (fd >= 0 && fd < 8192 && fd_sim[fd] >= 0) {
        sim *s = active[(int)fd_sim[fd]];
        int i = fd_file[fd];
        s->crash(s, i, "sync");
        make_durable(&s->f[i]);
    }
    /* Durability is simulated: the real sync would only cost time. */
    return 0;
}

static int
rec_sync_dir(const char *dir)
{
    /* Creations and removals in the directory become durable (contents
     * stay as durable as they were). */
    for (int s = 0; s < nactive; s++)
        for (int i = 0; i < 2; i++) {
            sim_file *f = &active[s]->f[i];
            uint8_t *b;
            size_t n;
            int exists = read_all(f->path, &b, &n);
            free(b);
            if (!exists) {
                free(f->durable);
                f->durable = NULL;
                f->dlen = 0;
            }
            f->dexists = exists;
        }
    KEEL_UNUSED(dir);
    return 0;
}

static keel_os rec_os;

/* --- composing images -------------------------------------------------------- */

static uint64_t
rnd(void)
{
    return test_rand(&rng);
}

/* Composes file f's crash image (variant 0: nothing since the last sync,
** 1: everything, 2 and 3: a random mix). Returns 0 if the file is absent.
** *pending gets whether anything was not yet durable. */
static int
compose(const sim_file *f, int variant, uint8_t **out, size_t *len,
        int *pending)
{
    uint8_t *cur;
    size_t clen;
    int cexists = read_all(f->path, &cur, &clen);
    *pending = cexists != f->dexists || clen != f->dlen ||
               (cexists && memcmp(cur, f->durable, clen) != 0);
    int present = f->dexists;
    if (cexists != f->dexists)
        present = variant == 0 ? f->dexists
                : variant == 1 ? cexists : (int)(rnd() & 1);
    if (!present) {
        free(cur);
        *out = NULL;
        *len = 0;
        return 0;
    }
    if (!cexists) { /* removed, not durably: the old file */
        free(cur);
        *len = f->dlen;
        *out = malloc(f->dlen ? f->dlen : 1);
        if (f->dlen)
            memcpy(*out, f->durable, f->dlen);
        return 1;
    }
    size_t dlen = f->dexists ? f->dlen : 0;
    size_t n = variant == 0 ? dlen
             : variant == 1 ? clen : ((rnd() & 1) ? clen : dlen);
    if (n < dlen)
        n = dlen; /* files never shrink */
    uint8_t *img = calloc(n ? n : 1, 1);
    if (dlen)
        memcpy(img, f->durable, KEEL_MIN(dlen, n));
    for (size_t off = 0; off < n; off += SECTOR) {
        size_t end = KEEL_MIN(off + SECTOR, n);
        uint8_t newb[SECTOR] = {0}, oldb[SECTOR] = {0};
        if (off < clen)
            memcpy(newb, cur + off, KEEL_MIN(end, clen) - off);
        if (off < dlen)
            memcpy(oldb, f->durable + off, KEEL_MIN(end, dlen) - off);
        if (memcmp(newb, oldb, end - off) == 0)
            continue;
        int pick = variant == 0 ? 0 : variant == 1 ? 1 : (int)(rnd() % 100);
        if (variant >= 2)
            pick = pick < 45 ? 1 : pick < 80 ? 0 : 2;
        if (pick == 1)
            memcpy(img + off, newb, end - off);
        else if (pick == 0)
            memcpy(img + off, oldb, end - off);
        else /* torn: each aligned 8-byte word old or new */
            for (size_t w = off; w < end; w += 8)
                memcpy(img + w, ((rnd() & 1) ? newb : oldb) + (w - off),
                       KEEL_MIN((size_t)8, end - w));
    }
    free(cur);
    *out = img;
    *len = n;
    return 1;
}

/* --- checking an image ------------------------------------------------------- */

static state acc[2];          /* states a crash may land on */
static int nacc;

static void
load_state(keel_index *idx, state *s)
{
    float v[DIM];
    keel_stats st;
    memset(s, 0, sizeof *s);
    keel_stat(idx, &st);
    s->next_id = st.next_id;
    for (uint64_t id = 0; id < MAXID; id++)
        s->live[id] = keel_get(idx, id, v) == KEEL_OK;
}

static int
accepted(const state *s, const state *set, int n)
{
    for (int i = 0; i < n; i++)
        if (state_eq(s, &set[i]))
            return 1;
    return 0;
}

/* Every live vector byte-exact; searches return only live ids at their true
** distances; with strict, every live vector is found by searching for
** itself (*misses counts those that are not). */
static int
check_contents(keel_index *idx, const state *s, int strict, long *misses)
{
    float v[DIM], got[DIM];
    for (uint64_t id = 0; id < MAXID; id++) {
        if (!s->live[id])
            continue;
        td_vec_of(id, DIM, v);
        if (keel_get(idx, id, got) != KEEL_OK || memcmp(v, got, sizeof v))
            return 0;
        keel_result r[10];
        size_t n;
        if (keel_search(idx, v, 10, NULL, r, &n) != KEEL_OK)
            return 0;
        for (size_t i = 0; i < n; i++) {
            if (r[i].id >= MAXID || !s->live[r[i].id])
                return 0;
            td_vec_of(r[i].id, DIM, got);
            double d = sqrt(td_l2sq(got, v, DIM));
            if (fabs(d - r[i].distance) > 1e-4 * (1 + d))
                return 0;
        }
        if (n == 0 || r[0].id != id) {
            (*misses)++;
            if (strict)
                return 0;
        }
    }
    return 1;
}

static void verify_image(const char *path, int nested, int strict);

/* Writes variant `variant` of sim s's crash image to img (and its undo log
** beside it); *pending_u gets whether the undo log had unsynced changes. */
static void
write_image(const sim *s, int variant, const char *img, int *pending_u)
{
    char upath[720];
    snprintf(upath, sizeof upath, "%s.undo", img);
    unlink(img);
    unlink(upath);
    uint8_t *b;
    size_t n;
    int pending_i;
    if (compose(&s->f[0], variant, &b, &n, &pending_i))
        td_write_file(img, b, n);
    free(b);
    if (compose(&s->f[1], variant, &b, &n, pending_u))
        td_write_file(upath, b, n);
    free(b);
}

/* Crash handler for a recovery under test: images of the recovering file. */
static void
nested_crash(sim *s, int file, const char *where)
{
    KEEL_UNUSED(file);
    KEEL_UNUSED(where);
    T.nested_points++;
    char img[700];
    snprintf(img, sizeof img, "%s", test_path("nested.keel"));
    for (int variant = 0; variant < 4; variant++) {
        int pending_u;
        write_image(s, variant, img, &pending_u);
        verify_image(img, 0, variant <= 1 || !pending_u);
    }
}

/* Checks an image at path against acc[]; nested: record the recovery. */
static void
verify_image(const char *path, int nested, int strict)
{
    T.images++;
    T.strict_images += strict;
    state s;
    keel_index *idx;
    /* 1. A reader, as found. */
    int rc = keel_open_reader(path, NULL, &idx);
    int creating = nacc && acc[0].none;
    if (rc == KEEL_OK) {
        load_state(idx, &s);
        long unused = 0;
        if ((!accepted(&s, acc, nacc) && !(creating && s.next_id == 0)) ||
            !check_contents(idx, &s, 0, &unused)) {
            T.reader_fail++;
            complain("reader: not an accepted state", path,
                     T.images);
        }
        keel_close(idx);
    } else if (!(creating && (rc == KEEL_ENOTINDEX || rc == KEEL_ENOTFOUND))) {
        T.reader_fail++;
        complain("reader could not open", path, (long)rc);
    }
    /* 2. A writer: recovery. */
    sim inner = {.crash = nested_crash, .depth = 1};
    if (nested) {
        snprintf(inner.f[0].path, sizeof inner.f[0].path, "%s", path);
        snprintf(inner.f[1].path, sizeof inner.f[1].path, "%s.undo", path);
        make_durable(&inner.f[0]);
        make_durable(&inner.f[1]);
        active[nactive++] = &inner;
    }
    rc = keel_open(path, DIM, NULL, &idx);
    if (nested) {
        /* Only the recovery is recorded: forget the handle's descriptors. */
        nactive--;
        for (int fd = 0; fd < 8192; fd++)
            if (fd_sim[fd] == nactive)
                fd_sim[fd] = -1;
        free(inner.f[0].durable);
        free(inner.f[1].durable);
    }
    if (rc != KEEL_OK) {
        T.writer_fail++;
        complain("writer could not open", path, (long)rc);
        return;
    }
    load_state(idx, &s);
    state want = s;
    if (!(accepted(&s, acc, nacc) || (creating && s.next_id == 0 &&
                                      memchr(s.live, 1, MAXID) == NULL)) ||
        !check_contents(idx, &s, strict, &T.misses) ||
        keel_check(idx) != KEEL_OK) {
        T.writer_fail++;
        complain("writer: not an accepted, whole state", path,
                 T.images);
        keel_close(idx);
        return;
    }
    /* 3. One more add, delete and flush, then a reopen. */
    float v[DIM];
    uint64_t id;
    td_vec_of(s.next_id, DIM, v);
    rc = keel_add(idx, v, &id);
    if (rc == KEEL_OK && id < MAXID)
        want.live[id] = 1;
    want.next_id = id + 1;
    for (uint64_t d = 0; d < MAXID && rc == KEEL_OK; d++)
        if (want.live[d] && d != id) {
            rc = keel_delete(idx, d);
            want.live[d] = 0;
            break;
        }
    if (rc == KEEL_OK)
        rc = keel_flush(idx);
    keel_close(idx);
    if (rc == KEEL_OK)
        rc = keel_open(path, DIM, NULL, &idx);
    if (rc == KEEL_OK) {
        load_state(idx, &s);
        long unused = 0;
        if (!state_eq(&s, &want) || !check_contents(idx, &s, strict, &unused))
            rc = -1;
        keel_close(idx);
    }
    if (rc != KEEL_OK) {
        T.after_fail++;
        complain("after add, delete, flush and reopen: wrong", path,
                 (long)rc);
    }
}

/* Crash handler for the workload: four images of both files. */
static void
workload_crash(sim *s, int file, const char *where)
{
    KEEL_UNUSED(file);
    KEEL_UNUSED(where);
    T.points++;
    char img[700];
    snprintf(img, sizeof img, "%s", test_path("image.keel"));
    for (int variant = 0; variant < 4; variant++) {
        int pending_u;
        write_image(s, variant, img, &pending_u);
        /* Findability is demanded where the undo log was durable, or the
         * image keeps all or nothing of the unsynced bytes; elsewhere a
         * committed node's changed list may reach the disk before the log
         * entry that undoes it (undo.c rule 4), and misses are counted. */
        verify_image(img, 1, variant <= 1 || !pending_u);
    }
}

/* --- the workload ------------------------------------------------------------ */

static void
between_ops(sim *s)
{
    workload_crash(s, 0, "between operations");
}

/* Ten flushes of 24 adds (batches and single adds in turn) and 3 deletes:
** the first add of the flush itself (its slot is the first a post-crash add
** reuses) and two older ones. Returns the number of failures. */
static long
run_workload(const char *name)
{
    memset(&T, 0, sizeof T);
    keel__test_geometry(4, 2, 10, 1, 6);
    sim s = {.crash = workload_crash};
    snprintf(s.f[0].path, sizeof s.f[0].path, "%s", test_path(name));
    snprintf(s.f[1].path, sizeof s.f[1].path, "%s.undo", test_path(name));
    unlink(s.f[0].path);
    unlink(s.f[1].path);
    make_durable(&s.f[0]);
    make_durable(&s.f[1]);
    memset(fd_sim, -1, sizeof fd_sim);
    rec_os = keel__os_posix;
    rec_os.open = rec_open;
    rec_os.close = rec_close;
    rec_os.sync = rec_sync;
    rec_os.sync_dir = rec_sync_dir;
    keel__os = &rec_os;
    active[0] = &s;
    nactive = 1;

    state committed = {.none = 1};
    acc[0] = committed;
    acc[1] = (state){0};
    nacc = 2;
    keel_index *w;
    long fail = 0;
    if (keel_open(s.f[0].path, DIM, NULL, &w) != KEEL_OK)
        fail++;
    committed = (state){0};
    float v[24 * DIM];
    for (int f = 0; f < 10 && !fail; f++) {
        state next = committed;
        uint64_t first = committed.next_id;
        for (int i = 0; i < 24; i++)
            td_vec_of(first + (uint64_t)i, DIM, v + i * DIM);
        acc[0] = committed;
        nacc = 1;
        int rc = KEEL_OK;
        if (f % 2 == 0)
            rc = keel_add_batch(w, v, 24, NULL, NULL);
        for (int i = 0; f % 2 && i < 24 && !rc; i++)
            rc = keel_add(w, v + i * DIM, NULL);
        for (int i = 0; i < 24; i++)
            next.live[first + (uint64_t)i] = 1;
        next.next_id = first + 24;
        between_ops(&s);
        int dels = 0;
        for (uint64_t id = first; id < first + 24 && dels < 1 && !rc; id++)
            rc = keel_delete(w, id), next.live[id] = 0, dels++;
        for (uint64_t id = 0; id < first && dels < 3 && !rc; id++)
            if (next.live[id])
                rc = keel_delete(w, id), next.live[id] = 0, dels++;
        between_ops(&s);
        acc[0] = committed;
        acc[1] = next;
        nacc = 2;
        if (rc || keel_flush(w) != KEEL_OK)
            fail++;
        committed = next;
    }
    keel_close(w);
    keel__os = &keel__os_posix;
    nactive = 0;
    free(s.f[0].durable);
    free(s.f[1].durable);
    keel__test_geometry(0, 0, 0, 0, 0);
    return fail + T.reader_fail + T.writer_fail + T.after_fail;
}

TEST(every_crash_point_of_a_workload)
{
    keel__mutant = KEEL_MUT_NONE;
    long fail = run_workload("pl.keel");
    printf("    %ld crash points (%ld inside recoveries), %ld images checked "
           "(%ld demanding every committed vector found): %ld reader, %ld "
           "writer, %ld after-flush failures; %ld self-searches missed where "
           "the undo log was not durable\n", T.points, T.nested_points,
           T.images, T.strict_images, T.reader_fail, T.writer_fail,
           T.after_fail, T.misses);
    CHECK(T.points >= 40);
    CHECK_EQ(fail, 0);
}

TEST(the_suite_catches_each_broken_protocol)
{
    static const char *names[] = {
        "", "no sync before the header", "header written over the newest copy",
        "no intent header for deletes", "recovery keeps uncommitted marks",
        "checksum not checked", "no undo log"};
    int caught = 0;
    /* KEEL_MUT_NO_UNDO damages only derived graph data, which images of
     * this small workload rarely expose: test_life.c's kill test shows the
     * undo log is needed (without it a killed bulk load cuts committed
     * vectors off). */
    for (int m = 1; m < KEEL_MUT_NO_UNDO; m++) {
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            keel__mutant = m;
            quiet = 1;
            alarm(300);
            long fail = run_workload("mutant.keel");
            _exit(fail ? 1 : 0);
        }
        int status;
        waitpid(pid, &status, 0);
        int got = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        printf("    mutant '%s': %s\n", names[m],
               got ? (WIFSIGNALED(status) ? "caught (crashed)" : "caught")
                   : "NOT caught");
        caught += got;
        CHECK_MSG(got, "mutant '%s' was not caught", names[m]);
    }
    CHECK_EQ(caught, 5);
}

TEST_MAIN()
