/* server.h -- the server object: its state and configuration.
 *
 * One `struct rowan_server` holds the configuration (filled by config.c from
 * defaults, rowan.conf and --options), the pool, the shards, the workers, the
 * statistics INFO reports and every module's state (issue 15: like LMDB's
 * environment, all state hangs off one handle, so one process can run two
 * servers: tests/unit/test-twoservers.c). Fields that change at run time from
 * several threads are atomics; the rest are set before the workers start.
 *
 * `server` names the object the current thread is bound to (rowan_self, a
 * thread-local pointer): every thread a server creates is bound to it by
 * rowan_thread_create, so code keeps writing server.cfg.port. A thread no
 * server created (the main thread before rowan_server_start, a library's
 * own thread) sees the process's first server object. */
#ifndef ROWAN_SERVER_H
#define ROWAN_SERVER_H
#include <stdatomic.h>
#include <stdint.h>
#include <pthread.h>
#include <time.h>
#include "pool.h"

#define ROWAN_VERSION "0.1.0"
/* Redis version we present to clients (INFO redis_version, HELLO). */
#define ROWAN_REDIS_COMPAT_VERSION "7.2.0"

struct shard;
struct worker;
struct digest_state;
struct repl_state;
struct control_state;
struct syncer_state;
struct cleaner;
struct member_state;
struct cm_state;
struct blog_state;
struct bus_state;
struct reconcile_state;
struct edge_state;
struct core_state;

enum { LL_DEBUG = 0, LL_VERBOSE, LL_NOTICE, LL_WARNING };

/* Redis's client classes for client-output-buffer-limit, in its order. */
enum { OBUF_NORMAL = 0, OBUF_REPLICA = 1, OBUF_PUBSUB = 2, OBUF_CLASSES = 3 };

struct rowan_config {
    char *conf_file;            /* absolute path of rowan.conf, or NULL */
    char *bind;                 /* space separated addresses */
    int port;
    char *dir;                  /* working directory: pool lives here */
    char *pool_file;            /* file name of the pool inside dir */
    long long pool_size;        /* bytes, for a new pool */
    int workers;                /* 0 = number of CPUs */
    int databases;
    int shards;                 /* shards in standalone mode */
    char *requirepass;          /* NULL or "" = no password */
    char *cluster_secret;       /* peers' shared secret; "" = requirepass's (peer_auth.c) */
    int protected_mode;
    int maxclients;
    long long proto_max_bulk_len;
    long long client_query_buffer_limit;
    /* client-output-buffer-limit, by class (OBUF_*); 0 = no limit */
    struct obuf_limit { long long hard, soft, soft_seconds; } obuf_limits[OBUF_CLASSES];
    long long client_output_buffer_max; /* unsent output any client may have; 0 = no ceiling */
    long long maxmemory_clients;        /* bytes; < 0: -percent of maxmemory; 0 = off */
    int clean_threshold;        /* percent live below which a segment is cleaned */
    int cold_read_threads;      /* coldread.c readers; 0: cold keys fault in the worker */
    int hz;
    int timeout;                /* idle client timeout, seconds, 0 = never */
    int tcp_keepalive;
    int tcp_backlog;
    int loglevel;
    char *logfile;              /* "" = stdout */
    char *pidfile;              /* "" = none (daemonized: DAEMON_DEFAULT_PIDFILE) */
    int daemonize;
    int supervised;             /* SUPERVISED_* (daemon.h) */
    long long slowlog_log_slower_than;
    long long busy_reply_threshold;  /* ms a script runs before others get -BUSY */
    long long slowlog_max_len;
    /* cluster and replication (cluster.h; cluster-node/cluster-self lines
     * go to cluster.c directly) */
    int replicas;               /* k; 0 = min(3, nodes) */
    long long replication_timeout; /* ms a write may wait for its replicas */
    int replication_mode;       /* REPL_MODE_* */
    int replication_transport;  /* REPL_TRANSPORT_* */
    long long replication_msg_max; /* TCP transport: larger entries go as blocks (vblock.h); 0 = no cap */
    /* managed cluster (cluster.h, member.c, cm.c) */
    char *zookeeper;            /* host:port[,host:port]; "" = static/standalone */
    char *cluster_name;         /* znodes under /rowan/<name> */
    long long cluster_lease_ms; /* how long a node serves without the CM's renewal */
    long long zookeeper_session_timeout; /* ms */
    int cluster_init_nodes;     /* the first configuration waits for this many nodes */
    int min_replicas_to_write;  /* backups a shard needs to take writes */
    int notify_keyspace_events; /* NOTIFY_* flags (config.h) */
    long long latency_monitor_threshold; /* ms; 0 = off */
    long long hll_sparse_max_bytes; /* a sparse HyperLogLog grows to this, then goes dense */
    /* Redis 7.0 directives Rowan implements (config.c; the ones it accepts
     * with no effect live in config.c alone) */
    long long maxmemory;        /* bytes, 0 = no limit (evict.c) */
    int maxmemory_policy;       /* MAXMEMORY_* */
    int maxmemory_samples;
    int lfu_log_factor;
    int lfu_decay_time;         /* minutes */
    long long hash_max_listpack_entries, hash_max_listpack_value;
    long long set_max_intset_entries, set_max_listpack_entries, set_max_listpack_value;
    long long zset_max_listpack_entries, zset_max_listpack_value;
    int list_max_listpack_size;
    int enable_protected_configs, enable_debug_command, enable_module_command; /* PROTECTED_ACTION_* */
    long long stream_node_max_bytes;   /* streams: node size limits (t_stream.c) */
    long long stream_node_max_entries;
    /* ACL (redis-compat/acl.c) */
    char *aclfile;              /* "" = none */
    long long acllog_max_len;
    int acl_pubsub_default;     /* 1: new and reset users get allchannels */
    char **acl_user_lines;      /* the `user` directives, words after "user" */
    int acl_nuser_lines;
    /* TLS for clients (tls.c): a listener on tls_port (0 = none) */
    int tls_port;
    char *tls_cert_file, *tls_key_file, *tls_key_file_pass;
    char *tls_ca_cert_file, *tls_ca_cert_dir, *tls_dh_params_file;
    int tls_auth_clients;       /* TLS_AUTH_CLIENTS_* */
    char *tls_protocols, *tls_ciphers, *tls_ciphersuites;
    int tls_prefer_server_ciphers;
    int tls_session_caching, tls_session_cache_size, tls_session_cache_timeout;
    /* TLS between nodes (peer_tls.c): the replication port, which carries
     * replication and the cluster bus, speaks TLS if either is set */
    int tls_replication, tls_cluster;
    /* the native datagram edge (rdma/native.c) */
    int native_port;            /* 0 = off */
    char *native_bind;          /* "" = the first `bind` address */
    int native_transport;       /* NATIVE_TRANSPORT_* (rdma/native_transport.h) */
    int native_max_clients;     /* native clients remembered at once */
    long long native_reply_cache; /* bytes of cached replies before new requests get BUSY */
    int native_client_timeout;  /* seconds idle before a native client is forgotten */
};

