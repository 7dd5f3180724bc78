/* t_debug_session.c -- DEBUG SESSION: a per-reply test transport, so tests
 * can drive a session (session.h) as the native edge does, through a real
 * server, over an ordinary connection.
 *
 *   DEBUG SESSION OPEN               a new session on this connection's
 *                                    worker; replies its id
 *   DEBUG SESSION RUN id tag arg...  run `arg...` on it with `tag` (from the
 *                                    worker's loop, as a request arriving
 *                                    on a socket would: not nested inside
 *                                    this DEBUG command); replies OK
 *   DEBUG SESSION READ id            what the transport got since the last
 *                                    READ: an array of [tag, reply bytes]
 *   DEBUG SESSION CLOSE id           session_close
 *
 * The session lives on the worker of the connection that opened it, and
 * only a connection on that same worker can name it (a session is touched
 * by its own worker's thread only): tests use one connection for all four.
 * A session the server closes itself (QUIT, CLIENT KILL...) is gone: READ
 * then answers "no such session". Sessions left open end with the server. */
#include <stdlib.h>
#include <string.h>
#include <event2/event.h>

#include "commands.h"
#include "server.h"
#include "session.h"
#include "t_debug.h"
#include "util.h"
#include "worker.h"

typedef struct test_run {
    uint64_t tag;
    int argc;
    char **argv;
    size_t *argvlen;
} test_run;

typedef struct test_conn {
    client *s;
    struct event *ev;         /* runs `runs` from the loop */
    test_run *runs;
    int nruns;
    rbuf got;                 /* delivered replies: tag (8 bytes), len (8), bytes */
    size_t ngot;
} test_conn;

static void test_reply(void *tctx, uint64_t tag, const char *resp, size_t len) {
    test_conn *t = tctx;
    uint64_t hdr[2] = {tag, len};
    rbuf_append(&t->got, (const char *)hdr, sizeof(hdr));
    rbuf_append(&t->got, resp, len);
    t->ngot++;
}

static void runs_free(test_conn *t) {
    for (int i = 0; i < t->nruns; i++) {
        for (int j = 0; j < t->runs[i].argc; j++) free(t->runs[i].argv[j]);
        free(t->runs[i].argv);
        free(t->runs[i].argvlen);
    }
    free(t->runs);
    t->runs = NULL;
    t->nruns = 0;
}

static void test_close(void *tctx) {
    test_conn *t = tctx;
    runs_free(t);
    event_free(t->ev);
    rbuf_free(&t->got);
    free(t);
}

static const session_transport test_transport = {
    .kind = "test", .reply = test_reply, .close = test_close,
};

/* The worker's loop: run what DEBUG SESSION RUN queued, in order. The
 * session may close while running (QUIT, an output limit): it is then
 * freed at the end of the round, and its runs are dropped with it. */
static void run_cb(evutil_socket_t fd, short what, void *arg) {
    test_conn *t = arg;
    (void)fd;
    test_run *runs = t->runs;
    int n = t->nruns;
    t->runs = NULL;
    t->nruns = 0;
    for (int i = 0; i < n; i++) {
        session_run(t->s, runs[i].tag, runs[i].argc, (const char *const *)runs[i].argv,
                    runs[i].argvlen);
        for (int j = 0; j < runs[i].argc; j++) free(runs[i].argv[j]);
        free(runs[i].argv);
        free(runs[i].argvlen);
    }
    free(runs);
}

/* The test session `id` on c's worker, or NULL (after an error reply). */
static test_conn *find(client *c, int i) {
    long long id;
    if (!string2ll(c->argv[i], c->argvlen[i], &id)) {
        resp_add_error(&c->out, "ERR value is not an integer or out of range");
        return NULL;
    }
    for (client *o = c->w->clients; o; o = o->next)
        if (o->tr == &test_transport && o->id == (uint64_t)id) return o->tctx;
    resp_add_error(&c->out, "ERR no such session on this connection's worker");
    return NULL;
}

static void session_open_cmd(client *c) {
    test_conn *t = calloc(1, sizeof(*t));
    rbuf_init(&t->got);
    t->ev = event_new(c->w->base, -1, 0, run_cb, t);
    t->s = session_open(c->w, &test_transport, t, "debug-session:0");
    if (!t->s) {
        event_free(t->ev);
        free(t);
        resp_add_error(&c->out, "ERR max number of clients reached");
        return;
    }
    resp_add_int(&c->out, (long long)t->s->id);
}

static void session_run_cmd(client *c, test_conn *t) {
    long long tag;
    if (c->argc < 5 || !string2ll(c->argv[4], c->argvlen[4], &tag) || tag < 0) {
        resp_add_error(&c->out, "ERR usage: DEBUG SESSION RUN id tag command [arg ...]");
        return;
    }
    test_run r = {.tag = (uint64_t)tag, .argc = c->argc - 5};
    r.argv = malloc(sizeof(char *) * (size_t)r.argc);
    r.argvlen = malloc(sizeof(size_t) * (size_t)r.argc);
    for (int i = 0; i < r.argc; i++) {
        r.argv[i] = malloc(c->argvlen[5 + i] + 1);
        memcpy(r.argv[i], c->argv[5 + i], c->argvlen[5 + i]);
        r.argvlen[i] = c->argvlen[5 + i];
    }
    t->runs = realloc(t->runs, sizeof(test_run) * (size_t)(t->nruns + 1));
    t->runs[t->nruns++] = r;
    event_active(t->ev, EV_READ, 0);
    resp_add_ok(&c->out);
}

static void session_read_cmd(client *c, test_conn *t) {
    resp_add_array(&c->out, (long long)t->ngot);
    size_t pos = 0;
    for (size_t i = 0; i < t->ngot; i++) {
        uint64_t hdr[2];
        memcpy(hdr, t->got.buf + pos, sizeof(hdr));
        pos += sizeof(hdr);
        resp_add_array(&c->out, 2);
        resp_add_int(&c->out, (long long)hdr[0]);
        resp_add_bulk(&c->out, t->got.buf + pos, hdr[1]);
        pos += hdr[1];
    }
    t->got.len = 0;
    t->ngot = 0;
}

void debug_session(client *c) {
    if (c->argc == 3 && arg_is(c, 2, "open")) {
        session_open_cmd(c);
        return;
    }
    if (c->argc < 4) {
        resp_add_error(&c->out, "ERR usage: DEBUG SESSION OPEN|RUN|READ|CLOSE ...");
        return;
    }
    test_conn *t = find(c, 3);
    if (!t) return;
    if (arg_is(c, 2, "run")) {
        session_run_cmd(c, t);
    } else if (c->argc == 4 && arg_is(c, 2, "read")) {
        session_read_cmd(c, t);
    } else if (c->argc == 4 && arg_is(c, 2, "close")) {
        session_close(t->s);
        resp_add_ok(&c->out);
    } else {
        resp_add_error(&c->out, "ERR usage: DEBUG SESSION OPEN|RUN|READ|CLOSE ...");
    }
}
