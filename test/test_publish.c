/* test_publish.c -- keel_publish against a real object store.
**
** Publishes an index to the Ceph RADOS Gateway `make test-objstore` starts,
** then rebuilds the file from the manifest and its packs alone (as a reader
** on another machine would) and searches it: the results must equal the
** local file's, id for id and distance bit for bit. A second publish after
** 1% more vectors sends only the changed pages. Without KEEL_TEST_BUCKET the
** tests that need the server say so and pass.
*/
#include "test.h"
#define OBJSTORE_AREA "test-publish"
#include "lib/objstore.h"
#include "lib/testdata.h"
#include "lib/objects.h"

#include "base/internal.h"
#include "api/api.h"
#include "api/publish.h"
#include "cache/cache.h"
#include "s3/s3.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <pthread.h>
#include <unistd.h>

#define DIM 96
#define PAGE ((uint64_t)1 << KEEL_MAN_PAGE_LOG2)

static int same_commit(const char *pa, const char *pb, uint64_t *compared);

/* Rebuilds version seq of url into path from the manifest and packs. */
static int
download(const char *url, uint64_t seq, const char *path)
{
    char b[64], prefix[1024], key[1400];
    int rc = keel__s3_url_parse(url, b, sizeof b, prefix, sizeof prefix);
    keel_s3 *s3 = NULL;
    if (rc || (rc = keel__s3_open(NULL, &s3)))
        return rc;
    keel__man_key(key, sizeof key, prefix, seq);
    void *data;
    size_t len;
    keel_manifest m;
    if ((rc = keel__s3_get(s3, b, key, NULL, KEEL_MAN_MAX_BYTES, &data, &len,
                           NULL)))
        goto out;
    rc = keel__manifest_decode(data, len, key, seq, &m);
    keel__free(data);
    if (rc)
        goto out;
    uint8_t *image = calloc(1, m.npages * PAGE);
    keel_s3_range *r = calloc(m.npages, sizeof *r);
    char (*keys)[256] = calloc(m.npacks ? m.npacks : 1, sizeof *keys);
    for (uint32_t i = 0; i < m.npacks; i++)
        keel__pack_key(keys[i], sizeof keys[i], prefix, &m.packs[i]);
    size_t n = 0;
    for (uint64_t i = 0; i < m.npages; i++)
        if (m.pages[i].pack != KEEL_MAN_ZERO_PAGE)
            r[n++] = (keel_s3_range){keys[m.pages[i].pack], m.pages[i].off,
                                     PAGE, image + i * PAGE};
    rc = keel__s3_get_ranges(s3, b, r, n, 16, NULL);
    if (!rc)
        rc = td_write_file(path, image, m.image_len) ? KEEL_EIO : KEEL_OK;
    free(image);
    free(r);
    free(keys);
    keel__manifest_free(&m);
out:
    keel__s3_close(s3);
    return rc;
}

/* Searches both handles with the same queries: equal ids and distance bits. */
static int
same_results(keel_index *a, keel_index *b, uint64_t seed)
{
    float *q = td_random(20, DIM, seed);
    int same = td_same_answers(a, b, q, 20, DIM, 10, NULL);
    keel_result r[10];
    size_t n = 0; /* and full answers */
    same = same && keel_search(a, q, 10, NULL, r, &n) == KEEL_OK && n == 10;
    free(q);
    return same;
}

/* As same_results, at dim dimensions. */
static int
same_results_dim(keel_index *a, keel_index *b, size_t dim, uint64_t seed)
{
    float *q = td_random(20, dim, seed);
    int same = td_same_answers(a, b, q, 20, dim, 10, NULL);
    free(q);
    return same;
}

static uint64_t
file_size(const char *path)
{
    struct stat s;
    return stat(path, &s) == 0 ? (uint64_t)s.st_size : 0;
}

TEST(a_url_that_is_not_s3_is_refused)
{
    keel_index *idx;
    CHECK_OK(keel_open(test_path("refuse.keel"), DIM, NULL, &idx));
    CHECK_ERR(keel_publish(idx, "http://x/y", NULL), KEEL_EINVAL);
    CHECK_MSG_HAS("s3://BUCKET/PREFIX");
    CHECK_ERR(keel_publish(idx, "s3:///prefix", NULL), KEEL_EINVAL);
    keel_close(idx);
}

/* A publish started while another thread compacts waits for it (the
** handle's lock order); the endpoint is a closed port, so the publish
** fails at its first request once it has the locks. */
struct compact_arg {
    keel_index *idx;
    int rounds, failed;
};

static void *
compact_main(void *p)
{
    struct compact_arg *a = p;
    for (int i = 0; i < a->rounds; i++)
        if (keel_compact(a->idx) != KEEL_OK)
            a->failed = 1;
    return NULL;
}

TEST(publishing_while_compacting_never_deadlocks)
{
    keel_index *idx;
    CHECK_OK(keel_open(test_path("pubcompact.keel"), DIM, NULL, &idx));
    float v[DIM];
    for (int i = 0; i < 300; i++) {
        for (int d = 0; d < DIM; d++)
            v[d] = (float)((i * 31 + d * 7) % 97);
        CHECK_OK(keel_add(idx, v, NULL));
    }
    CHECK_OK(keel_flush(idx));
    const char *saved = getenv("AWS_ENDPOINT_URL");
    char *keep = saved ? strdup(saved) : NULL;
    setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1", 1);
    struct compact_arg a = {.idx = idx, .rounds = 20};
    alarm(120); /* SIGALRM ends the binary: a deadlock fails, never hangs */
    pthread_t t;
    CHECK(pthread_create(&t, NULL, compact_main, &a) == 0);
    for (int i = 0; i < 20; i++)
        CHECK(keel_publish(idx, "s3://keel-test/never", NULL) != KEEL_OK);
    pthread_join(t, NULL); /* a deadlock hangs here: the alarm fails it */
    alarm(0);
    CHECK(!a.failed);
    if (keep) {
        setenv("AWS_ENDPOINT_URL", keep, 1);
        free(keep);
    } else {
        unsetenv("AWS_ENDPOINT_URL");
    }
    CHECK_OK(keel_close(idx));
}

