/* config.c -- configuration: defaults, rowan.conf, --options, CONFIG GET/SET/REWRITE.
 *
 * Design
 * ------
 * One table (`options[]`) describes every option: its redis.conf-style name,
 * its type, where it lives in server.cfg, its bounds, its default written in
 * config-file syntax, and whether CONFIG SET may change it while running.
 * Everything else is driven by that table, so an option is added in exactly
 * one place:
 *
 *   - defaults:   config_init_defaults() parses each default string through
 *                 the same code path as a config file line, so the embedded
 *                 defaults and the file syntax can never disagree;
 *   - rowan.conf: "name value" lines, '#' comments, Redis's quoting rules;
 *   - argv:       "--name value [value ...]";
 *   - CONFIG GET: values rendered as Redis renders them (yes/no, plain byte
 *                 counts, enum names, strings as they are);
 *   - CONFIG SET: two phases, like Redis 7: first check every name (unknown,
 *                 immutable, duplicate), then parse every value, and only when
 *                 all of them are good store any of them, so a failing
 *                 multi-option CONFIG SET changes nothing;
 *   - REWRITE:    lines of known options are rewritten in place, comments and
 *                 unknown lines kept, non-default options missing from the file
 *                 appended; written to a temporary file, synced and renamed so
 *                 a crash never leaves a half-written rowan.conf.
 *
 * Redis 7.0's whole redis.conf is understood, so a stock file starts the
 * server: the directives Rowan implements are ordinary rows; those it cannot
 * apply are rows flagged OPT_NOEFFECT, parsed and shown exactly as Redis
 * does but stored here (noeffect_values) rather than in server.cfg. Redis's
 * aliases (slave*, *ziplist*) map to their main rows; "include" reads other
 * files, "rename-command" is collected for the command table, and several
 * "save" lines add up as in Redis.
 *
 * Threads: CONFIG SET/GET/REWRITE run on worker threads concurrently with
 * readers of server.cfg everywhere else. A mutex serialises the config
 * commands among themselves. Readers are not locked: numeric fields are
 * stored with atomic stores (word-sized, never torn), and a string option
 * that can change at run time (requirepass, cluster-secret) never frees its old value --
 * another thread may still be comparing against it -- it is retired to a list
 * instead. Immutable strings are only ever replaced before the workers start.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cluster.h"
#include "config.h"
#include "daemon.h"
#include "server.h"
#include "tls.h"
#include "strutil.h"

/* ------------------------------------------------------------------------ */
/* The option table                                                           */
/* ------------------------------------------------------------------------ */

enum opt_type {
    T_BOOL,     /* int: yes/no */
    T_INT,      /* int */
    T_LL,       /* long long */
    T_MEM,      /* long long: a size with redis.conf units (1gb, 64mb) */
    T_ENUM,     /* int: one of a list of names */
    T_STR,      /* char * */
    T_PCTMEM,   /* long long: a size, or "N%" stored as -N (maxmemory-clients) */
    T_OBUF,     /* struct obuf_limit[OBUF_CLASSES]: client-output-buffer-limit */
    /* Redis's special syntaxes, kept as normalised strings (char *): */
    T_SAVE,     /* "" or pairs "<seconds> <changes>" */
    T_REPLICAOF,/* "" ("no one") or "<host> <port>" */
    T_OOMVALS,  /* three integers in [-2000, 2000] */
    T_PCTLIST,  /* percentiles in [0, 100] */
    T_OCTAL,    /* int written in octal (unixsocketperm) */
    T_KSEV      /* int: notify-keyspace-events flags, shown as letters */
};

/* Types whose value is a char * (T_OBUF keeps its text only while parsed). */
static int is_string_type(enum opt_type t)
{
    return t == T_STR || t == T_SAVE || t == T_REPLICAOF || t == T_OOMVALS || t == T_PCTLIST;
}

#define OPT_IMMUTABLE (1u << 0)  /* CONFIG SET refuses it */
#define OPT_MULTIARG  (1u << 1)  /* several words join into one value (bind) */
#define OPT_NOEFFECT  (1u << 2)  /* Redis 7.0 directive Rowan accepts with no
                                  * effect (README says why): its value lives in
                                  * noeffect_values[], not in server.cfg */
#define OPT_PROTECTED (1u << 3)  /* CONFIG SET needs enable-protected-configs */

struct enum_name { const char *name; int value; };

static const struct enum_name loglevel_names[] = {
    { "debug", LL_DEBUG }, { "verbose", LL_VERBOSE },
    { "notice", LL_NOTICE }, { "warning", LL_WARNING }, { NULL, 0 }
};

static const struct enum_name supervised_names[] = {
    { "no", SUPERVISED_NO }, { "upstart", SUPERVISED_UPSTART },
    { "systemd", SUPERVISED_SYSTEMD }, { "auto", SUPERVISED_AUTO }, { NULL, 0 }
};

static const struct enum_name repl_mode_names[] = {
    { "rowan", REPL_MODE_ROWAN }, { "rpc", REPL_MODE_RPC }, { NULL, 0 }
};

static const struct enum_name repl_transport_names[] = {
    { "tcp", REPL_TRANSPORT_TCP }, { "verbs", REPL_TRANSPORT_VERBS }, { NULL, 0 }
};

static const struct enum_name maxmemory_policy_names[] = {
    { "volatile-lru", MAXMEMORY_VOLATILE_LRU }, { "volatile-lfu", MAXMEMORY_VOLATILE_LFU },
    { "volatile-random", MAXMEMORY_VOLATILE_RANDOM }, { "volatile-ttl", MAXMEMORY_VOLATILE_TTL },
    { "allkeys-lru", MAXMEMORY_ALLKEYS_LRU }, { "allkeys-lfu", MAXMEMORY_ALLKEYS_LFU },
    { "allkeys-random", MAXMEMORY_ALLKEYS_RANDOM }, { "noeviction", MAXMEMORY_NO_EVICTION },
    { NULL, 0 }
};

static const struct enum_name protected_action_names[] = {
    { "no", PROTECTED_ACTION_NO }, { "yes", PROTECTED_ACTION_YES },
    { "local", PROTECTED_ACTION_LOCAL }, { NULL, 0 }
};

/* Value names of the Redis 7.0 enums Rowan accepts with no effect (the
 * numbers only tell them apart). */
static const struct enum_name appendfsync_names[] = {
    { "everysec", 0 }, { "always", 1 }, { "no", 2 }, { NULL, 0 }
};
static const struct enum_name cluster_preferred_endpoint_type_names[] = {
    { "ip", 0 }, { "hostname", 1 }, { "unknown-endpoint", 2 }, { NULL, 0 }
};
static const struct enum_name oom_score_adj_names[] = {
    { "no", 0 }, { "yes", 1 }, { "relative", 2 }, { "absolute", 3 }, { NULL, 0 }
};
static const struct enum_name propagation_error_behavior_names[] = {
    { "ignore", 0 }, { "panic", 1 }, { "panic-on-replicas", 2 }, { NULL, 0 }
};
static const struct enum_name repl_diskless_load_names[] = {
    { "disabled", 0 }, { "on-empty-db", 1 }, { "swapdb", 2 }, { NULL, 0 }
};
static const struct enum_name sanitize_dump_payload_names[] = {
    { "no", 0 }, { "yes", 1 }, { "clients", 2 }, { NULL, 0 }
};
static const struct enum_name shutdown_names[] = {
    { "default", 0 }, { "save", 1 }, { "nosave", 2 }, { "now", 3 }, { "force", 4 }, { NULL, 0 }
};
static const struct enum_name syslog_facility_names[] = {
    { "user", 0 }, { "local0", 1 }, { "local1", 2 }, { "local2", 3 }, { "local3", 4 },
    { "local4", 5 }, { "local5", 6 }, { "local6", 7 }, { "local7", 8 }, { NULL, 0 }
};
static const struct enum_name acl_pubsub_default_names[] = {
    { "allchannels", 1 }, { "resetchannels", 0 }, { NULL, 0 }   /* Redis's order */
};
static const struct enum_name tls_auth_clients_names[] = {
    { "no", 0 }, { "yes", 1 }, { "optional", 2 }, { NULL, 0 }
};
static const struct enum_name native_transport_names[] = {
    { "udp", 0 }, { "verbs", 1 }, { NULL, 0 }
};

struct option {
    const char *name;
    enum opt_type type;
    size_t off;                    /* offsetof(struct rowan_config, field) */
    unsigned flags;
    long long min, max;            /* numeric bounds (inclusive) */
    const char *def;               /* default, in config-file syntax */
    const struct enum_name *enums; /* T_ENUM only */
    long long (*clamp)(long long); /* optional: adjust a valid value (hz) */
};

/* Redis keeps repl-backlog-size at least 16 KB. */
static long long clamp_backlog(long long v) { return v < 16384 ? 16384 : v; }

/* Redis accepts any hz and silently keeps it within [1, 500]. */
static long long clamp_hz(long long v) { return v < 1 ? 1 : v > 500 ? 500 : v; }

#define CFG(f) offsetof(struct rowan_config, f)
#define NOOP 0   /* offset of an OPT_NOEFFECT option: unused (see field_ptr) */
#define MB (1024LL * 1024)
#define GB (1024LL * MB)

