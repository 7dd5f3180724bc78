/* zskiplist.h -- a skiplist ordered by (score, member), with spans.
 *
 * The ordered half of a sorted set (the other half, member -> score, is a
 * dict). Every forward link records how many level-0 steps it jumps (its
 * span), so the rank of an element and the element at a rank are found in
 * O(log n) like a search. Ranks are 1-based here; the commands turn them
 * into Redis's 0-based indexes.
 *
 * Order: by score, then by member bytes (memcmp, a shorter prefix first).
 * Scores are never NaN (the callers refuse it). Members are copied in.
 *
 * Not thread safe: the owning shard's lock protects it. */
#ifndef ROWAN_ZSKIPLIST_H
#define ROWAN_ZSKIPLIST_H
#include <stddef.h>

#define ZSL_MAXLEVEL 32

typedef struct zsl_node {
    double score;
    size_t mlen;
    char *member;              /* points into the node's own allocation */
    struct zsl_node *backward; /* level-0 predecessor (NULL for the first) */
    int nlevel;
    struct zsl_level {
        struct zsl_node *forward;
        unsigned long span;    /* level-0 steps to forward (or to the end) */
    } level[];
} zsl_node;

typedef struct zskiplist {
    zsl_node *header, *tail;
    unsigned long length;
    int level;
    size_t mem;                /* bytes allocated for nodes (MEMORY USAGE) */
} zskiplist;

/* A score interval; minex/maxex: the bound is excluded. */
typedef struct zrange_score {
    double min, max;
    int minex, maxex;
} zrange_score;

/* A lex interval: each end is -inf ("-"), +inf ("+") or a member
 * (inclusive "[m" or exclusive "(m"). */
enum { ZLEX_VALUE = 0, ZLEX_NEGINF = 1, ZLEX_POSINF = 2 };
typedef struct zrange_lex {
    int minkind, maxkind;
    const char *min, *max;
    size_t minlen, maxlen;
    int minex, maxex;
} zrange_lex;

zskiplist *zsl_new(void);
void zsl_free(zskiplist *zsl);

/* Compare two members as the skiplist orders them. */
int zsl_cmp_member(const char *a, size_t alen, const char *b, size_t blen);

/* Insert an element that is not in the list yet; returns its node. */
zsl_node *zsl_insert(zskiplist *zsl, double score, const char *m, size_t mlen);
/* Remove (score, m); 1 if it was there. */
int zsl_delete(zskiplist *zsl, double score, const char *m, size_t mlen);
/* Move an element that is in the list (with score cur) to newscore;
 * returns its (possibly new) node. */
zsl_node *zsl_update_score(zskiplist *zsl, double cur, const char *m, size_t mlen,
                           double newscore);

/* 1-based rank of (score, m), 0 if it is not in the list. */
unsigned long zsl_rank(const zskiplist *zsl, double score, const char *m, size_t mlen);
/* The node at 1-based rank, NULL if out of range. */
zsl_node *zsl_at_rank(const zskiplist *zsl, unsigned long rank);

static inline zsl_node *zsl_first(const zskiplist *zsl) { return zsl->header->level[0].forward; }
static inline zsl_node *zsl_next(const zsl_node *n) { return n->level[0].forward; }

/* Is the interval empty by itself (min > max, or equal with an exclusion)? */
int zsl_score_range_empty(const zrange_score *r);
int zsl_lex_range_empty(const zrange_lex *r);
int zsl_score_gte_min(double v, const zrange_score *r);
int zsl_score_lte_max(double v, const zrange_score *r);
int zsl_lex_gte_min(const char *m, size_t mlen, const zrange_lex *r);
int zsl_lex_lte_max(const char *m, size_t mlen, const zrange_lex *r);

/* First / last element inside the interval, NULL if none. */
zsl_node *zsl_first_in_score(const zskiplist *zsl, const zrange_score *r);
zsl_node *zsl_last_in_score(const zskiplist *zsl, const zrange_score *r);
zsl_node *zsl_first_in_lex(const zskiplist *zsl, const zrange_lex *r);
zsl_node *zsl_last_in_lex(const zskiplist *zsl, const zrange_lex *r);

/* Level used for a new node (exposed for the unit test's distribution check). */
int zsl_random_level(void);

#endif
