/* networking.c -- sessions (session.h) and RESP over TCP, their first
 * transport: accept, read, parse, dispatch, reply.
 *
 * A session (client) is transport-free: dispatch, the reply gate, output
 * limits and the registry below work on it alone, and the transport only
 * feeds commands in (session_run) and takes output out (tr->write for a byte
 * stream, tr->reply per reply and tag). TCP is the tcp_conn part ("TCP
 * transport" below): the socket, the query buffer and the RESP parser.
 *
 * A client belongs to the worker that accepted it. Reading parses every
 * complete command in the query buffer and executes it at once (pipelining);
 * replies accumulate in c->out. Nothing is written from the read path: the
 * worker's before_sleep syncs the log and then calls client_flush, which
 * writes only up to the first reply whose dependencies are not yet durable.
 *
 * Dispatch (client_call) is where the command table's contract is enforced:
 * unknown command, arity and authentication errors with Redis's exact texts,
 * then the shard locks of every key the command names, taken in ascending
 * shard order (so two workers can never deadlock), then the command, then the
 * reply gate: the (shard, version) pairs the command depended on that are not
 * durable yet become a held reply (src/engine/gate.h, the core's durability gate:
 * byte ranges of c->out and their dependencies) marking where it ends.
 *
 * The global client registry (a list per worker, guarded by one mutex) exists
 * for CLIENT LIST / CLIENT KILL, which look at other workers' clients. Only
 * the owning worker frees a client, and it does so under that mutex.
 *
 * Large arguments (BIG_ARG bytes or more) are not grown in the query buffer:
 * once a bulk's header is parsed and its payload is still arriving, the
 * payload goes, from then on straight from the socket, into a buffer of
 * exactly its size (bigval_buf_new; resp.h, resp_bulk_waiting), which the
 * command gets as its argv and the store may keep as the value (db.h,
 * x->own; bigval.c, "DRAM"), as Redis 7 does for bulks of
 * PROTO_MBULK_BIG_ARG. The client holds its buffers until the command has
 * run (or, in MULTI, the queue does), and frees a half-received one as soon
 * as it goes.
 *
 * Memory per client is bounded four ways (see "limits" below):
 *   - an argument a write could not store (the pool has no room for it)
 *     is refused at its bulk header and never buffered (refuse_big_arg);
 *   - output limits: every command and pub/sub delivery runs with
 *     c->out.limit set (client_out_prepare), so resp.c drops what would pass
 *     the hard limit, then client_out_check applies Redis's hard/soft rules
 *     and closes the client, dropping its output;
 *   - back-pressure: a client with OUT_BACKPRESSURE bytes pending runs no
 *     more commands until it takes its replies (its socket is still read:
 *     see client_process_input);
 *   - maxmemory-clients: the sum of all clients' buffers, enforced by
 *     evicting the biggest clients (clients_evict). */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <fcntl.h>
#include <time.h>
#include "networking.h"
#include "prefetch.h"
#include "session.h"
#include "conn.h"
#include "cmdclock.h"
#include "blocking.h"   /* blocked clients (BLPOP...): hooks marked "blocking:" */
#include "multi.h"      /* MULTI/EXEC: hooks marked "multi:" */
#include "pubsub.h"     /* pub/sub: hooks marked "pubsub:" */
#include "acl.h"        /* users and permissions: hooks marked "acl:" */
#include "t_cluster.h"  /* Redis Cluster routing: hook marked "cluster:" */
#include "script.h"     /* Lua scripts: hook marked "script:" */
#include "t_client.h"   /* REPLY, PAUSE, tracking, MONITOR: hooks marked "client:" */
#include "tracking.h"
#include "monitor.h"
#include "t_latency.h"
#include "clean.h"
#include "evict.h"      /* maxmemory: hook marked "maxmemory" */
#include "commands.h"
#include "server.h"
#include "shard.h"
#include "worker.h"
#include "cluster.h"
#include "member.h"
#include "coldhold.h"   /* cold keys read on reader threads: hooks marked "coldhold:" */
#include "util.h"
#include "edge_state.h"
#include "bigval.h"

#define READ_CHUNK (16 * 1024)
/* A bulk this long or longer that is still arriving is received into a
 * buffer of its own (above): Redis's PROTO_MBULK_BIG_ARG. Below it, the
 * copy out of the query buffer costs less than the extra allocation. */
#define BIG_ARG (32 * 1024)
/* Compact the output buffer once this much of it has been sent. */
#define OUT_COMPACT (64 * 1024)
/* Back-pressure: a client with this much output unsent (held replies
 * included) runs no further commands until it has taken some of it. */
#define OUT_BACKPRESSURE (256 * 1024)
/* Output limits count unsent bytes beyond this many, as Redis's count its
 * reply list but not its 16 KB reply buffer: a small limit closes a client
 * whose output piles up, not one that got one ordinary reply. */
#define OUT_UNCOUNTED (16 * 1024)
/* maxmemory-clients is never taken below this (Redis's floor), so a
 * misconfiguration cannot cut everyone off. */
#define CLIENTS_MEM_MIN (128 * 1024)
#define MAX_CMD_KEYS_STACK 64

/* This file's state, one per server (server.h). */
struct net_state {
    pthread_mutex_t clients_lock;
    _Atomic long long clients_evicting;
};

void net_state_new(void) {
    struct net_state *st = calloc(1, sizeof(*st));
    if (!st) abort();
    pthread_mutex_init(&st->clients_lock, NULL);
    server.edge_state->net = st;
}

void net_state_free(void) {
    pthread_mutex_destroy(&server.edge_state->net->clients_lock);
    free(server.edge_state->net);
}

#define clients_lock (server.edge_state->net->clients_lock)
/* Buffer bytes of clients marked for eviction and not yet freed. */
#define clients_evicting (server.edge_state->net->clients_evicting)

/* RESP over TCP: the connection part of a TCP client (its session is c). */
typedef struct tcp_conn {
    client *c;
    conn conn;              /* the socket, plain or TLS (conn.h) */
    struct event *ev_read, *ev_write;
    rbuf qbuf;              /* bytes from qpos on are not parsed yet */
    size_t qpos;
    resp_parser parser;
    const struct rcommand *refused; /* the command refused at an argument header */
    /* A large bulk being received (payload and CRLF: big_len bytes, big_got
     * so far), and the large arguments of the command being parsed. */
    char *big;
    size_t big_len, big_got;
    const char **own;
    int nown, capown;
    size_t own_bytes;       /* their length (stats: read by other threads) */
} tcp_conn;

static const session_transport tcp_transport;

static void client_free(client *c);
static void client_mem_update(client *c);
static void read_cb(evutil_socket_t fd, short what, void *arg);
static void write_cb(evutil_socket_t fd, short what, void *arg);
static void client_call(client *c);
static void session_drain(client *c);
static void close_soon(client *c);

/* ---------------- registry ---------------- */

void client_foreach(void (*fn)(client *c, void *arg), void *arg) {
    pthread_mutex_lock(&clients_lock);
    for (int i = 0; i < server.nworkers; i++)
        for (client *c = server.workers[i]->clients; c; c = c->next) fn(c, arg);
    pthread_mutex_unlock(&clients_lock);
}

int client_count(void) { return atomic_load(&server.connected_clients); }

void client_kill_async(client *c) {
    atomic_store(&c->killed, 1);
    atomic_store(&c->w->kill_pending, 1);
    worker_wake(c->w);
}

static void registry_add(worker *w, client *c) {
    pthread_mutex_lock(&clients_lock);
    c->next = w->clients;
    if (w->clients) w->clients->prev = c;
    w->clients = c;
    w->nclients++;
    pthread_mutex_unlock(&clients_lock);
}

/* Also takes c's memory out of server.clients_mem, BEFORE the part of it
 * counted as being evicted: clients_evict() on another worker reads the
 * two without the lock, and must never see the eviction undone while the
 * memory still counts (it would evict other clients for memory that is
 * already going). Nothing updates c->mem after this. */
