/* report.c -- table and JSON output (see report.h). */
#include "report.h"

#include <string.h>

static const double pcts[] = {50, 90, 99, 99.9};
static const char *const pct_keys[] = {"p50_us", "p90_us", "p99_us", "p999_us"};

static double us(uint64_t ns) {
    return (double)ns / 1000.0;
}

static double rate(uint64_t n, double elapsed) {
    return elapsed > 0 ? (double)n / elapsed : 0.0;
}

static const char *model_name(const struct bench_cfg *cfg) {
    return cfg->model == MODEL_KV ? "kv" : "ycsb-redis";
}

static void all_ops(const struct stats *st, struct hist *h) {
    hist_init(h);
    for (int i = 0; i < OP_NTYPES; i++)
        hist_merge(h, &st->lat[i]);
}

static uint64_t errors_total(const struct stats *st) {
    uint64_t n = 0;
    for (int i = 0; i < OP_NTYPES; i++)
        n += st->failed[i];
    return n;
}

/* ---- table ---- */

static void table_header(FILE *f, const struct bench_cfg *cfg, const struct slotmap *map) {
    fprintf(f, "rowan-bench: %s:%d (%s, %d node%s), model %s\n", cfg->host, cfg->port,
            map->cluster ? "cluster" : "standalone", map->nnodes, map->nnodes == 1 ? "" : "s",
            model_name(cfg));
    fprintf(f, "workload %s:", cfg->wl.name);
    for (int i = 0; i < OP_NTYPES; i++)
        if (cfg->wl.mix[i] > 0)
            fprintf(f, " %s %.4g%%", op_names[i], cfg->wl.mix[i] * 100);
    fprintf(f, " | keys %s", dist_names[cfg->dist]);
    if (cfg->dist != DIST_UNIFORM)
        fprintf(f, " %.4g", cfg->theta);
    fprintf(f, ", %llu records | values %s (mean %.2f B)", (unsigned long long)cfg->records,
            cfg->vs.name, cfg->vs.mean);
    if (cfg->wait_replicas >= 0)
        fprintf(f, " | WAIT %d 0 after writes", cfg->wait_replicas);
    fprintf(f, "\n");
    if (cfg->rate > 0)
        fprintf(f, "open loop at %.0f ops/s", cfg->rate);
    else
        fprintf(f, "closed loop");
    fprintf(f, ": %d thread%s, %d connections, pipeline %d, seed %llu\n", cfg->threads,
            cfg->threads == 1 ? "" : "s", cfg->connections, cfg->pipeline,
            (unsigned long long)cfg->seed);
}

static void table_row(FILE *f, const char *name, const struct hist *h, uint64_t failed,
                      double elapsed) {
    fprintf(f, "%-7s %10llu %11.1f %8.1f", name, (unsigned long long)h->count,
            rate(h->count, elapsed), us((uint64_t)hist_mean(h)));
    for (size_t i = 0; i < sizeof pcts / sizeof pcts[0]; i++)
        fprintf(f, " %9.1f", us(hist_percentile(h, pcts[i])));
    fprintf(f, " %9.1f %8llu\n", us(h->max), (unsigned long long)failed);
}

void report_table(FILE *f, const struct bench_cfg *cfg, const struct slotmap *map,
                  const struct stats *st, double elapsed) {
    uint64_t total = stats_total_ops(st), errs = errors_total(st);
    table_header(f, cfg, map);
    fprintf(f, "\nruntime %.3f s, %llu operations, %.1f ops/s, %llu failed\n", elapsed,
            (unsigned long long)total, rate(total, elapsed), (unsigned long long)errs);
    if (cfg->rate > 0)
        fprintf(f, "open loop: send lag (actual - intended send time) p50 %.1f p99 %.1f "
                "max %.1f us; %llu sends due but never made\n",
                us(hist_percentile(&st->send_lag, 50)), us(hist_percentile(&st->send_lag, 99)),
                us(st->send_lag.max), (unsigned long long)st->missed);
    fprintf(f, "\n%-7s %10s %11s %8s %9s %9s %9s %9s %9s %8s\n", "op", "ok", "ops/s",
            "avg", "p50", "p90", "p99", "p99.9", "max", "failed");
    for (int i = 0; i < OP_NTYPES; i++)
        if (st->ok[i] || st->failed[i])
            table_row(f, op_names[i], &st->lat[i], st->failed[i], elapsed);
    struct hist all;
    all_ops(st, &all);
    table_row(f, "ALL", &all, errs, elapsed);
    fprintf(f, "(latencies in microseconds, successful operations only, relative error "
            "<= %.2f%%)\n\ncommands:", HIST_REL_ERROR * 100);
    for (int i = 0; i < CMD_NCMDS; i++)
        if (st->cmds[i])
            fprintf(f, " %s=%llu", cmd_names[i], (unsigned long long)st->cmds[i]);
    fprintf(f, "\nredirects: moved=%llu ask=%llu\nerrors:", (unsigned long long)st->moved,
            (unsigned long long)st->ask);
    if (!st->nkinds)
        fprintf(f, " none");
    for (int i = 0; i < st->nkinds; i++)
        fprintf(f, " %s=%llu", st->kinds[i].kind, (unsigned long long)st->kinds[i].n);
    fprintf(f, "\n");
}