TEST(a_published_index_searches_like_the_file)
{
    NEED_SERVER();
    const char *path = test_path("pub.keel");
    keel_index *w, *r;
    CHECK_OK(keel_open(path, DIM, NULL, &w));
    float *v = td_random(4000, DIM, 11);
    CHECK_OK(keel_add_batch(w, v, 4000, NULL, NULL));
    CHECK_OK(keel_flush(w));
    char url[256];
    url_of(url, sizeof url, "idx");
    uint64_t up1 = 0, up2 = 0;
    keel_publish_options o = {.uploaded = &up1};
    CHECK_OK(keel_publish(w, url, &o));
    uint64_t size1 = file_size(path);
    printf("     first publish: %" PRIu64 " bytes sent, file %" PRIu64
           " bytes\n", up1, size1);
    CHECK(up1 > 0 && up1 <= size1 + (1u << 20));

    CHECK_OK(download(url, 1, test_path("v1.keel")));
    CHECK_OK(keel_open_reader(test_path("v1.keel"), NULL, &r));
    CHECK_OK(keel_check(r));
    CHECK_EQ(keel_count(r), 4000);
    CHECK(same_results(w, r, 12));
    keel_close(r);

    /* 1% more: only changed pages go up */
    float *more = td_random(40, DIM, 13);
    CHECK_OK(keel_add_batch(w, more, 40, NULL, NULL));
    CHECK_OK(keel_flush(w));
    o.uploaded = &up2;
    CHECK_OK(keel_publish(w, url, &o));
    uint64_t size2 = file_size(path);
    printf("     after 1%% more vectors: %" PRIu64 " bytes sent, file %"
           PRIu64 " bytes (%.1f%%)\n", up2, size2, 100.0 * (double)up2 /
           (double)size2);
    CHECK(up2 < size2 / 2);
    CHECK_OK(download(url, 2, test_path("v2.keel")));
    CHECK_OK(keel_open_reader(test_path("v2.keel"), NULL, &r));
    CHECK_OK(keel_check(r));
    CHECK_EQ(keel_count(r), 4040);
    CHECK(same_results(w, r, 14));
    keel_close(r);

    /* an unchanged index publishes nothing: no pack, no manifest */
    uint64_t up3 = 1;
    o.uploaded = &up3;
    CHECK_OK(keel_publish(w, url, &o));
    CHECK_EQ(up3, 0);
    free(v);
    free(more);
    keel_close(w);
}

/* Adds since the last flush rewrite committed nodes' lists in place; a
** publish then sends the commit's lists (from the undo log), the same a
** keel_backup of that commit holds, not the file's. Round 2: an index in
** memory, whose undo log is an anonymous file. */
TEST(a_publish_with_unflushed_adds_sends_the_committed_lists)
{
    NEED_SERVER();
    static const uint32_t Ms[3] = {4, 16, 4};
    for (int round = 0; round < 3; round++) {
        char name[32];
        snprintf(name, sizeof name, "pending%d.keel", round);
        keel_options o = {.max_connections = Ms[round]};
        keel_index *w, *img, *bak;
        CHECK_OK(keel_open(round == 2 ? ":memory:" : test_path(name), DIM, &o,
                           &w));
        size_t n1 = round == 1 ? 3000 : 65, n2 = 6000;
        float *v = td_random(n1 + n2, DIM, 31 + (uint64_t)round);
        CHECK_OK(keel_add_batch(w, v, n1, NULL, NULL));
        CHECK_OK(keel_flush(w));
        /* deletes after the flush: marks above the commit's epoch in the
         * file, not in the commit (a backup holds them as 0) */
        for (uint64_t id = 0; id < n1; id += 5)
            CHECK_OK(keel_delete(w, id));
        CHECK_OK(keel_add_batch(w, v + n1 * DIM, n2, NULL, NULL));
        char url[256], prefix[32];
        snprintf(prefix, sizeof prefix, "pending%d", round);
        url_of(url, sizeof url, prefix);
        CHECK_OK(keel_publish(w, url, NULL));
        snprintf(name, sizeof name, "pending%d.img", round);
        CHECK_OK(download(url, 1, test_path(name)));
        CHECK_OK(keel_open_reader(test_path(name), NULL, &img));
        snprintf(name, sizeof name, "pending%d.bak", round);
        CHECK_OK(keel_backup(w, test_path(name)));
        CHECK_OK(keel_open_reader(test_path(name), NULL, &bak));
        CHECK_OK(keel_check(img));
        CHECK_EQ(keel_count(img), n1);
        CHECK(same_results(bak, img, 40 + (uint64_t)round));
        const char *bpath = test_path(name);
        snprintf(name, sizeof name, "pending%d.img", round);
        uint64_t compared = 0;
        CHECK_MSG(same_commit(test_path(name), bpath, &compared),
                  "round %d: the published image is not the backup's commit",
                  round);
        keel_close(img);
        keel_close(bak);
        keel_close(w);
        free(v);
    }
}

struct racer {
    keel_index *idx;
    const char *url;
    int rc, unchanged;
};

static void *
race(void *arg)
{
    struct racer *r = arg;
    keel_publish_options o = {.unchanged = &r->unchanged};
    r->rc = keel_publish(r->idx, r->url, &o);
    return NULL;
}

TEST(racing_publishers_never_share_a_version)
{
    NEED_SERVER();
    keel_index *a, *b;
    /* two writers of one index (a copy of it): another index would be
     * refused before any race (publish.c invariant 10) */
    CHECK_OK(keel_open(test_path("race-a.keel"), DIM, NULL, &a));
    float *v = td_random(750, DIM, 21);
    CHECK_OK(keel_add_batch(a, v, 250, NULL, NULL));
    CHECK_OK(keel_flush(a));
    CHECK_OK(keel_backup(a, test_path("race-b.keel")));
    CHECK_OK(keel_open(test_path("race-b.keel"), DIM, NULL, &b));
    CHECK_OK(keel_add_batch(a, v + 250 * DIM, 250, NULL, NULL));
    CHECK_OK(keel_add_batch(b, v + 500 * DIM, 250, NULL, NULL));
    CHECK_OK(keel_flush(a));
    CHECK_OK(keel_flush(b));
    char url[256];
    url_of(url, sizeof url, "race");
    int won = 0, lost = 0;
    for (int round = 0; round < 12; round++) {
        struct racer ra = {a, url, -1, 0}, rb = {b, url, -1, 0};
        pthread_t ta, tb;
        if (round % 2) { /* each starts first in turn */
            pthread_create(&tb, NULL, race, &rb);
            pthread_create(&ta, NULL, race, &ra);
        } else {
            pthread_create(&ta, NULL, race, &ra);
            pthread_create(&tb, NULL, race, &rb);
        }
        pthread_join(ta, NULL);
        pthread_join(tb, NULL);
        for (int k = 0; k < 2; k++) {
            int rc = k ? rb.rc : ra.rc;
            CHECK_MSG(rc == KEEL_OK || rc == KEEL_ELOCKED,
                      "publish returned %d", rc);
            /* a publish that found its own commit the newest version
             * made none (publish.c invariant 12) */
            won += rc == KEEL_OK && !(k ? rb.unchanged : ra.unchanged);
            lost += rc == KEEL_ELOCKED;
        }
        CHECK(ra.rc == KEEL_OK || rb.rc == KEEL_OK); /* one wins, at least */
    }
    printf("     24 racing publishes: %d versions, %d lost races\n", won,
           lost);
    /* nothing a winner wrote is lost: every version is whole, and one of
     * the two commits */
    int of_a = 0, of_b = 0;
    for (int s = 1; s <= won; s++) {
        char name[64];
        snprintf(name, sizeof name, "race-v%d.keel", s);
        keel_index *r;
        CHECK_OK(download(url, (uint64_t)s, test_path(name)));
        CHECK_OK(keel_open_reader(test_path(name), NULL, &r));
        CHECK_OK(keel_check(r));
        CHECK_EQ(keel_count(r), 500);
        float got[DIM], want[DIM];
        CHECK_OK(keel_get(r, 400, got));
        CHECK_OK(keel_get(a, 400, want));
        int is_a = memcmp(got, want, sizeof got) == 0;
        of_a += is_a;
        of_b += !is_a;
        CHECK(same_results(is_a ? a : b, r, 22 + (uint64_t)s));
        keel_close(r);
    }
    printf("     versions of a: %d, of b: %d\n", of_a, of_b);
    /* every win is its own version: manifests 1..won exist, won+1 not */
    char bk[64], prefix[1024], key[1400];
    CHECK_OK(keel__s3_url_parse(url, bk, sizeof bk, prefix, sizeof prefix));
    keel_s3 *s3;
    CHECK_OK(keel__s3_open(NULL, &s3));
    keel_s3_object o;
    for (int s = 1; s <= won; s++) {
        keel__man_key(key, sizeof key, prefix, (uint64_t)s);
        CHECK_OK(keel__s3_head(s3, bk, key, &o));
    }
    keel__man_key(key, sizeof key, prefix, (uint64_t)won + 1);
    CHECK_ERR(keel__s3_head(s3, bk, key, &o), KEEL_ENOTFOUND);
    keel__s3_close(s3);
    free(v);
    keel_close(a);
    keel_close(b);
}

