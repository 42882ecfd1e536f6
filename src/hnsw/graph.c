/* graph.c -- HNSW node mechanics shared by searches and builds: distances,
** levels, the selection heuristic and list changes that keep graph.h's
** invariants for searches reading the same lists without a lock.
*/
#include "hnsw/graph.h"
#include "store/undo.h"

#include <math.h>
#include <sched.h>

void
keel__graph_init(keel_graph *gr, keel_store *st)
{
    memset(gr, 0, sizeof *gr);
    const keel_kernels *k = keel__kernels();
    gr->st = st;
    gr->metric = st->metric;
    gr->precision = st->precision;
    gr->dim = st->g.dim;
    gr->M = st->g.M;
    gr->M0 = st->g.M0;
    gr->dist = st->metric == KEEL_L2 ? k->l2sq[st->precision]
                                     : k->dot[st->precision];
    gr->dist4 = st->metric == KEEL_L2 ? k->l2sq4[st->precision]
                                      : k->dot4[st->precision];
    gr->code_dot = st->g.codes == KEEL_CODES_I4 ? k->code4_dot : k->code_dot;
    gr->codes = st->g.code_bytes != 0;
    gr->level_mult = 1.0 / log((double)gr->M);
}

float
keel__graph_report(const keel_graph *gr, float internal)
{
    if (gr->metric == KEEL_L2)
        return sqrtf(internal > 0.0f ? internal : 0.0f);
    if (gr->metric == KEEL_COSINE && internal < 0.0f)
        return 0.0f; /* rounding of unit vectors */
    return internal;
}

uint32_t
keel__graph_level(const keel_graph *gr, uint64_t slot)
{
    /* A hash of the slot, so a batch's levels do not depend on thread
     * timing and a file's graph shape is reproducible. */
    uint64_t state = slot, z = keel__splitmix64(&state);
    double u = ((double)(z >> 11) + 0.5) * 0x1.0p-53; /* (0, 1) */
    double l = -log(u) * gr->level_mult;
    return l >= KEEL_MAX_LEVELS - 1 ? KEEL_MAX_LEVELS - 1 : (uint32_t)l;
}

const float *
keel__graph_vec_f32(const keel_graph *gr, uint64_t slot, float *buf)
{
    const void *v = keel__store_vec(gr->st, slot);
    if (gr->precision == KEEL_F32)
        return (const float *)v;
    keel__f16_to_f32_n((const uint16_t *)v, buf, gr->dim);
    return buf;
}

/* Whether a candidate at distance d from base is a copy of it (base at
** self from itself; near: what rounding may add, keel__graph_select). */
static inline int
is_copy(float d, float self, float near)
{
    return fabsf(d - self) <= near;
}

/* A hash of slot seen from base: which copies of base its list holds
** (keel__graph_select). */
static uint64_t
copy_rank(uint64_t base, uint32_t slot)
{
    uint64_t z = base << 32 ^ slot ^ 0xC0B1E5C0DE5EED5ull;
    return keel__splitmix64(&z);
}

