/* radius.c -- keel_search_radius: every live vector within a distance of a
** query, nearest first, up to a cap.
**
** The walk is search.c's beam search of level 0 with a second reason to go
** on. Three heaps:
**   W  the beam: the max(ef, cap) nearest nodes reached (accepted or not),
**      which bounds the walk as in a k-NN search;
**   R  the results: the cap nearest accepted nodes within the radius;
**   C  candidates to expand, nearest first.
** A reached node is queued if it would enter W, or if it lies within the
** radius (and would enter R while R is full), and the walk stops at the
** first candidate beyond both W's bound and the radius. So when fewer
** nodes than the beam lie within the radius the walk is a k-NN search that
** reaches past the radius; when more do, it floods the in-radius region
** through its own links, as far as the cap needs. Like k-NN it is
** approximate (test_radius.c measures recall against an exact scan). An
** allow-list of few ids is scanned exactly instead.
**
** Reads the store through a view like every search; its scratch is the
** search context's visited set and heaps, plus R (allocated per call).
*/
#include "api/api.h"
#include "hnsw/filter.h"
#include "hnsw/walk.h"

#include <math.h>
#include <stdlib.h>

/* --- scratch: hnsw/walk.h's visited set and heaps ------------------------- */

/* Adds x to the max-heap h of at most cap entries (keeps the cap least). */
static inline void
max_keep(uint64_t *h, size_t *n, size_t cap, uint64_t x)
{
    if (*n < cap)
        max_push(h, n, x);
    else if (x < h[0])
        max_replace_top(h, *n, x);
}

static int
cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* --- the walk ------------------------------------------------------------ */

typedef struct radius_job {
    const keel_graph *gr;
    const keel_view *v;
    keel_search_ctx *c;
    const float *q;
    float radius;             /* as reported */
    float r_int;              /* the same as an internal distance, or above */
    size_t cap, beam;
    const keel_accept *acc;
    uint64_t *res;            /* R: cap + 1 entries */
    size_t nres;
} radius_job;

static inline void
consider(radius_job *j, float d, uint32_t s)
{
    if (d <= j->r_int && accepts(j->v, j->acc, s) &&
        keel__graph_report(j->gr, d) <= j->radius)
        max_keep(j->res, &j->nres, j->cap, keel__pack(d, s));
}

/* Every accepted id of an allow-list, measured. KEEL_OK, or the error of
** fetching a page (a published index read without faults: every read
** here is fetched first, store/pagein.h). */
static int
scan_allowed(radius_job *j)
{
    const keel_idset *s = j->acc->allowed;
    for (uint64_t i = 0; i <= s->mask; i++) {
        uint64_t slot;
        if (s->keys[i] == UINT64_MAX)
            continue;
        int rc = keel__store_id_lookup(j->v, s->keys[i], &slot);
        uint32_t s32 = (uint32_t)slot;
        if (rc == KEEL_OK)
            rc = keel__store_need_slots(j->gr->st, &s32, 1, KEEL_NEED_VEC);
        if (rc == KEEL_ENOTFOUND)
            continue;
        if (rc)
            return rc;
        float d = keel__graph_dist(j->gr, j->q,
                                   keel__store_vec(j->gr->st, slot));
        consider(j, d, (uint32_t)slot);
    }
    return KEEL_OK;
}

