/* t_latency.c -- LATENCY, ROLE, and the INFO sections errorstats and
 * latencystats.
 *
 * Latency monitor (Redis's latency.c): with latency-monitor-threshold N > 0,
 * a command that ran N ms or longer is a sample of the event "command", or
 * "fast-command" for a CMD_FAST one. Per event: the latest and the highest
 * latency, and a history of up to 160 samples, one per second (the highest
 * of that second). These are the only events Rowan reports; Redis's fork,
 * AOF and eviction events have no counterpart here. LATENCY DOCTOR gives
 * Redis's texts when monitoring is off or nothing was seen, else a short
 * summary per event (not Redis's full advice text). LATENCY GRAPH is not
 * implemented.
 *
 * Latency tracking (LATENCY HISTOGRAM, INFO latencystats): every command's
 * run time goes into a per-command histogram with log-linear buckets (16
 * per power of two: within 6.25% of the value, where Redis's HdrHistogram
 * keeps 2 significant digits). HISTOGRAM lists cumulative counts at the
 * powers of two from 1024 ns, keyed by microseconds, as Redis does;
 * latencystats gives p50, p99 and p99.9 (Redis's default
 * latency-tracking-info-percentiles) as bucket upper bounds.
 *
 * Error statistics (INFO errorstats): every error reply counts under its
 * first word (ERR, WRONGTYPE, NOAUTH...), through resp.c's error hook; at
 * most 128 distinct codes, as Redis (later new codes are not counted).
 *
 * Counters are atomics (any worker adds); the latency events and the table
 * of error codes change under one mutex. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "t_latency.h"
#include "commands.h"
#include "server.h"
#include "util.h"
#include "edge_state.h"

/* ---------------- per-command histograms ---------------- */

#define SUB_BITS 4
#define SUBS (1 << SUB_BITS)
#define NBUCKETS (64 * SUBS)

typedef struct histogram {
    _Atomic long long total;
    _Atomic long long b[NBUCKETS];
} histogram;

typedef struct hist_slot {
    _Atomic(const struct rcommand *) cmd;
    histogram *h;
} hist_slot;

#define NSLOTS 1024            /* > every command and subcommand */
/* This file's state, one per server (server.h). */
struct latency_state {
    hist_slot slots[NSLOTS];
    pthread_mutex_t lat_lock;
};

void latency_state_new(void) {
    struct latency_state *st = calloc(1, sizeof(*st));
    if (!st) abort();
    pthread_mutex_init(&st->lat_lock, NULL);
    server.edge_state->latency = st;
}

void latency_state_free(void) {
    for (int i = 0; i < NSLOTS; i++) free(server.edge_state->latency->slots[i].h);
    pthread_mutex_destroy(&server.edge_state->latency->lat_lock);
    free(server.edge_state->latency);
}

#define slots (server.edge_state->latency->slots)
#define lat_lock (server.edge_state->latency->lat_lock)

/* The bucket of v (ns): values below SUBS are exact, then 16 per octave. */
static int bucket_of(unsigned long long v) {
    if (v < SUBS) return (int)v;
    int msb = 63 - __builtin_clzll(v);
    int shift = msb - SUB_BITS;
    return (shift + 1) * SUBS + (int)((v >> shift) & (SUBS - 1));
}

/* The highest value of bucket i (ns). */
static unsigned long long bucket_high(int i) {
    if (i < SUBS) return (unsigned long long)i;
    int shift = i / SUBS - 1;
    unsigned long long base = (unsigned long long)(SUBS + i % SUBS) << shift;
    return base + (1ULL << shift) - 1;
}

static histogram *hist_of(const struct rcommand *cmd, int create) {
    size_t h = ((uintptr_t)cmd >> 4) % NSLOTS;
    for (size_t n = 0; n < NSLOTS; n++, h = (h + 1) % NSLOTS) {
        const struct rcommand *have = atomic_load(&slots[h].cmd);
        if (have == cmd) return slots[h].h;
        if (have) continue;
        if (!create) return NULL;
        pthread_mutex_lock(&lat_lock);
        have = atomic_load(&slots[h].cmd);
        if (!have) {
            slots[h].h = calloc(1, sizeof(histogram));
            atomic_store(&slots[h].cmd, cmd);   /* published after h */
            have = cmd;
        }
        pthread_mutex_unlock(&lat_lock);
        if (have == cmd) return slots[h].h;
    }
    return NULL;
}

