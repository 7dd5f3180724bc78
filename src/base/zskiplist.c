/* zskiplist.c -- skiplist with spans for sorted sets (see zskiplist.h).
 *
 * Levels are drawn with probability 1/4 per extra level, capped at
 * ZSL_MAXLEVEL. The header node has every level; a link that reaches the
 * end of the list (forward NULL) still carries the span to the end, which
 * keeps insertion and deletion bookkeeping uniform. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "zskiplist.h"

static __thread uint64_t zsl_rng_state;

static uint64_t zsl_rng(void) {
    uint64_t x = zsl_rng_state;
    if (x == 0) x = 0x9e3779b97f4a7c15ULL ^ (uint64_t)(uintptr_t)&zsl_rng_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    zsl_rng_state = x;
    return x;
}

int zsl_random_level(void) {
    int level = 1;
    /* Continue with probability 1/4. */
    while (level < ZSL_MAXLEVEL && ((zsl_rng() >> 32) & 3) == 0) level++;
    return level;
}

static zsl_node *node_new(int level, double score, const char *m, size_t mlen, size_t *bytes) {
    size_t sz = sizeof(zsl_node) + (size_t)level * sizeof(struct zsl_level) + mlen + 1;
    zsl_node *n = malloc(sz);
    if (!n) abort();
    n->score = score;
    n->mlen = mlen;
    n->member = (char *)n + sizeof(zsl_node) + (size_t)level * sizeof(struct zsl_level);
    if (mlen) memcpy(n->member, m, mlen);
    n->member[mlen] = '\0';
    n->backward = NULL;
    n->nlevel = level;
    for (int i = 0; i < level; i++) {
        n->level[i].forward = NULL;
        n->level[i].span = 0;
    }
    *bytes = sz;
    return n;
}

static size_t node_size(const zsl_node *n) {
    return sizeof(zsl_node) + (size_t)n->nlevel * sizeof(struct zsl_level) + n->mlen + 1;
}

zskiplist *zsl_new(void) {
    zskiplist *zsl = malloc(sizeof(*zsl));
    size_t sz;
    if (!zsl) abort();
    zsl->header = node_new(ZSL_MAXLEVEL, 0, NULL, 0, &sz);
    zsl->tail = NULL;
    zsl->length = 0;
    zsl->level = 1;
    zsl->mem = sizeof(*zsl) + sz;
    return zsl;
}

void zsl_free(zskiplist *zsl) {
    if (!zsl) return;
    zsl_node *n = zsl->header->level[0].forward;
    while (n) {
        zsl_node *next = n->level[0].forward;
        free(n);
        n = next;
    }
    free(zsl->header);
    free(zsl);
}

int zsl_cmp_member(const char *a, size_t alen, const char *b, size_t blen) {
    size_t min = alen < blen ? alen : blen;
    int c = min ? memcmp(a, b, min) : 0;
    if (c) return c;
    return alen < blen ? -1 : alen > blen ? 1 : 0;
}

/* Does node n come before (score, m)? */
static int node_before(const zsl_node *n, double score, const char *m, size_t mlen) {
    return n->score < score ||
           (n->score == score && zsl_cmp_member(n->member, n->mlen, m, mlen) < 0);
}

zsl_node *zsl_insert(zskiplist *zsl, double score, const char *m, size_t mlen) {
    zsl_node *update[ZSL_MAXLEVEL], *x = zsl->header;
    unsigned long rank[ZSL_MAXLEVEL];
    size_t sz;

    for (int i = zsl->level - 1; i >= 0; i--) {
        rank[i] = i == zsl->level - 1 ? 0 : rank[i + 1];
        while (x->level[i].forward && node_before(x->level[i].forward, score, m, mlen)) {
            rank[i] += x->level[i].span;
            x = x->level[i].forward;
        }
        update[i] = x;
    }
    int level = zsl_random_level();
    if (level > zsl->level) {
        for (int i = zsl->level; i < level; i++) {
            rank[i] = 0;
            update[i] = zsl->header;
            update[i]->level[i].span = zsl->length;
        }
        zsl->level = level;
    }
    x = node_new(level, score, m, mlen, &sz);
    zsl->mem += sz;
    for (int i = 0; i < level; i++) {
        x->level[i].forward = update[i]->level[i].forward;
        update[i]->level[i].forward = x;
        /* update[i] was rank[i]; x lands at rank[0] + 1. */
        x->level[i].span = update[i]->level[i].span - (rank[0] - rank[i]);
        update[i]->level[i].span = (rank[0] - rank[i]) + 1;
    }
    for (int i = level; i < zsl->level; i++) update[i]->level[i].span++;

    x->backward = update[0] == zsl->header ? NULL : update[0];
    if (x->level[0].forward) x->level[0].forward->backward = x;
    else zsl->tail = x;
    zsl->length++;
    return x;
}