static int
walk(radius_job *j)
{
    const keel_graph *gr = j->gr;
    const keel_view *v = j->v;
    keel_search_ctx *c = j->c;
    const keel_store *st = gr->st;
    /* A published index read without faults announces the descent's pages
     * as a search does (its record), and fetches the rest below. */
    keel_br_record *rec = keel__store_announces(st)
                              ? keel__br_record(&c->brc, st, v,
                                                (uint32_t)j->beam)
                              : NULL;
    c->br = rec;
    uint32_t ep = keel__search_greedy(gr, v, c, j->q, v->entry, v->max_level,
                                      0);
    c->br = NULL;
    if (rec)
        keel__br_done(rec);
    int rc;
    if (ep == KEEL_EMPTY) {
        rc = c->br_rc ? c->br_rc : KEEL_EIO;
        c->br_rc = 0;
        return rc;
    }
    if ((rc = keel__store_need_slots(st, &ep, 1,
                                     KEEL_NEED_VEC | KEEL_NEED_HDR)))
        return rc;
    if (keel__visited_reset(c, v->limit) ||
        heap_grow(&c->res, &c->res_cap, j->beam + 1) ||
        heap_grow(&c->cand, &c->cand_cap, KEEL_MAX(j->beam + 1, 256)))
        return KEEL_ENOMEM;
    c->nres = c->ncand = 0;
    float d0 = keel__graph_dist(gr, j->q, keel__store_vec(st, ep));
    visit(c, ep);
    min_push(c->cand, &c->ncand, keel__pack(d0, ep));
    max_keep(c->res, &c->nres, j->beam, keel__pack(d0, ep));
    consider(j, d0, ep);
    uint64_t r_key = keel__pack(j->r_int, UINT32_MAX);
    while (c->ncand) {
        uint64_t top = min_pop(c->cand, &c->ncand);
        int in_beam = c->nres < j->beam || top <= c->res[0];
        int in_radius = top <= r_key &&
                        (j->nres < j->cap || top < j->res[0]);
        if (!in_beam && !in_radius)
            break;
        uint32_t len, ts = keel__pack_slot(top);
        if ((rc = keel__store_need_slots(st, &ts, 1, KEEL_NEED_REC)))
            return rc;
        const uint32_t *list = keel__store_list(st, ts, 0, &len);
        if (!list)
            continue;
        uint32_t ng = 0;
        for (uint32_t i = 0; i < len; i++) {
            uint32_t s = KEEL_LOAD_RELAXED(&list[i]);
            if (s == KEEL_EMPTY || skip_slot(v, s) || visit(c, s))
                continue;
            c->gather[ng] = s;
            c->gvec[ng++] = keel__store_vec(st, s);
        }
        if (heap_grow(&c->cand, &c->cand_cap, c->ncand + ng))
            return KEEL_ENOMEM;
        if ((rc = keel__store_need_slots(st, c->gather, ng,
                                         KEEL_NEED_VEC | KEEL_NEED_HDR)))
            return rc;
        keel__graph_dist_group(gr, j->q, c->gvec, ng, c->gdist);
        for (uint32_t i = 0; i < ng; i++) {
            uint32_t s = c->gather[i];
            float d = c->gdist[i];
            uint64_t e = keel__pack(d, s);
            int beam_in = c->nres < j->beam || e < c->res[0];
            int radius_in = e <= r_key && (j->nres < j->cap || e < j->res[0]);
            if (beam_in)
                max_keep(c->res, &c->nres, j->beam, e);
            if (beam_in || radius_in) {
                min_push(c->cand, &c->ncand, e);
                consider(j, d, s);
            }
        }
    }
    c->nres = 0;
    return KEEL_OK;
}

/* --- the call ------------------------------------------------------------ */

static int
radius_oom(void)
{
    return keel__fail(KEEL_ENOMEM, "out of memory during a radius search\n"
                      "help: free memory, or lower max_results");
}