static void registry_remove(worker *w, client *c) {
    pthread_mutex_lock(&clients_lock);
    atomic_fetch_sub(&server.clients_mem, (long long)atomic_load(&c->mem));
    if (c->evicting) atomic_fetch_sub(&clients_evicting, (long long)c->evicting);
    if (c->prev) c->prev->next = c->next;
    else w->clients = c->next;
    if (c->next) c->next->prev = c->prev;
    w->nclients--;
    pthread_mutex_unlock(&clients_lock);
}

/* CLIENT SETNAME replaces the name under the registry lock, because CLIENT
 * LIST on another worker may be reading it. */
void client_set_name(client *c, const char *name, size_t len) {
    char *n = len ? strndup(name, len) : NULL;
    pthread_mutex_lock(&clients_lock);
    char *old = c->name;
    c->name = n;
    pthread_mutex_unlock(&clients_lock);
    free(old);
}

/* CLIENT LIST's flags field, in Redis's order: O monitor, P subscriber, x
 * in MULTI, b blocked, t/R/B tracking, e no-evict, N none. */
static void client_flags(const client *c, char *buf) {
    char *p = buf;
    if (monitor_is(c)) *p++ = 'O';
    if (pubsub_channel_count(c) + pubsub_pattern_count(c) > 0) *p++ = 'P';
    if (multi_active(c)) *p++ = 'x';
    if (blocking_is_blocked(c)) *p++ = 'b';
    p = tracking_list_flags(c, p);
    if (atomic_load(&c->no_evict)) *p++ = 'e';
    if (p == buf) *p++ = 'N';
    *p = 0;
}

void client_info_line(client *c, rbuf *out) {
    char line[1024], flags[16], user[128];
    time_t now = time(NULL);
    session_conn_stats st = {.fd = -1};   /* the transport's buffers */
    if (c->tr->stats) c->tr->stats(c->tctx, &st);
    client_flags(c, flags);
    acl_client_username(c, user, sizeof(user));
    int n = snprintf(line, sizeof(line),
        "id=%llu addr=%s laddr=%s fd=%d name=%s age=%lld idle=%lld flags=%s db=%d sub=%d psub=%d "
        "ssub=0 multi=%d qbuf=%zu qbuf-free=%zu argv-mem=%zu multi-mem=0 rbs=%zu rbp=0 obl=0 "
        "oll=0 omem=%zu tot-mem=%zu events=r cmd=%s user=%s redir=%lld resp=%d lib-name=%s "
        "lib-ver=%s",
        (unsigned long long)c->id, c->addr, c->laddr, st.fd, c->name ? c->name : "",
        (long long)(now - c->ctime), (long long)(now - c->last_interaction), flags, c->db,
        pubsub_channel_count(c), pubsub_pattern_count(c), multi_queued(c),
        st.qbuf, st.qbuf_free, st.argv_mem, st.qbuf + st.qbuf_free, c->out.b.len - c->sent,
        atomic_load(&c->mem),
        c->lastcmd ? c->lastcmd->name : "NULL", user, tracking_list_redir(c), c->out.proto,
        c->lib_name, c->lib_ver);
    rbuf_append(out, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
}

/* ---------------- accept ---------------- */

static void sockaddr_string(const struct sockaddr *sa, char *buf, size_t len) {
    char ip[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &a->sin_addr, ip, sizeof(ip));
        port = ntohs(a->sin_port);
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof(ip));
        port = ntohs(a->sin6_port);
    }
    snprintf(buf, len, "%s:%d", ip, port);
}

static int is_loopback(const struct sockaddr *sa) {
    if (sa->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        return IN6_IS_ADDR_LOOPBACK(a) ||
               (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
    }
    return 1; /* unix sockets */
}

/* Refuse a connection with one error line, as Redis does before any
 * command. A TLS connection is just closed: the line could only be sent
 * after a handshake, which a refused client does not get. */
static void refuse(int fd, int tls, const char *msg) {
    if (!tls) {
        ssize_t n = write(fd, msg, strlen(msg));
        (void)n;
    }
    close(fd);
}

static const char *protected_msg =
    "-DENIED Rowan is running in protected mode because protected mode is enabled and no "
    "password is set for the default user. In this mode connections are only accepted from the "
    "loopback interface. If you want to connect from external computers to Rowan you may adopt "
    "one of the following solutions: 1) Disable protected mode with 'CONFIG SET protected-mode "
    "no' from the loopback interface. 2) Set a password with 'requirepass'. 3) Start the server "
    "with '--protected-mode no'.\r\n";

static int no_password(void) { return acl_default_nopass(); }

/* resp.c's arg_check, for an argument longer than DB_MAX_ARG_LEN (one log
 * entry): a write logs such a value in pieces (src/store/bigval.h), in any
 * command, alone or in a batch (MULTI/EXEC, MSET, scripts), so a command
 * that stores its arguments (CMD_DENYOOM: SET, APPEND, HSET, MSET...)
 * takes it when the pool has room for it, and is refused at the header
 * with -OOM when it has not: its bytes are then dropped as they arrive
 * instead of being buffered only to be refused (a 400 MB SET into a small
 * pool costs no memory). Its first key that long is refused the same way:
 * no key that long can be logged. A client that still has to authenticate
 * is answered NOAUTH the same way (one that must give a password never
 * gets here: the parser's unauthenticated limit stops it at 16384 bytes).
 * Every other command (PUBLISH, ECHO, lookups) takes the argument, as
 * Redis does, up to proto-max-bulk-len. */
static const char *refuse_big_arg(void *ctx, const char *name, size_t nlen) {
    tcp_conn *t = ctx;
    client *c = t->c;
    const struct rcommand *cmd = command_lookup(name, nlen);
    if (!cmd) return NULL;
    t->refused = cmd;
    if (!c->authenticated && !(cmd->flags & CMD_NOAUTH) && !no_password()) return ERR_NOAUTH;
    if (cmd->flags & CMD_DENYOOM) {
        const resp_parser *p = &t->parser;
        if (cmd->firstkey > 0 && p->argc == cmd->firstkey) return db_key_too_big_error;
        size_t klen = cmd->firstkey > 0 && p->argc > cmd->firstkey ? p->argvlen[cmd->firstkey] : 0;
        const char *why = db_check_string(&c->x, klen, (uint64_t)p->bulk_len);
        if (why) return why;
    }
    t->refused = NULL;
    return NULL;
}

/* A session with no commands yet, not registered (session_register makes
 * it visible to CLIENT LIST once its transport is set up). */
static client *session_setup(worker *w, const session_transport *t, void *tctx, const char *addr) {
    client *c = calloc(1, sizeof(*c));
    c->id = atomic_fetch_add(&server.next_client_id, 1) + 1;
    c->tr = t;
    c->tctx = tctx;
    c->w = w;
    snprintf(c->addr, sizeof(c->addr), "%s", addr ? addr : "");
    acl_client_init(c);  /* acl: the default user; authenticated if it takes no password */
    c->ctime = c->last_interaction = time(NULL);
    resp_out_init(&c->out, 2);
    db_ctx_init(&c->x, w, w->id);
    return c;
}

static void session_register(client *c) {
    atomic_fetch_add(&server.connected_clients, 1);
    atomic_fetch_add(&server.stat.numconnections, 1);
    registry_add(c->w, c);
    client_mem_update(c);
}

static void input_cb(evutil_socket_t fd, short what, void *arg) {
    client *c = arg;
    (void)fd;
    if (atomic_load(&c->killed)) return;   /* freed at the end of this round */
    session_drain(c);
}

client *session_open(worker *w, const session_transport *t, void *tctx, const char *addr) {
    if (atomic_load(&server.connected_clients) >= server.cfg.maxclients) {
        atomic_fetch_add(&server.stat.rejected_conn, 1);
        return NULL;
    }
    client *c = session_setup(w, t, tctx, addr);
    /* a transport without an input buffer of its own: the session queues */
    if (!t->input) c->ev_input = event_new(w->base, -1, 0, input_cb, c);
    session_register(c);
    return c;
}

void client_accept(worker *w, int fd, int tls, struct sockaddr *sa, int salen) {
    if (atomic_load(&server.connected_clients) >= server.cfg.maxclients) {
        atomic_fetch_add(&server.stat.rejected_conn, 1);
        refuse(fd, tls, "-ERR max number of clients reached\r\n");
        return;
    }
    if (server.cfg.protected_mode && no_password() && !is_loopback(sa)) {
        atomic_fetch_add(&server.stat.rejected_conn, 1);
        refuse(fd, tls, protected_msg);
        return;
    }
    conn cn;
    if (conn_accept(&cn, fd, tls) != 0) {
        serverLog(LL_WARNING, "Error accepting a TLS client connection: out of memory");
        refuse(fd, tls, "");
        return;
    }
    evutil_make_socket_nonblocking(fd);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (server.cfg.tcp_keepalive > 0) setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));

    tcp_conn *t = calloc(1, sizeof(*t));
    t->conn = cn;
    rbuf_init(&t->qbuf);
    char addr[64];
    sockaddr_string(sa, addr, sizeof(addr));
    client *c = session_setup(w, &tcp_transport, t, addr);
    t->c = c;
    c->is_local = is_loopback(sa);
    struct sockaddr_storage ls;
    socklen_t lslen = sizeof(ls);
    if (getsockname(fd, (struct sockaddr *)&ls, &lslen) == 0)
        sockaddr_string((struct sockaddr *)&ls, c->laddr, sizeof(c->laddr));
    resp_limits lim = {
        .max_bulk_len = server.cfg.proto_max_bulk_len, .max_multibulk = 1024 * 1024,
        .max_inline = 64 * 1024, .max_arg = DB_MAX_ARG_LEN, .arg_check = refuse_big_arg,
        .arg_check_ctx = t, .unauthenticated = !c->authenticated,
    };
    resp_parser_init(&t->parser, &lim);
    t->ev_read = event_new(w->base, fd, EV_READ | EV_PERSIST, read_cb, t);
    t->ev_write = event_new(w->base, fd, EV_WRITE, write_cb, t);
    event_add(t->ev_read, NULL);
    session_register(c);
}