TEST(publishing_to_a_missing_bucket_names_it)
{
    NEED_SERVER();
    keel_index *idx;
    CHECK_OK(keel_open(test_path("nob.keel"), DIM, NULL, &idx));
    CHECK_ERR(keel_publish(idx, "s3://keel-no-such-bucket/x", NULL),
              KEEL_ENOTFOUND);
    CHECK_MSG_HAS("no bucket 'keel-no-such-bucket'");
    keel_close(idx);
}

static void
copy_file(const char *from, const char *to)
{
    size_t n;
    void *d = td_read_file(from, &n);
    td_write_file(to, d, n);
    free(d);
}

TEST(prune_keeps_the_newest_versions_and_removes_the_rest)
{
    NEED_SERVER();
    const char *path = test_path("prune.keel");
    keel_index *w;
    CHECK_OK(keel_open(path, DIM, NULL, &w));
    char url[256], snap[5][64];
    url_of(url, sizeof url, "prune");
    keel_publish_options po = {.pack_bytes = 1u << 16}; /* a page a pack */
    for (int v = 0; v < 5; v++) {
        float *x = td_random(600, DIM, 100 + (uint64_t)v);
        CHECK_OK(keel_add_batch(w, x, 600, NULL, NULL));
        free(x);
        CHECK_OK(keel_flush(w));
        CHECK_OK(keel_publish(w, url, &po));
        snprintf(snap[v], sizeof snap[v], "prune-v%d.keel", v + 1);
        copy_file(path, test_path(snap[v]));
    }
    size_t packs_before = obj_count(url, "/pack/");
    keel_index *pinned = NULL;
    int remote = keel_open_reader(url, NULL, &pinned) == KEEL_OK;
    CHECK_ERR(keel_prune(url, 0, NULL), KEEL_EINVAL);
    CHECK_MSG_HAS("help:");
    uint64_t removed = 0;
    keel_prune_options o = {.removed = &removed};
    CHECK_OK(keel_prune(url, 2, &o));
    size_t packs_after = obj_count(url, "/pack/");
    printf("     prune keep 2 of 5: %" PRIu64 " objects removed, packs %zu "
           "-> %zu\n", removed, packs_before, packs_after);
    CHECK_EQ(obj_count(url, "/manifest/"), 2);
    CHECK(packs_after < packs_before);
    CHECK(removed >= 3 + (packs_before - packs_after));
    for (int v = 3; v < 5; v++) { /* the kept versions equal their files */
        keel_index *local, *got;
        char name[64];
        snprintf(name, sizeof name, "prune-got%d.keel", v + 1);
        CHECK_OK(download(url, (uint64_t)v + 1, test_path(name)));
        CHECK_OK(keel_open_reader(test_path(name), NULL, &got));
        CHECK_OK(keel_open_reader(test_path(snap[v]), NULL, &local));
        CHECK_OK(keel_check(got));
        CHECK(same_results(local, got, 30 + (uint64_t)v));
        if (v == 4 && remote)
            CHECK(same_results(local, pinned, 40));
        keel_close(got);
        keel_close(local);
    }
    CHECK(download(url, 3, test_path("prune-gone.keel")) == KEEL_ENOTFOUND);
    /* every pack left is named by a kept manifest: a second prune with no
    ** grace for orphans removes nothing */
    o.orphan_grace_s = 0;
    CHECK_OK(keel_prune(url, 2, &o));
    CHECK_EQ(removed, 0);
    if (pinned)
        keel_close(pinned);
    keel_close(w);
}

/* kill -9 of a publisher at any point: readers keep the previous version,
** the next publish works. */
TEST(a_publisher_killed_midway_leaves_nothing_adopted)
{
    NEED_SERVER();
    char path[600]; /* test_path's buffers are reused: keep a copy */
    snprintf(path, sizeof path, "%s", test_path("kill.keel"));
    keel_index *w;
    CHECK_OK(keel_open(path, DIM, NULL, &w));
    float *x = td_random(2000, DIM, 50);
    CHECK_OK(keel_add_batch(w, x, 2000, NULL, NULL));
    CHECK_OK(keel_flush(w));
    char url[256];
    url_of(url, sizeof url, "kill");
    CHECK_OK(keel_publish(w, url, NULL));
    float *more = td_random(20000, DIM, 51);
    CHECK_OK(keel_add_batch(w, more, 20000, NULL, NULL));
    CHECK_OK(keel_flush(w));
    keel_close(w);
    int completed = 0, killed = 0;
    for (int round = 0; round < 10 && !completed; round++) {
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            keel_index *c;
            /* One page per pack, one PUT at a time: a publish of many
             * requests, so the kills below land inside it. */
            keel_publish_options po = {.pack_bytes = 1u << 16,
                                       .parallel = 1};
            if (keel_open(path, DIM, NULL, &c) ||
                keel_publish(c, url, &po))
                _exit(1);
            _exit(0);
        }
        struct timespec ts = {0, 2000000L + 12000000L * round};
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        int st;
        waitpid(pid, &st, 0);
        CHECK(!WIFEXITED(st) || WEXITSTATUS(st) == 0);
        /* A publish killed after its commit point (the manifest's create)
         * has published: version 2 exists, whole. Any other kill leaves
         * version 1 the newest. */
        size_t manifests = obj_count(url, "/manifest/");
        CHECK(manifests == 1 || manifests == 2);
        if (manifests == 2) {
            completed = 1;
            break;
        }
        killed += WIFSIGNALED(st);
        keel_index *r;
        CHECK_OK(download(url, 1, test_path("kill-v1.keel")));
        CHECK_OK(keel_open_reader(test_path("kill-v1.keel"), NULL, &r));
        CHECK_EQ(keel_count(r), 2000);
        keel_close(r);
    }
    printf("     publishes killed at 2..110 ms: %d killed before their "
           "commit point, %d published first\n", killed, completed);
    CHECK_MSG(killed >= 3, "only %d publishes were killed midway: the test "
              "did not exercise an interrupted publish", killed);
    CHECK_OK(keel_open(path, DIM, NULL, &w));
    CHECK_EQ(keel_count(w), 22000);
    if (!completed)
        CHECK_OK(keel_publish(w, url, NULL));
    keel_index *r;
    CHECK_OK(download(url, 2, test_path("kill-v2.keel")));
    CHECK_OK(keel_open_reader(test_path("kill-v2.keel"), NULL, &r));
    CHECK_EQ(keel_count(r), 22000);
    CHECK(same_results(w, r, 52));
    keel_close(r);
    keel_close(w);
    free(x);
    free(more);
}


