/* workload.c -- workload presets, op mixes, key space and key choosers. */
#include "workload.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

const char *const op_names[OP_NTYPES] = {"READ", "UPDATE", "INSERT", "SCAN", "RMW"};
const char *const dist_names[3] = {"uniform", "zipfian", "latest"};

struct preset {
    const char *name;
    double read, update, insert, scan, rmw;
    enum key_dist dist;
};

/* YCSB's core workloads (workloads/workloada ... workloadf). */
static const struct preset presets[] = {
    {"load", 0, 0, 1, 0, 0, DIST_ZIPFIAN},
    {"a", 0.5, 0.5, 0, 0, 0, DIST_ZIPFIAN},
    {"b", 0.95, 0.05, 0, 0, 0, DIST_ZIPFIAN},
    {"c", 1, 0, 0, 0, 0, DIST_ZIPFIAN},
    {"d", 0.95, 0, 0.05, 0, 0, DIST_LATEST},
    {"e", 0, 0, 0.05, 0.95, 0, DIST_ZIPFIAN},
    {"f", 0.5, 0, 0, 0, 0.5, DIST_ZIPFIAN},
    {"custom", 0, 0, 0, 0, 0, DIST_ZIPFIAN},
};

int workload_preset(struct workload *w, const char *name, char *err, size_t errlen) {
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        const struct preset *p = &presets[i];
        if (strcasecmp(name, p->name))
            continue;
        memset(w, 0, sizeof *w);
        snprintf(w->name, sizeof w->name, "%s", p->name);
        w->mix[OP_READ] = p->read;
        w->mix[OP_UPDATE] = p->update;
        w->mix[OP_INSERT] = p->insert;
        w->mix[OP_SCAN] = p->scan;
        w->mix[OP_RMW] = p->rmw;
        w->dist = p->dist;
        w->load = !strcmp(p->name, "load");
        return 0;
    }
    snprintf(err, errlen, "unknown workload '%s' (load, a, b, c, d, e, f, custom)", name);
    return -1;
}

static int op_by_name(const char *s, size_t len) {
    static const char *const names[OP_NTYPES] = {"read", "update", "insert", "scan", "rmw"};
    for (int i = 0; i < OP_NTYPES; i++)
        if (strlen(names[i]) == len && !strncasecmp(s, names[i], len))
            return i;
    if (len == 15 && !strncasecmp(s, "readmodifywrite", 15))
        return OP_RMW;
    return -1;
}

int workload_parse_mix(double mix[OP_NTYPES], const char *spec, char *err, size_t errlen) {
    double m[OP_NTYPES] = {0}, sum = 0;
    const char *p = spec;
    while (*p) {
        const char *eq = strchr(p, '=');
        if (!eq)
            goto bad;
        int op = op_by_name(p, (size_t)(eq - p));
        char *end;
        double v = strtod(eq + 1, &end);
        if (op < 0 || end == eq + 1 || v < 0 || (*end && *end != ','))
            goto bad;
        m[op] = v;
        p = *end ? end + 1 : end;
    }
    for (int i = 0; i < OP_NTYPES; i++)
        sum += m[i];
    if (sum <= 0)
        goto bad;
    for (int i = 0; i < OP_NTYPES; i++)
        mix[i] = m[i] / sum;
    return 0;
bad:
    snprintf(err, errlen, "bad mix '%s': want e.g. read=0.5,update=0.3,insert=0.1,"
             "scan=0.05,rmw=0.05", spec);
    return -1;
}

enum op_type workload_pick(const double mix[OP_NTYPES], double u) {
    double acc = 0;
    int last = OP_READ;
    for (int i = 0; i < OP_NTYPES; i++) {
        if (mix[i] <= 0)
            continue;
        acc += mix[i];
        last = i;
        if (u < acc)
            return (enum op_type)i;
    }
    /* Rounding left u above the sum: the last type with any share. */
    return (enum op_type)last;
}