/* ---------------- dispatch ---------------- */

static void reply_unknown(client *c) {
    rbuf args;
    rbuf_init(&args);
    for (int i = 1; i < c->argc && args.len < 128; i++) {
        int room = 128 - (int)args.len;
        char tmp[160];
        int n = snprintf(tmp, sizeof(tmp), "'%.*s' ",
                         (int)(c->argvlen[i] < (size_t)room ? c->argvlen[i] : (size_t)room), c->argv[i]);
        rbuf_append(&args, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
    }
    rbuf_append(&args, "", 1);
    /* argv entries point into the query buffer: never NUL-terminated. */
    int nlen = c->argvlen[0] < 128 ? (int)c->argvlen[0] : 128;
    resp_add_errorf(&c->out, "ERR unknown command '%.*s', with args beginning with: %s",
                    nlen, c->argv[0], args.buf);
    rbuf_free(&args);
}

static int cmp_u16(const void *a, const void *b) {
    return (int)*(const uint16_t *)a - (int)*(const uint16_t *)b;
}

/* The shards of the keys cmd names in argv (see client.h). One function for
 * the dispatcher and for EXEC, which locks the keys of every queued command
 * (multi.c). */
int command_key_shards(const struct rcommand *cmd, int argc, const char *const *argv,
                       const size_t *argvlen, uint16_t *ids, int *first_pos,
                       shard **first_shard) {
    int posstack[MAX_CMD_KEYS_STACK];
    int *pos = argc <= MAX_CMD_KEYS_STACK ? posstack : malloc(sizeof(int) * (size_t)argc);
    int nk = command_keys_argv(cmd, argc, argv, argvlen, pos, argc);
    if (first_pos) *first_pos = nk ? pos[0] : -1;
    for (int i = 0; i < nk; i++) {
        shard *s = shard_of_key(argv[pos[i]], argvlen[pos[i]]);
        if (i == 0 && first_shard) *first_shard = s;
        ids[i] = s->id;
    }
    if (pos != posstack) free(pos);
    return nk;
}

int shard_ids_normalize(uint16_t *ids, int nk) {
    if (nk > 1) qsort(ids, (size_t)nk, sizeof(uint16_t), cmp_u16);
    int n = 0;
    for (int i = 0; i < nk; i++)
        if (n == 0 || ids[n - 1] != ids[i]) ids[n++] = ids[i];
    return n;
}

/* The sorted, distinct shards of the command's keys. Returns how many; *out
 * is either stack (when it fits) or malloc'd (caller frees if != stack). The
 * first key's shard is left in the db_ctx so db.c need not route it again. */
static int command_shards(client *c, uint16_t *stack, int stackn, uint16_t **out) {
    uint16_t *ids = c->argc <= stackn ? stack : malloc(sizeof(uint16_t) * (size_t)c->argc);
    int first = -1;
    shard *s0 = NULL;
    int nk = command_key_shards(c->cmd, c->argc, c->argv, c->argvlen, ids, &first, &s0);
    c->x.hint_key = NULL;
    if (first >= 0) {
        c->x.hint_key = c->argv[first];
        c->x.hint_klen = c->argvlen[first];
        c->x.hint_shard = s0;
    }
    *out = ids;
    return shard_ids_normalize(ids, nk);
}

/* CLIENT REPLY OFF / SKIP: cut the reply that started at reply_start off,
 * with the holds of it (nothing of it will be sent to wait for). */
static void drop_reply(client *c, size_t reply_start) {
    gate_truncate(&c->held, reply_start);
    c->out.b.len = reply_start;
}

static int check_command(client *c) {
    const struct rcommand *cmd = c->cmd;
    if (!cmd) {
        reply_unknown(c);
        return -1;
    }
    if ((cmd->arity > 0 && c->argc != cmd->arity) || (c->argc < -cmd->arity)) {
        resp_add_errorf(&c->out, "ERR wrong number of arguments for '%s' command", cmd->name);
        return -1;
    }
    /* acl: as Redis, a default user that takes any password lets in even
     * connections made while it had one */
    if (!c->authenticated && !(cmd->flags & CMD_NOAUTH) && !acl_default_nopass()) {
        resp_add_error(&c->out, ERR_NOAUTH);
        return -1;
    }
    return acl_check_command(c); /* acl: NOPERM */
}

/* May cmd run while the data set is still being recovered? Redis's rule is
 * the LOADING flag (INFO, CONFIG, CLIENT, AUTH, HELLO, SELECT, MULTI...).
 * Rowan also refuses those of them that read the data set, because the
 * recovery thread is still building it without locks: WATCH (a key's
 * version) and the container subcommands below. */
static int allowed_while_loading(client *c) {
    static const char *const reads_data[][2] = {
        {"cluster", "countkeysinslot"}, {"cluster", "getkeysinslot"},
        {"rowan", "digest"}, {"rowan", "shard"},
    };
    const struct rcommand *cmd = c->cmd;
    if (!(cmd->flags & CMD_LOADING) || cmd->firstkey > 0) return 0;
    for (size_t i = 0; i < sizeof(reads_data) / sizeof(reads_data[0]); i++)
        if (!strcmp(cmd->name, reads_data[i][0]) && c->argc > 1 && arg_is(c, 1, reads_data[i][1]))
            return 0;
    return 1;
}

/* cluster: does c hold replies computed under a lease that has run out
 * since? They must never leave (the node may have been replaced meanwhile;
 * member.h), so the connection closes instead: their outcome is unknown
 * to the client, as after a crash. */
static int lease_stale(const client *c) {
    return c->lease_valid_exec && (gate_held(&c->held) || c->sent < c->out.b.len) && cluster_managed() &&
           (c->lease_epoch != member_lease_epoch() || !member_lease_valid());
}

static int queued_denyoom(void *arg, const struct rcommand *cmd, int argc,
                          const char *const *argv, const size_t *argvlen) {
    (void)arg; (void)argc; (void)argv; (void)argvlen;
    return (cmd->flags & CMD_DENYOOM) != 0;
}

static __thread int pre_command_oom;   /* set by maxmemory_refuses */

int client_pre_command_oom(void) { return pre_command_oom; }

/* Redis's processCommand rule: with maxmemory set, evict before every
 * command; if memory stays over the limit, refuse commands that may grow
 * it (CMD_DENYOOM, an EXEC queuing one, and anything but EXEC/DISCARD
 * inside MULTI since queuing itself takes memory). */
static int maxmemory_refuses(client *c) {
    pre_command_oom = 0;
    if (!__atomic_load_n(&server.cfg.maxmemory, __ATOMIC_RELAXED)) return 0;
    if (evict_perform(&c->x) == 0) return 0;
    pre_command_oom = 1;
    const struct rcommand *cmd = c->cmd;
    if (cmd->flags & CMD_DENYOOM) return 1;
    if (cmd->proc == execCommand) return multi_foreach_queued(c, queued_denyoom, NULL) != 0;
    return multi_active(c) && cmd->proc != discardCommand && cmd->proc != multiCommand &&
           cmd->proc != watchCommand && cmd->proc != resetCommand;
}

static void call_command(client *c) {
    if (lease_stale(c)) {
        c->flags |= CLIENT_CLOSE_ASAP;
        return;
    }
    if (cluster_managed()) {
        c->lease_epoch = member_lease_epoch();
        c->lease_valid_exec = member_lease_valid();
    }
    c->cmd = command_lookup(c->argv[0], c->argvlen[0]);
    /* The row counted and shown (CLIENT LIST's cmd=, from now on as in
     * Redis): "config|get" for a container's subcommand. */
    struct rcommand *row = c->cmd ? command_row(c->cmd, c->argc, c->argv, c->argvlen) : NULL;
    c->lastcmd = row;
    size_t reply_start = c->out.b.len;
    if (check_command(c) != 0) {
        if (row) atomic_fetch_add(&command_stats(row)->rejected_calls, 1);
        multi_flag_error(c); /* multi: a refused command inside MULTI aborts EXEC */
        return;
    }
    struct rcommand *cmd = (struct rcommand *)c->cmd;
    /* cluster: keys on another node (-MOVED) or in several slots
     * (-CROSSSLOT) are refused before MULTI queues the command, as in Redis. */
    if (cluster_redirect(c)) {
        atomic_fetch_add(&command_stats(row)->rejected_calls, 1);
        return;
    }
    /* pubsub: a RESP2 subscriber may run only (P)SUBSCRIBE... PING QUIT RESET. */
    if (pubsub_intercept(c)) return;
    /* Recovery still running: in Redis's order, after the pub/sub check and
     * before MULTI queues the command (a refused one aborts the EXEC). */
    if (server_loading() && !allowed_while_loading(c)) {
        resp_add_error(&c->out, ERR_LOADING);
        atomic_fetch_add(&command_stats(row)->rejected_calls, 1);
        multi_flag_error(c);
        return;
    }
    /* script: wait for a script running on another worker, or -BUSY
     * (first: eviction below takes shard locks a running script holds). */
    if (script_gate(c)) {
        atomic_fetch_add(&command_stats(row)->rejected_calls, 1);
        multi_flag_error(c);
        return;
    }
    /* maxmemory (evict.c): evict first; still over the limit, refuse what
     * may grow memory, in Redis's place (before MULTI queues it). */
    if (maxmemory_refuses(c)) {
        resp_add_error(&c->out, "OOM command not allowed when used memory > 'maxmemory'.");
        atomic_fetch_add(&command_stats(row)->rejected_calls, 1);
        multi_flag_error(c);
        return;
    }
    /* multi: inside MULTI the command is queued (+QUEUED), not run. */
    if (multi_intercept(c)) return;
    /* multi, pubsub: RESET leaves MULTI, unwatches and unsubscribes. */
    if (cmd->proc == resetCommand) {
        multi_reset(c);
        client_hooks_reset(c);   /* client: tracking off, no MONITOR, replies on */
        pubsub_reset(c);
    }
    /* Backpressure before any lock is taken: a write arriving while the pool
     * is nearly full waits for the cleaner rather than failing with OOM
     * while reclaimable space exists. */
    if ((cmd->flags & CMD_DENYOOM) && db_space_low()) clean_wait_for_space(1000);
    uint16_t stack[MAX_CMD_KEYS_STACK], *ids;
    int nids = command_shards(c, stack, MAX_CMD_KEYS_STACK, &ids);
    for (int i = 0; i < nids; i++) shard_lock(&server.shards[ids[i]]);
    db_ctx_reset(&c->x);
    int64_t t0 = cmdclock_us();
    client_command_begin(c);   /* client: tracking's NOLOOP knows who changes keys */
    /* cluster: checked again under the locks (EXEC does it under its own) */
    if (!nids || cmd->proc == execCommand || !cluster_recheck(c)) cmd->proc(c);
    int64_t dt = cmdclock_us() - t0;
    for (int i = nids - 1; i >= 0; i--) shard_unlock(&server.shards[ids[i]]);
    client_command_end(c);     /* client: tracking remembers keys read, MONITOR */
    if (ids != stack) free(ids);
    /* blocking: wake clients waiting on keys this command pushed to. */
    blocking_flush_signals();
    c->x.hint_key = NULL;
    /* the durability gate: hold the reply while what it depends on is not durable */
    gate_after_command(&c->held, &c->x, reply_start, c->out.b.len);
    c->tot_cmds++;
    int failed = c->out.b.len > reply_start && c->out.b.buf[reply_start] == '-';
    worker_count_command(c->w, row, dt, failed);
    slowlog_maybe_add(c, dt);
    latency_command(c, dt);   /* client: LATENCY, INFO latencystats */
}

/* The parser's limits as of now: CONFIG SET proto-max-bulk-len applies to
 * open connections too, and AUTH lifts the unauthenticated ones, as in
 * Redis. */
static void parser_limits(tcp_conn *t) {
    t->parser.lim.max_bulk_len =
        __atomic_load_n(&server.cfg.proto_max_bulk_len, __ATOMIC_RELAXED);
    t->parser.lim.unauthenticated = !t->c->authenticated && !no_password();
}

/* Per-reply transports: the reply of the command tagged `tag` is out.b from
 * start to its end now. Output before start that no mark covers yet is no
 * command's reply (a pub/sub message...): it gets a mark of its own, tag 0.
 * Marks move with the bytes as held replies do (compact_output, held_expire). */
static void mark_push(client *c, uint64_t tag, size_t end) {
    if (c->nmarks + c->headmarks == c->capmarks) {
        if (c->headmarks) {
            memmove(c->marks, c->marks + c->headmarks, sizeof(reply_mark) * (size_t)c->nmarks);
            c->headmarks = 0;
        } else {
            c->capmarks = c->capmarks ? c->capmarks * 2 : 16;
            c->marks = realloc(c->marks, sizeof(reply_mark) * (size_t)c->capmarks);
        }
    }
    c->marks[c->headmarks + c->nmarks++] = (reply_mark){.end = end, .tag = tag};
}

static void session_mark_reply(client *c, uint64_t tag, size_t start) {
    if (!c->tr->reply) return;
    size_t marked = c->nmarks ? c->marks[c->headmarks + c->nmarks - 1].end : c->sent;
    if (start > marked) mark_push(c, 0, start);
    mark_push(c, tag, c->out.b.len);
}

/* One command, within c's output limits. A command that blocked (BLPOP...)
 * has no reply yet: it gets its mark when it is served (client_call again,
 * from blocking.c) or answered (blocking_client_answered). */
static void client_call(client *c) {
    client_out_prepare(c);
    size_t reply_start = c->out.b.len;
    call_command(c);
    if (client_reply_dropped(c)) drop_reply(c, reply_start);   /* client: CLIENT REPLY */
    if (c->tr->reply && (c->out.b.len != reply_start || !blocking_is_blocked(c)))
        session_mark_reply(c, c->tag, reply_start);
    client_out_check(c);
}

/* A command refused at an argument header (refuse_big_arg): its bytes are
 * gone, it gets its error like any rejected command (and, inside MULTI,
 * makes EXEC fail as Redis does for commands refused while queueing). */
static void reply_refused(tcp_conn *t) {
    client *c = t->c;
    client_out_prepare(c);
    resp_add_error(&c->out, t->parser.refusal);
    if (t->refused) atomic_fetch_add(&command_stats(t->refused)->rejected_calls, 1);
    t->refused = NULL;
    multi_flag_error(c);
    client_out_check(c);
}

static size_t unsent(const client *c) { return c->out.b.len - c->sent; }
static int out_backlogged(const client *c) { return unsent(c) >= OUT_BACKPRESSURE; }
static int closing(const client *c) {
    return (c->flags & (CLIENT_CLOSE_AFTER_REPLY | CLIENT_CLOSE_ASAP)) || atomic_load(&c->killed);
}

void session_wake_input(client *c) {
    if (c->tr->resume) c->tr->resume(c->tctx);
    else event_active(c->ev_input, EV_READ, 0);
}

/* c took enough of its output: run the commands back-pressure left, from
 * the input event (as if its socket had more), not from before_sleep. */
static void resume_commands(client *c) {
    if ((c->flags & CLIENT_INPUT_LEFT) && !out_backlogged(c)) session_wake_input(c);
}

/* After running input: commands left waiting, output to deliver. */
static void session_after_input(client *c, int left) {
    c->argc = 0;
    c->flags &= ~CLIENT_INPUT_LEFT;
    if (left && !closing(c)) c->flags |= CLIENT_INPUT_LEFT;
    else if (c->flags & CLIENT_INPUT_EOF) c->flags |= CLIENT_CLOSE_AFTER_REPLY;
    if (c->out.b.len > c->sent || (c->flags & (CLIENT_CLOSE_ASAP | CLIENT_CLOSE_AFTER_REPLY)))
        worker_add_pending(c->w, c);
    client_mem_update(c);
}

/* Can c run a command now? Not while closing, blocked (blocking: until it
 * is served) or holding OUT_BACKPRESSURE of output. */
static int session_ready(const client *c) {
    return !closing(c) && !blocking_is_blocked(c) && !out_backlogged(c);
}

/* ---------------- large arguments ---------------- */

/* The parser waits for the payload of a bulk of BIG_ARG bytes or more: it
 * goes into a buffer of its own, with what of it the query buffer holds
 * (the buffer then ends at the payload's start). */
static void big_arg_start(tcp_conn *t) {
    size_t off;
    long long n = t->big ? -1 : resp_bulk_waiting(&t->parser, &off);
    if (n < BIG_ARG) return;
    t->big_len = (size_t)n + 2;
    t->big = bigval_buf_new((size_t)n, 2);
    t->big_got = t->qbuf.len - t->qpos - off;
    memcpy(t->big, t->qbuf.buf + t->qpos + off, t->big_got);
    t->qbuf.len = t->qpos + off;
}

/* Its last byte is in: it is the parser's next argument, held by t. */
static void big_arg_done(tcp_conn *t) {
    if (t->nown == t->capown) {
        t->capown = t->capown ? t->capown * 2 : 4;
        t->own = rbuf_realloc_or_die(t->own, sizeof(char *) * (size_t)t->capown);
    }
    t->own[t->nown++] = t->big;
    t->own_bytes += t->big_len;
    resp_bulk_external(&t->parser, t->big);
    t->big = NULL;
    t->big_len = t->big_got = 0;
}

/* The command they were for has run (or is gone): drop t's references
 * (the store or a MULTI queue may hold others). */
static void own_release(tcp_conn *t) {
    for (int i = 0; i < t->nown; i++) bigval_buf_release(t->own[i]);
    t->nown = 0;
    t->own_bytes = 0;
}

/* Bytes of the request being received: the query buffer's and a large
 * bulk's so far (client-query-buffer-limit). */
static size_t query_len(const tcp_conn *t) { return t->qbuf.len - t->qpos + t->big_got; }

/* The first n unparsed bytes are parsed. They leave the buffer only once
 * they are at least as many as what is left, so the move costs no more
 * than the bytes parsed: back-pressure runs a pipeline a few commands per
 * round, and moving the whole rest after each round would cost the
 * buffer's size (up to client-query-buffer-limit) per round. The parser's
 * offsets are relative to qbuf.buf + qpos, so they survive the move. */
static void query_consume(tcp_conn *t, size_t n) {
    t->qpos += n;
    if (t->qpos == t->qbuf.len) {
        t->qbuf.len = t->qpos = 0;
    } else if (t->qpos >= t->qbuf.len - t->qpos) {
        atomic_fetch_add(&server.stat.client_buffer_moved, (long long)(t->qbuf.len - t->qpos));
        rbuf_consume(&t->qbuf, t->qpos);
        t->qpos = 0;
    }
}

/* Execute every complete command in the query buffer, until c's unsent
 * output reaches OUT_BACKPRESSURE: then the rest waits in the query buffer
 * (CLIENT_INPUT_LEFT) until c takes its replies. So a client that
 * pipelines without reading holds at most that much output (plus one
 * command's reply) however many replies its commands make. Its socket is
 * still read meanwhile (read_cb), up to client-query-buffer-limit: a client
 * that writes its whole pipeline before reading a reply (redis-py,
 * hiredis) is blocked in write() until we read, so a server that stopped
 * reading it would wait for it for ever, and it for the server. What is
 * left is at most one partial command, at offset 0, with room reserved for
 * the rest of a large bulk being received. */
static void client_process_input(client *c) {
    tcp_conn *t = c->tctx;
    size_t pos = 0, need = 0;   /* pos: from qbuf.buf + qpos */
    while ((pos < t->qbuf.len - t->qpos || (pos == 0 && resp_parser_complete(&t->parser))) &&
           session_ready(c)) {
        size_t used = 0;
        const char *at = t->qbuf.buf + t->qpos + pos;
        parser_limits(t);
        int r = resp_parse(&t->parser, at, t->qbuf.len - t->qpos - pos, &used, &need);
        pos += used;
        if (r == RESP_INCOMPLETE) break;
        need = 0;
        if (r == RESP_DROPPED) continue;   /* bytes of a refused command */
        if (r == RESP_REFUSED) {
            own_release(t);
            reply_refused(t);
            continue;
        }
        if (r == RESP_ERROR) {
            own_release(t);
            resp_add_errorf(&c->out, "ERR %s", t->parser.err);
            c->flags |= CLIENT_CLOSE_AFTER_REPLY;
            serverLog(LL_VERBOSE, "Protocol error (%s) from client: id=%llu addr=%s",
                      t->parser.err, (unsigned long long)c->id, c->addr);
            break;
        }
        if (t->parser.argc == 0) continue;
        c->argc = t->parser.argc;
        c->argv = t->parser.argv;
        c->argvlen = t->parser.argvlen;
        /* client: CLIENT PAUSE; coldhold: its keys' pages are being read.
         * Parsed again later. */
        if (client_pause_holds(c) ||
            client_cold_holds(c, &t->parser.lim, at + used, t->qbuf.len - t->qpos - pos)) {
            pos -= used;
            /* its large arguments are not in the query buffer to parse again */
            if (t->nown) resp_parser_rewind(&t->parser, used);
            break;
        }
        c->x.own = t->own;
        c->x.nown = t->nown;
        client_call(c);
        c->x.own = NULL;
        c->x.nown = 0;
        own_release(t);
    }
    query_consume(t, pos);
    big_arg_start(t);
    if (need && !t->big) rbuf_reserve(&t->qbuf, need);
    session_after_input(c, (out_backlogged(c) || (c->flags & CLIENT_PAUSED) || c->cold) &&
                           t->qbuf.len > t->qpos);
}

/* ---------------- per-reply sessions: the command queue ---------------- */

/* A per-reply transport has no input buffer: a command c cannot run yet
 * waits in c->inq, copied, bounded like a query buffer
 * (client-query-buffer-limit). */
static void inq_push(client *c, uint64_t tag, int argc, const char *const *argv,
                     const size_t *argvlen) {
    size_t bytes = 0;
    for (int i = 0; i < argc; i++) bytes += argvlen[i];
    size_t size = (size_t)argc * (sizeof(char *) + sizeof(size_t)) + bytes;
    char *mem = malloc(size ? size : 1);
    session_qcmd q = {.tag = tag, .argc = argc, .size = size};
    q.argv = (const char **)mem;
    q.argvlen = (size_t *)(mem + (size_t)argc * sizeof(char *));
    char *p = mem + (size_t)argc * (sizeof(char *) + sizeof(size_t));
    for (int i = 0; i < argc; i++) {
        memcpy(p, argv[i], argvlen[i]);
        q.argv[i] = p;
        q.argvlen[i] = argvlen[i];
        p += argvlen[i];
    }
    if (c->ninq + c->headinq == c->capinq) {
        if (c->headinq) {
            memmove(c->inq, c->inq + c->headinq, sizeof(session_qcmd) * (size_t)c->ninq);
            c->headinq = 0;
        } else {
            c->capinq = c->capinq ? c->capinq * 2 : 16;
            c->inq = realloc(c->inq, sizeof(session_qcmd) * (size_t)c->capinq);
        }
    }
    c->inq[c->headinq + c->ninq++] = q;
    c->inq_bytes += size;
}

static void inq_pop(client *c) {
    session_qcmd *q = &c->inq[c->headinq];
    c->inq_bytes -= q->size;
    free(q->argv);
    c->headinq++;
    if (--c->ninq == 0) c->headinq = 0;
}

/* Run one command of a per-reply session now; 0 if CLIENT PAUSE or a cold
 * read holds it. */
static int session_run_now(client *c, uint64_t tag, int argc, const char *const *argv,
                           const size_t *argvlen) {
    c->argc = argc;
    c->argv = (const char **)argv;
    c->argvlen = (size_t *)argvlen;
    /* client: CLIENT PAUSE, run when it ends; coldhold: its keys' pages
     * are being read, run when they are in */
    if (client_pause_holds(c) || session_cold_holds(c)) {
        c->argc = 0;
        return 0;
    }
    c->tag = tag;
    c->last_interaction = time(NULL);
    client_call(c);
    c->argc = 0;
    return 1;
}

/* The queued commands c can run now, in order. */
static void session_drain(client *c) {
    while (c->ninq && session_ready(c)) {
        session_qcmd *q = &c->inq[c->headinq];
        if (!session_run_now(c, q->tag, q->argc, q->argv, q->argvlen)) break;
        inq_pop(c);
    }
    session_after_input(c, c->ninq && (out_backlogged(c) || (c->flags & CLIENT_PAUSED) || c->cold));
}

void session_run(client *c, uint64_t tag, int argc, const char *const *argv,
                 const size_t *argvlen) {
    if (atomic_load(&c->killed) || argc <= 0) return;
    if (c->ninq || !session_ready(c) || !session_run_now(c, tag, argc, argv, argvlen)) {
        inq_push(c, tag, argc, argv, argvlen);
        if ((long long)c->inq_bytes > server.cfg.client_query_buffer_limit) {
            serverLog(LL_WARNING, "Closing client that reached max query buffer length: "
                      "id=%llu addr=%s qbuf=%zu", (unsigned long long)c->id, c->addr,
                      c->inq_bytes);
            atomic_fetch_add(&server.stat.qbuf_limit_disconnections, 1);
            close_soon(c);
        }
    }
    session_after_input(c, c->ninq && (out_backlogged(c) || (c->flags & CLIENT_PAUSED) || c->cold));
}

/* blocking: entry points for blocking.c (re-run a blocked client's command,
 * then go on with its pending input once it is unblocked). A blocked
 * command answered outside a call (timeout, CLIENT UNBLOCK) appended its
 * reply from `start`: for a per-reply transport, that is its tag's reply. */
void blocking_client_rerun(client *c) { client_call(c); }
void blocking_client_resume(client *c) {
    if (c->tr->input) c->tr->input(c->tctx);
    else session_drain(c);
}
void blocking_client_answered(client *c, size_t start) {
    session_mark_reply(c, c->tag, start);
    blocking_client_resume(c);
}

static void read_cb(evutil_socket_t fd, short what, void *arg) {
    tcp_conn *t = arg;
    client *c = t->c;
    (void)fd;
    if (atomic_load(&c->killed)) return;   /* freed at the end of this round */
    /* TLS: a write that waited for the socket to be readable goes on. */
    if (t->conn.want & CONN_WRITE_WANTS_READ) worker_add_pending(c->w, c);
    /* Commands back-pressure left run first (resume_commands woke us). */
    if ((c->flags & CLIENT_INPUT_LEFT) && !out_backlogged(c)) client_process_input(c);
    if (c->flags & CLIENT_INPUT_EOF) return;
    ssize_t n;
    if (t->big) {   /* a large bulk: exactly its bytes, nothing after it */
        n = conn_read(&t->conn, t->big + t->big_got, t->big_len - t->big_got);
    } else {
        rbuf_reserve(&t->qbuf, READ_CHUNK);
        n = conn_read(&t->conn, t->qbuf.buf + t->qbuf.len, t->qbuf.cap - t->qbuf.len);
    }
    if (n <= 0) {
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
            if (t->conn.want & CONN_READ_WANTS_WRITE) event_add(t->ev_write, NULL);
            return;
        }
        if (n == 0 && (c->flags & CLIENT_INPUT_LEFT)) {
            /* The client wrote its last command (and shut its side down)
             * before reading its replies: the commands it sent still run,
             * then it is closed after their replies. */
            c->flags |= CLIENT_INPUT_EOF;
            event_del(t->ev_read);
            return;
        }
        client_free(c);
        return;
    }
    if (t->big) t->big_got += (size_t)n;
    else t->qbuf.len += (size_t)n;
    c->last_interaction = time(NULL);
    atomic_fetch_add(&server.stat.net_input_bytes, n);
    if ((long long)query_len(t) > server.cfg.client_query_buffer_limit) {
        serverLog(LL_WARNING, "Closing client that reached max query buffer length: id=%llu addr=%s "
                  "qbuf=%zu", (unsigned long long)c->id, c->addr, query_len(t));
        atomic_fetch_add(&server.stat.qbuf_limit_disconnections, 1);
        client_free(c);
        return;
    }
    /* TLS: bytes already decrypted wait in OpenSSL, not on the socket, so
     * no read event would come for them: read again in the next round. */
    if (conn_pending(&t->conn) > 0) event_active(t->ev_read, EV_READ, 0);
    if (t->big && t->big_got == t->big_len) big_arg_done(t);
    /* a pipelined batch: start its keys' cache misses together (prefetch.c) */
    else if (!t->big && !t->parser.discarding)
        prefetch_pipeline(c->db, t->qbuf.buf + t->qpos, t->qbuf.len - t->qpos);
    client_process_input(c);
}

