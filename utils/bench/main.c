/* main.c -- rowan-bench: a YCSB-style workload driver for any RESP server.
 *
 *   rowan-bench --host H --port P --workload a|b|c|d|e|f|load|custom
 *               --records N [--duration S | --operations N] [--json] ...
 *
 * This file only turns the command line into a bench_cfg, asks the seed node
 * for its slot map, runs the workers (driver.c) while printing a progress
 * line per second on stderr, and prints the report (report.c). Everything
 * that decides what goes on the wire lives in the other files. See
 * utils/bench/README.md for the options, the distributions and the output. */
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "driver.h"
#include "report.h"
#include "slots.h"

#define PROGRESS_MIN_SECONDS 3.0   /* shorter runs print no progress */

struct opts {
    struct bench_cfg cfg;
    const char *mix;
    const char *dist;
    const char *vsize;
    enum cluster_mode cluster;
    int fields_given;
    bool json, quiet, progress;
};

static void usage(FILE *f) {
    fprintf(f,
"usage: rowan-bench --workload W [options]\n"
"\n"
"target\n"
"  -h, --host H             server host (127.0.0.1)\n"
"  -p, --port P             server port (6379)\n"
"  -a, --password PW        AUTH on every connection\n"
"      --cluster auto|yes|no  use CLUSTER SLOTS and follow -MOVED/-ASK (auto)\n"
"      --transport T        resp (TCP, hiredis) or native (UDP datagrams, librowan;\n"
"                           --port is then the native port) (resp)\n"
"workload\n"
"  -w, --workload W         load, a, b, c, d, e, f or custom\n"
"      --mix SPEC           op mix, e.g. read=0.5,update=0.3,insert=0.1,scan=0.05,rmw=0.05\n"
"  -r, --records N          records loaded / key space (1000)\n"
"      --distribution D     uniform, zipfian or latest (the workload's own)\n"
"      --zipf-constant C    zipfian/latest constant, 0 < C < 1 (0.99)\n"
"      --model M            kv (SET/GET) or ycsb-redis (HMSET+ZADD, HGETALL, ...) (kv)\n"
"      --key-size N         key length in bytes (0: YCSB's user<hash>)\n"
"  -s, --value-size V       N, uniform:MIN:MAX, gpd:MEAN[:SHAPE[:MIN]], zippydb,\n"
"                           up2x or udb (zippydb)\n"
"      --fields N           ycsb-redis: fields per record (10)\n"
"      --read-all-fields yes|no   ycsb-redis: HGETALL, or HMGET of one field (yes)\n"
"      --write-all-fields yes|no  ycsb-redis updates: all fields or one (no)\n"
"      --scan-length N      scans read 1..N records, uniformly (100)\n"
"      --wait N             send WAIT N 0 after every write\n"
"      --seed S             seed of every generator (1)\n"
"load\n"
"  -n, --operations N       stop after N operations (load: records)\n"
"  -d, --duration S         stop after S seconds (10 unless -n is given)\n"
"  -t, --threads T          driver threads (1)\n"
"  -c, --connections C      connections in total, over all threads (50)\n"
"  -P, --pipeline D         operations in flight per connection (1)\n"
"  -R, --rate OPS           open loop at OPS ops/s in total, latency from the\n"
"                           intended send time (default: closed loop)\n"
"      --spin-us US         open loop: poll instead of sleeping when a send is\n"
"                           due within US microseconds (0: always sleep)\n"
"      --drain-timeout S    wait for late replies at the end (10)\n"
"output\n"
"      --json               JSON report on stdout instead of the table\n"
"  -q, --quiet              no progress lines\n"
"      --progress           progress lines even for short runs\n"
"      --help\n");
}

enum {
    O_CLUSTER = 256, O_TRANSPORT, O_MIX, O_DIST, O_THETA, O_MODEL, O_KEYSIZE, O_FIELDS, O_READALL,
    O_WRITEALL, O_SCANLEN, O_WAIT, O_SEED, O_DRAIN, O_SPIN, O_JSON, O_PROGRESS, O_HELP,
};