static const struct option options[] = {
    /* network */
    { "bind", T_STR, CFG(bind), OPT_IMMUTABLE | OPT_MULTIARG, 0, 0, "127.0.0.1", NULL, NULL },
    { "port", T_INT, CFG(port), OPT_IMMUTABLE, 0, 65535, "6379", NULL, NULL },
    { "protected-mode", T_BOOL, CFG(protected_mode), 0, 0, 1, "yes", NULL, NULL },
    { "tcp-backlog", T_INT, CFG(tcp_backlog), OPT_IMMUTABLE, 0, INT_MAX, "511", NULL, NULL },
    { "timeout", T_INT, CFG(timeout), 0, 0, INT_MAX, "0", NULL, NULL },
    { "tcp-keepalive", T_INT, CFG(tcp_keepalive), 0, 0, INT_MAX, "300", NULL, NULL },
    /* security and limits */
    { "requirepass", T_STR, CFG(requirepass), 0, 0, 0, "", NULL, NULL },
    { "cluster-secret", T_STR, CFG(cluster_secret), 0, 0, 0, "", NULL, NULL },
    { "maxclients", T_INT, CFG(maxclients), 0, 1, INT_MAX, "10000", NULL, NULL },
    { "proto-max-bulk-len", T_MEM, CFG(proto_max_bulk_len), 0, 1 * MB, LLONG_MAX, "512mb", NULL, NULL },
    { "client-query-buffer-limit", T_MEM, CFG(client_query_buffer_limit), 0, 1 * MB, LLONG_MAX, "1gb", NULL, NULL },
    { "client-output-buffer-limit", T_OBUF, CFG(obuf_limits), OPT_MULTIARG, 0, 0,
      "normal 0 0 0 replica 256mb 64mb 60 pubsub 32mb 8mb 60", NULL, NULL },
    { "client-output-buffer-max", T_MEM, CFG(client_output_buffer_max), 0, 0, LLONG_MAX, "1gb", NULL, NULL },
    { "maxmemory-clients", T_PCTMEM, CFG(maxmemory_clients), 0, -100, LLONG_MAX, "0", NULL, NULL },
    /* process */
    { "daemonize", T_BOOL, CFG(daemonize), OPT_IMMUTABLE, 0, 1, "no", NULL, NULL },
    { "pidfile", T_STR, CFG(pidfile), OPT_IMMUTABLE, 0, 0, "", NULL, NULL },
    { "supervised", T_ENUM, CFG(supervised), OPT_IMMUTABLE, 0, 0, "no", supervised_names, NULL },
    { "loglevel", T_ENUM, CFG(loglevel), 0, 0, 0, "notice", loglevel_names, NULL },
    { "logfile", T_STR, CFG(logfile), OPT_IMMUTABLE, 0, 0, "", NULL, NULL },
    { "databases", T_INT, CFG(databases), OPT_IMMUTABLE, 1, 256, "16", NULL, NULL },
    { "hz", T_INT, CFG(hz), 0, 0, INT_MAX, "10", NULL, clamp_hz },
    { "slowlog-log-slower-than", T_LL, CFG(slowlog_log_slower_than), 0, -1, LLONG_MAX, "10000", NULL, NULL },
    { "slowlog-max-len", T_LL, CFG(slowlog_max_len), 0, 0, LONG_MAX, "128", NULL, NULL },
    /* scripting (redis-compat/t_script.c); lua-time-limit is its Redis 6 name */
    { "busy-reply-threshold", T_LL, CFG(busy_reply_threshold), 0, 0, LLONG_MAX, "5000", NULL, NULL },
    { "lua-time-limit", T_LL, CFG(busy_reply_threshold), 0, 0, LLONG_MAX, "5000", NULL, NULL },
    /* storage: the pool is opened once, at start, from dir/pool-file */
    { "dir", T_STR, CFG(dir), OPT_IMMUTABLE, 0, 0, "./data", NULL, NULL },
    { "pool-file", T_STR, CFG(pool_file), OPT_IMMUTABLE, 0, 0, "rowan.pool", NULL, NULL },
    { "pool-size", T_MEM, CFG(pool_size), OPT_IMMUTABLE, 1, LLONG_MAX, "1gb", NULL, NULL }, /* minimum: db_min_pool_size */
    { "clean-threshold", T_INT, CFG(clean_threshold), 0, 0, 100, "75", NULL, NULL },
    { "cold-read-threads", T_INT, CFG(cold_read_threads), OPT_IMMUTABLE, 0, 1024, "8", NULL, NULL },
    /* threads and sharding */
    { "workers", T_INT, CFG(workers), OPT_IMMUTABLE, 0, 1024, "0", NULL, NULL },
    { "shards", T_INT, CFG(shards), OPT_IMMUTABLE, 1, 16384, "64", NULL, NULL },
    /* cluster and replication (cluster-node / cluster-self: see apply_cluster_line) */
    { "replicas", T_INT, CFG(replicas), OPT_IMMUTABLE, 0, 64, "0", NULL, NULL },
    { "replication-timeout", T_LL, CFG(replication_timeout), 0, 1, LLONG_MAX, "5000", NULL, NULL },
    { "replication-mode", T_ENUM, CFG(replication_mode), OPT_IMMUTABLE, 0, 0, "rowan", repl_mode_names, NULL },
    { "replication-transport", T_ENUM, CFG(replication_transport), OPT_IMMUTABLE, 0, 0, "tcp", repl_transport_names, NULL },
    { "replication-msg-max", T_MEM, CFG(replication_msg_max), OPT_IMMUTABLE, 0, REPL_MSG_MAX_TOP, "0", NULL, NULL },
    /* managed cluster */
    { "zookeeper", T_STR, CFG(zookeeper), OPT_IMMUTABLE, 0, 0, "", NULL, NULL },
    { "cluster-name", T_STR, CFG(cluster_name), OPT_IMMUTABLE, 0, 0, "", NULL, NULL },
    { "cluster-lease-ms", T_LL, CFG(cluster_lease_ms), OPT_IMMUTABLE, 20, 600000, "150", NULL, NULL },
    { "zookeeper-session-timeout", T_LL, CFG(zookeeper_session_timeout), OPT_IMMUTABLE, 200, 600000, "2000", NULL, NULL },
    { "cluster-init-nodes", T_INT, CFG(cluster_init_nodes), OPT_IMMUTABLE, 0, 64, "0", NULL, NULL },
    { "min-replicas-to-write", T_INT, CFG(min_replicas_to_write), 0, 0, 64, "1", NULL, NULL },
    /* client-facing surface (redis-compat/notify.c, t_latency.c) */
    { "notify-keyspace-events", T_KSEV, CFG(notify_keyspace_events), 0, 0, 0, "", NULL, NULL },
    { "latency-monitor-threshold", T_LL, CFG(latency_monitor_threshold), 0, 0, LLONG_MAX, "0", NULL, NULL },
    /* data types */
    { "hll-sparse-max-bytes", T_MEM, CFG(hll_sparse_max_bytes), 0, 0, LONG_MAX, "3000", NULL, NULL },
    /* Redis 7.0 directives Rowan implements: memory limit and eviction
     * (evict.c), the encodings OBJECT ENCODING reports (t_hash.c, t_set.c,
     * t_zset.c, t_list.c), the protected features (DEBUG, CONFIG SET of
     * protected options). */
    { "maxmemory", T_MEM, CFG(maxmemory), 0, 0, LLONG_MAX, "0", NULL, NULL },
    { "maxmemory-policy", T_ENUM, CFG(maxmemory_policy), 0, 0, 0, "noeviction", maxmemory_policy_names, NULL },
    { "maxmemory-samples", T_INT, CFG(maxmemory_samples), 0, 1, INT_MAX, "5", NULL, NULL },
    { "lfu-log-factor", T_INT, CFG(lfu_log_factor), 0, 0, INT_MAX, "10", NULL, NULL },
    { "lfu-decay-time", T_INT, CFG(lfu_decay_time), 0, 0, INT_MAX, "1", NULL, NULL },
    { "hash-max-listpack-entries", T_LL, CFG(hash_max_listpack_entries), 0, 0, LLONG_MAX, "512", NULL, NULL },
    { "hash-max-listpack-value", T_MEM, CFG(hash_max_listpack_value), 0, 0, LLONG_MAX, "64", NULL, NULL },
    { "set-max-intset-entries", T_LL, CFG(set_max_intset_entries), 0, 0, LLONG_MAX, "512", NULL, NULL },
    { "set-max-listpack-entries", T_LL, CFG(set_max_listpack_entries), 0, 0, LLONG_MAX, "128", NULL, NULL },
    { "set-max-listpack-value", T_MEM, CFG(set_max_listpack_value), 0, 0, LLONG_MAX, "64", NULL, NULL },
    { "zset-max-listpack-entries", T_LL, CFG(zset_max_listpack_entries), 0, 0, LLONG_MAX, "128", NULL, NULL },
    { "zset-max-listpack-value", T_MEM, CFG(zset_max_listpack_value), 0, 0, LLONG_MAX, "64", NULL, NULL },
    { "list-max-listpack-size", T_INT, CFG(list_max_listpack_size), 0, INT_MIN, INT_MAX, "-2", NULL, NULL },
    { "enable-protected-configs", T_ENUM, CFG(enable_protected_configs), OPT_IMMUTABLE, 0, 0, "no", protected_action_names, NULL },
    { "enable-debug-command", T_ENUM, CFG(enable_debug_command), OPT_IMMUTABLE, 0, 0, "no", protected_action_names, NULL },
    { "enable-module-command", T_ENUM, CFG(enable_module_command), OPT_IMMUTABLE, 0, 0, "no", protected_action_names, NULL },
    /* TLS for clients (tls.c): CONFIG SET rebuilds the context (see
     * config_set_many); tls-port is fixed at start like port and bind. */
    { "tls-auth-clients", T_ENUM, CFG(tls_auth_clients), 0, 0, 0, "yes", tls_auth_clients_names, NULL },
    { "tls-ca-cert-dir", T_STR, CFG(tls_ca_cert_dir), 0, 0, 0, "", NULL, NULL },
    { "tls-ca-cert-file", T_STR, CFG(tls_ca_cert_file), 0, 0, 0, "", NULL, NULL },
    { "tls-cert-file", T_STR, CFG(tls_cert_file), 0, 0, 0, "", NULL, NULL },
    { "tls-ciphers", T_STR, CFG(tls_ciphers), 0, 0, 0, "", NULL, NULL },
    { "tls-ciphersuites", T_STR, CFG(tls_ciphersuites), 0, 0, 0, "", NULL, NULL },
    { "tls-dh-params-file", T_STR, CFG(tls_dh_params_file), 0, 0, 0, "", NULL, NULL },
    { "tls-key-file", T_STR, CFG(tls_key_file), 0, 0, 0, "", NULL, NULL },
    { "tls-key-file-pass", T_STR, CFG(tls_key_file_pass), 0, 0, 0, "", NULL, NULL },
    { "tls-port", T_INT, CFG(tls_port), OPT_IMMUTABLE, 0, 65535, "0", NULL, NULL },
    { "tls-prefer-server-ciphers", T_BOOL, CFG(tls_prefer_server_ciphers), 0, 0, 1, "no", NULL, NULL },
    { "tls-protocols", T_STR, CFG(tls_protocols), 0, 0, 0, "", NULL, NULL },
    { "tls-session-cache-size", T_INT, CFG(tls_session_cache_size), 0, 0, INT_MAX, "20480", NULL, NULL },
    { "tls-session-cache-timeout", T_INT, CFG(tls_session_cache_timeout), 0, 0, INT_MAX, "300", NULL, NULL },
    { "tls-session-caching", T_BOOL, CFG(tls_session_caching), 0, 0, 1, "yes", NULL, NULL },
    /* TLS between nodes (peer_tls.c): fixed at start, like the ports */
    { "tls-cluster", T_BOOL, CFG(tls_cluster), OPT_IMMUTABLE, 0, 1, "no", NULL, NULL },
    { "tls-replication", T_BOOL, CFG(tls_replication), OPT_IMMUTABLE, 0, 1, "no", NULL, NULL },
    /* the native datagram edge (rdma/native.c): port and address fixed at
     * start; native-port 0 = off. The limits may change at run time. */
    { "native-port", T_INT, CFG(native_port), OPT_IMMUTABLE, 0, 65535, "0", NULL, NULL },
    { "native-bind", T_STR, CFG(native_bind), OPT_IMMUTABLE, 0, 0, "", NULL, NULL },
    { "native-transport", T_ENUM, CFG(native_transport), OPT_IMMUTABLE, 0, 0, "udp", native_transport_names, NULL },
    { "native-max-clients", T_INT, CFG(native_max_clients), 0, 1, 1000000, "1024", NULL, NULL },
    { "native-reply-cache", T_MEM, CFG(native_reply_cache), 0, 64 * 1024, LLONG_MAX, "64mb", NULL, NULL },
    { "native-client-timeout", T_INT, CFG(native_client_timeout), 0, 1, INT_MAX, "60", NULL, NULL },
    /* Redis 7.0 directives accepted with Redis's syntax and checks, shown by
     * CONFIG GET and kept by CONFIG REWRITE, with no effect: Rowan persists
     * every write in its pool before acknowledging it (save, appendonly and
     * the rdb/aof tuning), replicates its own way (replicaof, repl-*), has
     * its own cluster protocol and threads, and no TLS between nodes, unix socket, syslog
     * or jemalloc. README lists them with the reason. */
    { "save", T_SAVE, NOOP, OPT_NOEFFECT | OPT_MULTIARG, 0, 0, "3600 1 300 100 60 10000", NULL, NULL },
    { "replicaof", T_REPLICAOF, NOOP, OPT_IMMUTABLE | OPT_NOEFFECT | OPT_MULTIARG, 0, 0, "", NULL, NULL },
    { "oom-score-adj-values", T_OOMVALS, NOOP, OPT_NOEFFECT | OPT_MULTIARG, 0, 0, "0 200 800", NULL, NULL },
    { "latency-tracking-info-percentiles", T_PCTLIST, NOOP, OPT_NOEFFECT | OPT_MULTIARG, 0, 0, "50 99 99.9", NULL, NULL },
    { "unixsocketperm", T_OCTAL, NOOP, OPT_IMMUTABLE | OPT_NOEFFECT, 0, 0777, "0", NULL, NULL },
    { "dbfilename", T_STR, NOOP, OPT_PROTECTED | OPT_NOEFFECT, 0, 0, "dump.rdb", NULL, NULL },
    { "active-defrag-cycle-max", T_INT, NOOP, OPT_NOEFFECT, 1, 99, "25", NULL, NULL },
    { "active-defrag-cycle-min", T_INT, NOOP, OPT_NOEFFECT, 1, 99, "1", NULL, NULL },
    { "active-defrag-ignore-bytes", T_MEM, NOOP, OPT_NOEFFECT, 1, LLONG_MAX, "104857600", NULL, NULL },
    { "active-defrag-max-scan-fields", T_LL, NOOP, OPT_NOEFFECT, 1, LLONG_MAX, "1000", NULL, NULL },
    { "active-defrag-threshold-lower", T_INT, NOOP, OPT_NOEFFECT, 0, 1000, "10", NULL, NULL },
    { "active-defrag-threshold-upper", T_INT, NOOP, OPT_NOEFFECT, 0, 1000, "100", NULL, NULL },
    { "active-expire-effort", T_INT, NOOP, OPT_NOEFFECT, 1, 10, "1", NULL, NULL },
    { "activedefrag", T_BOOL, NOOP, OPT_NOEFFECT, 0, 1, "no", NULL, NULL },
    { "activerehashing", T_BOOL, NOOP, OPT_NOEFFECT, 0, 1, "yes", NULL, NULL },
    { "always-show-logo", T_BOOL, NOOP, OPT_IMMUTABLE | OPT_NOEFFECT, 0, 1, "no", NULL, NULL },
    { "aof-disable-auto-gc", T_BOOL, NOOP, OPT_NOEFFECT, 0, 1, "no", NULL, NULL },
    { "aof-load-truncated", T_BOOL, NOOP, OPT_NOEFFECT, 0, 1, "yes", NULL, NULL },
    { "aof-rewrite-incremental-fsync", T_BOOL, NOOP, OPT_NOEFFECT, 0, 1, "yes", NULL, NULL },
    { "aof-timestamp-enabled", T_BOOL, NOOP, OPT_NOEFFECT, 0, 1, "no", NULL, NULL },
    { "aof-use-rdb-preamble", T_BOOL, NOOP, OPT_NOEFFECT, 0, 1, "yes", NULL, NULL },
    { "aof_rewrite_cpulist", T_STR, NOOP, OPT_IMMUTABLE | OPT_NOEFFECT, 0, 0, "", NULL, NULL },
    { "appenddirname", T_STR, NOOP, OPT_IMMUTABLE | OPT_NOEFFECT, 0, 0, "appendonlydir", NULL, NULL },
    { "appendfilename", T_STR, NOOP, OPT_IMMUTABLE | OPT_NOEFFECT, 0, 0, "appendonly.aof", NULL, NULL },
    { "appendfsync", T_ENUM, NOOP, OPT_NOEFFECT, 0, 0, "everysec", appendfsync_names, NULL },
    { "appendonly", T_BOOL, NOOP, OPT_NOEFFECT, 0, 1, "no", NULL, NULL },
    { "auto-aof-rewrite-min-size", T_MEM, NOOP, OPT_NOEFFECT, 0, LLONG_MAX, "67108864", NULL, NULL },
    { "auto-aof-rewrite-percentage", T_INT, NOOP, OPT_NOEFFECT, 0, INT_MAX, "100", NULL, NULL },
    { "bgsave_cpulist", T_STR, NOOP, OPT_IMMUTABLE | OPT_NOEFFECT, 0, 0, "", NULL, NULL },
    { "bind-source-addr", T_STR, NOOP, OPT_NOEFFECT, 0, 0, "", NULL, NULL },
    { "bio_cpulist", T_STR, NOOP, OPT_IMMUTABLE | OPT_NOEFFECT, 0, 0, "", NULL, NULL },
    { "cluster-allow-pubsubshard-when-down", T_BOOL, NOOP, OPT_NOEFFECT, 0, 1, "yes", NULL, NULL },
    { "cluster-allow-reads-when-down", T_BOOL, NOOP, OPT_NOEFFECT, 0, 1, "no", NULL, NULL },
    { "cluster-allow-replica-migration", T_BOOL, NOOP, OPT_NOEFFECT, 0, 1, "yes", NULL, NULL },
    { "cluster-announce-bus-port", T_INT, NOOP, OPT_NOEFFECT, 0, 65535, "0", NULL, NULL },
    { "cluster-announce-hostname", T_STR, NOOP, OPT_NOEFFECT, 0, 0, "", NULL, NULL },
    { "cluster-announce-ip", T_STR, NOOP, OPT_NOEFFECT, 0, 0, "", NULL, NULL },
    { "cluster-announce-port", T_INT, NOOP, OPT_NOEFFECT, 0, 65535, "0", NULL, NULL },
    { "cluster-announce-tls-port", T_INT, NOOP, OPT_NOEFFECT, 0, 65535, "0", NULL, NULL },
    { "cluster-config-file", T_STR, NOOP, OPT_IMMUTABLE | OPT_NOEFFECT, 0, 0, "nodes.conf", NULL, NULL },
    { "cluster-enabled", T_BOOL, NOOP, OPT_IMMUTABLE | OPT_NOEFFECT, 0, 1, "no", NULL, NULL },
    { "cluster-link-sendbuf-limit", T_MEM, NOOP, OPT_NOEFFECT, 0, LLONG_MAX, "0", NULL, NULL },
    { "cluster-migration-barrier", T_INT, NOOP, OPT_NOEFFECT, 0, INT_MAX, "1", NULL, NULL },
    { "cluster-node-timeout", T_LL, NOOP, OPT_NOEFFECT, 0, LLONG_MAX, "15000", NULL, NULL },
    { "cluster-port", T_INT, NOOP, OPT_IMMUTABLE | OPT_NOEFFECT, 0, 65535, "0", NULL, NULL },
    { "cluster-preferred-endpoint-type", T_ENUM, NOOP, OPT_NOEFFECT, 0, 0, "ip", cluster_preferred_endpoint_type_names, NULL },
    { "cluster-replica-no-failover", T_BOOL, NOOP, OPT_NOEFFECT, 0, 1, "no", NULL, NULL },
    { "cluster-replica-validity-factor", T_INT, NOOP, OPT_NOEFFECT, 0, INT_MAX, "10", NULL, NULL },
    { "cluster-require-full-coverage", T_BOOL, NOOP, OPT_NOEFFECT, 0, 1, "yes", NULL, NULL },
    { "crash-log-enabled", T_BOOL, NOOP, OPT_NOEFFECT, 0, 1, "yes", NULL, NULL },
    { "crash-memcheck-enabled", T_BOOL, NOOP, OPT_NOEFFECT, 0, 1, "yes", NULL, NULL },
    { "disable-thp", T_BOOL, NOOP, OPT_IMMUTABLE | OPT_NOEFFECT, 0, 1, "yes", NULL, NULL },
    { "dynamic-hz", T_BOOL, NOOP, OPT_NOEFFECT, 0, 1, "yes", NULL, NULL },
    { "ignore-warnings", T_STR, NOOP, OPT_NOEFFECT, 0, 0, "", NULL, NULL },
    { "io-threads", T_INT, NOOP, OPT_IMMUTABLE | OPT_NOEFFECT, 1, 128, "1", NULL, NULL },
    { "io-threads-do-reads", T_BOOL, NOOP, OPT_IMMUTABLE | OPT_NOEFFECT, 0, 1, "no", NULL, NULL },
    { "jemalloc-bg-thread", T_BOOL, NOOP, OPT_NOEFFECT, 0, 1, "yes", NULL, NULL },
    { "latency-tracking", T_BOOL, NOOP, OPT_NOEFFECT, 0, 1, "yes", NULL, NULL },
    { "lazyfree-lazy-eviction", T_BOOL, NOOP, OPT_NOEFFECT, 0, 1, "no", NULL, NULL },
    { "lazyfree-lazy-expire", T_BOOL, NOOP, OPT_NOEFFECT, 0, 1, "no", NULL, NULL },
    { "lazyfree-lazy-server-del", T_BOOL, NOOP, OPT_NOEFFECT, 0, 1, "no", NULL, NULL },
    { "lazyfree-lazy-user-del", T_BOOL, NOOP, OPT_NOEFFECT, 0, 1, "no", NULL, NULL },
    { "lazyfree-lazy-user-flush", T_BOOL, NOOP, OPT_NOEFFECT, 0, 1, "no", NULL, NULL },
    { "list-compress-depth", T_INT, NOOP, OPT_NOEFFECT, 0, INT_MAX, "0", NULL, NULL },
    { "masterauth", T_STR, NOOP, OPT_NOEFFECT, 0, 0, "", NULL, NULL },
    { "masteruser", T_STR, NOOP, OPT_NOEFFECT, 0, 0, "", NULL, NULL },
    { "maxmemory-eviction-tenacity", T_INT, NOOP, OPT_NOEFFECT, 0, 100, "10", NULL, NULL },
    { "min-replicas-max-lag", T_INT, NOOP, OPT_NOEFFECT, 0, INT_MAX, "10", NULL, NULL },
    { "no-appendfsync-on-rewrite", T_BOOL, NOOP, OPT_NOEFFECT, 0, 1, "no", NULL, NULL },
    { "oom-score-adj", T_ENUM, NOOP, OPT_NOEFFECT, 0, 0, "no", oom_score_adj_names, NULL },
    { "proc-title-template", T_STR, NOOP, OPT_NOEFFECT, 0, 0, "{title} {listen-addr} {server-mode}", NULL, NULL },
    { "propagation-error-behavior", T_ENUM, NOOP, OPT_NOEFFECT, 0, 0, "ignore", propagation_error_behavior_names, NULL },
    { "rdb-del-sync-files", T_BOOL, NOOP, OPT_NOEFFECT, 0, 1, "no", NULL, NULL },
    { "rdb-save-incremental-fsync", T_BOOL, NOOP, OPT_NOEFFECT, 0, 1, "yes", NULL, NULL },
    { "rdbchecksum", T_BOOL, NOOP, OPT_IMMUTABLE | OPT_NOEFFECT, 0, 1, "yes", NULL, NULL },
    { "rdbcompression", T_BOOL, NOOP, OPT_NOEFFECT, 0, 1, "yes", NULL, NULL },
    { "repl-backlog-size", T_MEM, NOOP, OPT_NOEFFECT, 1, LLONG_MAX, "1048576", NULL, clamp_backlog },
    { "repl-backlog-ttl", T_LL, NOOP, OPT_NOEFFECT, 0, LLONG_MAX, "3600", NULL, NULL },
    { "repl-disable-tcp-nodelay", T_BOOL, NOOP, OPT_NOEFFECT, 0, 1, "no", NULL, NULL },
    { "repl-diskless-load", T_ENUM, NOOP, OPT_NOEFFECT, 0, 0, "disabled", repl_diskless_load_names, NULL },
    { "repl-diskless-sync", T_BOOL, NOOP, OPT_NOEFFECT, 0, 1, "yes", NULL, NULL },
    { "repl-diskless-sync-delay", T_INT, NOOP, OPT_NOEFFECT, 0, INT_MAX, "5", NULL, NULL },
    { "repl-diskless-sync-max-replicas", T_INT, NOOP, OPT_NOEFFECT, 0, INT_MAX, "0", NULL, NULL },
    { "repl-ping-replica-period", T_INT, NOOP, OPT_NOEFFECT, 1, INT_MAX, "10", NULL, NULL },
    { "repl-timeout", T_INT, NOOP, OPT_NOEFFECT, 1, INT_MAX, "60", NULL, NULL },
    { "replica-announce-ip", T_STR, NOOP, OPT_NOEFFECT, 0, 0, "", NULL, NULL },
    { "replica-announce-port", T_INT, NOOP, OPT_NOEFFECT, 0, 65535, "0", NULL, NULL },
    { "replica-announced", T_BOOL, NOOP, OPT_NOEFFECT, 0, 1, "yes", NULL, NULL },
    { "replica-ignore-disk-write-errors", T_BOOL, NOOP, OPT_NOEFFECT, 0, 1, "no", NULL, NULL },
    { "replica-ignore-maxmemory", T_BOOL, NOOP, OPT_NOEFFECT, 0, 1, "yes", NULL, NULL },
    { "replica-lazy-flush", T_BOOL, NOOP, OPT_NOEFFECT, 0, 1, "no", NULL, NULL },
    { "replica-priority", T_INT, NOOP, OPT_NOEFFECT, 0, INT_MAX, "100", NULL, NULL },
    { "replica-read-only", T_BOOL, NOOP, OPT_NOEFFECT, 0, 1, "yes", NULL, NULL },
    { "replica-serve-stale-data", T_BOOL, NOOP, OPT_NOEFFECT, 0, 1, "yes", NULL, NULL },
    { "sanitize-dump-payload", T_ENUM, NOOP, OPT_NOEFFECT, 0, 0, "no", sanitize_dump_payload_names, NULL },
    { "server_cpulist", T_STR, NOOP, OPT_IMMUTABLE | OPT_NOEFFECT, 0, 0, "", NULL, NULL },
    { "set-proc-title", T_BOOL, NOOP, OPT_IMMUTABLE | OPT_NOEFFECT, 0, 1, "yes", NULL, NULL },
    { "shutdown-on-sigint", T_ENUM, NOOP, OPT_NOEFFECT, 0, 0, "default", shutdown_names, NULL },
    { "shutdown-on-sigterm", T_ENUM, NOOP, OPT_NOEFFECT, 0, 0, "default", shutdown_names, NULL },
    { "shutdown-timeout", T_INT, NOOP, OPT_NOEFFECT, 0, INT_MAX, "10", NULL, NULL },
    { "socket-mark-id", T_INT, NOOP, OPT_IMMUTABLE | OPT_NOEFFECT, 0, INT_MAX, "0", NULL, NULL },
    { "stop-writes-on-bgsave-error", T_BOOL, NOOP, OPT_NOEFFECT, 0, 1, "yes", NULL, NULL },
    { "syslog-enabled", T_BOOL, NOOP, OPT_IMMUTABLE | OPT_NOEFFECT, 0, 1, "no", NULL, NULL },
    { "syslog-facility", T_ENUM, NOOP, OPT_IMMUTABLE | OPT_NOEFFECT, 0, 0, "local0", syslog_facility_names, NULL },
    { "syslog-ident", T_STR, NOOP, OPT_IMMUTABLE | OPT_NOEFFECT, 0, 0, "redis", NULL, NULL },
    { "tls-client-cert-file", T_STR, NOOP, OPT_NOEFFECT, 0, 0, "", NULL, NULL },
    { "tls-client-key-file", T_STR, NOOP, OPT_NOEFFECT, 0, 0, "", NULL, NULL },
    { "tls-client-key-file-pass", T_STR, NOOP, OPT_NOEFFECT, 0, 0, "", NULL, NULL },
    { "tracking-table-max-keys", T_LL, NOOP, OPT_NOEFFECT, 0, LLONG_MAX, "1000000", NULL, NULL },
    { "unixsocket", T_STR, NOOP, OPT_IMMUTABLE | OPT_NOEFFECT, 0, 0, "", NULL, NULL },
    /* streams (redis-compat/t_stream.c): when XADD starts a new node, which
     * is what approximate (~) trimming removes whole */
    { "stream-node-max-bytes", T_MEM, CFG(stream_node_max_bytes), 0, 0, LLONG_MAX, "4096", NULL, NULL },
    { "stream-node-max-entries", T_LL, CFG(stream_node_max_entries), 0, 0, LLONG_MAX, "100", NULL, NULL },
    /* ACL (redis-compat/acl.c; `user` lines: see apply_user_line) */
    { "aclfile", T_STR, CFG(aclfile), OPT_IMMUTABLE, 0, 0, "", NULL, NULL },
    { "acllog-max-len", T_LL, CFG(acllog_max_len), 0, 0, LONG_MAX, "128", NULL, NULL },
    { "acl-pubsub-default", T_ENUM, CFG(acl_pubsub_default), 0, 0, 0, "resetchannels", acl_pubsub_default_names, NULL },
};
#define NOPTIONS ((int)(sizeof(options) / sizeof(options[0])))