enum {
    MAXMEMORY_VOLATILE_LRU, MAXMEMORY_VOLATILE_LFU, MAXMEMORY_VOLATILE_RANDOM,
    MAXMEMORY_VOLATILE_TTL, MAXMEMORY_ALLKEYS_LRU, MAXMEMORY_ALLKEYS_LFU,
    MAXMEMORY_ALLKEYS_RANDOM, MAXMEMORY_NO_EVICTION
};
/* enable-debug-command and friends: no, yes, local (loopback clients only). */
enum { PROTECTED_ACTION_NO, PROTECTED_ACTION_YES, PROTECTED_ACTION_LOCAL };

enum { REPL_MODE_ROWAN = 0, REPL_MODE_RPC = 1 };
enum { TLS_AUTH_CLIENTS_NO = 0, TLS_AUTH_CLIENTS_YES = 1, TLS_AUTH_CLIENTS_OPTIONAL = 2 };
enum { REPL_TRANSPORT_TCP = 0, REPL_TRANSPORT_VERBS = 1 };
/* replication-msg-max: 0 (no cap) or this range of bytes; a receiver
 * refuses a hello that declares a cap outside it (control.c) */
#define REPL_MSG_MAX_MIN 1024
#define REPL_MSG_MAX_TOP (4LL << 20)

struct rowan_stats {
    _Atomic long long numcommands;
    _Atomic long long numconnections;
    _Atomic long long rejected_conn;
    _Atomic long long expiredkeys;
    _Atomic long long keyspace_hits;
    _Atomic long long keyspace_misses;
    _Atomic long long net_input_bytes;
    _Atomic long long net_output_bytes;
    _Atomic long long oom_refused;        /* writes refused: pool full */
    _Atomic long long held_replies;       /* replies that waited for durability */
    _Atomic long long syncs;              /* group commits that persisted data */
    _Atomic long long clean_segments;     /* segments reclaimed by the cleaner */
    _Atomic long long clean_bytes_copied;
    _Atomic long long recovered_entries;
    _Atomic long long recovery_dropped_bytes;
    _Atomic long long recovery_corrupt_entries; /* damaged regions skipped */
    _Atomic long long recovery_accepted_losses; /* LOG_LOSS entries (rowan-check-pool --fix) */
    _Atomic long long recovery_accepted_loss_bytes;
    _Atomic long long damaged_shards;     /* shards marked damaged by recovery (cluster) */
    _Atomic long long unexpected_errors;
    _Atomic long long replication_timeouts; /* held replies failed with NOREPLICAS */
    _Atomic long long replies_dropped_handover; /* held replies whose shard changed hands (shard.h) */
    _Atomic long long evicted_clients;      /* closed by maxmemory-clients */
    _Atomic long long qbuf_limit_disconnections; /* client-query-buffer-limit */
    _Atomic long long obuf_limit_disconnections; /* client-output-buffer-limit / -max */
    _Atomic long long client_buffer_moved; /* bytes moved to compact client buffers */
    _Atomic long long evicted_keys;         /* maxmemory evictions (evict.c) */
};

