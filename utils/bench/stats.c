/* stats.c -- per-worker counters and their merge (see stats.h). */
#include "stats.h"

#include <string.h>

const char *const cmd_names[CMD_NCMDS] = {
    "get", "set", "hgetall", "hmget", "hmset", "zadd", "zrangebyscore", "wait",
};

void stats_init(struct stats *s) {
    memset(s, 0, sizeof *s);
    for (int i = 0; i < OP_NTYPES; i++)
        hist_init(&s->lat[i]);
    hist_init(&s->send_lag);
}

static void kind_add(struct stats *s, const char *kind, size_t len, uint64_t n) {
    if (len >= ERRKIND_LEN)
        len = ERRKIND_LEN - 1;
    for (int i = 0; i < s->nkinds; i++)
        if (strlen(s->kinds[i].kind) == len && !memcmp(s->kinds[i].kind, kind, len)) {
            s->kinds[i].n += n;
            return;
        }
    if (s->nkinds >= ERRKIND_MAX - 1 && (len != 5 || memcmp(kind, "OTHER", 5))) {
        /* Keep the last slot for everything else. */
        kind_add(s, "OTHER", 5, n);
        return;
    }
    struct errkind *k = &s->kinds[s->nkinds++];
    memcpy(k->kind, kind, len);
    k->kind[len] = 0;
    k->n = n;
}

void stats_error(struct stats *s, const char *kind, size_t len) {
    /* Only the first word: "ERR unknown command 'x'" is kind ERR. */
    const char *sp = memchr(kind, ' ', len);
    if (sp)
        len = (size_t)(sp - kind);
    kind_add(s, kind, len, 1);
}

void stats_merge(struct stats *dst, const struct stats *src) {
    for (int i = 0; i < OP_NTYPES; i++) {
        hist_merge(&dst->lat[i], &src->lat[i]);
        dst->ok[i] += src->ok[i];
        dst->failed[i] += src->failed[i];
    }
    for (int i = 0; i < CMD_NCMDS; i++)
        dst->cmds[i] += src->cmds[i];
    dst->moved += src->moved;
    dst->ask += src->ask;
    dst->missed += src->missed;
    hist_merge(&dst->send_lag, &src->send_lag);
    for (int i = 0; i < src->nkinds; i++)
        kind_add(dst, src->kinds[i].kind, strlen(src->kinds[i].kind), src->kinds[i].n);
}

uint64_t stats_total_ops(const struct stats *s) {
    uint64_t n = 0;
    for (int i = 0; i < OP_NTYPES; i++)
        n += s->ok[i] + s->failed[i];
    return n;
}