/* Redis's alternative names: CONFIG GET shows both, CONFIG SET and the
 * config file take both (setting both in one CONFIG SET is a duplicate),
 * CONFIG REWRITE writes the main name. */
static const struct { const char *alias, *name; } aliases[] = {
    { "slaveof", "replicaof" },
    { "slave-announce-ip", "replica-announce-ip" },
    { "slave-announce-port", "replica-announce-port" },
    { "slave-ignore-maxmemory", "replica-ignore-maxmemory" },
    { "slave-lazy-flush", "replica-lazy-flush" },
    { "slave-priority", "replica-priority" },
    { "slave-read-only", "replica-read-only" },
    { "slave-serve-stale-data", "replica-serve-stale-data" },
    { "min-slaves-max-lag", "min-replicas-max-lag" },
    { "min-slaves-to-write", "min-replicas-to-write" },
    { "cluster-slave-no-failover", "cluster-replica-no-failover" },
    { "cluster-slave-validity-factor", "cluster-replica-validity-factor" },
    { "repl-ping-slave-period", "repl-ping-replica-period" },
    { "hash-max-ziplist-entries", "hash-max-listpack-entries" },
    { "hash-max-ziplist-value", "hash-max-listpack-value" },
    { "zset-max-ziplist-entries", "zset-max-listpack-entries" },
    { "zset-max-ziplist-value", "zset-max-listpack-value" },
    { "list-max-ziplist-size", "list-max-listpack-size" },
};
#define NALIASES ((int)(sizeof(aliases) / sizeof(aliases[0])))