/* --- versions: the hint, the listing, the manifest's own number ---------- */

/* Publish three versions, prune keeping one, delete `latest`, open a
** reader: the newest version; publish: version 4, not a second version 1;
** prune keeping one: version 4 stays, and a reader opens its data. */
TEST(a_lost_hint_after_a_prune_never_forks_the_versions)
{
    NEED_SERVER();
    keel_index *w, *r, *r2;
    CHECK_OK(keel_open(test_path("fork.keel"), DIM, NULL, &w));
    char url[256];
    url_of(url, sizeof url, "fork");
    for (int v = 0; v < 3; v++) {
        CHECK_OK(obj_add_flush(w, 300, DIM, 200 + (uint64_t)v));
        CHECK_OK(keel_publish(w, url, NULL));
    }
    /* a stale hint, naming a version prune removes: prune rewrites it */
    CHECK_OK(obj_set(url, "latest", "1\n", 2));
    CHECK_OK(keel_prune(url, 1, NULL));
    CHECK_EQ(obj_count(url, "/manifest/"), 1);
    CHECK_EQ(obj_hint(url), 3);
    CHECK_OK(obj_set(url, "latest", NULL, 0));
    CHECK_OK(keel_open_reader(url, NULL, &r));
    CHECK_EQ(reader_counters(r).seq, 3);
    CHECK_EQ(keel_count(r), 900);
    CHECK_OK(obj_add_flush(w, 300, DIM, 210));
    CHECK_OK(keel_publish(w, url, NULL));
    CHECK_EQ(obj_count(url, "/manifest/"), 2);
    CHECK(download(url, 1, test_path("fork-1.keel")) == KEEL_ENOTFOUND);
    CHECK_OK(download(url, 4, test_path("fork-4.keel")));
    CHECK_OK(keel_refresh(r));
    CHECK_EQ(reader_counters(r).seq, 4);
    CHECK_EQ(keel_count(r), 1200);
    CHECK_OK(obj_set(url, "latest", NULL, 0));
    CHECK_OK(keel_prune(url, 1, NULL));
    CHECK_EQ(obj_count(url, "/manifest/"), 1);
    CHECK_OK(obj_set(url, "latest", NULL, 0));
    CHECK_OK(keel_open_reader(url, NULL, &r2));
    CHECK_EQ(reader_counters(r2).seq, 4);
    CHECK_EQ(keel_count(r2), 1200);
    CHECK(same_results(w, r2, 211));
    keel_close(r2);
    keel_close(r);
    keel_close(w);
}

/* The bytes of url's object rest, in buf (cap); their length, or -1. */
static long
object_bytes(const char *url, const char *rest, char *buf, size_t cap)
{
    char b[64], key[1400];
    keel_s3 *s3 = obj_client(url, rest, b, key, sizeof key);
    void *d;
    size_t n;
    long got = -1;
    if (s3 && keel__s3_get(s3, b, key, NULL, cap, &d, &n, NULL) == KEEL_OK) {
        memcpy(buf, d, n);
        got = (long)n;
        keel__free(d);
    }
    keel__s3_close(s3);
    return got;
}

/* A publish with no flush since the last one makes no version and sends
** nothing, not even the hint when it is right (publish.c invariant 12);
** a missing or wrong hint is repaired; the next flush is the next version.
** Two copies of one index whose headers agree are told apart by their
** pages. */
TEST(an_unchanged_republish_makes_no_version)
{
    NEED_SERVER();
    char path[600], url[256], text[64];
    snprintf(path, sizeof path, "%s", test_path("same.keel"));
    url_of(url, sizeof url, "same");
    keel_index *w, *r, *c;
    CHECK_OK(keel_open(path, DIM, NULL, &w));
    CHECK_OK(obj_add_flush(w, 300, DIM, 400));
    uint64_t up = 0, version = 0;
    int unchanged = -1;
    keel_publish_options o = {.uploaded = &up, .version = &version,
                              .unchanged = &unchanged};
    CHECK_OK(keel_publish(w, url, &o));
    CHECK(up > 0 && version == 1 && unchanged == 0);
    /* a right hint, in bytes publish would not write: left as it is */
    CHECK_OK(obj_set(url, "latest", "1 \n", 3));
    size_t objects = obj_count(url, "/");
    up = 1, version = 0, unchanged = -1;
    CHECK_OK(keel_publish(w, url, &o));
    CHECK_EQ(up, 0);
    CHECK_EQ(version, 1);
    CHECK_EQ(unchanged, 1);
    CHECK_EQ(obj_count(url, "/manifest/"), 1);
    CHECK_EQ(obj_count(url, "/"), objects);
    CHECK_EQ(object_bytes(url, "latest", text, sizeof text), 3);
    /* a missing hint, and one naming no version, are put right */
    CHECK_OK(obj_set(url, "latest", NULL, 0));
    CHECK_OK(keel_publish(w, url, &o));
    CHECK(unchanged == 1 && version == 1 && obj_hint(url) == 1);
    CHECK_OK(obj_set(url, "latest", "7\n", 2));
    CHECK_OK(keel_publish(w, url, &o));
    CHECK(unchanged == 1 && version == 1 && obj_hint(url) == 1);
    /* a reader of the file says the same */
    CHECK_OK(keel_open_reader(path, NULL, &r));
    unchanged = -1;
    CHECK_OK(keel_publish(r, url, &o));
    CHECK(unchanged == 1 && version == 1 && up == 0);
    /* a change, flushed: the next version */
    CHECK_OK(keel_delete(w, 7));
    CHECK_OK(keel_flush(w));
    CHECK_OK(keel_publish(w, url, &o));
    CHECK(unchanged == 0 && version == 2 && up > 0);
    CHECK_EQ(obj_count(url, "/manifest/"), 2);
    CHECK_OK(keel_publish(r, url, &o));
    CHECK(unchanged == 1 && version == 2 && up == 0);
    keel_close(r);
    /* a copy with the same header fields over other vectors: a version */
    CHECK_OK(keel_backup(w, test_path("same-copy.keel")));
    CHECK_OK(keel_open(test_path("same-copy.keel"), DIM, NULL, &c));
    CHECK_OK(obj_add_flush(w, 10, DIM, 401));
    CHECK_OK(obj_add_flush(c, 10, DIM, 402));
    keel_stats sw, sc;
    CHECK_OK(keel_stat(w, &sw));
    CHECK_OK(keel_stat(c, &sc));
    CHECK_EQ(sw.snapshot, sc.snapshot);
    CHECK_OK(keel_publish(w, url, &o));
    CHECK(unchanged == 0 && version == 3);
    CHECK_OK(keel_publish(c, url, &o));
    CHECK(unchanged == 0 && version == 4);
    keel_close(c);
    keel_close(w);
}

