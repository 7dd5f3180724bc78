/* coldhold.c -- the dispatcher's side of cold reads (src/store/coldread.h).
 *
 * Before a parsed command runs, client_cold_holds asks the core which pages
 * of its keys' entries are not in memory. If there are some, they go to
 * the reader threads and the command stays in the query buffer, unrun: the
 * connection stops there exactly as under CLIENT PAUSE, so its replies keep
 * their order, and other connections of the worker go on meanwhile. When
 * the pages are in, the worker resumes the connection (its input is parsed
 * again) and the command runs without being checked again, so a page
 * evicted in between costs one fault in the worker, never a loop.
 *
 * Checked: every command with keys outside MULTI, and EXEC with the keys of
 * its queued commands. Commands queued inside MULTI run only at EXEC. When
 * a command waits, the keys of the commands pipelined behind it are read
 * too (gather_ahead).
 *
 * Both edges take this one path. A byte-stream session (RESP over TCP)
 * keeps the waiting command in its query buffer (client_cold_holds); a
 * per-reply session (the native edge, session.h) keeps it in its command
 * queue, c->inq, like a command CLIENT PAUSE holds (session_cold_holds),
 * and the queued commands behind it are read along. The hold belongs to
 * the session either way: c->cold, resumed by blocking_client_resume. */
#include <stdlib.h>
#include "blocking.h"
#include "coldhold.h"
#include "coldread.h"
#include "commands.h"
#include "multi.h"
#include "resp.h"
#include "server.h"

#define LOOKAHEAD 32        /* pipelined commands whose keys are read along */
#define MAX_PAGES 256       /* pages one request reads at most */

struct gather {
    client *c;
    coldread_req *r;
};

static int gather_keys(void *arg, const struct rcommand *cmd, int argc, const char *const *argv,
                       const size_t *argvlen) {
    struct gather *g = arg;
    int posstack[16];
    int *pos = argc <= 16 ? posstack : malloc(sizeof(int) * (size_t)argc);
    int nk = command_keys_argv(cmd, argc, argv, argvlen, pos, argc);
    for (int i = 0; i < nk && (!g->r || coldread_pages(g->r) < MAX_PAGES); i++)
        coldread_add_key(&g->r, g->c->w, g->c, g->c->db, argv[pos[i]], argvlen[pos[i]]);
    if (pos != posstack) free(pos);
    return 0;
}

/* One command behind the one that waits: its keys are read along. 0 when
 * it changes how later keys resolve (SELECT, MULTI...): stop there. */
static int gather_next(struct gather *g, int argc, const char *const *argv,
                       const size_t *argvlen) {
    if (argc == 0) return 1;
    const struct rcommand *cmd = command_lookup(argv[0], argvlen[0]);
    if (!cmd || cmd->proc == selectCommand || cmd->proc == swapdbCommand ||
        cmd->proc == multiCommand || cmd->proc == execCommand)
        return 0;
    gather_keys(g, cmd, argc, argv, argvlen);
    return 1;
}

/* The commands pipelined after the one that waits: their keys' pages are
 * read along with its own, so a pipeline of cold GETs costs one wait, not
 * one per command. Parsed with a parser of its own (c's keeps its state);
 * stops at what changes how keys resolve (SELECT, MULTI...). Reading a
 * page that is not used after all costs nothing but the read. */
struct resp_ahead {
    const resp_limits *limits;
    const char *buf;
    size_t len;
};

static void gather_ahead(struct gather *g, void *arg) {
    const struct resp_ahead *a = arg;
    resp_limits lim = *a->limits;
    lim.arg_check = NULL;
    resp_parser p;
    resp_parser_init(&p, &lim);
    size_t pos = 0;
    for (int n = 0; n < LOOKAHEAD && pos < a->len; n++) {
        size_t used = 0;
        if (resp_parse(&p, a->buf + pos, a->len - pos, &used, NULL) != RESP_COMMAND) break;
        pos += used;
        if (!gather_next(g, p.argc, p.argv, p.argvlen)) break;
    }
    resp_parser_free(&p);
}

/* A per-reply session: the commands queued behind the one that waits (it
 * is the queue's head when it came from there). */
static void gather_queued(struct gather *g, void *arg) {
    client *c = arg;
    for (int i = 0, n = 0; i < c->ninq && n < LOOKAHEAD; i++) {
        const session_qcmd *q = &c->inq[c->headinq + i];
        if (q->argv == c->argv) continue;   /* the command that waits */
        if (!gather_next(g, q->argc, q->argv, q->argvlen)) break;
        n++;
    }
}

/* The pages are in: run the command that waited, then the rest. */
static void resume(void *owner) {
    client *c = owner;
    c->cold = NULL;
    c->cold_ready = 1;
    blocking_client_resume(c);   /* parses and runs c's pending input */
}

static int cold_holds(client *c, void (*ahead)(struct gather *, void *), void *arg) {
    if (c->cold) return 1;   /* still reading */
    if (c->cold_ready) {     /* this command's pages were just read */
        c->cold_ready = 0;
        return 0;
    }
    if (!coldread_enabled() || server_loading()) return 0;
    const struct rcommand *cmd = command_lookup(c->argv[0], c->argvlen[0]);
    if (!cmd || (cmd->firstkey == 0 && cmd->proc != execCommand && !command_movable_keys(cmd)))
        return 0;   /* no keys */
    if (coldread_skip(c->w)) return 0;
    struct gather g = {c, NULL};
    if (cmd->proc == execCommand)
        multi_foreach_queued(c, gather_keys, &g);
    else if (!multi_active(c))
        gather_keys(&g, cmd, c->argc, c->argv, c->argvlen);
    coldread_checked(c->w, g.r != NULL);
    if (!g.r) return 0;
    if (!multi_active(c)) ahead(&g, arg);
    c->cold = g.r;
    coldread_submit(g.r, resume);
    return 1;
}

int client_cold_holds(client *c, const resp_limits *lim, const char *rest, size_t restlen) {
    struct resp_ahead a = {lim, rest, restlen};
    return cold_holds(c, gather_ahead, &a);
}

int session_cold_holds(client *c) { return cold_holds(c, gather_queued, c); }

void client_cold_freed(client *c) {
    if (c->cold) coldread_cancel(c->cold);
    c->cold = NULL;
}

int debug_coldread(client *c) {
    if (c->argc == 3 && arg_is(c, 2, "drop")) {
        coldread_drop_cache();
        resp_add_ok(&c->out);
    } else if (c->argc == 4 && arg_is(c, 2, "force")) {
        coldread_set_force(c->argvlen[3] == 1 && c->argv[3][0] == '1');
        resp_add_ok(&c->out);
    } else if (c->argc == 3 && arg_is(c, 2, "stats")) {
        resp_add_array(&c->out, 4);
        resp_add_bulk(&c->out, "requests", 8);
        resp_add_int(&c->out, coldread_stat_requests());
        resp_add_bulk(&c->out, "pages", 5);
        resp_add_int(&c->out, coldread_stat_pages());
    } else {
        return 0;
    }
    return 1;
}