/* ---------------- output ---------------- */

static size_t sendable_end(const client *c) {
    return gate_sendable_end(&c->held, c->out.b.len);
}

static void compact_output(client *c) {
    if (c->sent == c->out.b.len && !gate_held(&c->held)) {
        c->out.b.len = c->sent = 0;
        return;
    }
    /* Only once the sent prefix is at least as long as what is left: the
     * move then costs no more than the bytes already sent. Compacting
     * after every write made a 30 MB reply leaving in 200 KB writes cost
     * gigabytes of memmove, and the worker's other clients waited for it
     * (a PING took seconds). */
    if (c->sent < OUT_COMPACT || c->sent < unsent(c)) return;
    atomic_fetch_add(&server.stat.client_buffer_moved, (long long)unsent(c));
    rbuf_consume(&c->out.b, c->sent);
    gate_shift(&c->held, c->sent);
    for (int i = 0; i < c->nmarks; i++) c->marks[c->headmarks + i].end -= c->sent;
    c->sent = 0;
}

/* Per-reply transports: hand over every reply that ends by `end`, each with
 * its tag; then, once no reply is pending, what follows (tag 0: messages). */
static void deliver_replies(client *c, size_t end) {
    while (c->nmarks && c->marks[c->headmarks].end <= end) {
        reply_mark m = c->marks[c->headmarks];
        c->headmarks++;
        if (--c->nmarks == 0) c->headmarks = 0;
        c->tr->reply(c->tctx, m.tag, c->out.b.buf + c->sent, m.end - c->sent);
        atomic_fetch_add(&server.stat.net_output_bytes, (long long)(m.end - c->sent));
        c->sent = m.end;
    }
    if (!c->nmarks && c->sent < end) {
        c->tr->reply(c->tctx, 0, c->out.b.buf + c->sent, end - c->sent);
        atomic_fetch_add(&server.stat.net_output_bytes, (long long)(end - c->sent));
        c->sent = end;
    }
}