/* A publish with adds and deletes since the last flush publishes that
** flush: once it is published, a publish makes no version and sends
** nothing, from the writer and from a reader of its file, also when the
** adds grew the id table. Entries of adds a writer dropped (closed
** unflushed) lie in the committed table's probe runs; those a committed
** probe passes stay, so the image finds every id. */
TEST(adds_since_a_published_flush_make_no_version)
{
    NEED_SERVER();
    char path[600], url[256];
    snprintf(path, sizeof path, "%s", test_path("since.keel"));
    url_of(url, sizeof url, "since");
    keel_index *w, *r, *img;
    uint64_t up = 0, version = 0;
    int unchanged = -1;
    keel_publish_options o = {.uploaded = &up, .version = &version,
                              .unchanged = &unchanged};
    float *x = td_random(3000, DIM, 601);
    CHECK_OK(keel_open(path, DIM, NULL, &w));
    CHECK_OK(obj_add_flush(w, 300, DIM, 600));
    /* dropped adds: entries past the count in the committed table, and
     * entries of the adds flushed after them on in their probe runs */
    uint64_t ids[1500];
    for (uint64_t i = 0; i < 1500; i++)
        ids[i] = 10000 + i;
    CHECK_OK(keel_add_batch(w, x, 1500, ids, NULL));
    keel_close(w);
    CHECK_OK(keel_open(path, DIM, NULL, &w));
    for (uint64_t i = 0; i < 100; i++)
        ids[i] = 20000 + i;
    CHECK_OK(keel_add_batch(w, x + 1500 * DIM, 100, ids, NULL));
    CHECK_OK(keel_flush(w));
    CHECK_OK(keel_publish(w, url, &o));
    CHECK(unchanged == 0 && version == 1 && up > 0);
    CHECK_OK(download(url, 1, test_path("since.img")));
    CHECK_OK(keel_open_reader(test_path("since.img"), NULL, &img));
    CHECK_OK(keel_check(img));
    CHECK_EQ(keel_count(img), 400);
    float got[DIM], want[DIM];
    for (uint64_t i = 0; i < 400; i++) {
        uint64_t id = i < 300 ? i : 20000 + i - 300;
        CHECK_OK(keel_get(img, id, got));
        CHECK_OK(keel_get(w, id, want));
        CHECK(memcmp(got, want, sizeof got) == 0);
    }
    CHECK_ERR(keel_get(img, 10000, got), KEEL_ENOTFOUND);
    keel_close(img);
    /* adds and deletes since the flush; then adds that grow the table */
    for (int round = 0; round < 2; round++) {
        CHECK_OK(keel_add_batch(w, x + (round ? 500 * DIM : 0),
                                round ? 2500 : 500, NULL, NULL));
        for (uint64_t id = (uint64_t)round; id < 300; id += 7)
            CHECK_OK(keel_delete(w, id));
        up = 1, version = 0, unchanged = -1;
        CHECK_OK(keel_publish(w, url, &o));
        CHECK_MSG(unchanged == 1 && version == 1 && up == 0,
                  "round %d: version %llu, unchanged %d, %llu bytes sent",
                  round, (unsigned long long)version, unchanged,
                  (unsigned long long)up);
        CHECK_OK(keel_open_reader(path, NULL, &r));
        up = 1, unchanged = -1;
        CHECK_OK(keel_publish(r, url, &o));
        CHECK(unchanged == 1 && version == 1 && up == 0);
        keel_close(r);
    }
    CHECK_EQ(obj_count(url, "/manifest/"), 1);
    /* flushed: the next version */
    CHECK_OK(keel_flush(w));
    CHECK_OK(keel_publish(w, url, &o));
    CHECK(unchanged == 0 && version == 2 && up > 0);
    keel_close(w);
    free(x);
}

/* What keel_list_versions gave, and a stop after `stop` of them. */
struct seen {
    keel_version v[8];
    int n, stop;
};

static int
see_version(const keel_version *v, void *arg)
{
    struct seen *s = arg;
    if (s->n < 8)
        s->v[s->n] = *v;
    s->n++;
    return s->stop && s->n == s->stop ? 42 : 0;
}

/* keel_list_versions lists every version, oldest first, with the newest
** and the hinted one marked; keel_published_version names the version a
** URL reader serves, and refuses a file's handle. */
TEST(versions_are_listed_and_a_reader_names_its_own)
{
    NEED_SERVER();
    keel_index *w, *r;
    char url[256], empty[256];
    url_of(url, sizeof url, "listed");
    url_of(empty, sizeof empty, "listed-nothing");
    CHECK_OK(keel_open(test_path("listed.keel"), DIM, NULL, &w));
    struct seen s = {0};
    CHECK_ERR(keel_list_versions(empty, see_version, &s), KEEL_ENOTFOUND);
    CHECK_MSG_HAS("no index is published at");
    CHECK_MSG_HAS("help:");
    CHECK_ERR(keel_list_versions("notaurl", see_version, &s), KEEL_EINVAL);
    CHECK_MSG_HAS("'notaurl'");
    CHECK_ERR(keel_list_versions(url, NULL, NULL), KEEL_EINVAL);
    CHECK_EQ(s.n, 0);
    double t0 = (double)time(NULL);
    for (int v = 0; v < 3; v++) {
        CHECK_OK(obj_add_flush(w, 200, DIM, 500 + (uint64_t)v));
        CHECK_OK(keel_publish(w, url, NULL));
    }
    CHECK_OK(keel_list_versions(url, see_version, &s));
    CHECK_EQ(s.n, 3);
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(s.v[i].version, (uint64_t)i + 1);
        CHECK(s.v[i].manifest_bytes > 64);
        CHECK_EQ(s.v[i].newest, i == 2);
        CHECK_EQ(s.v[i].hinted, i == 2);
        /* the store's clock and ours agree within a minute */
        CHECK(s.v[i].modified_ms > (int64_t)(t0 - 60) * 1000 &&
              s.v[i].modified_ms < (int64_t)(t0 + 60) * 1000);
    }
    /* a hint naming no version marks none; a stop is returned */
    CHECK_OK(obj_set(url, "latest", "9\n", 2));
    s = (struct seen){.stop = 2};
    CHECK_EQ(keel_list_versions(url, see_version, &s), 42);
    CHECK(s.n == 2 && !s.v[0].hinted && !s.v[1].hinted);
    /* a reader names the version it opened, then the one it moved to */
    uint64_t seq = 0;
    CHECK_OK(keel_open_reader(url, NULL, &r));
    CHECK_OK(keel_published_version(r, &seq));
    CHECK_EQ(seq, 3);
    CHECK_OK(obj_add_flush(w, 200, DIM, 510));
    CHECK_OK(keel_publish(w, url, NULL));
    CHECK_OK(keel_refresh(r));
    CHECK_OK(keel_published_version(r, &seq));
    CHECK_EQ(seq, 4);
    CHECK_ERR(keel_published_version(w, &seq), KEEL_EINVAL);
    CHECK_MSG_HAS("not a published index");
    CHECK_MSG_HAS("help:");
    CHECK_ERR(keel_published_version(r, NULL), KEEL_EINVAL);
    CHECK_ERR(keel_published_version(NULL, &seq), KEEL_EINVAL);
    keel_close(r);
    keel_close(w);
}