int dist_parse(const char *s, enum key_dist *d) {
    for (int i = 0; i < 3; i++)
        if (!strcasecmp(s, dist_names[i])) {
            *d = (enum key_dist)i;
            return 0;
        }
    return -1;
}

/* ---- key space ---- */

int keyspace_init(struct keyspace *ks, uint64_t first) {
    atomic_init(&ks->next, first);
    atomic_init(&ks->limit, first);
    ks->acked = calloc(KEYSPACE_WINDOW, 1);
    if (!ks->acked)
        return -1;
    pthread_mutex_init(&ks->lock, NULL);
    return 0;
}

void keyspace_free(struct keyspace *ks) {
    free(ks->acked);
    ks->acked = NULL;
    pthread_mutex_destroy(&ks->lock);
}

void keyspace_ack(struct keyspace *ks, uint64_t k) {
    pthread_mutex_lock(&ks->lock);
    uint64_t limit = atomic_load_explicit(&ks->limit, memory_order_relaxed);
    /* In flight inserts are bounded by connections x pipeline, far below
     * the window, so k - limit < KEYSPACE_WINDOW always holds. */
    ks->acked[k % KEYSPACE_WINDOW] = 1;
    while (ks->acked[limit % KEYSPACE_WINDOW]) {
        ks->acked[limit % KEYSPACE_WINDOW] = 0;
        limit++;
    }
    atomic_store_explicit(&ks->limit, limit, memory_order_release);
    pthread_mutex_unlock(&ks->lock);
}

/* ---- choosers ---- */

int chooser_init(struct chooser *c, enum key_dist d, double theta, uint64_t records,
                 uint64_t expected_inserts) {
    memset(c, 0, sizeof *c);
    c->dist = d;
    c->items = records + expected_inserts;
    if (c->items < 1)
        c->items = 1;
    switch (d) {
    case DIST_UNIFORM:
        return 0;
    case DIST_ZIPFIAN:
        return scrambled_init(&c->sz, c->items, theta);
    case DIST_LATEST:
        return zipf_init(&c->latest, records ? records : 1, theta);
    }
    return -1;
}

uint64_t chooser_next(struct chooser *c, struct rng *r, uint64_t limit) {
    switch (c->dist) {
    case DIST_UNIFORM:
        return rng_below(r, limit);
    case DIST_ZIPFIAN:
        /* The zipfian spans the key space the run may grow into; draws above
         * the acknowledged limit are redrawn, as YCSB does. A bounded number
         * of tries keeps a tiny limit from spinning. */
        for (int i = 0; i < 64; i++) {
            uint64_t k = scrambled_next(&c->sz, r);
            if (k < limit)
                return k;
        }
        return scrambled_next(&c->sz, r) % limit;
    case DIST_LATEST:
        zipf_grow(&c->latest, limit);
        /* The newest key is the most popular. */
        return limit - 1 - zipf_next(&c->latest, r) % limit;
    }
    return 0;
}

/* ---- key names ---- */

static size_t u64_digits(char *out, uint64_t v, int width) {
    char tmp[24];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    int pad = width > n ? width - n : 0;
    memset(out, '0', (size_t)pad);
    for (int i = 0; i < n; i++)
        out[pad + i] = tmp[n - 1 - i];
    return (size_t)(pad + n);
}

size_t key_format(char *buf, uint64_t keynum, int key_size) {
    memcpy(buf, "user", 4);
    if (key_size <= 0)
        return 4 + u64_digits(buf + 4, fnv64(keynum), 0);
    if (key_size >= 23)
        return 4 + u64_digits(buf + 4, fnv64(keynum), key_size - 4);
    return 4 + u64_digits(buf + 4, keynum, key_size - 4);
}

bool key_size_fits(int key_size, uint64_t max_keynum) {
    if (key_size <= 0 || key_size >= 23)
        return true;
    if (key_size < 5)
        return false;
    uint64_t cap = 1;
    for (int i = 0; i < key_size - 4; i++)
        cap *= 10;
    return max_keynum < cap;
}