/* Values of the OPT_NOEFFECT options, by option index. Written like the
 * server.cfg fields (atomic stores, retired strings). */
union noeffect_value { int i; long long ll; char *s; };
/* This file's state, one per server (server.h). */
struct config_state {
    union noeffect_value noeffect_values[NOPTIONS];
    pthread_mutex_t config_mu;
    char **retired;
    size_t nretired;
    size_t capretired;
    struct rowan_config configured;
    int configured_valid;
    char **rename_from;
    char **rename_to;
    int nrenames;
    int save_lines_seen;
};

void config_state_new(void) {
    struct config_state *st = calloc(1, sizeof(*st));
    if (!st) abort();
    pthread_mutex_init(&st->config_mu, NULL);
    server.config_st = st;
}

#define noeffect_values (server.config_st->noeffect_values)

/* A parsed but not yet stored value. */
struct optval { long long n; char *s; };

#define config_mu (server.config_st->config_mu)

/* Old values of run-time-mutable strings: other threads may still read them. */
#define retired (server.config_st->retired)
#define nretired (server.config_st->nretired)
#define capretired (server.config_st->capretired)

/* Immutable options as the user configured them, taken when loading ends.
 * The server may adjust a live value after loading (workers 0 becomes the
 * CPU count); CONFIG GET and REWRITE must show the configured one, or a
 * rewritten file would pin this machine's CPU count. Strings are copies. */
#define configured (server.config_st->configured)
#define configured_valid (server.config_st->configured_valid)

static void *field_ptr(const struct option *o)
{
    if (o->flags & OPT_NOEFFECT) return &noeffect_values[o - options];
    return (char *)&server.cfg + o->off;
}

/* Where CONFIG GET / REWRITE read an option: the configured snapshot for
 * immutable options (once a snapshot exists), the live config otherwise. */
static const void *shown_ptr(const struct option *o)
{
    if (o->flags & OPT_NOEFFECT) return field_ptr(o);   /* the server never adjusts them */
    const char *base = (o->flags & OPT_IMMUTABLE) && configured_valid ? (const char *)&configured
                                                                      : (const char *)&server.cfg;
    return base + o->off;
}

static void snapshot_configured(void)
{
    for (int i = 0; i < NOPTIONS; i++) {
        const struct option *o = &options[i];
        if (!(o->flags & OPT_IMMUTABLE) || (o->flags & OPT_NOEFFECT)) continue;
        char *dst = (char *)&configured + o->off;
        const char *src = (const char *)&server.cfg + o->off;
        switch (o->type) {
        case T_BOOL: case T_INT: case T_ENUM: case T_OCTAL: case T_KSEV: memcpy(dst, src, sizeof(int)); break;
        case T_LL: case T_MEM: case T_PCTMEM: memcpy(dst, src, sizeof(long long)); break;
        case T_OBUF: memcpy(dst, src, sizeof(struct obuf_limit) * OBUF_CLASSES); break;
        case T_STR: case T_SAVE: case T_REPLICAOF: case T_OOMVALS: case T_PCTLIST: {
            const char *v = *(char *const *)src;
            free(*(char **)dst);
            *(char **)dst = strdup(v ? v : "");
            break;
        }
        }
    }
    configured_valid = 1;
}

/* A stopped server's configuration: every string it holds (live, as
 * configured, retired by CONFIG SET), the renames, the user lines. */
void config_state_free(void)
{
    if (!server.config_st) return;
    for (int i = 0; i < NOPTIONS; i++) {
        const struct option *o = &options[i];
        if (!is_string_type(o->type)) continue;
        free(*(char **)field_ptr(o));
        *(char **)field_ptr(o) = NULL;
        if ((o->flags & OPT_IMMUTABLE) && !(o->flags & OPT_NOEFFECT))
            free(*(char **)((char *)&configured + o->off));
    }
    for (size_t i = 0; i < nretired; i++) free(retired[i]);
    free(retired);
    struct config_state *st = server.config_st;
    for (int i = 0; i < st->nrenames; i++) {
        free(st->rename_from[i]);
        free(st->rename_to[i]);
    }
    free(st->rename_from);
    free(st->rename_to);
    for (int i = 0; i < server.cfg.acl_nuser_lines; i++) free(server.cfg.acl_user_lines[i]);
    free(server.cfg.acl_user_lines);
    server.cfg.acl_user_lines = NULL;
    server.cfg.acl_nuser_lines = 0;
    free(server.cfg.conf_file);
    server.cfg.conf_file = NULL;
    pthread_mutex_destroy(&config_mu);
    free(server.config_st);
    server.config_st = NULL;
}

static const struct option *opt_find_main(const char *name, size_t len)
{
    for (int i = 0; i < NOPTIONS; i++)
        if (strcaseeqlen(name, len, options[i].name)) return &options[i];
    return NULL;
}

/* An option by its name or one of Redis's aliases for it. */
static const struct option *opt_find(const char *name, size_t len)
{
    const struct option *o = opt_find_main(name, len);
    for (int i = 0; !o && i < NALIASES; i++)
        if (strcaseeqlen(name, len, aliases[i].alias))
            o = opt_find_main(aliases[i].name, strlen(aliases[i].name));
    return o;
}