uint32_t
keel__graph_select(const keel_graph *gr, uint64_t base, const float *q,
                   const uint64_t *cand, uint32_t n, uint32_t cap,
                   uint32_t *out, float *buf, const void **kvec,
                   keel_select_aux *aux)
{
    uint32_t kept = 0, quarter = (cap + 3) / 4;
    /* Copies of base (the same stored vector: at base's distance from
     * itself, whatever the metric and precision) pass the heuristic
     * against each other (a distance is not nearer than the same
     * distance), so a vector stored more than cap times filled its
     * copies' lists with copies alone: islands with no links out, where
     * walks from elsewhere were caught (100 copies each of 100 vectors
     * among 10,000 others: 0.17-0.31 of random queries' results right, at
     * any ef; test_copies). Copies take at most half of a list: those of
     * lowest copy_rank when there are more, so the copies a group's lists
     * hold differ from list to list and every copy has links in (taken in
     * candidate order, every list held the same lowest slots and later
     * copies had none: searches could not return them; three quarters
     * left 1-3% of a group of 100 with none). A list with fewer exact
     * copies is chosen as before. */
    float self = keel__graph_dist(gr, q, keel__store_vec(gr->st, base));
    /* Cosine also counts what rounding of the normalization left apart:
     * v and 2v, stored normalized, differ in the last bits. */
    float near = gr->metric == KEEL_COSINE ? (float)gr->dim * 0x1p-22f : 0.0f;
    uint32_t copy_cap = cap / 2, ncopies = 0, copies = 0;
    for (uint32_t i = 0; i < n; i++)
        ncopies += is_copy(keel__pack_dist(cand[i]), self, near);
    /* Members of a closed set (keel_select_aux) are measured only against
     * kept non-members (ovecs[0..nother)): against members they passed
     * when the set was chosen, and distances are bit-identical every time
     * (dist.h invariant 2; both kernels are symmetric in their operands).
     * Copies follow rules of their own: with any, every candidate is
     * measured. */
    const uint8_t *member = aux && ncopies == 0 ? aux->member : NULL;
    const void **ovecs = member ? aux->ovecs : NULL;
    uint32_t nother = 0;
    /* Past copy_cap copies, the copy_cap-th lowest rank among them (a
     * selection by repeated minimum: copy_cap passes over the candidates,
     * only for a node with that many copies). */
    uint64_t limit = UINT64_MAX;
    for (uint32_t t = 0; ncopies > copy_cap && t < copy_cap; t++) {
        uint64_t m = UINT64_MAX;
        for (uint32_t i = 0; i < n; i++) {
            if (!is_copy(keel__pack_dist(cand[i]), self, near))
                continue;
            uint64_t r = copy_rank(base, keel__pack_slot(cand[i]));
            if ((t == 0 || r > limit) && r < m)
                m = r;
        }
        limit = m;
    }
    for (uint32_t i = 0; i < n && kept < cap; i++) {
        uint32_t c = keel__pack_slot(cand[i]);
        float dc = keel__pack_dist(cand[i]);
        int copy = is_copy(dc, self, near);
        if (copy && (copies == copy_cap ||
                     (ncopies > copy_cap && copy_rank(base, c) > limit)))
            continue;
        int in = member && member[i];
        const void **against = in ? ovecs : kvec;
        uint32_t nagainst = in ? nother : kept;
        int good = 1;
        /* Against the kept ones four at a time: most candidates are turned
         * down by one of the first few. A copy next to copies alone is
         * kept, as an exact one passes against them (near ones, which
         * rounding left apart, would be turned down at random). */
        uint32_t j = copy && copies == kept ? kept : 0;
        if (j < nagainst) {
            const float *cv = keel__graph_vec_f32(gr, c, buf);
            for (; j < nagainst && good; j += 4) {
                float d4[4];
                uint32_t m = KEEL_MIN(4u, nagainst - j);
                keel__graph_dist_group(gr, cv, against + j, m, d4);
                for (uint32_t t = 0; t < m; t++)
                    good &= d4[t] >= dc;
            }
        }
        if (good) {
            copies += copy;
            kvec[kept] = keel__store_vec(gr->st, c);
            if (ovecs && !in)
                ovecs[nother++] = kvec[kept];
            if (aux && aux->idx)
                aux->idx[kept] = i;
            out[kept++] = c;
        }
    }
    if (aux)
        aux->nclosed = kept;
    /* Colinear or clustered data can leave a node with two diverse
     * neighbours; a quarter of the list keeps such chains connected. */
    for (uint32_t i = 0; i < n && kept < quarter; i++) {
        uint32_t c = keel__pack_slot(cand[i]);
        if (is_copy(keel__pack_dist(cand[i]), self, near))
            continue; /* copies had their places above */
        int have = 0;
        for (uint32_t j = 0; j < kept && !have; j++)
            have = out[j] == c;
        if (have)
            continue;
        if (aux && aux->idx)
            aux->idx[kept] = i;
        out[kept++] = c;
    }
    return kept;
}

void
keel__spin_lock(uint32_t *l)
{
    for (unsigned spins = 0;; spins++) {
        if (!__atomic_load_n(l, __ATOMIC_RELAXED) &&
            !__atomic_exchange_n(l, 1u, __ATOMIC_ACQUIRE))
            return;
        if (spins > 64)
            sched_yield();
    }
}

void
keel__spin_unlock(uint32_t *l)
{
    __atomic_store_n(l, 0u, __ATOMIC_RELEASE);
}

/* The closed-set bits of slot's list at level (invariant 4), or NULL when
** none are kept for it. */
static uint64_t *
closed_bits(const keel_graph *gr, uint64_t slot, uint32_t level)
{
    if (!gr->closed || level != 0 || slot < gr->closed_base ||
        slot - gr->closed_base >= gr->closed_n)
        return NULL;
    return &gr->closed[slot - gr->closed_base];
}

void
keel__graph_set_list(keel_graph *gr, uint64_t slot, uint32_t level,
                     const uint32_t *nb, uint32_t n, uint32_t nclosed)
{
    uint32_t len;
    uint32_t *list = keel__store_list(gr->st, slot, level, &len);
    if (!list)
        return;
    uint32_t *lock = &gr->stripes[slot % KEEL_STRIPES];
    keel__spin_lock(lock);
    for (uint32_t j = 0; j < len; j++)
        KEEL_STORE_RELAXED(&list[j], j < n ? nb[j] : KEEL_EMPTY);
    uint64_t *bits = closed_bits(gr, slot, level);
    if (bits)
        *bits = nclosed >= 64 ? ~0ull : ((uint64_t)1 << nclosed) - 1;
    keel__spin_unlock(lock);
}

