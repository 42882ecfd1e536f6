/* walk.c -- the data every graph walk shares (walk.h): search contexts,
** their visited sets, and the id sets of allow-lists.
**
** A context belongs to one thread for the duration of a call; nothing here
** is shared between threads.
*/
#include "hnsw/walk.h"

/* --- the search context ----------------------------------------------------------- */

keel_search_ctx *
keel__search_ctx_new(const keel_graph *gr)
{
    keel_search_ctx *c = keel__calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->dim = gr->dim;
    c->M0 = gr->M0;
    /* A cold walk's step gathers the lists of up to KEEL_BR_BEAM_MAX. */
    size_t ng = KEEL_BR_BEAM_MAX * ((size_t)gr->M0 + 1);
    c->gather = keel__malloc(ng * sizeof *c->gather);
    c->gvec = keel__malloc(ng * sizeof *c->gvec);
    c->gdist = keel__malloc(ng * sizeof *c->gdist);
    c->qbuf = keel__malloc(gr->dim * sizeof(float));
    c->vbuf = keel__malloc(gr->dim * sizeof(float));
    c->cq.qu = keel__malloc(KEEL_CODE_QUERY_BYTES(gr->dim));
    c->cq.tmp = keel__malloc(gr->dim * sizeof(float));
    c->link.cand = keel__malloc((gr->M0 + 2) * sizeof(uint64_t));
    c->link.keep = keel__malloc((gr->M0 + 2) * sizeof(uint32_t));
    c->link.flags = keel__malloc(2 * (size_t)gr->M0 + 2);
    c->link.vecs = keel__malloc((gr->M0 + 2) * sizeof *c->link.vecs);
    c->link.ovecs = keel__malloc((gr->M0 + 2) * sizeof *c->link.ovecs);
    c->link.pos = keel__malloc((gr->M0 + 2) * sizeof(uint32_t));
    c->link.idx = keel__malloc((gr->M0 + 2) * sizeof(uint32_t));
    c->link.dists = keel__malloc((gr->M0 + 2) * sizeof *c->link.dists);
    c->link.vbuf = keel__malloc(gr->dim * sizeof(float));
    c->link.cbuf = keel__malloc(gr->dim * sizeof(float));
    c->sel = keel__malloc((gr->M0 + 2) * sizeof(uint32_t));
    /* A neighbour's vector, record and slot header (br_vectors). */
    c->bwant = keel__malloc(KEEL_WANT_LISTS * ((size_t)gr->M0 + 1) *
                            sizeof *c->bwant);
    if (!c->bwant || !c->gather || !c->gvec || !c->gdist || !c->qbuf || !c->vbuf || !c->cq.qu || !c->cq.tmp || !c->link.cand || !c->link.keep ||
        !c->link.flags || !c->link.vecs || !c->link.ovecs || !c->link.pos || !c->link.idx || !c->link.dists || !c->link.vbuf || !c->link.cbuf || !c->sel) {
        keel__search_ctx_free(c);
        return NULL;
    }
    return c;
}

void
keel__search_ctx_free(keel_search_ctx *c)
{
    if (!c)
        return;
    keel__free(c->visited);
    keel__free(c->touched);
    keel__free(c->cand);
    keel__free(c->res);
    keel__free(c->gather);
    keel__free(c->gvec);
    keel__free(c->gdist);
    keel__free(c->qbuf);
    keel__free(c->vbuf);
    keel__free(c->cq.qu);
    keel__free(c->cq.tmp);
    keel__free(c->link.cand);
    keel__free(c->link.keep);
    keel__free(c->link.flags);
    keel__free(c->link.vecs);
    keel__free(c->link.ovecs);
    keel__free(c->link.pos);
    keel__free(c->link.idx);
    keel__free(c->link.dists);
    keel__free(c->link.vbuf);
    keel__free(c->link.cbuf);
    keel__free(c->sel);
    keel__free(c->bwant);
    keel__br_scratch_free(&c->bscratch);
    keel__free(c);
}

/* --- the visited set ------------------------------------------------------ */

int
keel__visited_reset(keel_search_ctx *c, uint64_t limit)
{
    size_t words = (size_t)((limit + 63) / 64);
    if (words > c->visited_words) {
        size_t nw = KEEL_MAX(words, c->visited_words * 2);
        uint64_t *v = keel__calloc(nw, 8);
        uint32_t *t = keel__malloc((nw + 1) * sizeof *t);
        if (!v || !t) {
            keel__free(v);
            keel__free(t);
            return KEEL_ENOMEM;
        }
        keel__free(c->visited);
        keel__free(c->touched);
        c->visited = v;
        c->touched = t;
        c->visited_words = nw;
        c->ntouched = 0;
        return KEEL_OK;
    }
    for (size_t i = 0; i < c->ntouched; i++)
        c->visited[c->touched[i]] = 0;
    c->ntouched = 0;
    return KEEL_OK;
}

/* --- allow-lists ------------------------------------------------------- */

int
keel__idset_build(keel_idset *s, const uint64_t *ids, size_t n)
{
    uint32_t log2 = keel__log2_ceil64(n * 2 + 2);
    if (log2 < 4)
        log2 = 4;
    s->mask = ((uint64_t)1 << log2) - 1;
    s->keys = keel__malloc((size_t)(s->mask + 1) * 8);
    s->n = 0;
    if (!s->keys)
        return KEEL_ENOMEM;
    memset(s->keys, 0xFF, (size_t)(s->mask + 1) * 8);
    for (size_t i = 0; i < n; i++) {
        uint64_t id = ids[i];
        if (id == UINT64_MAX)
            continue; /* reserved: never an id in the index */
        uint64_t h = (id * 0x9E3779B97F4A7C15ull) >> (64 - log2);
        while (s->keys[h] != UINT64_MAX && s->keys[h] != id)
            h = (h + 1) & s->mask;
        if (s->keys[h] == UINT64_MAX) {
            s->keys[h] = id;
            s->n++;
        }
    }
    return KEEL_OK;
}

void
keel__idset_free(keel_idset *s)
{
    keel__free(s->keys);
    s->keys = NULL;
}

int
keel__idset_has(const keel_idset *s, uint64_t id)
{
    uint32_t log2 = keel__log2_floor64(s->mask + 1);
    uint64_t h = (id * 0x9E3779B97F4A7C15ull) >> (64 - log2);
    for (;;) {
        uint64_t k = s->keys[h];
        if (k == id)
            return id != UINT64_MAX;
        if (k == UINT64_MAX)
            return 0;
        h = (h + 1) & s->mask;
    }
}