int
keel_search_radius(keel_index *idx, const float *query, float radius,
                   size_t max_results, const keel_search_params *p,
                   keel_result *out, size_t *n_out)
{
    keel__clear_error();
    const char *fn = "keel_search_radius";
    if (!idx)
        return keel__null_handle(fn);
    NEED(query, "%s was given no query\nhelp: pass %u floats", fn, idx->dim);
    NEED(!isnan(radius), "radius is NaN, but has to be a number\nhelp: pass "
         "the largest distance to return, such as 0.5");
    NEED(isfinite(radius), "radius is %s, but has to be finite\nhelp: for "
         "the nearest max_results whatever their distance, call keel_search "
         "with k = max_results", radius > 0 ? "inf" : "-inf");
    NEED(radius >= 0 || idx->metric == KEEL_IP,
         "radius is %g, but %s distances are never negative\nhelp: pass 0 "
         "for exact copies, or a positive distance", (double)radius,
         idx->metric == KEEL_L2 ? "l2" : "cosine");
    NEED(max_results > 0, "max_results is 0, but has to be at least 1\n"
         "help: pass the room out has, such as 100");
    NEED(max_results <= 1000000, "max_results is %zu, but has to be at most "
         "1,000,000\nhelp: ask for fewer results, or a smaller radius",
         max_results);
    NEED(out && n_out, "%s was given no room for results\nhelp: pass out "
         "with room for max_results results and n_out", fn);
    int rc = keel__params_check_filters(p, fn, 0);
    if (rc)
        return rc;
    if (p) {
        NEED(p->allowed || p->n_allowed == 0, "n_allowed is %zu but allowed "
             "is NULL\nhelp: pass the ids, or n_allowed 0 without a filter",
             p->n_allowed);
        NEED(p->ef <= 100000, "ef is %u, but has to be at most 100,000\n"
             "help: 64 to 512 covers most recall targets", p->ef);
    }
    if ((rc = keel__check_query(idx, query)))
        return rc;
    keel_accept acc;
    keel_idset set;
    if ((rc = keel__params_accept(p, &acc, &set)))
        return rc;
    uint64_t *res = keel__malloc((max_results + 1) * sizeof *res);
    if (!res) {
        keel__idset_free(&set);
        return KEEL_ENOMEM;
    }
    keel_read r;
    if ((rc = keel__read_enter(idx, &r, KEEL_READ_VIEW | KEEL_READ_PAGES))) {
        keel__idset_free(&set);
        keel__free(res);
        return rc == KEEL_ENOMEM ? radius_oom() : rc;
    }
    const keel_view *v = &r.v;
    keel_search_ctx *c = keel__ctx_get(idx);
    rc = c ? KEEL_OK : KEEL_ENOMEM;
    radius_job j = {.gr = idx->gr, .v = v, .c = c, .radius = radius,
                    .cap = max_results, .acc = &acc, .res = res};
    uint32_t ef = p && p->ef ? p->ef : idx->ef_search;
    j.beam = KEEL_MAX((size_t)ef, max_results);
    j.r_int = idx->metric == KEEL_L2
            ? nextafterf(radius * radius, INFINITY) : radius;
    if (!rc && v->count && v->entry != KEEL_EMPTY && v->entry < v->limit) {
        j.q = keel__prep_query(idx, query, c->vbuf);
        if (acc.allowed && acc.allowed->n <= 2 * j.beam)
            rc = scan_allowed(&j);
        else
            rc = walk(&j);
    }
    size_t n = j.nres;
    if (!rc) {
        qsort(res, n, sizeof *res, cmp_u64);
        for (size_t i = 0; i < n; i++) {
            uint32_t s = keel__pack_slot(res[i]);
            out[i].id = keel__store_id(idx->st, s);
            out[i].distance = keel__graph_report(idx->gr,
                                                 keel__pack_dist(res[i]));
        }
        /* Equal distances come back by id. */
        for (size_t i = 1; i < n; i++) {
            keel_result x = out[i];
            size_t k = i;
            for (; k > 0 && (out[k - 1].distance > x.distance ||
                             (out[k - 1].distance == x.distance &&
                              out[k - 1].id > x.id)); k--)
                out[k] = out[k - 1];
            out[k] = x;
        }
        *n_out = n;
    }
    keel__ctx_put(idx, c);
    rc = keel__read_leave(idx, &r, rc);
    keel__idset_free(&set);
    keel__free(res);
    return rc == KEEL_ENOMEM ? radius_oom() : rc;
}