/* Rewrites a full list (len positions) to hold the selection's nk choices
** (candidate indexes idx[0..nk), candidate i from position pos[i], len for
** the newcomer), keeping the positions of entries that stay (invariant 2):
** each in one pass, no matching of entries. Returns the positions of the
** first nclosed choices as bits. stays: len bytes of scratch. */
static uint64_t
rewrite_list(uint32_t *list, uint32_t len, const uint32_t *keep,
             const uint32_t *idx, uint32_t nk, uint32_t nclosed,
             const uint32_t *pos, uint8_t *stays)
{
    memset(stays, 0, len);
    uint64_t bits = 0;
    uint32_t newcomer = KEEL_EMPTY; /* its rank among the choices */
    for (uint32_t t = 0; t < nk; t++) {
        uint32_t p = pos[idx[t]];
        if (p == len) {
            newcomer = t;
            continue;
        }
        stays[p] = 1;
        if (t < nclosed && p < 64)
            bits |= (uint64_t)1 << p;
    }
    for (uint32_t j = 0; j < len; j++) {
        if (stays[j])
            continue;
        if (newcomer != KEEL_EMPTY) {
            KEEL_STORE_RELAXED(&list[j], keep[newcomer]);
            if (newcomer < nclosed && j < 64)
                bits |= (uint64_t)1 << j;
            stays[j] = 1;
            newcomer = KEEL_EMPTY;
        }
    }
    for (uint32_t j = 0; j < len; j++)
        if (!stays[j])
            KEEL_STORE_RELAXED(&list[j], KEEL_EMPTY);
    return bits;
}

static int
journal_grow(keel_journal *jn, size_t more)
{
    size_t cap = jn->cap ? jn->cap : 4096;
    while (cap < jn->n + more)
        cap *= 2;
    uint32_t *w = keel__realloc(jn->w, cap * sizeof *w);
    if (!w)
        return keel__fail(KEEL_ENOMEM, "out of memory keeping the lists an "
                          "add changes (%zu bytes)\nhelp: free memory, or add "
                          "smaller batches", cap * sizeof *w);
    jn->w = w;
    jn->cap = cap;
    return KEEL_OK;
}

/* Appends slot's record (words 0: its lists are in the undo log). The
** caller holds the slot's stripe lock and made room. */
static void
journal_put(const keel_graph *gr, keel_journal *jn, uint64_t slot,
            uint32_t words)
{
    uint32_t *w = jn->w + jn->n;
    w[0] = (uint32_t)slot;
    w[1] = words;
    w += 2;
    for (uint32_t lv = 0, j = 0; j < words; lv++) {
        uint32_t len;
        const uint32_t *list = keel__store_list(gr->st, slot, lv, &len);
        uint32_t n = lv ? gr->M : gr->M0;
        for (uint32_t e = 0; e < n; e++, j++)
            w[j] = list ? KEEL_LOAD_RELAXED(&list[e]) : KEEL_EMPTY;
    }
    jn->n += 2 + (size_t)words;
}

void
keel__graph_journal_end(keel_graph *gr, keel_journal *jn, int restore)
{
    keel_store *st = gr->st;
    for (size_t p = 0; p < jn->n;) {
        uint32_t slot = jn->w[p], words = jn->w[p + 1];
        const uint32_t *w = jn->w + p + 2;
        if (restore && words) {
            uint32_t *lock = &gr->stripes[slot % KEEL_STRIPES];
            keel__spin_lock(lock);
            for (uint32_t lv = 0, j = 0; j < words; lv++) {
                uint32_t len;
                uint32_t *list = keel__store_list(st, slot, lv, &len);
                uint32_t n = lv ? gr->M : gr->M0;
                for (uint32_t e = 0; e < n; e++, j++)
                    if (list)
                        KEEL_STORE_RELAXED(&list[e], w[j]);
            }
            keel__spin_unlock(lock);
        }
        uint64_t i;
        uint32_t k = keel__slot_segment(&st->g, slot, &i);
        __atomic_fetch_and(&st->journal_bits[k][i >> 6],
                           ~((uint64_t)1 << (i & 63)), __ATOMIC_RELAXED);
        p += 2 + (size_t)words;
    }
    keel__free(jn->w);
    memset(jn, 0, sizeof *jn);
}