/* ---- JSON ---- */

static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

static void json_hist(FILE *f, const struct hist *h, uint64_t failed, double elapsed) {
    fprintf(f, "{\"count\": %llu, \"failed\": %llu, \"ops_per_sec\": %.1f, \"avg_us\": %.2f",
            (unsigned long long)h->count, (unsigned long long)failed, rate(h->count, elapsed),
            us((uint64_t)hist_mean(h)));
    for (size_t i = 0; i < sizeof pcts / sizeof pcts[0]; i++)
        fprintf(f, ", \"%s\": %.2f", pct_keys[i], us(hist_percentile(h, pcts[i])));
    fprintf(f, ", \"max_us\": %.2f}", us(h->max));
}

static void json_config(FILE *f, const struct bench_cfg *cfg, const struct slotmap *map) {
    fprintf(f, "  \"target\": {\"host\": ");
    json_str(f, cfg->host);
    fprintf(f, ", \"port\": %d, \"cluster\": %s, \"nodes\": %d},\n", cfg->port,
            map->cluster ? "true" : "false", map->nnodes);
    fprintf(f, "  \"workload\": ");
    json_str(f, cfg->wl.name);
    fprintf(f, ",\n  \"mix\": {");
    for (int i = 0, n = 0; i < OP_NTYPES; i++)
        if (cfg->wl.mix[i] > 0)
            fprintf(f, "%s\"%s\": %.6g", n++ ? ", " : "", op_names[i], cfg->wl.mix[i]);
    fprintf(f, "},\n  \"model\": \"%s\",\n  \"distribution\": \"%s\",\n", model_name(cfg),
            dist_names[cfg->dist]);
    fprintf(f, "  \"zipf_constant\": %.6g,\n  \"records\": %llu,\n  \"key_size\": %d,\n",
            cfg->theta, (unsigned long long)cfg->records, cfg->key_size);
    fprintf(f, "  \"value_size\": {\"dist\": ");
    json_str(f, cfg->vs.name);
    fprintf(f, ", \"mean\": %.3f},\n  \"fields\": %d,\n", cfg->vs.mean, cfg->fields);
    fprintf(f, "  \"threads\": %d,\n  \"connections\": %d,\n  \"pipeline\": %d,\n",
            cfg->threads, cfg->connections, cfg->pipeline);
    fprintf(f, "  \"mode\": \"%s\",\n  \"target_rate\": %.1f,\n  \"wait\": %d,\n",
            cfg->rate > 0 ? "open" : "closed", cfg->rate, cfg->wait_replicas);
    fprintf(f, "  \"seed\": %llu,\n", (unsigned long long)cfg->seed);
}

void report_json(FILE *f, const struct bench_cfg *cfg, const struct slotmap *map,
                 const struct stats *st, double elapsed) {
    uint64_t total = stats_total_ops(st);
    fprintf(f, "{\n  \"tool\": \"rowan-bench\",\n");
    json_config(f, cfg, map);
    fprintf(f, "  \"runtime_s\": %.6f,\n  \"ops\": %llu,\n  \"failed\": %llu,\n", elapsed,
            (unsigned long long)total, (unsigned long long)errors_total(st));
    fprintf(f, "  \"throughput\": %.1f,\n  \"missed\": %llu,\n", rate(total, elapsed),
            (unsigned long long)st->missed);
    fprintf(f, "  \"send_lag\": ");
    json_hist(f, &st->send_lag, 0, elapsed);
    fprintf(f, ",\n");
    fprintf(f, "  \"histogram_rel_error\": %.6f,\n  \"operations\": {", HIST_REL_ERROR);
    int n = 0;
    for (int i = 0; i < OP_NTYPES; i++) {
        if (!st->ok[i] && !st->failed[i])
            continue;
        fprintf(f, "%s\n    \"%s\": ", n++ ? "," : "", op_names[i]);
        json_hist(f, &st->lat[i], st->failed[i], elapsed);
    }
    struct hist all;
    all_ops(st, &all);
    fprintf(f, "%s\n    \"ALL\": ", n ? "," : "");
    json_hist(f, &all, errors_total(st), elapsed);
    fprintf(f, "\n  },\n  \"commands\": {");
    n = 0;
    for (int i = 0; i < CMD_NCMDS; i++)
        if (st->cmds[i])
            fprintf(f, "%s\"%s\": %llu", n++ ? ", " : "", cmd_names[i],
                    (unsigned long long)st->cmds[i]);
    fprintf(f, "},\n  \"redirects\": {\"moved\": %llu, \"ask\": %llu},\n  \"errors\": {",
            (unsigned long long)st->moved, (unsigned long long)st->ask);
    for (int i = 0; i < st->nkinds; i++) {
        fprintf(f, "%s", i ? ", " : "");
        json_str(f, st->kinds[i].kind);
        fprintf(f, ": %llu", (unsigned long long)st->kinds[i].n);
    }
    fprintf(f, "}\n}\n");
}
