/* t_dump.c -- DUMP and RESTORE (the serialization is rdb.c's).
 *
 * DUMP answers the key's value in Redis 7.0's format, so a payload moves
 * between Rowan and Redis either way. RESTORE decodes into a private value
 * first (a string's bytes, or a collection built as a private object) and
 * only then writes it: a string with db_set, a collection as one snapshot
 * entry with db_set_copy, each replacing what the key held, so the key is
 * logged and replicated like any other write. IDLETIME and FREQ are
 * checked as Redis checks them and otherwise ignored: a restored key
 * starts with fresh access information.
 *
 * MIGRATE sends DUMP payloads to another server (Rowan or Redis) as
 * RESTORE commands over a plain blocking connection with the command's
 * timeout, then deletes the keys the target acknowledged (unless COPY).
 * Like Redis it blocks while it talks to the target; unlike Redis only the
 * worker running it waits (no connection cache: one connection a call).
 * Its key positions cover every argument from the key on (the table holds
 * ranges only), so the KEYS form's keys are locked too; migrate_keys
 * finds the real ones, for a dispatcher that supports movable keys (in a
 * cluster the extra arguments would otherwise count as cross-slot keys).
 *
 * Replies, error texts and the order of checks follow Redis 7.0. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "blocking.h"
#include "cluster.h"
#include "commands.h"
#include "db.h"
#include "object.h"
#include "rdb.h"
#include "server.h"
#include "util.h"

/* DUMP key */
void dumpCommand(client *c) {
    db_val v;
    if (!db_lookup(&c->x, c->db, c->argv[1], c->argvlen[1], &v)) {
        resp_add_null(&c->out);
        return;
    }
    rbuf out;
    rbuf_init(&out);
    rdb_dump_value(&v, &out);
    resp_add_bulk(&c->out, out.buf, out.len);
    rbuf_free(&out);
}

/* REPLACE, ABSTTL, IDLETIME s, FREQ f from argv[4]. 0, or -1 replied. */
static int restore_options(client *c, int *replace, int *absttl) {
    long long idle = -1, freq = -1;
    for (int j = 4; j < c->argc; j++) {
        int more = c->argc - j - 1;
        if (arg_is(c, j, "replace")) {
            *replace = 1;
        } else if (arg_is(c, j, "absttl")) {
            *absttl = 1;
        } else if (arg_is(c, j, "idletime") && more >= 1 && freq == -1) {
            if (arg_ll(c, j + 1, &idle)) return -1;
            if (idle < 0) {
                resp_add_error(&c->out, "ERR Invalid IDLETIME value, must be >= 0");
                return -1;
            }
            j++;
        } else if (arg_is(c, j, "freq") && more >= 1 && idle == -1) {
            if (arg_ll(c, j + 1, &freq)) return -1;
            if (freq < 0 || freq > 255) {
                resp_add_error(&c->out, "ERR Invalid FREQ value, must be >= 0 and <= 255");
                return -1;
            }
            j++;
        } else {
            resp_add_error(&c->out, ERR_SYNTAX);
            return -1;
        }
    }
    return 0;
}