static const struct option long_opts[] = {
    {"host", required_argument, 0, 'h'},
    {"port", required_argument, 0, 'p'},
    {"password", required_argument, 0, 'a'},
    {"cluster", required_argument, 0, O_CLUSTER},
    {"transport", required_argument, 0, O_TRANSPORT},
    {"workload", required_argument, 0, 'w'},
    {"mix", required_argument, 0, O_MIX},
    {"records", required_argument, 0, 'r'},
    {"distribution", required_argument, 0, O_DIST},
    {"zipf-constant", required_argument, 0, O_THETA},
    {"model", required_argument, 0, O_MODEL},
    {"key-size", required_argument, 0, O_KEYSIZE},
    {"value-size", required_argument, 0, 's'},
    {"fields", required_argument, 0, O_FIELDS},
    {"read-all-fields", required_argument, 0, O_READALL},
    {"write-all-fields", required_argument, 0, O_WRITEALL},
    {"scan-length", required_argument, 0, O_SCANLEN},
    {"wait", required_argument, 0, O_WAIT},
    {"seed", required_argument, 0, O_SEED},
    {"operations", required_argument, 0, 'n'},
    {"duration", required_argument, 0, 'd'},
    {"threads", required_argument, 0, 't'},
    {"connections", required_argument, 0, 'c'},
    {"clients", required_argument, 0, 'c'},
    {"pipeline", required_argument, 0, 'P'},
    {"rate", required_argument, 0, 'R'},
    {"drain-timeout", required_argument, 0, O_DRAIN},
    {"spin-us", required_argument, 0, O_SPIN},
    {"json", no_argument, 0, O_JSON},
    {"quiet", no_argument, 0, 'q'},
    {"progress", no_argument, 0, O_PROGRESS},
    {"help", no_argument, 0, O_HELP},
    {0, 0, 0, 0},
};

static void die(const char *fmt, const char *arg) {
    fprintf(stderr, "rowan-bench: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n");
    exit(2);
}

static long long num(const char *s, const char *what, long long min, long long max) {
    char *end;
    double v = strtod(s, &end);   /* accepts 1e6 as well as 1000000 */
    if (end == s || *end || v != floor(v) || v < (double)min || v > (double)max)
        die("bad %s", what);
    return (long long)v;
}

static double real(const char *s, const char *what, double min) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !(v >= min) || isinf(v))
        die("bad %s", what);
    return v;
}

static bool yesno(const char *s, const char *what) {
    if (!strcasecmp(s, "yes") || !strcmp(s, "1") || !strcasecmp(s, "true"))
        return true;
    if (!strcasecmp(s, "no") || !strcmp(s, "0") || !strcasecmp(s, "false"))
        return false;
    die("%s takes yes or no", what);
    return false;
}

static void defaults(struct opts *o) {
    memset(o, 0, sizeof *o);
    struct bench_cfg *c = &o->cfg;
    c->host = "127.0.0.1";
    c->port = 6379;
    c->theta = ZIPF_DEFAULT_THETA;
    c->records = 1000;
    c->threads = 1;
    c->connections = 50;
    c->pipeline = 1;
    c->read_all_fields = true;
    c->scan_len = 100;
    c->wait_replicas = -1;
    c->seed = 1;
    c->drain_timeout = 10;
    c->spin_us = 0;
    c->fields = 10;
    o->vsize = "zippydb";
    o->cluster = CLUSTER_AUTO;
}