/* A manifest under another version's name (its bytes copied there) is
** refused by readers and publishers alike: nothing pins it as the version
** it claims, and no publish continues from the number it claims. */
TEST(a_manifest_that_claims_another_version_is_refused)
{
    NEED_SERVER();
    keel_index *w, *r;
    CHECK_OK(keel_open(test_path("claim.keel"), DIM, NULL, &w));
    char url[256], b[64], key[1400];
    url_of(url, sizeof url, "claim");
    CHECK_OK(obj_add_flush(w, 500, DIM, 220));
    CHECK_OK(keel_publish(w, url, NULL));
    CHECK_OK(obj_add_flush(w, 100, DIM, 221));
    CHECK_OK(keel_publish(w, url, NULL));
    keel_s3 *s3 = obj_client(url, "manifest/00000000000000000001", b, key,
                            sizeof key);
    CHECK(s3 != NULL);
    void *m1;
    size_t len;
    CHECK_OK(keel__s3_get(s3, b, key, NULL, KEEL_MAN_MAX_BYTES, &m1, &len,
                          NULL));
    CHECK_OK(obj_set(url, "manifest/00000000000000000003", m1, len));
    CHECK_OK(obj_set(url, "latest", "3\n", 2));
    CHECK_ERR(keel_open_reader(url, NULL, &r), KEEL_ECORRUPT);
    CHECK_MSG_HAS("says it is version 1");
    CHECK_ERR(keel_publish(w, url, NULL), KEEL_ECORRUPT);
    CHECK_MSG_HAS("says it is version 1");
    CHECK_EQ(obj_count(url, "/manifest/"), 3);
    /* the impostor gone, the next version is 3 and holds the data */
    CHECK_OK(obj_set(url, "manifest/00000000000000000003", NULL, 0));
    CHECK_OK(obj_add_flush(w, 100, DIM, 222));
    CHECK_OK(keel_publish(w, url, NULL));
    CHECK_OK(keel_open_reader(url, NULL, &r));
    CHECK_EQ(reader_counters(r).seq, 3);
    CHECK_EQ(keel_count(r), 700);
    CHECK(same_results(w, r, 223));
    keel_close(r);
    keel__free(m1);
    keel__s3_close(s3);
    keel_close(w);
}

/* A 4-d index at a prefix; publishing a 64-d one, or another 4-d one,
** over it is refused unless replace is asked; a reader of the first keeps
** its version and its dimensions, and refresh reports the other index. */
TEST(another_index_over_a_prefix_needs_replace_and_readers_keep_theirs)
{
    NEED_SERVER();
    keel_index *a, *b, *c, *r, *r2;
    CHECK_OK(keel_open(test_path("rep-a.keel"), 4, NULL, &a));
    CHECK_OK(keel_open(test_path("rep-b.keel"), 64, NULL, &b));
    CHECK_OK(keel_open(test_path("rep-c.keel"), 4, NULL, &c));
    CHECK_OK(obj_add_flush(a, 500, 4, 230));
    CHECK_OK(obj_add_flush(b, 300, 64, 231));
    CHECK_OK(obj_add_flush(c, 200, 4, 232));
    char url[256];
    url_of(url, sizeof url, "replace");
    CHECK_OK(keel_publish(a, url, NULL));
    CHECK_OK(keel_open_reader(url, NULL, &r));
    CHECK_EQ(keel_dim(r), 4);
    CHECK_ERR(keel_publish(b, url, NULL), KEEL_EDIM);
    CHECK_MSG_HAS("another index");
    CHECK_MSG_HAS("64 dimensions");
    CHECK_MSG_HAS("help:");
    CHECK_MSG_HAS("replace");
    CHECK_ERR(keel_publish(c, url, NULL), KEEL_EOPTIONS);
    CHECK_MSG_HAS("another index");
    CHECK_EQ(obj_count(url, "/manifest/"), 1);
    /* a later version of the same index is no replacement */
    CHECK_OK(obj_add_flush(a, 10, 4, 233));
    CHECK_OK(keel_publish(a, url, NULL));
    CHECK_OK(keel_refresh(r));
    CHECK_EQ(reader_counters(r).seq, 2);
    CHECK_EQ(keel_count(r), 510);
    keel_publish_options po = {.replace = 1};
    CHECK_OK(keel_publish(b, url, &po));
    CHECK_EQ(obj_count(url, "/manifest/"), 3);
    for (int round = 0; round < 2; round++) { /* and again, not refetched */
        CHECK_ERR(keel_refresh(r), KEEL_EDIM);
        CHECK_MSG_HAS("another index");
        CHECK_MSG_HAS("version 3");
        CHECK_MSG_HAS("help: ");
        CHECK_EQ(keel_dim(r), 4);
        CHECK_EQ(reader_counters(r).seq, 2);
        CHECK_EQ(keel_count(r), 510);
        CHECK(same_results_dim(a, r, 4, 234 + (uint64_t)round));
    }
    CHECK_OK(keel_open_reader(url, NULL, &r2));
    CHECK_EQ(keel_dim(r2), 64);
    CHECK_EQ(keel_count(r2), 300);
    CHECK(same_results_dim(b, r2, 64, 236));
    /* the first index is now the other one there */
    CHECK_ERR(keel_publish(a, url, NULL), KEEL_EDIM);
    keel_close(r2);
    keel_close(r);
    keel_close(c);
    keel_close(b);
    keel_close(a);
}

static double
secs(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}


static double secs(void);

/* --- publishing an index another process writes ---------------------------- */

/* The header of the index file at path (copy A). */
static int
header_of(const char *path, keel_header *h)
{
    size_t n;
    uint8_t *d = td_read_file(path, &n);
    int rc = d && n >= KEEL_PAGE_SLOT
                 ? keel__header_decode(d + KEEL_HDR_A_OFF, n, h, NULL, 0)
                 : KEEL_EIO;
    free(d);
    return rc;
}