/* Unlink x, whose predecessors per level are update[]. */
static void unlink_node(zskiplist *zsl, zsl_node *x, zsl_node **update) {
    for (int i = 0; i < zsl->level; i++) {
        if (update[i]->level[i].forward == x) {
            update[i]->level[i].span += x->level[i].span - 1;
            update[i]->level[i].forward = x->level[i].forward;
        } else {
            update[i]->level[i].span--;
        }
    }
    if (x->level[0].forward) x->level[0].forward->backward = x->backward;
    else zsl->tail = x->backward;
    while (zsl->level > 1 && zsl->header->level[zsl->level - 1].forward == NULL) zsl->level--;
    zsl->length--;
}

/* Fill update[] with the last node before (score, m) on each level;
 * returns the node after update[0] (the candidate match). */
static zsl_node *find_update(const zskiplist *zsl, double score, const char *m, size_t mlen,
                             zsl_node **update) {
    zsl_node *x = zsl->header;
    for (int i = zsl->level - 1; i >= 0; i--) {
        while (x->level[i].forward && node_before(x->level[i].forward, score, m, mlen))
            x = x->level[i].forward;
        update[i] = x;
    }
    return x->level[0].forward;
}

static int node_is(const zsl_node *x, double score, const char *m, size_t mlen) {
    return x && x->score == score && zsl_cmp_member(x->member, x->mlen, m, mlen) == 0;
}

int zsl_delete(zskiplist *zsl, double score, const char *m, size_t mlen) {
    zsl_node *update[ZSL_MAXLEVEL];
    zsl_node *x = find_update(zsl, score, m, mlen, update);
    if (!node_is(x, score, m, mlen)) return 0;
    unlink_node(zsl, x, update);
    zsl->mem -= node_size(x);
    free(x);
    return 1;
}

zsl_node *zsl_update_score(zskiplist *zsl, double cur, const char *m, size_t mlen,
                           double newscore) {
    zsl_node *update[ZSL_MAXLEVEL];
    zsl_node *x = find_update(zsl, cur, m, mlen, update);
    if (!node_is(x, cur, m, mlen)) return NULL;
    /* Still between its neighbours: change the score in place. */
    if ((x->backward == NULL || x->backward->score < newscore ||
         (x->backward->score == newscore &&
          zsl_cmp_member(x->backward->member, x->backward->mlen, m, mlen) < 0)) &&
        (x->level[0].forward == NULL || x->level[0].forward->score > newscore ||
         (x->level[0].forward->score == newscore &&
          zsl_cmp_member(x->level[0].forward->member, x->level[0].forward->mlen, m, mlen) > 0))) {
        x->score = newscore;
        return x;
    }
    unlink_node(zsl, x, update);
    zsl->mem -= node_size(x);
    /* Insert first (it copies m, which may point into x), then free x. */
    zsl_node *n = zsl_insert(zsl, newscore, x->member, x->mlen);
    free(x);
    return n;
}

unsigned long zsl_rank(const zskiplist *zsl, double score, const char *m, size_t mlen) {
    const zsl_node *x = zsl->header;
    unsigned long rank = 0;
    for (int i = zsl->level - 1; i >= 0; i--) {
        while (x->level[i].forward &&
               (node_before(x->level[i].forward, score, m, mlen) ||
                node_is(x->level[i].forward, score, m, mlen))) {
            rank += x->level[i].span;
            x = x->level[i].forward;
        }
        if (x != zsl->header && node_is(x, score, m, mlen)) return rank;
    }
    return 0;
}

zsl_node *zsl_at_rank(const zskiplist *zsl, unsigned long rank) {
    zsl_node *x = zsl->header;
    unsigned long traversed = 0;
    if (rank == 0 || rank > zsl->length) return NULL;
    for (int i = zsl->level - 1; i >= 0; i--) {
        while (x->level[i].forward && traversed + x->level[i].span <= rank) {
            traversed += x->level[i].span;
            x = x->level[i].forward;
        }
        if (traversed == rank) return x;
    }
    return NULL;
}