int
keel__graph_add_link(keel_graph *gr, uint64_t to, uint64_t from,
                     uint32_t level, uint64_t limit, keel_link_scratch *s)
{
    uint32_t len;
    uint32_t *list = keel__store_list(gr->st, to, level, &len);
    if (!list)
        return KEEL_OK;
    /* A committed node's lists go to the undo log before they change (before
     * the stripe lock: the save may write). If they cannot, the link is not
     * made and the add fails: a link the log cannot undo would let a crash
     * cut committed nodes off, and an add that leaves it out is not whole. */
    keel_store *st = gr->st;
    int rc = KEEL_OK, wrote = 0;
    if (to < st->committed.count && (rc = keel__undo_save(st, to, &wrote)))
        return rc;
    /* The call's journal (keel_journal): room is made before the lock, the
     * bit is taken and the lists copied under it, before they change. */
    keel_journal *jn = s->journal;
    uint64_t *jword = NULL, jbit = 0;
    uint32_t words = 0;
    if (jn && to < jn->before) {
        uint64_t i;
        uint32_t k = keel__slot_segment(&st->g, to, &i);
        jword = &st->journal_bits[k][i >> 6];
        jbit = (uint64_t)1 << (i & 63);
        if (__atomic_load_n(jword, __ATOMIC_RELAXED) & jbit) {
            jword = NULL; /* journaled already by this call */
        } else {
            if (!wrote)
                words = gr->M0 + (uint32_t)(KEEL_LOAD_ACQUIRE(
                                     keel__store_rec(st, to)) & 0xFF) * gr->M;
            if (jn->n + 2 + words > jn->cap && (rc = journal_grow(jn, 2 + words)))
                return rc;
        }
    }
    uint32_t *lock = &gr->stripes[to % KEEL_STRIPES];
    keel__spin_lock(lock);
    if (jword && !(__atomic_fetch_or(jword, jbit, __ATOMIC_RELAXED) & jbit))
        journal_put(gr, jn, to, words);
    uint32_t free_pos = KEEL_EMPTY;
    for (uint32_t j = 0; j < len; j++) {
        uint32_t e = KEEL_LOAD_RELAXED(&list[j]);
        if (e == from)
            goto done;
        if ((e == KEEL_EMPTY || e >= limit) && free_pos == KEEL_EMPTY)
            free_pos = j;
    }
    uint64_t *bits = closed_bits(gr, to, level);
    if (free_pos != KEEL_EMPTY) {
        KEEL_STORE_RELAXED(&list[free_pos], (uint32_t)from);
        if (bits && free_pos < 64)
            *bits &= ~((uint64_t)1 << free_pos);
        goto done;
    }
    /* Full: choose the best len of the current entries and the new one. */
    const float *tv = keel__graph_vec_f32(gr, to, s->vbuf);
    uint32_t n = 0;
    for (uint32_t j = 0; j < len; j++) {
        s->keep[n] = KEEL_LOAD_RELAXED(&list[j]);
        s->vecs[n] = keel__store_vec(gr->st, s->keep[n]);
        n++;
    }
    s->keep[n] = (uint32_t)from;
    s->vecs[n++] = keel__store_vec(gr->st, from);
    keel__graph_dist_group(gr, tv, s->vecs, n, s->dists);
    for (uint32_t j = 0; j < n; j++) {
        s->cand[j] = keel__pack(s->dists[j], s->keep[j]);
        s->pos[j] = j;
    }
    /* Insertion sort, positions alongside: n is at most 2M + 1. */
    for (uint32_t i = 1; i < n; i++) {
        uint64_t x = s->cand[i];
        uint32_t xp = s->pos[i], j = i;
        for (; j > 0 && s->cand[j - 1] > x; j--) {
            s->cand[j] = s->cand[j - 1];
            s->pos[j] = s->pos[j - 1];
        }
        s->cand[j] = x;
        s->pos[j] = xp;
    }
    uint8_t *member = s->flags, *stays = s->flags + n;
    uint64_t was = bits ? *bits : 0;
    for (uint32_t i = 0; i < n; i++)
        member[i] = s->pos[i] < 64 && (was >> s->pos[i] & 1);
    keel_select_aux aux = {.member = was ? member : NULL,
                           .ovecs = s->ovecs, .idx = s->idx};
    uint32_t nk = keel__graph_select(gr, to, tv, s->cand, n, len, s->keep,
                                     s->cbuf, s->vecs, &aux);
    uint64_t now = rewrite_list(list, len, s->keep, s->idx, nk, aux.nclosed,
                                s->pos, stays);
    if (bits)
        *bits = now;
done:
    keel__spin_unlock(lock);
    return rc;
}
