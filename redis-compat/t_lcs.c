/* t_lcs.c -- LCS (longest common subsequence of two strings); SUBSTR is a
 * row in cmds_lcs.def that runs GETRANGE, as in Redis.
 *
 * LCS fills the classic (alen+1) x (blen+1) table of prefix LCS lengths,
 * then walks back from the bottom-right corner, collecting the subsequence
 * and, for IDX, the runs of consecutive matches (from the end of the
 * strings to their start, as Redis lists them). The table is transient
 * memory: it is refused past 512 MB (Redis's proto-max-bulk-len bound and
 * its error text), so two large strings cannot exhaust memory.
 *
 * Replies, error texts and the order of checks follow Redis 7.0. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "db.h"

#define LCS_MAX_TABLE (512ULL * 1024 * 1024)

typedef struct lcs_match { long long a0, a1, b0, b1; } lcs_match;

/* LCS key1 key2 [LEN] [IDX] [MINMATCHLEN n] [WITHMATCHLEN] */
void lcsCommand(client *c) {
    const char *s[2] = {"", ""};
    size_t len[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        db_val v;
        if (!db_lookup(&c->x, c->db, c->argv[1 + k], c->argvlen[1 + k], &v)) continue;
        if (v.type != OBJ_STRING) {
            resp_add_error(&c->out, "ERR The specified keys must contain string values");
            return;
        }
        s[k] = v.ptr;
        len[k] = v.len;
    }
    int getlen = 0, getidx = 0, withmatchlen = 0;
    long long minmatchlen = 0;
    for (int j = 3; j < c->argc; j++) {
        int more = c->argc - 1 - j;
        if (arg_is(c, j, "idx")) getidx = 1;
        else if (arg_is(c, j, "len")) getlen = 1;
        else if (arg_is(c, j, "withmatchlen")) withmatchlen = 1;
        else if (arg_is(c, j, "minmatchlen") && more) {
            if (arg_ll(c, j + 1, &minmatchlen)) return;
            if (minmatchlen < 0) minmatchlen = 0;
            j++;
        } else {
            resp_add_error(&c->out, ERR_SYNTAX);
            return;
        }
    }
    if (getlen && getidx) {
        resp_add_error(&c->out, "ERR If you want both the length and indexes, please just use IDX.");
        return;
    }
    const unsigned char *a = (const unsigned char *)s[0], *b = (const unsigned char *)s[1];
    size_t alen = len[0], blen = len[1];
    if ((unsigned long long)(alen + 1) * (blen + 1) > LCS_MAX_TABLE / sizeof(uint32_t)) {
        resp_add_error(&c->out, "ERR Insufficient memory, transient memory for LCS exceeds "
                                "proto-max-bulk-len");
        return;
    }
    size_t w = blen + 1;
    uint32_t *t = malloc((alen + 1) * w * sizeof(uint32_t));
    if (!t) abort();
#define T(i, j) t[(size_t)(i) * w + (j)]
    for (size_t i = 0; i <= alen; i++) {
        for (size_t j = 0; j <= blen; j++) {
            if (i == 0 || j == 0) T(i, j) = 0;
            else if (a[i - 1] == b[j - 1]) T(i, j) = T(i - 1, j - 1) + 1;
            else T(i, j) = T(i - 1, j) > T(i, j - 1) ? T(i - 1, j) : T(i, j - 1);
        }
    }
    uint32_t total = T(alen, blen), idx = total;
    char *res = malloc(total + 1);
    lcs_match *m = NULL;
    size_t nm = 0, capm = 0;
    if (!res) abort();
    /* A run is a0..a1 / b0..b1; a0 == alen means no run is open. */
    size_t a0 = alen, a1 = 0, b0 = 0, b1 = 0, i = alen, j = blen;
    while (i > 0 && j > 0) {
        int emit = 0;
        if (a[i - 1] == b[j - 1]) {
            res[--idx] = (char)a[i - 1];
            if (a0 == alen) {
                a0 = a1 = i - 1;
                b0 = b1 = j - 1;
            } else if (a0 == i && b0 == j) {
                a0--, b0--;   /* the run goes on */
            } else {
                emit = 1;
            }
            if (a0 == 0 || b0 == 0) emit = 1;
            i--, j--;
        } else {
            if (T(i - 1, j) > T(i, j - 1)) i--;
            else j--;
            if (a0 != alen) emit = 1;
        }
        if (emit) {
            if (getidx && (minmatchlen == 0 || (long long)(a1 - a0 + 1) >= minmatchlen)) {
                if (nm == capm) {
                    capm = capm ? capm * 2 : 16;
                    m = realloc(m, capm * sizeof(*m));
                    if (!m) abort();
                }
                m[nm++] = (lcs_match){(long long)a0, (long long)a1, (long long)b0, (long long)b1};
            }
            a0 = alen;
        }
    }
#undef T
    if (getidx) {
        resp_add_map(&c->out, 2);
        resp_add_bulkstr(&c->out, "matches");
        resp_add_array(&c->out, (long long)nm);
        for (size_t k = 0; k < nm; k++) {
            resp_add_array(&c->out, 2 + withmatchlen);
            resp_add_array(&c->out, 2);
            resp_add_int(&c->out, m[k].a0);
            resp_add_int(&c->out, m[k].a1);
            resp_add_array(&c->out, 2);
            resp_add_int(&c->out, m[k].b0);
            resp_add_int(&c->out, m[k].b1);
            if (withmatchlen) resp_add_int(&c->out, m[k].a1 - m[k].a0 + 1);
        }
        resp_add_bulkstr(&c->out, "len");
        resp_add_int(&c->out, total);
    } else if (getlen) {
        resp_add_int(&c->out, total);
    } else {
        resp_add_bulk(&c->out, res, total);
    }
    free(m);
    free(res);
    free(t);
}