/* ---------------- score intervals ---------------- */

int zsl_score_gte_min(double v, const zrange_score *r) {
    return r->minex ? v > r->min : v >= r->min;
}

int zsl_score_lte_max(double v, const zrange_score *r) {
    return r->maxex ? v < r->max : v <= r->max;
}

int zsl_score_range_empty(const zrange_score *r) {
    return r->min > r->max || (r->min == r->max && (r->minex || r->maxex));
}

zsl_node *zsl_first_in_score(const zskiplist *zsl, const zrange_score *r) {
    zsl_node *x = zsl->header;
    if (zsl_score_range_empty(r)) return NULL;
    for (int i = zsl->level - 1; i >= 0; i--)
        while (x->level[i].forward && !zsl_score_gte_min(x->level[i].forward->score, r))
            x = x->level[i].forward;
    x = x->level[0].forward;
    if (!x || !zsl_score_lte_max(x->score, r)) return NULL;
    return x;
}

zsl_node *zsl_last_in_score(const zskiplist *zsl, const zrange_score *r) {
    zsl_node *x = zsl->header;
    if (zsl_score_range_empty(r)) return NULL;
    for (int i = zsl->level - 1; i >= 0; i--)
        while (x->level[i].forward && zsl_score_lte_max(x->level[i].forward->score, r))
            x = x->level[i].forward;
    if (x == zsl->header || !zsl_score_gte_min(x->score, r)) return NULL;
    return x;
}

/* ---------------- lex intervals ---------------- */

int zsl_lex_gte_min(const char *m, size_t mlen, const zrange_lex *r) {
    if (r->minkind == ZLEX_NEGINF) return 1;
    if (r->minkind == ZLEX_POSINF) return 0;
    int c = zsl_cmp_member(m, mlen, r->min, r->minlen);
    return r->minex ? c > 0 : c >= 0;
}

int zsl_lex_lte_max(const char *m, size_t mlen, const zrange_lex *r) {
    if (r->maxkind == ZLEX_POSINF) return 1;
    if (r->maxkind == ZLEX_NEGINF) return 0;
    int c = zsl_cmp_member(m, mlen, r->max, r->maxlen);
    return r->maxex ? c < 0 : c <= 0;
}

int zsl_lex_range_empty(const zrange_lex *r) {
    if (r->minkind == ZLEX_POSINF || r->maxkind == ZLEX_NEGINF) return 1;
    if (r->minkind == ZLEX_NEGINF || r->maxkind == ZLEX_POSINF) return 0;
    int c = zsl_cmp_member(r->min, r->minlen, r->max, r->maxlen);
    return c > 0 || (c == 0 && (r->minex || r->maxex));
}

/* Both ends of the list against the interval: nothing can match when the
 * last element is below min or the first above max. */
static int lex_ends_overlap(const zskiplist *zsl, const zrange_lex *r) {
    const zsl_node *f = zsl->header->level[0].forward, *l = zsl->tail;
    return f && !zsl_lex_range_empty(r) && zsl_lex_gte_min(l->member, l->mlen, r) &&
           zsl_lex_lte_max(f->member, f->mlen, r);
}

zsl_node *zsl_first_in_lex(const zskiplist *zsl, const zrange_lex *r) {
    zsl_node *x = zsl->header;
    if (!lex_ends_overlap(zsl, r)) return NULL;
    for (int i = zsl->level - 1; i >= 0; i--)
        while (x->level[i].forward &&
               !zsl_lex_gte_min(x->level[i].forward->member, x->level[i].forward->mlen, r))
            x = x->level[i].forward;
    x = x->level[0].forward;
    if (!x || !zsl_lex_lte_max(x->member, x->mlen, r)) return NULL;
    return x;
}

zsl_node *zsl_last_in_lex(const zskiplist *zsl, const zrange_lex *r) {
    zsl_node *x = zsl->header;
    if (!lex_ends_overlap(zsl, r)) return NULL;
    for (int i = zsl->level - 1; i >= 0; i--)
        while (x->level[i].forward &&
               zsl_lex_lte_max(x->level[i].forward->member, x->level[i].forward->mlen, r))
            x = x->level[i].forward;
    if (x == zsl->header || !zsl_lex_gte_min(x->member, x->mlen, r)) return NULL;
    return x;
}