/* Whether the two files hold the same commit, byte for byte in every
** region it names as far as it is written (what keel_backup copies): the
** slots' headers (deleted epochs past the commit's are 0 in a backup and
** must be in a published image too), vectors, lists and codes, the heap
** up to heap_used, and the id table (below). */
static int
same_commit(const char *pa, const char *pb, uint64_t *compared)
{
    size_t na, nb;
    uint8_t *a = td_read_file(pa, &na), *b = td_read_file(pb, &nb);
    keel_header ha, hb;
    int same = a && b &&
               keel__header_decode(a, na, &ha, NULL, 0) == KEEL_OK &&
               keel__header_decode(b, nb, &hb, NULL, 0) == KEEL_OK &&
               ha.sequence == hb.sequence && ha.count == hb.count &&
               ha.file_end == hb.file_end && na >= ha.file_end &&
               nb >= hb.file_end;
    *compared = 0;
#define SAME_AT(off, len)                                                  \
    do {                                                                   \
        same = same && memcmp(a + (off), b + (off), (size_t)(len)) == 0;  \
        if (!same && getenv("KEEL_TEST_DEBUG")) {                          \
            size_t z = 0;                                                  \
            while (a[(off) + z] == b[(off) + z])                           \
                z++;                                                       \
            fprintf(stderr, "differs in [%llu, +%llu) line %d at +%zu: "   \
                    "%016llx %016llx vs %016llx %016llx\n",                \
                    (unsigned long long)(off), (unsigned long long)(len),  \
                    __LINE__, z,                                           \
                    (unsigned long long)keel__get64(a + (off) + z / 16 * 16), \
                    (unsigned long long)keel__get64(a + (off) + z / 16 * 16 + 8), \
                    (unsigned long long)keel__get64(b + (off) + z / 16 * 16), \
                    (unsigned long long)keel__get64(b + (off) + z / 16 * 16 + 8)); \
            fprintf(stderr, "epoch %llu count %llu\n",                     \
                    (unsigned long long)ha.epoch,                          \
                    (unsigned long long)ha.count);                         \
        }                                                                  \
        *compared += (len);                                                \
    } while (0)
    keel_geometry g;
    if (same)
        keel__geometry_init(&g, &ha);
    for (uint32_t k = 0; same && k < ha.segments; k++) {
        keel_seg_layout L;
        keel__seg_layout(&g, k, &L);
        uint64_t first = keel__seg_first_slot(&g, k);
        uint64_t n = ha.count > first ? KEEL_MIN(L.slots, ha.count - first)
                                      : 0;
        uint64_t off = ha.seg_off[k];
        SAME_AT(off, n * KEEL_SLOT_HDR_BYTES);
        SAME_AT(off + L.vec_off, n * g.vec_bytes);
        SAME_AT(off + L.rec_off, n * g.rec_bytes);
        if (L.code_off)
            SAME_AT(off + L.code_off, n * g.code_bytes);
    }
    uint32_t used = (uint32_t)(ha.heap_used >> 32);
    for (uint32_t c = 0; same && c < ha.heap_chunks && c <= used; c++)
        SAME_AT(ha.heap_off[c], c < used ? keel__heap_chunk_bytes(&g, c)
                                         : (ha.heap_used & 0xFFFFFFFFu));
    /* The id table: adds after the commit put their slots (past its
     * count, which readers of the commit skip) in entries that were empty
     * at the commit, as a reader's backup of it would hold them too; the
     * published entries must be the writer's backup's but for those. */
    uint64_t extra = 0;
    for (uint64_t e = 0; same && ha.idtab_offset &&
                         e < (1ull << ha.idtab_log2); e++) {
        uint32_t x = keel__get32(a + ha.idtab_offset + 4 * e);
        uint32_t y = keel__get32(b + ha.idtab_offset + 4 * e);
        same = x == y || (y == KEEL_EMPTY && x >= ha.count) ||
               (x == KEEL_EMPTY && y >= ha.count);
        extra += x != y;
        *compared += 4;
    }
    if (!same && getenv("KEEL_TEST_DEBUG"))
        fprintf(stderr, "the id tables differ\n");
    else if (extra && getenv("KEEL_TEST_DEBUG"))
        fprintf(stderr, "%llu id table entries of later adds\n",
                (unsigned long long)extra);
#undef SAME_AT
    free(a);
    free(b);
    return same;
}

/* The writer of the test below, in a process of its own: adds throughout
** (a few vectors at a time, each rewriting committed nodes' lists), deletes
** some, flushes every ~120 ms, and after each flush keeps a backup of that
** commit as DIR/bk-<header sequence>.keel (the last 64 of them). */
static void
writer_main(const char *path, const char *dir)
{
    keel_index *w;
    if (keel_open(path, DIM, NULL, &w))
        _exit(1);
    char ring[64][700] = {{0}};
    for (uint64_t round = 0;; round++) {
        for (int j = 0; j < 12; j++) {
            float *x = td_random(8, DIM, 1000 + round * 64 + (uint64_t)j);
            if (keel_add_batch(w, x, 8, NULL, NULL))
                _exit(2);
            free(x);
            struct timespec ts = {0, 10000000L};
            nanosleep(&ts, NULL);
        }
        (void)keel_delete(w, round * 7 % 3000);
        char tmp[700], fin[700];
        keel_header h;
        snprintf(tmp, sizeof tmp, "%s/bk-tmp.keel", dir);
        if (keel_flush(w) || keel_backup(w, tmp) || header_of(tmp, &h))
            _exit(3);
        snprintf(fin, sizeof fin, "%s/bk-%" PRIu64 ".keel", dir, h.sequence);
        if (rename(tmp, fin))
            _exit(4);
        /* a delete the next flush commits: until then a mark above the
         * commit's epoch in the file, which a publish must not send */
        (void)keel_delete(w, (round * 7 + 1500) % 3000);
        char *old = ring[round % 64];
        if (old[0])
            unlink(old);
        snprintf(old, sizeof ring[0], "%s", fin);
    }
}