/* ------------------------------------------------------------------------ */
/* Line splitting with redis.conf's quoting rules                            */
/* ------------------------------------------------------------------------ */

struct words { int n, cap; char **w; };

static void words_free(struct words *ws)
{
    for (int i = 0; i < ws->n; i++) free(ws->w[i]);
    free(ws->w);
    ws->n = ws->cap = 0;
    ws->w = NULL;
}

static int words_push(struct words *ws, rbuf *b)
{
    if (ws->n == ws->cap) {
        int cap = ws->cap ? ws->cap * 2 : 8;
        char **w = realloc(ws->w, (size_t)cap * sizeof(*w));
        if (!w) return -1;
        ws->w = w;
        ws->cap = cap;
    }
    char *s = malloc(b->len + 1);
    if (!s) return -1;
    memcpy(s, b->buf, b->len);
    s[b->len] = '\0';
    ws->w[ws->n++] = s;
    return 0;
}

static int hexval(int ch)
{
    if (ch >= '0' && ch <= '9') return ch - '0';
    ch = tolower(ch);
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    return -1;
}

/* One double-quoted word starting after the opening quote. Returns the
 * position after the closing quote, or NULL when unbalanced. */
static const char *scan_dquoted(const char *p, rbuf *b)
{
    for (;;) {
        if (!*p) return NULL;
        if (*p == '"') return p + 1;
        if (p[0] == '\\' && p[1] == 'x' && p[2] && p[3] &&
            hexval((unsigned char)p[2]) >= 0 && hexval((unsigned char)p[3]) >= 0) {
            char ch = (char)(hexval((unsigned char)p[2]) * 16 + hexval((unsigned char)p[3]));
            rbuf_append(b, &ch, 1);
            p += 4;
            continue;
        }
        if (p[0] == '\\' && p[1]) {
            char ch = p[1];
            switch (ch) {
            case 'n': ch = '\n'; break;
            case 'r': ch = '\r'; break;
            case 't': ch = '\t'; break;
            case 'b': ch = '\b'; break;
            case 'a': ch = '\a'; break;
            default: break;     /* \\ \" and anything else: the char itself */
            }
            rbuf_append(b, &ch, 1);
            p += 2;
            continue;
        }
        rbuf_append(b, p, 1);
        p++;
    }
}

/* One single-quoted word: only \' is an escape. */
static const char *scan_squoted(const char *p, rbuf *b)
{
    for (;;) {
        if (!*p) return NULL;
        if (*p == '\'') return p + 1;
        if (p[0] == '\\' && p[1] == '\'') { rbuf_append(b, "'", 1); p += 2; continue; }
        rbuf_append(b, p, 1);
        p++;
    }
}

/* Split a config line into words. -1 on unbalanced quotes (or a closing
 * quote glued to the next word, which Redis also rejects). */