/* Hand what may leave to the transport; -1 when it is dead. */
static int write_out(client *c) {
    size_t end = sendable_end(c);
    if (c->tr->reply) {
        deliver_replies(c, end);
        return 0;
    }
    while (c->sent < end) {
        ssize_t n = c->tr->write(c->tctx, c->out.b.buf + c->sent, end - c->sent);
        if (n < 0) return -1;
        if (n == 0) return 0;   /* full: it calls session_flush when it can take more */
        c->sent += (size_t)n;
        atomic_fetch_add(&server.stat.net_output_bytes, n);
    }
    return 0;
}

/* The head held reply waited longer than replication-timeout: its data is
 * not on every replica (a backup is down or catching up), or, with no
 * replicas at all, not flushed to this node's own device (a device slower
 * than the timeout), so the client gets an error naming that cause instead
 * of an acknowledgement. The effect may still become durable later, like a
 * write whose reply was lost; it is never reported as done while it is not.
 * Later held replies move by the size difference. */
static void held_expire(client *c) {
    const gate_entry *h = &c->held.q[c->held.head];
    char msg[200];
    int n = cluster_enabled()
        ? snprintf(msg, sizeof(msg), "-NOREPLICAS Not enough good replicas: not persisted on "
                   "every replica within replication-timeout (%lld ms)\r\n",
                   (long long)server.cfg.replication_timeout)
        : snprintf(msg, sizeof(msg), "-TIMEOUT Not persisted: the pool's device did not complete "
                   "a flush within replication-timeout (%lld ms)\r\n",
                   (long long)server.cfg.replication_timeout);
    size_t oldlen = h->end - h->start, newlen = (size_t)n;
    rbuf_reserve(&c->out.b, newlen);
    char *b = c->out.b.buf;
    memmove(b + h->start + newlen, b + h->end, c->out.b.len - h->end);
    memcpy(b + h->start, msg, newlen);
    c->out.b.len = c->out.b.len - oldlen + newlen;
    /* the marks of this reply (its end) and of every later one move too */
    for (int i = 0; i < c->nmarks; i++)
        if (c->marks[c->headmarks + i].end >= h->end)
            c->marks[c->headmarks + i].end = c->marks[c->headmarks + i].end - oldlen + newlen;
    atomic_fetch_add(&server.stat.replication_timeouts, 1);
    gate_replace_head(&c->held, newlen);   /* later holds move; this one goes */
}