static void parse_opt(struct opts *o, int ch, const char *arg) {
    struct bench_cfg *c = &o->cfg;
    char err[256];
    switch (ch) {
    case 'h': c->host = arg; break;
    case 'p': c->port = (int)num(arg, "port", 1, 65535); break;
    case 'a': c->password = arg; break;
    case O_CLUSTER:
        if (!strcasecmp(arg, "auto"))
            o->cluster = CLUSTER_AUTO;
        else
            o->cluster = yesno(arg, "--cluster") ? CLUSTER_ON : CLUSTER_OFF;
        break;
    case O_TRANSPORT:
        if (!strcasecmp(arg, "native"))
            c->native = true;
        else if (strcasecmp(arg, "resp"))
            die("unknown transport '%s' (resp or native)", arg);
        break;
    case 'w':
        if (workload_preset(&c->wl, arg, err, sizeof err))
            die("%s", err);
        break;
    case O_MIX: o->mix = arg; break;
    case 'r': c->records = (uint64_t)num(arg, "record count", 1, 1LL << 48); break;
    case O_DIST: o->dist = arg; break;
    case O_THETA: c->theta = real(arg, "zipf constant", 0); break;
    case O_MODEL:
        if (!strcasecmp(arg, "kv"))
            c->model = MODEL_KV;
        else if (!strcasecmp(arg, "ycsb-redis") || !strcasecmp(arg, "ycsb"))
            c->model = MODEL_YCSB;
        else
            die("unknown model '%s' (kv or ycsb-redis)", arg);
        break;
    case O_KEYSIZE: c->key_size = (int)num(arg, "key size", 0, 500); break;
    case 's': o->vsize = arg; break;
    case O_FIELDS: c->fields = (int)num(arg, "field count", 1, 1000); break;
    case O_READALL: c->read_all_fields = yesno(arg, "--read-all-fields"); break;
    case O_WRITEALL: c->write_all_fields = yesno(arg, "--write-all-fields"); break;
    case O_SCANLEN: c->scan_len = (int)num(arg, "scan length", 1, 100000); break;
    case O_WAIT: c->wait_replicas = (int)num(arg, "--wait replica count", 0, 1000); break;
    case O_SEED: c->seed = strtoull(arg, NULL, 0); break;
    case 'n': c->operations = (uint64_t)num(arg, "operation count", 1, 1LL << 52); break;
    case 'd': c->duration = real(arg, "duration", 0); break;
    case 't': c->threads = (int)num(arg, "thread count", 1, 256); break;
    case 'c': c->connections = (int)num(arg, "connection count", 1, 100000); break;
    case 'P': c->pipeline = (int)num(arg, "pipeline depth", 1, 100000); break;
    case 'R': c->rate = real(arg, "rate", 0); break;
    case O_DRAIN: c->drain_timeout = real(arg, "drain timeout", 0); break;
    case O_SPIN: c->spin_us = real(arg, "--spin-us", 0); break;
    case O_JSON: o->json = true; break;
    case 'q': o->quiet = true; break;
    case O_PROGRESS: o->progress = true; break;
    case O_HELP: usage(stdout); exit(0);
    default: usage(stderr); exit(2);
    }
}

/* Cross-option checks and derived settings. */
static void finish_cfg(struct opts *o) {
    struct bench_cfg *c = &o->cfg;
    char err[256];
    if (!c->wl.name[0])
        die("%s", "--workload is required (load, a, b, c, d, e, f or custom)");
    if (o->mix && workload_parse_mix(c->wl.mix, o->mix, err, sizeof err))
        die("%s", err);
    if (!strcmp(c->wl.name, "custom") && !o->mix)
        die("%s", "--workload custom needs --mix");
    c->dist = c->wl.dist;
    if (o->dist && dist_parse(o->dist, &c->dist))
        die("unknown distribution '%s' (uniform, zipfian, latest)", o->dist);
    if (c->dist != DIST_UNIFORM && !(c->theta > 0 && c->theta < 1))
        die("%s", "--zipf-constant must be between 0 and 1 (exclusive)");
    if (vsize_parse(&c->vs, o->vsize, err, sizeof err))
        die("%s", err);
    if (c->model == MODEL_KV && !c->wl.load && c->wl.mix[OP_SCAN] > 0)
        die("%s", "scans need --model ycsb-redis (the kv model has no index to scan)");
    if (c->model == MODEL_KV)
        c->fields = 1;
    if (c->threads > c->connections)
        die("%s", "--threads cannot exceed --connections");
    if (c->wl.load && (!c->operations || c->operations > c->records))
        c->operations = c->records;     /* load exactly the records */
    if (!c->operations && c->duration <= 0)
        c->duration = 10;
    if (!c->wl.load && c->wl.mix[OP_INSERT] > 0)
        c->expected_inserts = c->operations
            ? (uint64_t)((double)c->operations * c->wl.mix[OP_INSERT] * 2) + 1
            : c->records;   /* YCSB sizes it from the op count; time-bound
                               runs get room to double the key space */
    if (!key_size_fits(c->key_size, c->records + c->expected_inserts))
        die("%s", "--key-size is too small to name every record");
}

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void on_signal(int sig) {
    (void)sig;
    atomic_store(&bench_stop_requested, 1);
}