/* keel_publish of a reader's handle while another process adds and
** flushes throughout: every publish succeeds, and each version holds
** exactly its commit, byte for byte what a keel_backup of that commit
** holds (the committed lists, though the file's were rewritten). */
TEST(a_reader_publishes_the_last_flush_while_another_process_writes)
{
    NEED_SERVER();
    char path[600], dir[600], url[256];
    snprintf(path, sizeof path, "%s", test_path("busy.keel"));
    snprintf(dir, sizeof dir, "%s", test_path("busy-backups"));
    mkdir(dir, 0700);
    url_of(url, sizeof url, "busy");
    keel_index *w;
    CHECK_OK(keel_open(path, DIM, NULL, &w));
    float *x = td_random(3000, DIM, 300);
    CHECK_OK(keel_add_batch(w, x, 3000, NULL, NULL));
    free(x);
    CHECK_OK(keel_flush(w));
    keel_close(w);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlives a failed test */
        writer_main(path, dir);
        _exit(0);
    }
    struct timespec ts = {0, 300000000L}; /* the writer is at work */
    nanosleep(&ts, NULL);
    keel_index *r;
    CHECK_OK(keel_open_reader(path, NULL, &r));
    int published = 0, compared = 0;
    uint64_t bytes = 0, first_commit = 0, last_commit = 0, versions = 0;
    double t0 = secs(), slowest = 0;
    for (int k = 0; k < 10; k++) {
        double t = secs();
        uint64_t version = 0;
        int unchanged = -1;
        keel_publish_options po = {.version = &version,
                                   .unchanged = &unchanged};
        int rc = keel_publish(r, url, &po);
        t = secs() - t;
        slowest = KEEL_MAX(slowest, t);
        CHECK_MSG(rc == KEEL_OK, "publish %d: %s", k, keel_errmsg());
        if (rc)
            continue;
        published++;
        char got[700], bk[700];
        snprintf(got, sizeof got, "%s/pub-%d.keel", dir, k);
        /* a publish of a commit published already makes no version */
        versions += unchanged == 0;
        CHECK_EQ(version, versions);
        CHECK_OK(download(url, version, got));
        keel_header h;
        CHECK_OK(header_of(got, &h));
        if (!first_commit)
            first_commit = h.sequence;
        last_commit = h.sequence;
        snprintf(bk, sizeof bk, "%s/bk-%" PRIu64 ".keel", dir, h.sequence);
        for (int wait = 0; wait < 100 && access(bk, F_OK) != 0; wait++) {
            struct timespec q = {0, 20000000L};
            nanosleep(&q, NULL);
        }
        uint64_t n = 0;
        int same = same_commit(got, bk, &n);
        CHECK_MSG(same, "version %d (commit %" PRIu64 ") differs from the "
                  "backup of its commit", published, h.sequence);
        compared += same;
        bytes += n;
        unlink(got);
    }
    kill(pid, SIGKILL);
    int st;
    waitpid(pid, &st, 0);
    CHECK(WIFSIGNALED(st)); /* the writer was still writing */
    printf("     %d publishes in %.1f s (slowest %.2f s) of commits %" PRIu64
           "..%" PRIu64 " while the writer flushed; %d equal to the backup "
           "of their commit (%" PRIu64 " bytes compared)\n", published,
           secs() - t0, slowest, first_commit, last_commit, compared, bytes);
    CHECK_EQ(compared, 10);
    CHECK(last_commit > first_commit);
    /* a reader of the URL reads the last one like its backup */
    keel_index *u, *b;
    char bk[700];
    snprintf(bk, sizeof bk, "%s/bk-%" PRIu64 ".keel", dir, last_commit);
    CHECK_OK(keel_open_reader(url, NULL, &u));
    CHECK_OK(keel_open_reader(bk, NULL, &b));
    CHECK_EQ(keel_count(u), keel_count(b));
    CHECK(same_results(u, b, 301));
    keel_close(b);
    keel_close(u);
    keel_close(r);
}

/* The newest valid header copy of the index file at path. */
static int
newest_header_of(const char *path, keel_header *h)
{
    size_t n;
    uint8_t *d = td_read_file(path, &n);
    keel_header a, b;
    int ra = d && n >= KEEL_DATA_OFF
                 ? keel__header_decode(d + KEEL_HDR_A_OFF, n, &a, NULL, 0)
                 : KEEL_EIO;
    int rb = d && n >= KEEL_DATA_OFF
                 ? keel__header_decode(d + KEEL_HDR_B_OFF, n, &b, NULL, 0)
                 : KEEL_EIO;
    free(d);
    if (ra && rb)
        return KEEL_EIO;
    *h = ra ? b : rb ? a : a.sequence > b.sequence ? a : b;
    return KEEL_OK;
}

/* A delete flush writes the deleted epochs (E + 1) into the slots before
** the header that commits them; a writer killed in between leaves them in
** the file above the commit's epoch, and readers of the commit hold those
** slots as present. A reader's publish of that commit sends the commit's
** bytes, as its keel_backup holds them: the marks as 0 (an image with
** them would say, to anything that reads it with a later epoch, that
** vectors the commit holds are deleted). */
TEST(a_published_commit_holds_no_marks_of_an_unfinished_delete_flush)
{
    NEED_SERVER();
    char path[600], url[256], img[600], bk[600];
    snprintf(path, sizeof path, "%s", test_path("marks.keel"));
    snprintf(img, sizeof img, "%s", test_path("marks.img"));
    snprintf(bk, sizeof bk, "%s", test_path("marks.bak"));
    url_of(url, sizeof url, "marks");
    keel_index *w;
    CHECK_OK(keel_open(path, DIM, NULL, &w));
    float *x = td_random(600, DIM, 77);
    CHECK_OK(keel_add_batch(w, x, 600, NULL, NULL));
    free(x);
    CHECK_OK(keel_delete(w, 3));
    CHECK_OK(keel_flush(w));
    keel_close(w);
    /* the marks of a flush that deletes every 7th slot, its header not
     * written: as the writer's crash left them */
    keel_header h;
    CHECK_OK(newest_header_of(path, &h));
    keel_geometry g;
    keel__geometry_init(&g, &h);
    int fd = open(path, O_RDWR);
    CHECK(fd >= 0);
    int marked = 0;
    for (uint64_t s = 10; s < KEEL_MIN(h.count, keel__seg_slots(&g, 0));
         s += 7) {
        uint8_t m[8];
        keel__put64(m, h.epoch + 1);
        CHECK(pwrite(fd, m, 8, (off_t)(h.seg_off[0] + s * 16 + 8)) == 8);
        marked++;
    }
    close(fd);
    CHECK(marked > 50);
    keel_index *r, *b, *u;
    CHECK_OK(keel_open_reader(path, NULL, &r));
    CHECK_EQ(keel_count(r), 599); /* the commit holds the marked slots */
    CHECK_OK(keel_publish(r, url, NULL));
    CHECK_OK(keel_backup(r, bk));
    keel_close(r);
    CHECK_OK(download(url, 1, img));
    uint64_t n = 0;
    CHECK_MSG(same_commit(img, bk, &n), "the published image differs from "
              "the backup of its commit (%d slots marked above its epoch)",
              marked);
    CHECK_OK(keel_open_reader(url, NULL, &u));
    CHECK_OK(keel_open_reader(bk, NULL, &b));
    CHECK_EQ(keel_count(u), keel_count(b));
    CHECK(same_results(u, b, 78));
    keel_close(b);
    keel_close(u);
}

/* ~50 MB published one pack at a time and 4 at once (printed, no bound). */
TEST(packs_go_up_in_parallel)
{
    NEED_SERVER();
    const char *path = test_path("par.keel");
    keel_index *w;
    CHECK_OK(keel_open(path, DIM, NULL, &w));
    float *x = td_random(100000, DIM, 60);
    CHECK_OK(keel_add_batch(w, x, 100000, NULL, NULL));
    free(x);
    CHECK_OK(keel_flush(w));
    double t[2];
    uint64_t up[2];
    for (int k = 0; k < 2; k++) {
        char url[256];
        url_of(url, sizeof url, k ? "par4" : "par1");
        keel_publish_options po = {.parallel = k ? 4 : 1, .uploaded = &up[k]};
        double t0 = secs();
        CHECK_OK(keel_publish(w, url, &po));
        t[k] = secs() - t0;
    }
    printf("     %" PRIu64 " bytes (file %" PRIu64 "): serial %.2f s, 4 "
           "packs at once %.2f s\n", up[0], file_size(path), t[0], t[1]);
    CHECK_EQ(up[0], up[1]);
    keel_close(w);
}

TEST_MAIN()