/* RESTORE key ttl payload [REPLACE] [ABSTTL] [IDLETIME s] [FREQ f] */
void restoreCommand(client *c) {
    int replace = 0, absttl = 0, r;
    long long ttl;
    db_val v;
    const char *key = c->argv[1];
    size_t klen = c->argvlen[1];
    if (restore_options(c, &replace, &absttl)) return;
    if (!replace && db_peek(&c->x, c->db, key, klen, &v)) {
        resp_add_error(&c->out, "BUSYKEY Target key name already exists.");
        return;
    }
    if (arg_ll(c, 2, &ttl)) return;
    if (ttl < 0) {
        resp_add_error(&c->out, "ERR Invalid TTL value, must be >= 0");
        return;
    }
    if (rdb_verify_payload(c->argv[3], c->argvlen[3])) {
        resp_add_error(&c->out, "ERR DUMP payload version or checksum are wrong");
        return;
    }
    rbuf str;
    robj *o = NULL;
    rbuf_init(&str);
    int type = rdb_load_value(c->argv[3], c->argvlen[3], &str, &o);
    if (type < 0) {
        resp_add_error(&c->out, "ERR Bad data format");
        goto done;
    }
    if (ttl && !absttl) {
        int64_t now = mstime();
        ttl = ttl > LLONG_MAX - now ? LLONG_MAX : ttl + now;
    }
    if (ttl && ttl <= mstime()) {
        /* Already expired: the key is only removed (when replacing). */
        r = replace ? db_del(&c->x, c->db, key, klen) : DB_OK;
    } else if (type == OBJ_STRING) {
        r = db_set(&c->x, c->db, key, klen, str.buf ? str.buf : "", str.len, ttl);
    } else {
        r = db_set_copy(&c->x, c->db, key, klen, o, ttl);
        if (r == DB_OK && (type == OBJ_LIST || type == OBJ_ZSET))
            blocking_signal_key(c->db, key, klen);
        else if (r == DB_OK && type == OBJ_STREAM)
            blocking_signal_key_all(c->db, key, klen);
    }
    if (r == DB_OOM) resp_add_error(&c->out, db_error_text(&c->x));
    else resp_add_ok(&c->out);
done:
    if (o) obj_free(o);
    rbuf_free(&str);
}

/* ---------------- MIGRATE ---------------- */

/* A blocking connection to host:port within timeout_ms, with send and
 * receive timeouts of timeout_ms. -1 if the name does not resolve or the
 * connect times out, -2 if it is refused (Redis then fails on its first
 * write and says so). */
static int mig_connect(const char *host, const char *port, long long timeout_ms) {
    struct addrinfo hints = {0}, *res = NULL, *ai;
    int fd = -1, refused = 0;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, port, &hints, &res)) return -1;
    for (ai = res; ai && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
        if (fd < 0) continue;
        int ok = connect(fd, ai->ai_addr, ai->ai_addrlen) == 0;
        if (!ok && errno == EINPROGRESS) {
            struct pollfd pfd = {fd, POLLOUT, 0};
            int err = 0;
            socklen_t el = sizeof(err);
            ok = poll(&pfd, 1, (int)timeout_ms) == 1 &&
                 getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err == 0;
            if (err) refused = 1;
        } else if (!ok) {
            refused = 1;
        }
        if (!ok) {
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0) return refused ? -2 : -1;
    struct timeval tv = {(time_t)(timeout_ms / 1000), (suseconds_t)(timeout_ms % 1000) * 1000};
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    return fd;
}

static int mig_write(int fd, const char *p, size_t len) {
    while (len) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n <= 0) {
            if (n < 0 && errno == EINTR) continue;
            return -1;
        }
        p += n, len -= (size_t)n;
    }
    return 0;
}

/* The next reply line (without \r\n) into line; in holds what was read
 * past it. Replies to AUTH, SELECT and RESTORE are one line each. */