static void install_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = (int)SA_RESETHAND;    /* a second ^C kills outright */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

/* Wait for the workers, printing one progress line per second on stderr
 * for runs long enough to want it. */
static void watch(struct run *run, const struct opts *o) {
    const struct bench_cfg *c = &o->cfg;
    bool known_long = c->duration > PROGRESS_MIN_SECONDS && !c->operations;
    double start = mono_s(), next = start + 1;
    uint64_t last_ops = 0;
    while (run_wait(run, 100)) {
        double now = mono_s();
        if (now < next)
            continue;
        next += 1;
        uint64_t ops, errs;
        run_progress(run, &ops, &errs);
        bool show = o->progress ||
                    (!o->quiet && (known_long || now - start >= PROGRESS_MIN_SECONDS));
        if (show)
            fprintf(stderr, "[%5.0fs] %llu ops, %.0f ops/s now, %.0f ops/s avg, %llu failed\n",
                    now - start, (unsigned long long)ops, (double)(ops - last_ops),
                    (double)ops / (now - start), (unsigned long long)errs);
        last_ops = ops;
    }
}

/* 1 when nothing worked -- no operation at all, or every one failed for a
 * reason other than a missing key (reads of an empty store are legitimate)
 * -- so scripts notice a dead or refusing server; else 0. */
static int exit_status(const struct stats *st) {
    uint64_t total = stats_total_ops(st), failed = 0, not_found = 0;
    for (int i = 0; i < OP_NTYPES; i++)
        failed += st->failed[i];
    for (int i = 0; i < st->nkinds; i++)
        if (!strcmp(st->kinds[i].kind, "NOT_FOUND"))
            not_found = st->kinds[i].n;
    return total == 0 || (failed == total && not_found < total) ? 1 : 0;
}

int main(int argc, char **argv) {
    struct opts o;
    defaults(&o);
    int ch;
    while ((ch = getopt_long(argc, argv, "h:p:a:w:r:s:n:d:t:c:P:R:q", long_opts, NULL)) != -1)
        parse_opt(&o, ch, optarg);
    if (optind < argc)
        die("unexpected argument '%s'", argv[optind]);
    finish_cfg(&o);

    char err[256];
    static struct slotmap map;
    if (o.cfg.native) {
        /* librowan reads the configuration and routes by itself */
        map.nnodes = 1;
        snprintf(map.nodes[0].host, sizeof map.nodes[0].host, "%s", o.cfg.host);
        map.nodes[0].port = o.cfg.port;
        if (o.cfg.password)
            die("%s", "--password is not supported with --transport native");
    } else if (slotmap_fetch(&map, o.cfg.host, o.cfg.port, o.cfg.password, o.cluster, err,
                             sizeof err)) {
        die("%s", err);
    }
    install_signals();
    struct run *run = run_start(&o.cfg, &map, err, sizeof err);
    if (!run)
        die("%s", err);
    watch(run, &o);
    static struct stats st;
    double elapsed;
    run_finish(run, &st, &elapsed);
    if (o.json)
        report_json(stdout, &o.cfg, &map, &st, elapsed);
    else
        report_table(stdout, &o.cfg, &map, &st, elapsed);
    return exit_status(&st);
}