/* ---------------- latency events ---------------- */

#define HISTORY 160

typedef struct lat_event {
    char name[32];
    struct { time_t t; long long ms; } s[HISTORY];
    int idx, n;
    time_t latest_t;
    long long latest_ms, max_ms;
} lat_event;

/* This file's state, one per server (server.h). */
struct lat_events_state {
    lat_event events[4];
    int nevents;
};

void lat_events_state_new(void) {
    struct lat_events_state *st = calloc(1, sizeof(*st));
    if (!st) abort();
    server.edge_state->lat_events = st;
}

void lat_events_state_free(void) { free(server.edge_state->lat_events); }

#define events (server.edge_state->lat_events->events)
#define nevents (server.edge_state->lat_events->nevents)

static lat_event *lat_event_get(const char *name, int create) {
    for (int i = 0; i < nevents; i++)
        if (!strcmp(events[i].name, name)) return &events[i];
    if (!create || nevents == (int)(sizeof(events) / sizeof(events[0]))) return NULL;
    lat_event *e = &events[nevents++];
    memset(e, 0, sizeof(*e));
    snprintf(e->name, sizeof(e->name), "%s", name);
    return e;
}

static void lat_event_add(const char *name, long long ms) {
    time_t now = time(NULL);
    pthread_mutex_lock(&lat_lock);
    lat_event *e = lat_event_get(name, 1);
    if (e) {
        int prev = (e->idx + HISTORY - 1) % HISTORY;
        if (e->n && e->s[prev].t == now) {
            if (ms > e->s[prev].ms) e->s[prev].ms = ms;
        } else {
            e->s[e->idx].t = now;
            e->s[e->idx].ms = ms;
            e->idx = (e->idx + 1) % HISTORY;
            if (e->n < HISTORY) e->n++;
        }
        e->latest_t = now;
        e->latest_ms = ms;
        if (ms > e->max_ms) e->max_ms = ms;
    }
    pthread_mutex_unlock(&lat_lock);
}

void latency_command(client *c, long long duration_us) {
    if (!c->lastcmd) return;
    histogram *h = hist_of(c->lastcmd, 1);   /* the row that ran: "config|get" */
    if (h) {
        unsigned long long ns = duration_us > 0 ? (unsigned long long)duration_us * 1000 : 0;
        atomic_fetch_add(&h->b[bucket_of(ns)], 1);
        atomic_fetch_add(&h->total, 1);
    }
    long long thr = __atomic_load_n(&server.cfg.latency_monitor_threshold, __ATOMIC_RELAXED);
    long long ms = duration_us / 1000;
    if (thr > 0 && ms >= thr) lat_event_add((c->lastcmd->flags & CMD_FAST) ? "fast-command" : "command", ms);
}

/* ---------------- LATENCY ---------------- */

static const char *const latency_help[] = {
    "LATENCY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "DOCTOR",
    "    Return a human readable latency analysis report.",
    "GRAPH <event>",
    "    Return an ASCII latency graph for the <event> class.",
    "HISTORY <event>",
    "    Return time-latency samples for the <event> class.",
    "LATEST",
    "    Return the latest latency samples for all events.",
    "RESET [<event> ...]",
    "    Reset latency data of one or more <event> classes.",
    "    (default: reset all data for all event classes)",
    "HISTOGRAM [COMMAND ...]",
    "    Return a cumulative distribution of latencies in the format of a histogram for the specified command names.",
    "    If no commands are specified then all histograms are replied.",
    "HELP",
    "    Prints this help.",
    NULL
};