static int split_line(const char *line, struct words *ws)
{
    const char *p = line;
    rbuf b;
    rbuf_init(&b);
    for (;;) {
        while (*p && isspace((unsigned char)*p)) p++;
        if (!*p) break;
        b.len = 0;
        if (*p == '"' || *p == '\'') {
            p = (*p == '"') ? scan_dquoted(p + 1, &b) : scan_squoted(p + 1, &b);
            if (!p || (*p && !isspace((unsigned char)*p))) { rbuf_free(&b); return -1; }
        } else {
            while (*p && !isspace((unsigned char)*p)) { rbuf_append(&b, p, 1); p++; }
        }
        if (words_push(ws, &b) < 0) { rbuf_free(&b); return -1; }
    }
    rbuf_free(&b);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* client-output-buffer-limit: "<class> <hard> <soft> <soft-seconds>" ...     */
/* ------------------------------------------------------------------------ */

/* Class names as CONFIG GET shows them (Redis 7 still says "slave"). */
static const char *const obuf_class_names[OBUF_CLASSES] = { "normal", "slave", "pubsub" };

static int obuf_class_by_name(const char *s)
{
    if (!strcasecmp(s, "normal")) return OBUF_NORMAL;
    if (!strcasecmp(s, "slave") || !strcasecmp(s, "replica")) return OBUF_REPLICA;
    if (!strcasecmp(s, "pubsub")) return OBUF_PUBSUB;
    return -1;   /* "master" too: Redis refuses it here */
}

/* Apply text to lim (every class it names; the others keep their values),
 * with Redis's checks and texts: all of it is checked before lim changes.
 * The soft seconds are read like Redis reads them (strtoll, after the
 * memory-value check). 0 ok, -1 with reason. */
static int obuf_parse(const char *text, struct obuf_limit *lim, char *reason, size_t rlen)
{
    struct words ws = { 0, 0, NULL };
    const char *why = NULL;
    long long v;

    if (split_line(text, &ws) < 0 || ws.n % 4)
        why = "Wrong number of arguments in buffer limit configuration.";
    for (int j = 0; j < ws.n && !why; j++) {
        if (j % 4 == 0 && obuf_class_by_name(ws.w[j]) < 0)
            why = "Invalid client class specified in buffer limit configuration.";
        else if (j % 4 != 0 && !memtoll(ws.w[j], &v))
            why = "Error in hard, soft or soft_seconds setting in buffer limit configuration.";
    }
    for (int j = 0; j + 3 < ws.n && !why; j += 4) {
        struct obuf_limit *l = &lim[obuf_class_by_name(ws.w[j])];
        memtoll(ws.w[j + 1], &l->hard);
        memtoll(ws.w[j + 2], &l->soft);
        l->soft_seconds = strtoll(ws.w[j + 3], NULL, 10);
    }
    words_free(&ws);
    if (why) snprintf(reason, rlen, "%s", why);
    return why ? -1 : 0;
}

/* The embedded defaults of client-output-buffer-limit. */
static void obuf_defaults(const struct option *o, struct obuf_limit *lim)
{
    char reason[128];
    memset(lim, 0, sizeof(struct obuf_limit) * OBUF_CLASSES);
    obuf_parse(o->def, lim, reason, sizeof(reason));
}

/* notify-keyspace-events, as Redis's keyspaceEventsStringToFlags and
 * keyspaceEventsFlagsToString (whose quirk is kept: 'n' is not shown when
 * every A class is on). */
int keyspace_events_parse(const char *s)
{
    static const char letters[] = "g$lshzxeKEtmdn";
    static const int bits[] = { NOTIFY_GENERIC, NOTIFY_STRING, NOTIFY_LIST, NOTIFY_SET,
        NOTIFY_HASH, NOTIFY_ZSET, NOTIFY_EXPIRED, NOTIFY_EVICTED, NOTIFY_KEYSPACE,
        NOTIFY_KEYEVENT, NOTIFY_STREAM, NOTIFY_KEY_MISS, NOTIFY_MODULE, NOTIFY_NEW };
    int flags = 0;
    for (; *s; s++) {
        const char *p = *s == 'A' ? NULL : strchr(letters, *s);
        if (*s == 'A') flags |= NOTIFY_ALL;
        else if (!p) return -1;
        else flags |= bits[p - letters];
    }
    return flags;
}

void keyspace_events_string(int flags, char *buf)
{
    static const char letters[] = "g$lshzxetdn";
    static const int bits[] = { NOTIFY_GENERIC, NOTIFY_STRING, NOTIFY_LIST, NOTIFY_SET,
        NOTIFY_HASH, NOTIFY_ZSET, NOTIFY_EXPIRED, NOTIFY_EVICTED, NOTIFY_STREAM,
        NOTIFY_MODULE, NOTIFY_NEW };
    char *p = buf;
    if ((flags & NOTIFY_ALL) == NOTIFY_ALL) *p++ = 'A';
    else
        for (int i = 0; letters[i]; i++)
            if (flags & bits[i]) *p++ = letters[i];
    if (flags & NOTIFY_KEYSPACE) *p++ = 'K';
    if (flags & NOTIFY_KEYEVENT) *p++ = 'E';
    if (flags & NOTIFY_KEY_MISS) *p++ = 'm';
    *p = 0;
}

/* ------------------------------------------------------------------------ */
/* Parsing, storing and rendering one value                                  */
/* ------------------------------------------------------------------------ */

/* Redis's special syntaxes: check text as Redis does (same reasons) and
 * append its normalised form to norm. 0 ok, -1 with reason. */
static int parse_special(enum opt_type t, const char *text, rbuf *norm, char *reason, size_t rlen)
{
    struct words ws = { 0, 0, NULL };
    const char *why = NULL;
    long long n;
    double d;
    int split_ok = split_line(text, &ws) == 0;
    switch (t) {
    case T_SAVE:
        /* pairs <seconds> (>= 1) <changes> (>= 0); none at all is "no saving" */
        if (!split_ok || ws.n % 2) why = "Invalid save parameters";
        for (int j = 0; j < ws.n && !why; j++) {
            if (!string2ll(ws.w[j], strlen(ws.w[j]), &n) || n < (j % 2 ? 0 : 1))
                why = "Invalid save parameters";
            else
                rbuf_appendf(norm, "%s%lld", j ? " " : "", n);
        }
        break;
    case T_REPLICAOF:
        if (!split_ok || (ws.n != 0 && ws.n != 2)) {
            why = "wrong number of arguments";
        } else if (ws.n == 2 && !(!strcasecmp(ws.w[0], "no") && !strcasecmp(ws.w[1], "one"))) {
            if (!string2ll(ws.w[1], strlen(ws.w[1]), &n) || n < 0 || n > 65535)
                why = "Invalid master port";
            else
                rbuf_appendf(norm, "%s %lld", ws.w[0], n);
        }
        break;
    case T_OOMVALS:
        if (!split_ok || ws.n != 3) why = "wrong number of arguments";
        for (int j = 0; j < ws.n && !why; j++) {
            if (!string2ll(ws.w[j], strlen(ws.w[j]), &n) || n < -2000 || n > 2000)
                why = "Invalid oom-score-adj-values, elements must be between -2000 and 2000.";
            else
                rbuf_appendf(norm, "%s%lld", j ? " " : "", n);
        }
        break;
    case T_PCTLIST:
        if (!split_ok) why = "Invalid latency-tracking-info-percentiles parameters";
        for (int j = 0; j < ws.n && !why; j++) {
            char num[64];
            if (!string2d(ws.w[j], strlen(ws.w[j]), &d)) {
                why = "Invalid latency-tracking-info-percentiles parameters";
            } else if (d < 0 || d > 100) {
                why = "latency-tracking-info-percentiles parameters should sit between [0.0,100.0]";
            } else {
                /* Redis shows "%f" without trailing zeros (99.9, 100) */
                snprintf(num, sizeof(num), "%f", d);
                char *e = num + strlen(num);
                while (e > num && e[-1] == '0') *--e = '\0';
                if (e > num && e[-1] == '.') *--e = '\0';
                rbuf_appendf(norm, "%s%s", j ? " " : "", num);
            }
        }
        break;
    default:
        break;
    }
    words_free(&ws);
    if (why) snprintf(reason, rlen, "%s", why);
    return why ? -1 : 0;
}

/* Parse text into *v. On failure fills reason with Redis's CONFIG SET reason
 * text (the part after "... - ") and returns -1. */
static int opt_parse(const struct option *o, const char *text, struct optval *v,
                     char *reason, size_t rlen)
{
    long long n = 0;
    v->s = NULL;
    v->n = 0;
    switch (o->type) {
    case T_BOOL:
        if (!strcasecmp(text, "yes")) n = 1;
        else if (!strcasecmp(text, "no")) n = 0;
        else { snprintf(reason, rlen, "argument must be 'yes' or 'no'"); return -1; }
        v->n = n;
        return 0;
    case T_ENUM:
        for (const struct enum_name *e = o->enums; e->name; e++)
            if (!strcasecmp(text, e->name)) { v->n = e->value; return 0; }
        {
            size_t p = (size_t)snprintf(reason, rlen, "argument(s) must be one of the following: ");
            for (const struct enum_name *e = o->enums; e->name && p < rlen; e++)
                p += (size_t)snprintf(reason + p, rlen - p, "%s%s", e != o->enums ? ", " : "", e->name);
        }
        return -1;
    case T_INT:
    case T_LL:
        if (!string2ll(text, strlen(text), &n)) {
            snprintf(reason, rlen, "argument couldn't be parsed into an integer");
            return -1;
        }
        break;
    case T_MEM:
        if (*text && !memtoll(text, &n)) {   /* Redis reads "" as 0 */
            snprintf(reason, rlen, "argument must be a memory value");
            return -1;
        }
        break;
    case T_PCTMEM:
        /* Redis: a memory value ("" reads as 0), else "N%" stored as -N. */
        if (*text && !memtoll(text, &n)) {
            size_t l = strlen(text);
            if (l < 2 || text[l - 1] != '%' || !string2ll(text, l - 1, &n) || n < 0) {
                snprintf(reason, rlen, "argument must be a memory or percent value");
                return -1;
            }
            n = -n;
            if (n < o->min) {
                snprintf(reason, rlen, "percentage argument must be less or equal to %lld", -o->min);
                return -1;
            }
        }
        break;
    case T_OBUF: {
        struct obuf_limit scratch[OBUF_CLASSES];
        if (obuf_parse(text, scratch, reason, rlen) < 0) return -1;
        v->s = strdup(text);   /* applied to the live limits by opt_store */
        if (!v->s) { snprintf(reason, rlen, "out of memory"); return -1; }
        return 0;
    }
    case T_STR:
        v->s = strdup(text);
        if (!v->s) { snprintf(reason, rlen, "out of memory"); return -1; }
        return 0;
    case T_SAVE: case T_REPLICAOF: case T_OOMVALS: case T_PCTLIST: {
        rbuf norm;
        rbuf_init(&norm);
        if (parse_special(o->type, text, &norm, reason, rlen) < 0) { rbuf_free(&norm); return -1; }
        v->s = strndup(norm.buf ? norm.buf : "", norm.len);
        rbuf_free(&norm);
        if (!v->s) { snprintf(reason, rlen, "out of memory"); return -1; }
        return 0;
    }
    case T_OCTAL: {
        char *end;
        errno = 0;
        n = strtoll(text, &end, 8);
        if (!*text || *end || errno) {
            snprintf(reason, rlen, "argument couldn't be parsed into an integer");
            return -1;
        }
        break;
    }
    case T_KSEV:
        if ((v->n = keyspace_events_parse(text)) < 0) {
            snprintf(reason, rlen, "Invalid event class character. Use 'Ag$lshzxeKEtmdn'.");
            return -1;
        }
        return 0;
    }
    if (n < o->min || n > o->max) {
        snprintf(reason, rlen, "argument must be between %lld and %lld inclusive", o->min, o->max);
        return -1;
    }
    /* replication-msg-max: 0 (no cap), or a message that holds a block's
     * 64-byte header and a useful payload */
    if (o->off == CFG(replication_msg_max) && n > 0 && n < REPL_MSG_MAX_MIN) {
        snprintf(reason, rlen, "argument must be 0 or between %d and %lld inclusive",
                 REPL_MSG_MAX_MIN, o->max);
        return -1;
    }
    v->n = o->clamp ? o->clamp(n) : n;
    return 0;
}

static void retire_string(char *s)
{
    if (!s) return;
    if (nretired == capretired) {
        size_t cap = capretired ? capretired * 2 : 8;
        char **r = realloc(retired, cap * sizeof(*r));
        if (!r) return; /* leaking a few bytes beats a use-after-free */
        retired = r;
        capretired = cap;
    }
    retired[nretired++] = s;
}

/* Store a parsed value; takes ownership of v->s. runtime: other threads run. */
static void opt_store(const struct option *o, struct optval *v, int runtime)
{
    void *f = field_ptr(o);
    switch (o->type) {
    case T_BOOL: case T_INT: case T_ENUM: case T_OCTAL: case T_KSEV:
        __atomic_store_n((int *)f, (int)v->n, __ATOMIC_RELEASE);
        break;
    case T_LL: case T_MEM: case T_PCTMEM:
        __atomic_store_n((long long *)f, v->n, __ATOMIC_RELEASE);
        break;
    case T_OBUF: {
        /* Only config_mu holders write the limits; readers load each
         * number on its own (a class may briefly mix old and new values). */
        struct obuf_limit *live = f, next[OBUF_CLASSES];
        char reason[128];
        memcpy(next, live, sizeof(next));
        obuf_parse(v->s, next, reason, sizeof(reason));
        for (int k = 0; k < OBUF_CLASSES; k++) {
            __atomic_store_n(&live[k].hard, next[k].hard, __ATOMIC_RELEASE);
            __atomic_store_n(&live[k].soft, next[k].soft, __ATOMIC_RELEASE);
            __atomic_store_n(&live[k].soft_seconds, next[k].soft_seconds, __ATOMIC_RELEASE);
        }
        free(v->s);
        v->s = NULL;
        break;
    }
    case T_STR: case T_SAVE: case T_REPLICAOF: case T_OOMVALS: case T_PCTLIST: {
        char *old = __atomic_exchange_n((char **)f, v->s, __ATOMIC_ACQ_REL);
        if (runtime) retire_string(old);
        else free(old);
        v->s = NULL;
        break;
    }
    }
}

/* Current value as Redis's CONFIG GET shows it. Returns a pointer to a static
 * name, to the string field itself, or into buf. */
static const char *opt_render(const struct option *o, char *buf, size_t blen)
{
    const void *f = shown_ptr(o);
    switch (o->type) {
    case T_BOOL:
        return *(const int *)f ? "yes" : "no";
    case T_ENUM:
        for (const struct enum_name *e = o->enums; e->name; e++)
            if (e->value == *(const int *)f) return e->name;
        return "";
    case T_INT:
        snprintf(buf, blen, "%d", *(const int *)f);
        return buf;
    case T_OCTAL:
        snprintf(buf, blen, "%o", (unsigned)*(const int *)f);
        return buf;
    case T_LL: case T_MEM:
        snprintf(buf, blen, "%lld", *(const long long *)f);
        return buf;
    case T_PCTMEM: {
        long long v = *(const long long *)f;
        snprintf(buf, blen, v < 0 ? "%lld%%" : "%lld", v < 0 ? -v : v);
        return buf;
    }
    case T_OBUF: {
        const struct obuf_limit *l = f;
        size_t p = 0;
        for (int k = 0; k < OBUF_CLASSES && p < blen; k++)
            p += (size_t)snprintf(buf + p, blen - p, "%s%s %lld %lld %lld", k ? " " : "",
                                  obuf_class_names[k], l[k].hard, l[k].soft, l[k].soft_seconds);
        return buf;
    }
    case T_STR: case T_SAVE: case T_REPLICAOF: case T_OOMVALS: case T_PCTLIST: {
        const char *s = *(char *const *)f;
        return s ? s : "";
    }
    case T_KSEV:
        keyspace_events_string(*(const int *)f, buf);
        return buf;
    }
    return "";
}

/* ------------------------------------------------------------------------ */
/* Startup: defaults, file, argv                                             */
/* ------------------------------------------------------------------------ */

void config_init_defaults(void)
{
    char reason[256];
    free(server.cfg.conf_file);
    server.cfg.conf_file = NULL;
    for (int i = 0; i < NOPTIONS; i++) {
        struct optval v;
        if (opt_parse(&options[i], options[i].def, &v, reason, sizeof(reason)) < 0) {
            /* A bad embedded default is a programming error: fail loudly. */
            fprintf(stderr, "rowan: bad default for '%s': %s\n", options[i].name, reason);
            abort();
        }
        opt_store(&options[i], &v, 0);
    }
    snapshot_configured();
}

/* The cluster lines are not table options: they may repeat and go to
 * cluster.c directly (CONFIG GET does not show them; CONFIG REWRITE keeps
 * them as they are, like any line it does not know):
 *   cluster-node <name> <host> <resp-port> <repl-port> [<native-port>]
 *   cluster-self <name>
 * Returns 1 if name is one of them (rc in *rc), 0 otherwise. */
static int apply_cluster_line(const char *name, int nwords, char **wordv, int *rc,
                              char *err, size_t errlen)
{
    if (!strcasecmp(name, "cluster-self")) {
        if (nwords != 1) goto arity;
        *rc = cluster_set_self(wordv[0], err, errlen);
        return 1;
    }
    if (strcasecmp(name, "cluster-node")) return 0;
    if (nwords != 4 && nwords != 5) goto arity;
    long long port, repl_port, native_port = 0;
    if (!string2ll(wordv[2], strlen(wordv[2]), &port) ||
        !string2ll(wordv[3], strlen(wordv[3]), &repl_port) ||
        (nwords == 5 && !string2ll(wordv[4], strlen(wordv[4]), &native_port)) ||
        port <= 0 || port > 65535 || repl_port <= 0 || repl_port > 65535 ||
        native_port < 0 || native_port > 65535) {
        snprintf(err, errlen, "cluster-node ports must be integers in 1-65535");
        *rc = -1;
        return 1;
    }
    *rc = cluster_add_node(wordv[0], wordv[1], (int)port, (int)repl_port, err, errlen);
    if (*rc == 0) cluster_add_node_native_port((int)native_port);
    return 1;
arity:
    snprintf(err, errlen, "Bad directive or wrong number of arguments");
    *rc = -1;
    return 1;
}

/* rename-command lines, in order (the command table applies them:
 * commands_rename). Like the cluster lines, CONFIG REWRITE keeps them as
 * they are. */
#define rename_from (server.config_st->rename_from)
#define rename_to (server.config_st->rename_to)
#define nrenames (server.config_st->nrenames)

static int add_rename(const char *from, const char *to, char *err, size_t errlen)
{
    char **f = realloc(rename_from, (size_t)(nrenames + 1) * sizeof(*f));
    if (f) rename_from = f;
    char **t = f ? realloc(rename_to, (size_t)(nrenames + 1) * sizeof(*t)) : NULL;
    if (t) rename_to = t;
    if (!f || !t) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    rename_from[nrenames] = strdup(from);
    rename_to[nrenames] = strdup(to);
    nrenames++;
    return 0;
}

int config_renames(const char *const **from, const char *const **to)
{
    *from = (const char *const *)rename_from;
    *to = (const char *const *)rename_to;
    return nrenames;
}

/* Startup "save" lines seen so far: as in Redis, the first one replaces the
 * default and the following ones add their pairs to it. */
#define save_lines_seen (server.config_st->save_lines_seen)

/* "user <name> <rule>..." lines may repeat: kept in order for the ACL
 * (redis-compat/acl.c), which checks them when it starts. CONFIG GET does
 * not show them; CONFIG REWRITE writes the users the ACL has then
 * (config_set_user_lines). */
static int apply_user_line(const char *name, int nwords, char **wordv)
{
    if (strcasecmp(name, "user") || nwords < 1) return 0;
    rbuf line;
    rbuf_init(&line);
    for (int i = 0; i < nwords; i++) {
        if (i) rbuf_append(&line, " ", 1);
        rbuf_append(&line, wordv[i], strlen(wordv[i]));
    }
    rbuf_append(&line, "", 1);
    struct rowan_config *cfg = &server.cfg;
    cfg->acl_user_lines = realloc(cfg->acl_user_lines, sizeof(char *) * (size_t)(cfg->acl_nuser_lines + 1));
    cfg->acl_user_lines[cfg->acl_nuser_lines++] = line.buf;
    return 1;
}

/* Apply "name word..." at startup. 0 ok, -1 with err = the reason. */
static int apply_words(const char *name, int nwords, char **wordv, char *err, size_t errlen)
{
    int crc;
    if (apply_cluster_line(name, nwords, wordv, &crc, err, errlen)) return crc;
    if (!strcasecmp(name, "rename-command")) {
        if (nwords != 2) {
            snprintf(err, errlen, "Bad directive or wrong number of arguments");
            return -1;
        }
        return add_rename(wordv[0], wordv[1], err, errlen);
    }
    if (!strcasecmp(name, "loadmodule")) {
        snprintf(err, errlen, "Rowan has no module support (loadmodule)");
        return -1;
    }
    if (apply_user_line(name, nwords, wordv)) return 0;
    const struct option *o = opt_find(name, strlen(name));
    if (!o || nwords < 1 || (nwords > 1 && !(o->flags & OPT_MULTIARG))) {
        snprintf(err, errlen, "Bad directive or wrong number of arguments");
        return -1;
    }
    rbuf joined;
    rbuf_init(&joined);
    if (o->type == T_SAVE && save_lines_seen++ > 0 && !(nwords == 1 && !*wordv[0])) {
        const char *cur = *(char *const *)field_ptr(o);
        if (cur && *cur) {
            rbuf_append(&joined, cur, strlen(cur));
            rbuf_append(&joined, " ", 1);
        }
    }
    for (int i = 0; i < nwords; i++) {
        if (i) rbuf_append(&joined, " ", 1);
        rbuf_append(&joined, wordv[i], strlen(wordv[i]));
    }
    rbuf_append(&joined, "", 1);
    struct optval v;
    int rc = opt_parse(o, joined.buf, &v, err, errlen);
    if (rc == 0) opt_store(o, &v, 0);
    rbuf_free(&joined);
    return rc;
}

/* Read a whole file into a NUL-terminated buffer. */
static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    rbuf b;
    rbuf_init(&b);
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) rbuf_append(&b, chunk, n);
    int bad = ferror(f);
    fclose(f);
    if (bad) { rbuf_free(&b); errno = EIO; return NULL; }
    rbuf_append(&b, "", 1);
    if (len) *len = b.len - 1;
    return b.buf;
}