int client_flush(client *c) {
    if (lease_stale(c)) {
        serverLog(LL_VERBOSE, "Closing client id=%llu addr=%s: its replies were computed under "
                  "a lease that expired", (unsigned long long)c->id, c->addr);
        client_free(c);
        return 0;
    }
    int64_t limit = server.cfg.replication_timeout * 1000;
    /* Killed (CLIENT KILL, output limits, eviction): its output is dropped,
     * as Redis drops a client's output when it closes it asynchronously. */
    if (atomic_load(&c->killed)) {
        client_free(c);
        return 0;
    }
    for (;;) {
        int st = gate_release(&c->held, limit);
        if (st == GATE_BROKEN) {
            serverLog(LL_VERBOSE, "Closing client id=%llu addr=%s: a reply waited for versions of "
                      "a shard this node no longer serves; whether they are durable is unknown",
                      (unsigned long long)c->id, c->addr);
            atomic_fetch_add(&server.stat.replies_dropped_handover, 1);
            client_free(c);
            return 0;
        }
        if (st != GATE_EXPIRED) break;
        held_expire(c);
    }
    if (write_out(c) != 0) {
        client_free(c);
        return 0;
    }
    int unsent = c->sent < c->out.b.len;
    compact_output(c);
    client_out_prepare(c);   /* the limit follows sent (blocking timeouts reply outside a call) */
    if (!unsent && (c->flags & (CLIENT_CLOSE_AFTER_REPLY | CLIENT_CLOSE_ASAP))) {
        client_free(c);
        return 0;
    }
    resume_commands(c);
    client_mem_update(c);
    if (gate_held(&c->held)) return 1;
    /* Unsent but not held means the socket is full: the write event finishes. */
    worker_remove_pending(c->w, c);
    return 0;
}