static void latency_latest(client *c) {
    pthread_mutex_lock(&lat_lock);
    resp_add_array(&c->out, nevents);
    for (int i = 0; i < nevents; i++) {
        resp_add_array(&c->out, 4);
        resp_add_bulkstr(&c->out, events[i].name);
        resp_add_int(&c->out, (long long)events[i].latest_t);
        resp_add_int(&c->out, events[i].latest_ms);
        resp_add_int(&c->out, events[i].max_ms);
    }
    pthread_mutex_unlock(&lat_lock);
}

static void latency_history(client *c) {
    char name[32];
    snprintf(name, sizeof(name), "%.*s", (int)c->argvlen[2], c->argv[2]);
    pthread_mutex_lock(&lat_lock);
    lat_event *e = c->argvlen[2] < sizeof(name) ? lat_event_get(name, 0) : NULL;
    int n = e ? e->n : 0;
    resp_add_array(&c->out, n);
    for (int k = 0; k < n; k++) {
        int i = (e->idx + HISTORY - n + k) % HISTORY;
        resp_add_array(&c->out, 2);
        resp_add_int(&c->out, (long long)e->s[i].t);
        resp_add_int(&c->out, e->s[i].ms);
    }
    pthread_mutex_unlock(&lat_lock);
}

static void latency_reset(client *c) {
    int reset = 0;
    pthread_mutex_lock(&lat_lock);
    if (c->argc == 2) {
        reset = nevents;
        nevents = 0;
    } else {
        for (int j = 2; j < c->argc; j++) {
            for (int i = 0; i < nevents; i++) {
                if (strlen(events[i].name) == c->argvlen[j] &&
                    !memcmp(events[i].name, c->argv[j], c->argvlen[j])) {
                    events[i] = events[--nevents];
                    reset++;
                    break;
                }
            }
        }
    }
    pthread_mutex_unlock(&lat_lock);
    resp_add_int(&c->out, reset);
}

static void latency_doctor(client *c) {
    rbuf b;
    rbuf_init(&b);
    long long thr = __atomic_load_n(&server.cfg.latency_monitor_threshold, __ATOMIC_RELAXED);
    pthread_mutex_lock(&lat_lock);
    if (nevents == 0 && thr == 0) {
        rbuf_appendf(&b, "I'm sorry, Dave, I can't do that. Latency monitoring is disabled in this "
                     "Redis instance. You may use \"CONFIG SET latency-monitor-threshold "
                     "<milliseconds>.\" in order to enable it. If we weren't in a deep space "
                     "mission I'd suggest to take a look at https://redis.io/topics/latency-monitor.\n");
    } else if (nevents == 0) {
        rbuf_appendf(&b, "Dave, no latency spike was observed during the lifetime of this Redis "
                     "instance, not in the slightest bit. I honestly think you ought to sit down "
                     "calmly, take a stress pill, and think things over.\n");
    } else {
        rbuf_appendf(&b, "Dave, I have observed latency spikes in this Redis instance. You don't "
                     "mind talking about it, do you Dave?\n\n");
        for (int i = 0; i < nevents; i++) {
            lat_event *e = &events[i];
            long long sum = 0;
            for (int k = 0; k < e->n; k++) sum += e->s[k].ms;
            rbuf_appendf(&b, "%d. %s: %d latency spikes (average %lldms, mean deviation 0ms, "
                         "period 0 sec). Worst all time event %lldms.\n", i + 1, e->name, e->n,
                         e->n ? sum / e->n : 0, e->max_ms);
        }
        rbuf_appendf(&b, "\nI have a few advices for you:\n\n- Check your SLOWLOG for the slow "
                     "commands: in Rowan a slow command holds the shard locks of its keys.\n");
    }
    pthread_mutex_unlock(&lat_lock);
    resp_add_verbatim(&c->out, b.buf, b.len);
    rbuf_free(&b);
}