/* Next line of a buffer: returns its start, sets *next; the newline (and a
 * CR before it) is replaced with NUL. */
static char *next_line(char *p, char **next)
{
    char *nl = strchr(p, '\n');
    if (nl) {
        *nl = '\0';
        *next = nl + 1;
    } else {
        *next = p + strlen(p);
    }
    size_t l = strlen(p);
    if (l && p[l - 1] == '\r') p[l - 1] = '\0';
    return p;
}

static int is_blank_or_comment(const char *line)
{
    while (*line && isspace((unsigned char)*line)) line++;
    return *line == '\0' || *line == '#';
}

static int load_file(const char *path, int depth, char *err, size_t errlen);

/* "include <path>": every file the glob matches, in order; a pattern that
 * matches nothing is ignored, a plain path that is missing is an error (as
 * in Redis). Included files may include others, up to a depth. */
static int load_include(const char *pattern, int depth, char *err, size_t errlen)
{
    if (depth >= 16) {
        snprintf(err, errlen, "include nesting too deep (a loop?) at '%s'", pattern);
        return -1;
    }
    if (!strpbrk(pattern, "*?[")) return load_file(pattern, depth + 1, err, errlen);
    glob_t g;
    int grc = glob(pattern, 0, NULL, &g), rc = 0;
    if (grc == GLOB_NOMATCH) return 0;
    if (grc != 0) {
        snprintf(err, errlen, "include '%s': glob failed", pattern);
        return -1;
    }
    for (size_t i = 0; i < g.gl_pathc && rc == 0; i++) rc = load_file(g.gl_pathv[i], depth + 1, err, errlen);
    globfree(&g);
    return rc;
}

static int load_file(const char *path, int depth, char *err, size_t errlen)
{
    char *text = read_file(path, NULL);
    if (!text) {
        snprintf(err, errlen, "can't open config file '%s': %s", path, strerror(errno));
        return -1;
    }
    char *p = text, *next;
    int lineno = 0, rc = 0;
    while (*p && rc == 0) {
        char *line = next_line(p, &next);
        p = next;
        lineno++;
        if (is_blank_or_comment(line)) continue;
        struct words ws = { 0, 0, NULL };
        char reason[512];
        if (split_line(line, &ws) < 0) {
            snprintf(reason, sizeof(reason), "Unbalanced quotes in configuration line");
            rc = -1;
        } else if (ws.n == 2 && !strcasecmp(ws.w[0], "include")) {
            rc = load_include(ws.w[1], depth, reason, sizeof(reason));
        } else if (ws.n > 0) {
            rc = apply_words(ws.w[0], ws.n - 1, ws.w + 1, reason, sizeof(reason));
        }
        if (rc < 0 && depth) snprintf(err, errlen, "%s, line %d: >>> '%s': %s", path, lineno, line, reason);
        else if (rc < 0) snprintf(err, errlen, "line %d: >>> '%s': %s", lineno, line, reason);
        words_free(&ws);
    }
    free(text);
    return rc;
}

int config_load_file(const char *path, char *err, size_t errlen)
{
    int rc = load_file(path, 0, err, errlen);
    if (rc == 0) {
        /* CONFIG REWRITE needs the file even if the server later chdir()s. */
        char *abs = realpath(path, NULL);
        if (!abs) abs = strdup(path);
        /* main may have stored this very path string: free it only now. */
        free(server.cfg.conf_file);
        server.cfg.conf_file = abs;
        snapshot_configured();
    }
    return rc;
}

static int is_option_arg(const char *a) { return a[0] == '-' && a[1] == '-' && a[2]; }

int config_parse_argv(int argc, char **argv, int start, char *err, size_t errlen)
{
    int i = start;
    while (i < argc) {
        if (!is_option_arg(argv[i])) {
            snprintf(err, errlen, "unexpected argument '%s' (options look like --port 6380)", argv[i]);
            return -1;
        }
        const char *name = argv[i] + 2;
        int j = i + 1;
        while (j < argc && !is_option_arg(argv[j])) j++;
        char reason[256];
        if (apply_words(name, j - i - 1, argv + i + 1, reason, sizeof(reason)) < 0) {
            snprintf(err, errlen, "option '--%s': %s", name, reason);
            return -1;
        }
        i = j;
    }
    snapshot_configured();
    return 0;
}

/* ------------------------------------------------------------------------ */
/* CONFIG SET                                                                 */
/* ------------------------------------------------------------------------ */

#define SET_FAILED "ERR CONFIG SET failed (possibly related to argument '%s') - %s"

/* Phase 1 of CONFIG SET: resolve names, refuse unknown, immutable and
 * duplicate ones. Fills found[]. */
static int set_check_names(int n, const char *const *names, int runtime,
                           const struct option **found, char *err, size_t errlen)
{
    for (int i = 0; i < n; i++) {
        found[i] = opt_find(names[i], strlen(names[i]));
        if (!found[i]) {
            snprintf(err, errlen, "ERR Unknown option or number of arguments for CONFIG SET - '%s'", names[i]);
            return -1;
        }
        if (runtime && (found[i]->flags & OPT_IMMUTABLE)) {
            snprintf(err, errlen, SET_FAILED, names[i], "can't set immutable config");
            return -1;
        }
        if (runtime && (found[i]->flags & OPT_PROTECTED) &&
            server.cfg.enable_protected_configs == PROTECTED_ACTION_NO) {
            snprintf(err, errlen, SET_FAILED, names[i], "can't set protected config");
            return -1;
        }
        /* Redis compares names: an option and its alias both set is no
         * duplicate (the later one wins). */
        for (int k = 0; k < i; k++) {
            if (!strcasecmp(names[k], names[i])) {
                snprintf(err, errlen, SET_FAILED, names[i], "duplicate parameter");
                return -1;
            }
        }
    }
    return 0;
}

int config_set_many(int n, const char *const *names, const char *const *values,
                    char *err, size_t errlen)
{
    if (n <= 0) return 0;
    const struct option **found = calloc((size_t)n, sizeof(*found));
    struct optval *vals = calloc((size_t)n, sizeof(*vals));
    int rc = -1, parsed = 0;
    if (!found || !vals) {
        snprintf(err, errlen, "ERR out of memory");
        goto done;
    }
    pthread_mutex_lock(&config_mu);
    if (set_check_names(n, names, 1, found, err, errlen) < 0) goto unlock;
    /* Phase 2: parse every value before storing any. */
    for (; parsed < n; parsed++) {
        char reason[256];
        if (opt_parse(found[parsed], values[parsed], &vals[parsed], reason, sizeof(reason)) < 0) {
            snprintf(err, errlen, SET_FAILED, names[parsed], reason);
            goto unlock;
        }
    }
    /* TLS options apply by rebuilding the TLS context (tls.c); if that
     * fails, as in Redis, nothing changes: the old values are put back. */
    const char *tls_name = NULL;
    char **old = NULL;
    for (int i = 0; i < n && !tls_name; i++)
        if (!strncmp(found[i]->name, "tls-", 4) && !(found[i]->flags & OPT_NOEFFECT))
            tls_name = names[i];
    if (tls_name && (old = calloc((size_t)n, sizeof(*old)))) {
        char buf[512];
        for (int i = 0; i < n; i++) old[i] = strdup(opt_render(found[i], buf, sizeof(buf)));
    }
    for (int i = 0; i < n; i++) opt_store(found[i], &vals[i], 1);
    rc = 0;
    char why[512];
    if (tls_name && tls_reconfigure(why, sizeof(why)) != 0) {
        serverLog(LL_WARNING, "Unable to update TLS configuration: %s", why);
        for (int i = 0; old && i < n; i++) {
            struct optval v;
            if (old[i] && opt_parse(found[i], old[i], &v, why, sizeof(why)) == 0)
                opt_store(found[i], &v, 1);
        }
        snprintf(err, errlen, SET_FAILED, tls_name,
                 "Unable to update TLS configuration. Check server logs.");
        rc = -1;
    }
    for (int i = 0; old && i < n; i++) free(old[i]);
    free(old);
unlock:
    pthread_mutex_unlock(&config_mu);
    for (int i = 0; i < parsed; i++) free(vals[i].s);  /* NULL once stored */
done:
    free(found);
    free(vals);
    return rc;
}

int config_set(const char *name, const char *value, int runtime, char *err, size_t errlen)
{
    if (runtime) return config_set_many(1, &name, &value, err, errlen);
    char *v = (char *)value;
    if (apply_words(name, 1, &v, err, errlen) < 0) return -1;
    snapshot_configured();
    return 0;
}

/* ------------------------------------------------------------------------ */
/* CONFIG GET                                                                 */
/* ------------------------------------------------------------------------ */

static int name_matches(const char *name, int npat, const char *const *pats, const size_t *plens)
{
    for (int k = 0; k < npat; k++)
        if (stringmatchlen(pats[k], plens[k], name, strlen(name), 1)) return 1;
    return 0;
}

/* Every option, then every alias (shown with its option's value). */
#define NSHOWN (NOPTIONS + NALIASES)

static const char *shown_name(int i)
{
    return i < NOPTIONS ? options[i].name : aliases[i - NOPTIONS].alias;
}

static const struct option *shown_option(int i)
{
    if (i < NOPTIONS) return &options[i];
    return opt_find_main(aliases[i - NOPTIONS].name, strlen(aliases[i - NOPTIONS].name));
}