struct rowan_server {
    struct rowan_config cfg;
    struct rowan_stats stat;
    pool *pool;
    int nshards;
    struct shard *shards;
    int nworkers;
    struct worker **workers;
    time_t start_time;
    int64_t start_ms;
    uint64_t run_id_seed;
    char run_id[41];
    _Atomic int shutdown_asap;
    _Atomic int connected_clients;
    _Atomic long long clients_mem;      /* buffers of every client (maxmemory-clients) */
    _Atomic uint64_t next_client_id;
    char executable[4096];
    double recovery_seconds;
    /* Loading (recovery): set while the workers answer -LOADING; the
     * progress is in pool bytes (see recovery.c), for INFO persistence. */
    _Atomic int loading;
    _Atomic int active_expire_off;      /* DEBUG SET-ACTIVE-EXPIRE 0 */
    /* DEBUG CHUNK-CRASH n (tests): the process kills itself (SIGKILL) right
     * after writing the n-th chunk of a large value's run, before the rest
     * and its final entry (db.c write_chunked); 0 = off. */
    _Atomic int debug_chunk_crash;
    time_t loading_start_time;
    _Atomic uint64_t loading_total_bytes, loading_loaded_bytes;
    /* The state of the modules with threads of their own (each private to
     * its file, allocated by its *_init at startup, before anything uses
     * it): one server owns them, and their threads get them as their
     * argument. */
    struct digest_state *digest;     /* digest.c */
    struct repl_state *repl;         /* repl.c */
    struct control_state *control;   /* control.c */
    struct syncer_state *syncer;     /* syncer.c */
    struct cleaner *cleaner;         /* clean.c */
    struct member_state *member;     /* member.c */
    struct cm_state *cm;             /* cm.c */
    struct blog_state *blog;         /* blog.c (from blog_init) */
    struct bus_state *bus;           /* bus.c */
    struct reconcile_state *reconcile; /* reconcile.c */
    /* The file-level state of the core's modules without threads
     * (core_state.h), and the client edge's (opaque here: the edge defines
     * it, redis-compat/edge_state.h; src/ never includes the edge). */
    struct core_state *core;
    struct edge_state *edge_state;
    /* The file-level state of the modules without threads, each private
     * to its file and allocated by its *_state_new (core_state_new, boot.c)
     * before the configuration is read. */
    struct cluster_state *cluster_st;     /* cluster.c */
    struct zk_state *zk_st;               /* zk.c */
    struct coldread_state *coldread_st;   /* coldread.c */
    struct listen_state *listen_st;       /* worker.c: the listening sockets */
    struct shard_state *shard_st;         /* shard.c */
    struct bigval_state *bigval_st;       /* bigval.c */
    struct evict_state *evict_st;         /* evict.c */
    struct db_state *db_st;               /* db.c */
    struct pauth_state *pauth_st;         /* peer_auth.c */
    struct tls_state *tls_st;             /* tls.c */
    struct config_state *config_st;       /* config.c */
    struct peer_tls_state *peer_tls_st;   /* peer_tls.c */
    int owns_process;                /* rowan-server's: signals, pidfile, supervisor (boot.c) */
};

void cluster_state_new(void);
void zk_state_new(void);
void coldread_state_new(void);
void listen_state_new(void);
void shard_state_new(void);
void bigval_state_new(void);
void evict_state_new(void);
void db_state_new(void);
void pauth_state_new(void);
void tls_state_new(void);
void config_state_new(void);
void peer_tls_state_new(void);
/* ... and free them, once the server stopped (server_state_free). */
void cluster_state_free(void);
void zk_state_free(void);
void coldread_state_free(void);
void listen_state_free(void);
void shard_state_free(void);
void bigval_state_free(void);
void evict_state_free(void);
void db_state_free(void);
void pauth_state_free(void);
void tls_state_free(void);
void config_state_free(void);
void peer_tls_state_free(void);

/* Allocate them all for the calling thread's server (server.c). */
void server_state_new(void);
/* Free them all: the calling thread's server has stopped (boot.c). */
void server_state_free(void);

/* The server the calling thread works for (see the file comment). */
extern __thread struct rowan_server *rowan_self;
#define server (*rowan_self)
/* pthread_create for a thread of this server: the new thread is bound to
 * the caller's server before fn runs. */
int rowan_thread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg);

/* Logging like redis-server: "pid:M 22 Nov 2026 09:00:00.123 * message". */
void serverLog(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Wall clock in milliseconds / microseconds since the epoch. */
int64_t mstime(void);
int64_t ustime(void);
/* Monotonic microseconds (for latency measurement). */
int64_t monotonic_us(void);



/* Is the data set still being recovered? While it is, nothing may read it:
 * clients get -LOADING and the workers touch no shard. Acquire: once it
 * reads 0, everything recovery built is visible. */
static inline int server_loading(void) {
    return atomic_load_explicit(&server.loading, memory_order_acquire);
}

/* Ask every worker to stop (SHUTDOWN, SIGTERM): safe from any thread. */
void server_request_shutdown(void);
/* Wake every worker's loop (e.g. after a shard's durable watermark moved). */
void server_wake_workers(void);
#endif