/* One command's {calls, histogram_usec}. */
static void reply_histogram(client *c, const char *name, const histogram *h) {
    resp_add_bulkstr(&c->out, name);
    resp_add_map(&c->out, 2);
    resp_add_bulkstr(&c->out, "calls");
    resp_add_int(&c->out, atomic_load(&h->total));
    resp_add_bulkstr(&c->out, "histogram_usec");
    long long cum[64], keys[64];
    int n = 0, bi = 0;
    long long acc = 0, prev = 0;
    for (int k = 0; k < 54 && acc < atomic_load(&h->total); k++) {
        unsigned long long limit = 1024ULL << k;
        while (bi < NBUCKETS && bucket_high(bi) < limit) acc += atomic_load(&h->b[bi++]);
        if (acc > prev) {
            keys[n] = (long long)(limit / 1000);
            cum[n++] = acc;
        }
        prev = acc;
    }
    resp_add_map(&c->out, n);
    for (int i = 0; i < n; i++) {
        resp_add_int(&c->out, keys[i]);
        resp_add_int(&c->out, cum[i]);
    }
}

struct hist_ctx { client *c; int n; int count_only; };

static void hist_cb(const struct rcommand *cmd, const char *parent, struct hist_ctx *x) {
    histogram *h = hist_of(cmd, 0);
    if (!h || atomic_load(&h->total) == 0) return;
    x->n++;
    if (x->count_only) return;
    char name[128];
    snprintf(name, sizeof(name), "%s%s%s", parent ? parent : "", parent ? "|" : "", cmd->name);
    reply_histogram(x->c, name, h);
}

static void hist_all_cb(struct rcommand *cmd, void *arg) {
    hist_cb(cmd, NULL, arg);
    for (const struct rcommand *s = cmd->subcommands; s && s->name; s++) hist_cb(s, cmd->name, arg);
}

static void latency_histogram(client *c) {
    struct hist_ctx x = {c, 0, 1};
    if (c->argc == 2) {
        command_foreach(hist_all_cb, &x);
        resp_add_map(&c->out, x.n);
        x.count_only = 0;
        command_foreach(hist_all_cb, &x);
        return;
    }
    for (int j = 2; j < c->argc; j++) {
        const struct rcommand *cmd = command_lookup(c->argv[j], c->argvlen[j]);
        if (cmd) hist_cb(cmd, NULL, &x);
    }
    resp_add_map(&c->out, x.n);
    x.count_only = 0;
    for (int j = 2; j < c->argc; j++) {
        const struct rcommand *cmd = command_lookup(c->argv[j], c->argvlen[j]);
        if (cmd) hist_cb(cmd, NULL, &x);
    }
}

static void latency_help_cmd(client *c) { reply_help(c, latency_help); }

static void latency_graph(client *c) {
    resp_add_error(&c->out, "ERR LATENCY GRAPH is not implemented in Rowan; use LATENCY HISTORY");
}

static const subcommand latency_subs[] = {
    { "latest", 2, latency_latest },
    { "history", 3, latency_history },
    { "reset", -2, latency_reset },
    { "doctor", 2, latency_doctor },
    { "histogram", -2, latency_histogram },
    { "graph", 3, latency_graph },
    { "help", 2, latency_help_cmd },
    { NULL, 0, NULL }
};

void latencyCommand(client *c) { subcommand_dispatch(c, latency_subs, "latency"); }

/* ---------------- INFO latencystats ---------------- */

static double percentile_usec(const histogram *h, double p) {
    long long total = atomic_load(&h->total);
    long long want = (long long)((p / 100.0) * (double)total + 0.5), acc = 0;
    if (want < 1) want = 1;
    for (int i = 0; i < NBUCKETS; i++) {
        acc += atomic_load(&h->b[i]);
        if (acc >= want) return (double)bucket_high(i) / 1000.0;
    }
    return 0;
}

static void latstat_line(const struct rcommand *cmd, const char *parent, rbuf *b) {
    histogram *h = hist_of(cmd, 0);
    if (!h || atomic_load(&h->total) == 0) return;
    rbuf_appendf(b, "latency_percentiles_usec_%s%s%s:p50=%.3f,p99=%.3f,p99.9=%.3f\r\n",
                 parent ? parent : "", parent ? "|" : "", cmd->name, percentile_usec(h, 50),
                 percentile_usec(h, 99), percentile_usec(h, 99.9));
}

static void latstat_cb(struct rcommand *cmd, void *arg) {
    latstat_line(cmd, NULL, arg);
    for (const struct rcommand *s = cmd->subcommands; s && s->name; s++) latstat_line(s, cmd->name, arg);
}