int config_get_matching(int npat, const char *const *pats, const size_t *plens,
                        void (*fn)(void *arg, const char *name, const char *value), void *arg)
{
    pthread_mutex_lock(&config_mu);
    int count = 0;
    for (int i = 0; i < NSHOWN; i++) {
        if (!name_matches(shown_name(i), npat, pats, plens)) continue;
        count++;
        if (!fn) continue;
        char buf[256];
        fn(arg, shown_name(i), opt_render(shown_option(i), buf, sizeof(buf)));
    }
    pthread_mutex_unlock(&config_mu);
    return count;
}

static int opt_is_default(const struct option *o);

void config_warn_no_effect(void)
{
    static const char *const surprising[] = { "replicaof", "tls-replication", "tls-cluster", "unixsocket" };
    for (size_t i = 0; i < sizeof(surprising) / sizeof(surprising[0]); i++) {
        const struct option *o = opt_find(surprising[i], strlen(surprising[i]));
        if (!o || opt_is_default(o)) continue;
        /* between nodes of a cluster they do take effect (peer_tls.c) */
        if (!strncmp(o->name, "tls-", 4) && cluster_enabled()) continue;
        char buf[256];
        serverLog(LL_WARNING, "WARNING: '%s %s' is accepted for compatibility but has no effect "
                  "in Rowan (see README, Redis configuration files)", o->name,
                  opt_render(o, buf, sizeof(buf)));
    }
}

const char *config_enum_name(const char *option)
{
    const struct option *o = opt_find(option, strlen(option));
    char buf[8];
    return o && o->type == T_ENUM ? opt_render(o, buf, sizeof(buf)) : "";
}

/* ------------------------------------------------------------------------ */
/* CONFIG REWRITE                                                             */
/* ------------------------------------------------------------------------ */

#define REWRITE_MARK "# Generated by CONFIG REWRITE"

/* Does s need quotes to read back as one word? */
static int needs_quotes(const char *s)
{
    if (!*s) return 1;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (isspace(*p) || *p == '"' || *p == '\'' || *p == '\\' || *p < 32 || *p >= 127) return 1;
    return 0;
}

static void append_quoted(rbuf *b, const char *s)
{
    rbuf_append(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[8];
        switch (*p) {
        case '\\': rbuf_append(b, "\\\\", 2); break;
        case '"':  rbuf_append(b, "\\\"", 2); break;
        case '\n': rbuf_append(b, "\\n", 2); break;
        case '\r': rbuf_append(b, "\\r", 2); break;
        case '\t': rbuf_append(b, "\\t", 2); break;
        default:
            if (*p < 32 || *p == 127) {
                snprintf(esc, sizeof(esc), "\\x%02x", *p);
                rbuf_append(b, esc, 4);
            } else {
                rbuf_append(b, p, 1);
            }
        }
    }
    rbuf_append(b, "\"", 1);
}

/* A size as redis.conf writes it: with the largest unit that divides it. */
static void fmt_mem(char *buf, size_t len, long long v)
{
    if (v != 0 && v % GB == 0) snprintf(buf, len, "%lldgb", v / GB);
    else if (v != 0 && v % MB == 0) snprintf(buf, len, "%lldmb", v / MB);
    else if (v != 0 && v % 1024 == 0) snprintf(buf, len, "%lldkb", v / 1024);
    else snprintf(buf, len, "%lld", v);
}

/* Value in config-file syntax: sizes with units, strings quoted if needed. */
static void render_conf_value(const struct option *o, rbuf *b)
{
    char buf[256];
    long long v = 0;
    if (o->type == T_MEM || o->type == T_PCTMEM) v = *(const long long *)shown_ptr(o);
    if (o->type == T_MEM || (o->type == T_PCTMEM && v >= 0)) {
        fmt_mem(buf, sizeof(buf), v);
        rbuf_append(b, buf, strlen(buf));
        return;
    }
    const char *s = opt_render(o, buf, sizeof(buf));
    /* bind is a list of words: written unquoted, as redis.conf does. */
    if ((is_string_type(o->type) || o->type == T_KSEV) && !(o->flags & OPT_MULTIARG) &&
        needs_quotes(s))
        append_quoted(b, s);
    else if (is_string_type(o->type) && (o->flags & OPT_MULTIARG) && !*s) rbuf_append(b, "\"\"", 2);
    else rbuf_append(b, s, strlen(s));
}

/* Is the option at its embedded default? (Typed comparison, so "1gb" in the
 * file and 1073741824 set at run time count as the same value.) */
static int opt_is_default(const struct option *o)
{
    char reason[256];
    struct optval v;
    if (o->type == T_OBUF) {
        struct obuf_limit def[OBUF_CLASSES];
        obuf_defaults(o, def);
        return memcmp(def, shown_ptr(o), sizeof(def)) == 0;
    }
    if (opt_parse(o, o->def, &v, reason, sizeof(reason)) < 0) return 0;
    const void *f = shown_ptr(o);
    int same;
    switch (o->type) {
    case T_BOOL: case T_INT: case T_ENUM: case T_OCTAL: case T_KSEV: same = *(const int *)f == (int)v.n; break;
    case T_LL: case T_MEM: case T_PCTMEM: same = *(const long long *)f == v.n; break;
    default: {
        const char *s = *(char *const *)f;
        same = strcmp(s ? s : "", v.s) == 0;
        break;
    }
    }
    free(v.s);
    return same;
}

/* The most lines one option has in a config file. */
#define MAX_CONF_LINES OBUF_CLASSES

/* An option's lines in config-file syntax, and for each whether it differs
 * from the default (only those are added to a file that lacks them).
 * client-output-buffer-limit has one line per class, as in redis.conf
 * (the replica class is written "replica", as Redis writes it); every
 * other option has one line. Returns the number of lines. */
static int conf_lines(const struct option *o, rbuf *lines, int *force)
{
    if (o->type != T_OBUF) {
        rbuf_append(&lines[0], o->name, strlen(o->name));
        rbuf_append(&lines[0], " ", 1);
        render_conf_value(o, &lines[0]);
        rbuf_append(&lines[0], "\n", 1);
        force[0] = !opt_is_default(o);
        return 1;
    }
    const struct obuf_limit *cur = shown_ptr(o);
    struct obuf_limit def[OBUF_CLASSES];
    obuf_defaults(o, def);
    for (int k = 0; k < OBUF_CLASSES; k++) {
        char hard[32], soft[32];
        fmt_mem(hard, sizeof(hard), cur[k].hard);
        fmt_mem(soft, sizeof(soft), cur[k].soft);
        rbuf_appendf(&lines[k], "%s %s %s %s %lld\n", o->name,
                     k == OBUF_REPLICA ? "replica" : obuf_class_names[k], hard, soft,
                     cur[k].soft_seconds);
        force[k] = memcmp(&cur[k], &def[k], sizeof(def[k])) != 0;
    }
    return OBUF_CLASSES;
}

static void (*user_lines_fn)(rbuf *out);

void config_set_user_lines(void (*fn)(rbuf *out)) { user_lines_fn = fn; }

static int is_user_line(const struct words *ws) { return ws->n > 0 && !strcasecmp(ws->w[0], "user"); }

/* Build the new file text from the old one, as Redis does: an option's
 * lines replace its existing lines in the file in order (extra old lines
 * vanish), and lines left over are appended if they differ from the
 * default. */
static void rewrite_text(char *old, rbuf *out)
{
    rbuf lines[NOPTIONS][MAX_CONF_LINES];
    int nlines[NOPTIONS], used[NOPTIONS], force[NOPTIONS][MAX_CONF_LINES];
    int has_mark = 0, users_done = 0;
    rbuf users;   /* the user lines go where the first one was */
    rbuf_init(&users);
    if (user_lines_fn) user_lines_fn(&users);
    for (int i = 0; i < NOPTIONS; i++) {
        for (int k = 0; k < MAX_CONF_LINES; k++) rbuf_init(&lines[i][k]);
        nlines[i] = conf_lines(&options[i], lines[i], force[i]);
        used[i] = 0;
    }
    char *p = old, *next;
    while (p && *p) {
        char *line = next_line(p, &next);
        p = next;
        struct words ws = { 0, 0, NULL };
        const struct option *o = NULL;
        int user_line = 0;
        if (!is_blank_or_comment(line) && split_line(line, &ws) == 0 && ws.n > 0) {
            o = opt_find(ws.w[0], strlen(ws.w[0]));
            user_line = user_lines_fn && is_user_line(&ws);
        }
        words_free(&ws);
        if (user_line) {
            if (!users_done && users.len) rbuf_append(out, users.buf, users.len);
            users_done = 1;
            continue;
        }
        if (!o) {
            if (!strcmp(line, REWRITE_MARK)) has_mark = 1;
            rbuf_append(out, line, strlen(line));
            rbuf_append(out, "\n", 1);
            continue;
        }
        int idx = (int)(o - options);
        if (used[idx] < nlines[idx]) {
            rbuf *l = &lines[idx][used[idx]++];
            rbuf_append(out, l->buf, l->len);
        }
    }
    for (int i = 0; i < NOPTIONS; i++) {
        for (int k = used[i]; k < nlines[i]; k++) {
            if (!force[i][k]) continue;
            if (!has_mark) {
                rbuf_append(out, REWRITE_MARK "\n", strlen(REWRITE_MARK) + 1);
                has_mark = 1;
            }
            rbuf_append(out, lines[i][k].buf, lines[i][k].len);
        }
        for (int k = 0; k < MAX_CONF_LINES; k++) rbuf_free(&lines[i][k]);
    }
    if (!users_done && users.len) {
        if (!has_mark) rbuf_append(out, REWRITE_MARK "\n", strlen(REWRITE_MARK) + 1);
        rbuf_append(out, users.buf, users.len);
    }
    rbuf_free(&users);
}

/* Write data to path atomically: temp file in the same directory, fsync,
 * rename over, fsync the directory. */
static int write_atomically(const char *path, const rbuf *data, char *err, size_t errlen)
{
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof(tmp), "%s.rewrite-%d", path, (int)getpid());
    struct stat st;
    mode_t mode = (stat(path, &st) == 0) ? (st.st_mode & 07777) : 0644;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (fd < 0) goto fail;
    size_t off = 0;
    while (off < data->len) {
        ssize_t w = write(fd, data->buf + off, data->len - off);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) goto fail_fd;
        off += (size_t)w;
    }
    if (fsync(fd) < 0) goto fail_fd;
    close(fd);
    if (rename(tmp, path) < 0) { int e = errno; unlink(tmp); errno = e; goto fail; }
    char *slash = strrchr(tmp, '/');
    if (slash) {
        *slash = '\0';
        int dfd = open(slash == tmp ? "/" : tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) { fsync(dfd); close(dfd); }
    }
    return 0;
fail_fd: {
        int e = errno;
        close(fd);
        unlink(tmp);
        errno = e;
    }
fail:
    snprintf(err, errlen, "ERR Rewriting config file: %s", strerror(errno));
    return -1;
}

int config_rewrite(char *err, size_t errlen)
{
    pthread_mutex_lock(&config_mu);
    int rc = -1;
    const char *path = server.cfg.conf_file;
    if (!path) {
        snprintf(err, errlen, "ERR The server is running without a config file");
        goto out;
    }
    char *old = read_file(path, NULL);
    if (!old && errno != ENOENT) {
        snprintf(err, errlen, "ERR Rewriting config file: %s", strerror(errno));
        goto out;
    }
    rbuf text;
    rbuf_init(&text);
    rewrite_text(old, &text);
    free(old);
    rc = write_atomically(path, &text, err, errlen);
    rbuf_free(&text);
out:
    pthread_mutex_unlock(&config_mu);
    return rc;
}