int session_flush(client *c) { return client_flush(c); }

/* ---------------- limits ---------------- */

/* Redis's classes for client-output-buffer-limit. Rowan has no Redis
 * replicas (its replication has its own links), so a client is normal or,
 * while it has subscriptions, pubsub. */
static int out_class(const client *c) {
    return pubsub_channel_count(c) + pubsub_pattern_count(c) > 0 ? OBUF_PUBSUB : OBUF_NORMAL;
}

static size_t client_out_hard_limit(int cls) {
    long long hard = __atomic_load_n(&server.cfg.obuf_limits[cls].hard, __ATOMIC_RELAXED);
    long long cap = __atomic_load_n(&server.cfg.client_output_buffer_max, __ATOMIC_RELAXED);
    if (hard <= 0 || (cap > 0 && cap < hard)) hard = cap;
    return hard > 0 ? (size_t)hard : 0;
}

/* c's output as its limits see it: unsent bytes (held replies included:
 * they cannot be dropped) beyond OUT_UNCOUNTED. */
static size_t out_used(const client *c) {
    return unsent(c) > OUT_UNCOUNTED ? unsent(c) - OUT_UNCOUNTED : 0;
}

/* resp.c stops c->out where out_used would pass the hard limit: no
 * append takes c's output past it. */
void client_out_prepare(client *c) {
    size_t hard = client_out_hard_limit(out_class(c));
    c->out.limit = hard ? c->sent + OUT_UNCOUNTED + hard : 0;
}

/* Close c at the end of this round, without sending what it has pending. */
static void close_soon(client *c) {
    c->out.overflow = 1;   /* nothing more is added to its output */
    atomic_store(&c->killed, 1);
    atomic_store(&c->w->kill_pending, 1);
}

/* Redis's checkClientOutputBufferLimits and its close: the hard limit
 * (or client-output-buffer-max) at once, the soft limit once it has been
 * exceeded for more than its seconds, an overflowed reply at once. */
int client_out_check(client *c) {
    if (atomic_load(&c->killed)) return 1;
    int cls = out_class(c);
    size_t used = out_used(c), hard = client_out_hard_limit(cls);
    long long soft = __atomic_load_n(&server.cfg.obuf_limits[cls].soft, __ATOMIC_RELAXED);
    long long secs = __atomic_load_n(&server.cfg.obuf_limits[cls].soft_seconds, __ATOMIC_RELAXED);
    int hit = c->out.overflow || (hard && used >= hard);
    if (soft > 0 && used >= (size_t)soft) {
        time_t now = time(NULL);
        if (c->obuf_soft_since == 0) c->obuf_soft_since = now;
        else if (now - c->obuf_soft_since > secs) hit = 1;
    } else {
        c->obuf_soft_since = 0;
    }
    if (!hit) return 0;
    rbuf info;
    rbuf_init(&info);
    client_info_line(c, &info);
    rbuf_append(&info, "", 1);
    serverLog(LL_WARNING, "Client %s scheduled to be closed ASAP for overcoming of output buffer "
              "limits.", info.buf);
    rbuf_free(&info);
    atomic_fetch_add(&server.stat.obuf_limit_disconnections, 1);
    close_soon(c);
    return 1;
}

/* What maxmemory-clients counts for c: its buffers. (Queued MULTI commands
 * and undelivered pub/sub messages are not counted.) */
static size_t client_mem(const client *c) {
    session_conn_stats st = {.fd = -1};
    if (c->tr->stats) c->tr->stats(c->tctx, &st);
    return sizeof(*c) + st.mem + c->out.b.cap + gate_mem(&c->held) +
           (size_t)c->capmarks * sizeof(reply_mark) + (size_t)c->capinq * sizeof(session_qcmd) +
           c->inq_bytes;
}

static void client_mem_update(client *c) {
    size_t now = client_mem(c), old = atomic_load(&c->mem);
    if (now == old) return;
    atomic_store(&c->mem, now);
    atomic_fetch_add(&server.clients_mem, (long long)now - (long long)old);
}