void info_latencystats(rbuf *b) {
    rbuf_appendf(b, "# Latencystats\r\n");
    command_foreach(latstat_cb, b);
}

/* ---------------- INFO errorstats ---------------- */

#define MAX_ERROR_CODES 128

struct errcode_count { char code[32]; _Atomic long long n; };
/* This file's state, one per server (server.h). */
struct errcodes_state {
    struct errcode_count errcodes[MAX_ERROR_CODES];
    _Atomic int nerrcodes;
};

void errcodes_state_new(void) {
    struct errcodes_state *st = calloc(1, sizeof(*st));
    if (!st) abort();
    server.edge_state->errstats = st;
}

void errcodes_state_free(void) { free(server.edge_state->errstats); }

#define errcodes (server.edge_state->errstats->errcodes)
#define nerrcodes (server.edge_state->errstats->nerrcodes)

static void count_error(const char *msg) {
    size_t len = strcspn(msg, " \r\n");
    if (len == 0 || len >= sizeof(errcodes[0].code)) return;
    int n = atomic_load(&nerrcodes);
    for (int i = 0; i < n; i++) {
        if (!strncmp(errcodes[i].code, msg, len) && errcodes[i].code[len] == 0) {
            atomic_fetch_add(&errcodes[i].n, 1);
            return;
        }
    }
    pthread_mutex_lock(&lat_lock);
    n = atomic_load(&nerrcodes);
    int i;
    for (i = 0; i < n; i++)
        if (!strncmp(errcodes[i].code, msg, len) && errcodes[i].code[len] == 0) break;
    if (i == n && n < MAX_ERROR_CODES) {
        memcpy(errcodes[n].code, msg, len);
        errcodes[n].code[len] = 0;
        atomic_store(&nerrcodes, n + 1);
    }
    if (i < MAX_ERROR_CODES) atomic_fetch_add(&errcodes[i].n, 1);
    pthread_mutex_unlock(&lat_lock);
}

static int cmp_code(const void *a, const void *b) {
    return strcmp(errcodes[*(const int *)a].code, errcodes[*(const int *)b].code);
}

void info_errorstats(rbuf *b) {
    rbuf_appendf(b, "# Errorstats\r\n");
    int n = atomic_load(&nerrcodes), order[MAX_ERROR_CODES];
    for (int i = 0; i < n; i++) order[i] = i;
    qsort(order, (size_t)n, sizeof(int), cmp_code);
    for (int i = 0; i < n; i++) {
        long long v = atomic_load(&errcodes[order[i]].n);
        if (v) rbuf_appendf(b, "errorstat_%s:count=%lld\r\n", errcodes[order[i]].code, v);
    }
}

/* CONFIG RESETSTAT: error counts and latency histograms start again. */
void latency_resetstat(void) {
    int n = atomic_load(&nerrcodes);
    for (int i = 0; i < n; i++) atomic_store(&errcodes[i].n, 0);
    for (int i = 0; i < NSLOTS; i++) {
        histogram *h = atomic_load(&slots[i].cmd) ? slots[i].h : NULL;
        if (!h) continue;
        for (int k = 0; k < NBUCKETS; k++) atomic_store(&h->b[k], 0);
        atomic_store(&h->total, 0);
    }
}

void latency_init(void) { resp_error_hook = count_error; }

/* Rowan has no modules: the section is there, empty, as in Redis without
 * modules. */
void info_modules(rbuf *b) { rbuf_appendf(b, "# Modules\r\n"); }

/* ---------------- ROLE ---------------- */

/* Rowan has no Redis-style replicas: a standalone server, and every node of
 * a cluster (each one the primary of its own shards, whose backups are
 * other nodes reached over Rowan's own replication), answers as a master
 * with offset 0 and no replicas. */
void roleCommand(client *c) {
    resp_add_array(&c->out, 3);
    resp_add_bulkstr(&c->out, "master");
    resp_add_int(&c->out, 0);
    resp_add_array(&c->out, 0);
}
