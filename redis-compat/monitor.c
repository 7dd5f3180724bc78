/* monitor.c -- MONITOR, as Redis's replicationFeedMonitors.
 *
 * After a command ran, each monitor gets one status line:
 *   +<unix seconds>.<microseconds> [<db> <ip:port>] "arg" "arg"...
 * with every argument quoted and escaped as Redis's sdscatrepr does.
 * Administrative commands (CMD_ADMIN: CONFIG, DEBUG, SHUTDOWN...) are not
 * shown, as in Redis; AUTH and HELLO's arguments are shown as (redacted).
 * Commands that EXEC runs are shown as they run (multi.c), then EXEC.
 *
 * Monitors live in one list under mon_lock. The line goes through each
 * monitor's pub/sub inbox (pubsub_push_line), so a monitor on any worker
 * gets the lines in the order commands finished on each worker. A monitor
 * that goes away (or runs RESET) leaves the list first, before its pub/sub
 * side is freed. Lock order: mon_lock -> ps_lock. */
#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include "monitor.h"
#include "commands.h"
#include "pubsub.h"
#include "util.h"
#include "edge_state.h"

/* This file's state, one per server (server.h). */
struct monitor_state {
    pthread_mutex_t mon_lock;
    client **monitors;
    int nmonitors;
    int capmonitors;
    _Atomic int active;
};

void monitor_state_new(void) {
    struct monitor_state *st = calloc(1, sizeof(*st));
    if (!st) abort();
    pthread_mutex_init(&st->mon_lock, NULL);
    server.edge_state->monitor = st;
}

void monitor_state_free(void) {
    struct monitor_state *st = server.edge_state->monitor;
    free(st->monitors);
    pthread_mutex_destroy(&st->mon_lock);
    free(st);
}

#define mon_lock (server.edge_state->monitor->mon_lock)
#define monitors (server.edge_state->monitor->monitors)
#define nmonitors (server.edge_state->monitor->nmonitors)
#define capmonitors (server.edge_state->monitor->capmonitors)
#define active (server.edge_state->monitor->active)

/* sdscatrepr: "..." with \\ \" \n \r \t \a \b escaped, other non-printable
 * bytes as \xhh. */
static void append_repr(rbuf *b, const char *s, size_t len) {
    rbuf_append(b, "\"", 1);
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)s[i];
        char tmp[8];
        switch (ch) {
        case '\\': rbuf_append(b, "\\\\", 2); break;
        case '"': rbuf_append(b, "\\\"", 2); break;
        case '\n': rbuf_append(b, "\\n", 2); break;
        case '\r': rbuf_append(b, "\\r", 2); break;
        case '\t': rbuf_append(b, "\\t", 2); break;
        case '\a': rbuf_append(b, "\\a", 2); break;
        case '\b': rbuf_append(b, "\\b", 2); break;
        default:
            if (isprint(ch)) {
                rbuf_append(b, (const char *)&ch, 1);
            } else {
                snprintf(tmp, sizeof(tmp), "\\x%02x", ch);
                rbuf_append(b, tmp, 4);
            }
        }
    }
    rbuf_append(b, "\"", 1);
}

static int redacted(const client *c) {
    return !strcmp(c->cmd->name, "auth") || !strcmp(c->cmd->name, "hello");
}

void monitor_feed(client *c) {
    if (!atomic_load(&active) || !c->cmd || (c->cmd->flags & CMD_ADMIN)) return;
    struct timeval tv;
    gettimeofday(&tv, NULL);
    rbuf line;
    rbuf_init(&line);
    char head[128];
    int n = snprintf(head, sizeof(head), "%ld.%06ld [%d %s]", (long)tv.tv_sec, (long)tv.tv_usec,
                     c->db, c->addr);
    rbuf_append(&line, head, (size_t)n);
    for (int i = 0; i < c->argc; i++) {
        rbuf_append(&line, " ", 1);
        if (i > 0 && redacted(c)) rbuf_append(&line, "\"(redacted)\"", 12);
        else append_repr(&line, c->argv[i], c->argvlen[i]);
    }
    pthread_mutex_lock(&mon_lock);
    for (int i = 0; i < nmonitors; i++) pubsub_push_line(monitors[i], line.buf, line.len);
    pthread_mutex_unlock(&mon_lock);
    rbuf_free(&line);
}

int monitor_is(const client *c) { return c->flags & CLIENT_MONITOR; }

void monitor_client_freed(client *c) {
    if (!monitor_is(c)) return;
    pthread_mutex_lock(&mon_lock);
    for (int i = 0; i < nmonitors; i++) {
        if (monitors[i] == c) {
            monitors[i] = monitors[--nmonitors];
            break;
        }
    }
    atomic_store(&active, nmonitors);
    pthread_mutex_unlock(&mon_lock);
    c->flags &= ~CLIENT_MONITOR;
}

/* MONITOR: +OK, then the stream. Calling it again changes nothing. */
void monitorCommand(client *c) {
    if (monitor_is(c)) return;   /* Redis ignores a second MONITOR */
    pthread_mutex_lock(&mon_lock);
    if (nmonitors == capmonitors) {
        capmonitors = capmonitors ? capmonitors * 2 : 8;
        monitors = realloc(monitors, sizeof(client *) * (size_t)capmonitors);
    }
    monitors[nmonitors++] = c;
    atomic_store(&active, nmonitors);
    pthread_mutex_unlock(&mon_lock);
    c->flags |= CLIENT_MONITOR;
    resp_add_ok(&c->out);
}