static int mig_read_line(int fd, rbuf *in, rbuf *line) {
    for (;;) {
        char *nl = in->len ? memchr(in->buf, '\n', in->len) : NULL;
        if (nl) {
            size_t n = (size_t)(nl - in->buf);
            line->len = 0;
            rbuf_append(line, in->buf, n && nl[-1] == '\r' ? n - 1 : n);
            rbuf_append(line, "", 1);
            line->len--;
            rbuf_consume(in, n + 1);
            return 0;
        }
        if (in->len > 65536) return -1;
        char buf[4096];
        ssize_t n = recv(fd, buf, sizeof(buf), 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        rbuf_append(in, buf, (size_t)n);
    }
}

static void mig_arg(rbuf *b, const char *p, size_t len) {
    rbuf_appendf(b, "$%zu\r\n", len);
    rbuf_append(b, p, len);
    rbuf_append(b, "\r\n", 2);
}

typedef struct mig_opts {
    int copy, replace, first_key, num_keys;
    int auth_i, auth2_i;    /* argv index of the password / username, 0 = none */
    long long timeout, dbid;
} mig_opts;

/* Options from argv[6]; 0, or -1 replied. */
static int migrate_options(client *c, mig_opts *o) {
    o->first_key = 3;
    o->num_keys = 1;
    for (int j = 6; j < c->argc; j++) {
        int more = c->argc - 1 - j;
        if (arg_is(c, j, "copy")) {
            o->copy = 1;
        } else if (arg_is(c, j, "replace")) {
            o->replace = 1;
        } else if (arg_is(c, j, "auth")) {
            if (!more) goto syntax;
            o->auth_i = ++j;
            o->auth2_i = 0;
        } else if (arg_is(c, j, "auth2")) {
            if (more < 2) goto syntax;
            o->auth2_i = ++j;
            o->auth_i = ++j;
        } else if (arg_is(c, j, "keys")) {
            if (c->argvlen[3] != 0) {
                resp_add_error(&c->out, "ERR When using MIGRATE KEYS option, the key argument"
                                        " must be set to the empty string");
                return -1;
            }
            o->first_key = j + 1;
            o->num_keys = c->argc - j - 1;
            break;
        } else {
            goto syntax;
        }
    }
    if (arg_ll(c, 5, &o->timeout) || arg_ll(c, 4, &o->dbid)) return -1;
    if (o->timeout <= 0) o->timeout = 1000;
    return 0;
syntax:
    resp_add_error(&c->out, ERR_SYNTAX);
    return -1;
}

/* MIGRATE host port key|"" db timeout [COPY] [REPLACE] [AUTH pw]
 *         [AUTH2 user pw] [KEYS key...] */
void migrateCommand(client *c) {
    mig_opts o = {0};
    if (migrate_options(c, &o)) return;
    /* The keys that exist, and the RESTORE commands that recreate them. */
    int *keys = malloc(sizeof(int) * (size_t)(o.num_keys ? o.num_keys : 1)), nk = 0;
    rbuf cmd, payload, in, line;
    rbuf_init(&cmd);
    rbuf_init(&payload);
    rbuf_init(&in);
    rbuf_init(&line);
    if (!keys) abort();
    int nauth = (o.auth_i != 0);
    if (o.auth_i) {
        rbuf_appendf(&cmd, "*%d\r\n", o.auth2_i ? 3 : 2);
        mig_arg(&cmd, "AUTH", 4);
        if (o.auth2_i) mig_arg(&cmd, c->argv[o.auth2_i], c->argvlen[o.auth2_i]);
        mig_arg(&cmd, c->argv[o.auth_i], c->argvlen[o.auth_i]);
    }
    char num[32];
    int nl = snprintf(num, sizeof(num), "%lld", o.dbid);
    rbuf_appendf(&cmd, "*2\r\n");
    mig_arg(&cmd, "SELECT", 6);
    mig_arg(&cmd, num, (size_t)nl);
    int64_t now = mstime();
    for (int i = 0; i < o.num_keys; i++) {
        int k = o.first_key + i;
        db_val v;
        if (!db_lookup(&c->x, c->db, c->argv[k], c->argvlen[k], &v)) continue;
        long long ttl = 0;
        if (v.expire_ms) {
            ttl = v.expire_ms - now;
            if (ttl < 0) continue;
            if (ttl < 1) ttl = 1;
        }
        keys[nk++] = k;
        payload.len = 0;
        rdb_dump_value(&v, &payload);
        rbuf_appendf(&cmd, "*%d\r\n", o.replace ? 5 : 4);
        /* In a cluster the target may be importing the slot (Redis's rule). */
        if (cluster_enabled()) mig_arg(&cmd, "RESTORE-ASKING", 14);
        else mig_arg(&cmd, "RESTORE", 7);
        mig_arg(&cmd, c->argv[k], c->argvlen[k]);
        nl = snprintf(num, sizeof(num), "%lld", ttl);
        mig_arg(&cmd, num, (size_t)nl);
        mig_arg(&cmd, payload.buf, payload.len);
        if (o.replace) mig_arg(&cmd, "REPLACE", 7);
    }
    if (nk == 0) {
        resp_add_simple(&c->out, "NOKEY");
        goto done;
    }
    char host[256], port[32];
    if (c->argvlen[1] >= sizeof(host) || c->argvlen[2] >= sizeof(port)) goto conn_err;
    memcpy(host, c->argv[1], c->argvlen[1]);
    host[c->argvlen[1]] = 0;
    memcpy(port, c->argv[2], c->argvlen[2]);
    port[c->argvlen[2]] = 0;
    int fd = mig_connect(host, port, o.timeout);
    if (fd == -1) goto conn_err;
    if (fd < 0 || mig_write(fd, cmd.buf, cmd.len)) {
        if (fd >= 0) close(fd);
        resp_add_error(&c->out, "IOERR error or timeout writing to target instance");
        goto done;
    }
    /* Replies: AUTH's, SELECT's, then one per RESTORE. The first error is
     * the answer; keys the target took are still deleted (unless COPY). */
    rbuf err;
    rbuf_init(&err);
    int socket_error = 0, pre_bad = 0;
    for (int i = 0; i < nauth + 1 + nk; i++) {
        if (mig_read_line(fd, &in, &line)) {
            socket_error = 1;
            break;
        }
        int bad = line.len && line.buf[0] == '-';
        if (bad && !err.len) rbuf_append(&err, line.buf + 1, line.len);  /* with its NUL */
        if (i < nauth + 1) {
            pre_bad |= bad;   /* a failed AUTH or SELECT makes every RESTORE moot */
            continue;
        }
        int k = keys[i - nauth - 1];
        if (!bad && !pre_bad && !o.copy) db_del(&c->x, c->db, c->argv[k], c->argvlen[k]);
    }
    close(fd);
    if (err.len)
        resp_add_errorf(&c->out, "ERR Target instance replied with error: %s", err.buf);
    else if (socket_error)
        resp_add_error(&c->out, "IOERR error or timeout reading to target instance");
    else
        resp_add_ok(&c->out);
    rbuf_free(&err);
    goto done;
conn_err:
    resp_add_error(&c->out, "IOERR error or timeout connecting to the client");
done:
    free(keys);
    rbuf_free(&cmd);
    rbuf_free(&payload);
    rbuf_free(&in);
    rbuf_free(&line);
}

/* MIGRATE's keys as Redis 7.0 finds them (movablekeys): argv[3], or with
 * KEYS (after skipping AUTH's and AUTH2's arguments) everything after it.
 * For a movable-keys hook in the dispatcher (the command table can only
 * say 3..-1 meanwhile, which also locks the other arguments). */
int migrate_keys(int argc, const char *const *argv, const size_t *argvlen, int *idx, int max) {
    int first = 3, n = 1;
    for (int j = 6; j < argc; j++) {
        if (strcaseeqlen(argv[j], argvlen[j], "auth")) {
            j++;
        } else if (strcaseeqlen(argv[j], argvlen[j], "auth2")) {
            j += 2;
        } else if (strcaseeqlen(argv[j], argvlen[j], "keys")) {
            if (argvlen[3] != 0) break;  /* MIGRATE refuses it anyway */
            first = j + 1;
            n = argc - j - 1;
            break;
        }
    }
    if (argc <= 3) n = 0;
    int k = 0;
    for (int i = 0; i < n && k < max; i++) idx[k++] = first + i;
    return k;
}