/* maxmemory-clients in bytes, 0 = off. A percentage is of maxmemory, which
 * Rowan does not have (0): off, as in Redis when maxmemory is 0. */
static long long clients_mem_limit(void) {
    long long v = __atomic_load_n(&server.cfg.maxmemory_clients, __ATOMIC_RELAXED);
    if (v <= 0) return 0;
    return v < CLIENTS_MEM_MIN ? CLIENTS_MEM_MIN : v;
}

static long long clients_mem_over(long long limit) {
    return atomic_load(&server.clients_mem) - atomic_load(&clients_evicting) - limit;
}

/* The biggest client that may be evicted (registry lock held). */
static client *biggest_evictable(void) {
    client *big = NULL;
    for (int i = 0; i < server.nworkers; i++)
        for (client *c = server.workers[i]->clients; c; c = c->next)
            if (!atomic_load(&c->killed) && !atomic_load(&c->no_evict) &&
                (!big || atomic_load(&c->mem) > atomic_load(&big->mem)))
                big = c;
    return big;
}

/* Redis evicts from its biggest memory bucket down; this evicts the
 * biggest client first, then the next, until the rest fit. A marked
 * client's memory counts as gone until its worker frees it, so several
 * workers running this at once never evict more than needed. */
void clients_evict(void) {
    long long limit = clients_mem_limit();
    if (limit == 0 || clients_mem_over(limit) <= 0) return;
    pthread_mutex_lock(&clients_lock);
    while (clients_mem_over(limit) > 0) {
        client *c = biggest_evictable();
        if (!c) break;
        rbuf info;
        rbuf_init(&info);
        client_info_line(c, &info);
        rbuf_append(&info, "", 1);
        serverLog(LL_NOTICE, "Evicting client: %s", info.buf);
        rbuf_free(&info);
        c->evicting = atomic_load(&c->mem);
        atomic_fetch_add(&clients_evicting, (long long)c->evicting);
        atomic_fetch_add(&server.stat.evicted_clients, 1);
        client_kill_async(c);
    }
    pthread_mutex_unlock(&clients_lock);
}

void client_out_write_some(client *c) {
    /* a per-reply transport takes messages whole, at the flush */
    if (c->tr->reply || unsent(c) < OUT_COMPACT || atomic_load(&c->killed)) return;
    if (write_out(c) != 0) close_soon(c);   /* a dead socket: freed at the round's end */
    compact_output(c);
    client_out_prepare(c);   /* sent moved */
}

/* ---------------- teardown ---------------- */

static void client_free(client *c) {
    worker *w = c->w;
    client_hooks_freed(c);    /* client: leave tracking and MONITOR first */
    blocking_client_freed(c); /* blocking: leave the wait queues */
    client_cold_freed(c);     /* coldhold: its reads end without it */
    multi_reset(c);           /* multi: drop the queue and watches */
    pubsub_reset(c);          /* pubsub: leave the registry before c is freed */
    worker_remove_pending(w, c);
    registry_remove(w, c);
    c->tr->close(c->tctx);    /* the transport lets go of c */
    if (c->ev_input) event_free(c->ev_input);
    gate_free(&c->held);
    free(c->marks);
    while (c->ninq) inq_pop(c);
    free(c->inq);
    rbuf_free(&c->out.b);
    db_ctx_free(&c->x);
    free(c->name);
    client_hooks_release(c);
    acl_client_free(c);       /* acl: drop the user */
    atomic_fetch_sub(&server.connected_clients, 1);
    free(c);
}

void clients_reap_killed(worker *w) {
    client *c = w->clients, *next;
    for (; c; c = next) {
        next = c->next;
        /* Replies were flushed just before (worker_before_sleep), so a
         * client that killed itself has already had its +OK. */
        if (atomic_load(&c->killed)) client_free(c);
    }
}

/* Give back the buffers an idle client no longer needs (Redis's
 * clientsCronResizeQueryBuffer / OutputBuffer): capacity never shrinks
 * otherwise, and one big request or reply would count against
 * maxmemory-clients for the rest of the connection. An empty query buffer
 * holds no parser state (the parser keeps offsets into it only while bytes
 * are pending, and a refused command's offsets restart at 0); the parser's
 * own arrays go between commands (resp_parser_trim). */
static void shrink_buffers(client *c) {
    if (c->tr->trim) c->tr->trim(c->tctx);
    if (c->out.b.len == 0 && c->out.b.cap > OUT_COMPACT) rbuf_free(&c->out.b);
    client_mem_update(c);
}

void clients_cron(worker *w) {
    time_t now = time(NULL);
    client *c = w->clients, *next;
    for (; c; c = next) {
        next = c->next;
        if (server.cfg.timeout > 0 && now - c->last_interaction > server.cfg.timeout &&
            !gate_held(&c->held) && !blocking_is_blocked(c) && /* blocking: as Redis, no idle timeout */
            c->sent == c->out.b.len) {
            client_free(c);
            continue;
        }
        if (client_pause_over(c)) client_pause_resume(c);   /* client: CLIENT PAUSE ended */
        shrink_buffers(c);
    }
}

void clients_free_all(worker *w) {
    while (w->clients) client_free(w->clients);
}

void session_close(client *c) { client_free(c); }

/* ---------------- the TCP transport ---------------- */

static ssize_t tcp_write(void *tctx, const char *buf, size_t len) {
    tcp_conn *t = tctx;
    for (;;) {
        ssize_t n = conn_write(&t->conn, buf, len);
        if (n >= 0) return n;
        if (errno == EINTR) continue;
        if (errno == EAGAIN) {
            /* TLS may need the socket readable instead: read_cb resumes. */
            if (!(t->conn.want & CONN_WRITE_WANTS_READ)) event_add(t->ev_write, NULL);
            return 0;
        }
        return -1;
    }
}

static void write_cb(evutil_socket_t fd, short what, void *arg) {
    tcp_conn *t = arg;
    client *c = t->c;
    /* TLS: a read that waited for the socket to be writable goes on. */
    if (t->conn.want & CONN_READ_WANTS_WRITE) event_active(t->ev_read, EV_READ, 0);
    if (client_flush(c) == 1) worker_add_pending(c->w, c);
}

static void tcp_close(void *tctx) {
    tcp_conn *t = tctx;
    event_free(t->ev_read);
    event_free(t->ev_write);
    conn_close(&t->conn);
    rbuf_free(&t->qbuf);
    resp_parser_free(&t->parser);
    bigval_buf_release(t->big);   /* a client gone half-way through a large bulk */
    own_release(t);
    free(t->own);
    free(t);
}

static void tcp_input(void *tctx) { client_process_input(((tcp_conn *)tctx)->c); }

/* Run the commands left in the query buffer from the read event, as if the
 * socket had more (any thread: event_active is). */
static void tcp_resume(void *tctx) { event_active(((tcp_conn *)tctx)->ev_read, EV_READ, 0); }

static void tcp_stats(void *tctx, session_conn_stats *st) {
    tcp_conn *t = tctx;
    st->fd = t->conn.fd;
    st->qbuf = query_len(t);
    st->qbuf_free = t->qbuf.cap - t->qbuf.len + t->big_len - t->big_got;
    st->argv_mem = resp_parser_mem(&t->parser);   /* arrays the parser keeps */
    st->argv_mem += t->own_bytes;
    st->mem = sizeof(*t) + t->qbuf.cap + t->big_len + st->argv_mem;
}

static void tcp_trim(void *tctx) {
    tcp_conn *t = tctx;
    if (t->qbuf.len == 0 && t->qbuf.cap > 2 * READ_CHUNK) rbuf_free(&t->qbuf);
    resp_parser_trim(&t->parser);
}

static const session_transport tcp_transport = {
    .kind = "tcp", .write = tcp_write, .close = tcp_close, .input = tcp_input,
    .resume = tcp_resume, .stats = tcp_stats, .trim = tcp_trim,
};

int client_fd(client *c) {
    return c->tr == &tcp_transport ? ((tcp_conn *)c->tctx)->conn.fd : -1;
}
