/* librowan_test.c -- librowan driven against a real rowan-server by
 * tests/integration/test_librowan.py (built by `make` as
 * build/<variant>/tests/librowan-test).
 *
 *   librowan-test HOST PORT MODE [ARGS...]
 *
 * Each mode checks what it can itself and exits 1 with a message on the
 * first failure; it prints `key=value` lines the Python side checks against
 * the server (over RESP) afterwards. ROWAN_FAULTS in the environment turns
 * on the library's loss/duplication hook. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <signal.h>
#include <unistd.h>
#include <event2/event.h>
#include "rowan.h"

#define CHECK(cond, ...) do { if (!(cond)) { fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
    fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); exit(1); } } while (0)

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static rowanContext *connect_or_die(const char *host, int port) {
    rowanContext *c = rowanConnect(host, port);
    CHECK(c && !c->err, "connect: %s", c ? c->errstr : "oom");
    return c;
}

static redisReply *cmd_ok(rowanContext *c, redisReply *r, const char *what) {
    CHECK(r != NULL, "%s: err %d %s", what, c->err, c->errstr);
    return r;
}

static void print_stats(const rowanStats *st) {
    printf("sent=%llu\nretransmits=%llu\nreceived=%llu\ndropped_send=%llu\ndropped_recv=%llu\n"
           "duplicated=%llu\nrefreshes=%llu\nredirects=%llu\nspin_hits=%llu\nspin_misses=%llu\n",
           st->sent, st->retransmits, st->received, st->dropped_send, st->dropped_recv,
           st->duplicated, st->refreshes, st->redirects, st->spin_hits, st->spin_misses);
}

/* SET/GET/INCR, binary values, error replies, nil, a reply in many
 * fragments, a request too large for a datagram. */
static int mode_basic(const char *host, int port) {
    rowanContext *c = connect_or_die(host, port);
    redisReply *r = cmd_ok(c, rowanCommand(c, "DEL %s %s %s", "lr:a", "lr:big", "lr:huge"), "DEL");
    freeReplyObject(r);
    r = cmd_ok(c, rowanCommand(c, "SET %s %s", "lr:a", "1"), "SET");
    CHECK(r->type == REDIS_REPLY_STATUS && !strcmp(r->str, "OK"), "SET reply");
    freeReplyObject(r);
    r = cmd_ok(c, rowanCommand(c, "GET %s", "lr:a"), "GET");
    CHECK(r->type == REDIS_REPLY_STRING && !strcmp(r->str, "1"), "GET reply");
    freeReplyObject(r);
    r = cmd_ok(c, rowanCommand(c, "INCRBY %s %d", "lr:a", 41), "INCRBY");
    CHECK(r->type == REDIS_REPLY_INTEGER && r->integer == 42, "INCRBY reply %lld", r->integer);
    freeReplyObject(r);
    char bin[5] = {'a', 0, 'b', '\r', '\n'};
    r = cmd_ok(c, rowanCommand(c, "SET %b %b", "lr:bin", (size_t)6, bin, sizeof bin), "SET bin");
    freeReplyObject(r);
    const char *argv[] = {"GET", "lr:bin"};
    size_t lens[] = {3, 6};
    r = cmd_ok(c, rowanCommandArgv(c, 2, argv, lens), "GET bin");
    CHECK(r->type == REDIS_REPLY_STRING && r->len == 5 && !memcmp(r->str, bin, 5), "binary value");
    freeReplyObject(r);
    r = cmd_ok(c, rowanCommand(c, "GET %s", "lr:missing"), "GET nil");
    CHECK(r->type == REDIS_REPLY_NIL, "nil reply, type %d", r->type);
    freeReplyObject(r);
    r = cmd_ok(c, rowanCommand(c, "LPUSH %s x", "lr:a"), "LPUSH");
    CHECK(r->type == REDIS_REPLY_ERROR && !strncmp(r->str, "WRONGTYPE", 9), "error reply");
    freeReplyObject(r);
    r = cmd_ok(c, rowanCommand(c, "NOSUCHCOMMAND"), "unknown");
    CHECK(r->type == REDIS_REPLY_ERROR, "unknown command error");
    freeReplyObject(r);

    /* a 300 KB value: built by APPENDs (each fits a datagram), read back
     * in ~75 fragments */
    char chunk[3000];
    for (int i = 0; i < 100; i++) {
        memset(chunk, 'a' + i % 26, sizeof chunk);
        r = cmd_ok(c, rowanCommand(c, "APPEND %s %b", "lr:big", chunk, sizeof chunk), "APPEND");
        freeReplyObject(r);
    }
    r = cmd_ok(c, rowanCommand(c, "GET %s", "lr:big"), "GET big");
    CHECK(r->type == REDIS_REPLY_STRING && r->len == 300000, "big value length %zu", (size_t)r->len);
    for (int i = 0; i < 100; i++) CHECK(r->str[i * 3000] == 'a' + i % 26, "big value chunk %d", i);
    freeReplyObject(r);

    /* too large for one datagram: refused before sending, context still usable */
    char *huge = malloc(5000);
    memset(huge, 'x', 5000);
    r = rowanCommand(c, "SET %s %b", "lr:huge", huge, (size_t)5000);
    CHECK(r == NULL && c->err == ROWAN_ERR_TOOBIG && strstr(c->errstr, "use TCP"),
          "oversized request: err %d %s", c->err, c->errstr);
    free(huge);
    printf("toobig_errstr=%s\n", c->errstr);
    r = cmd_ok(c, rowanCommand(c, "PING"), "PING after error");
    CHECK(r->type == REDIS_REPLY_STATUS && !strcmp(r->str, "PONG"), "PONG");
    CHECK(c->err == 0, "err cleared");
    freeReplyObject(r);
    r = cmd_ok(c, rowanCommand(c, "EXISTS %s", "lr:huge"), "EXISTS");
    CHECK(r->integer == 0, "oversized SET must not have run");
    freeReplyObject(r);
    void *none;
    CHECK(rowanGetReply(c, &none) == ROWAN_ERR && none == NULL, "GetReply with nothing appended");
    printf("term=%llu\nok=1\n", rowanTerm(c));
    rowanFree(c);
    return 0;
}

/* N commands appended before any reply is read; replies in order. */
static int mode_pipeline(const char *host, int port, int n) {
    rowanContext *c = connect_or_die(host, port);
    for (int i = 0; i < n; i++) {
        char key[32];
        snprintf(key, sizeof key, "lr:p:%d", i);
        CHECK(rowanAppendCommand(c, "SET %s %d", key, i) == ROWAN_OK, "append: %s", c->errstr);
        CHECK(rowanAppendCommand(c, "INCR %s", key) == ROWAN_OK, "append: %s", c->errstr);
    }
    for (int i = 0; i < n; i++) {
        void *r;
        CHECK(rowanGetReply(c, &r) == ROWAN_OK, "reply SET %d: %s", i, c->errstr);
        freeReplyObject(r);
        CHECK(rowanGetReply(c, &r) == ROWAN_OK, "reply INCR %d: %s", i, c->errstr);
        CHECK(((redisReply *)r)->integer == i + 1, "INCR %d in order: %lld", i,
              ((redisReply *)r)->integer);
        freeReplyObject(r);
    }
    rowanStats st;
    rowanGetStats(c, &st);
    print_stats(&st);
    printf("ok=1\n");
    rowanFree(c);
    return 0;
}

/* N INCRs of KEY, WINDOW in flight, and SET KEY:i i for each. Prints how
 * many were acknowledged; checks that the INCR replies acknowledged are
 * distinct (nothing applied twice is visible to us as a repeated value). */
static int mode_incr(const char *host, int port, const char *key, int n, int window,
                     double seconds) {
    rowanContext *c = connect_or_die(host, port);
    if (seconds > 0) {
        struct timeval tv = {(time_t)seconds, (suseconds_t)((seconds - (time_t)seconds) * 1e6)};
        rowanSetTimeout(c, tv);
    }
    long long *seen = calloc((size_t)n + 1, sizeof *seen);
    char *setacked = calloc((size_t)n, 1);
    int acked = 0, failed = 0, sent = 0, got = 0, errors_logged = 0;
    long long maxv = 0;
    while (got < sent || sent < n) {
        while (sent < n && sent - got < window) {
            char k2[160];
            snprintf(k2, sizeof k2, "%s:%d", key, sent);
            CHECK(rowanAppendCommand(c, "INCR %s", key) == ROWAN_OK, "append %s", c->errstr);
            CHECK(rowanAppendCommand(c, "SET %s %d", k2, sent) == ROWAN_OK, "append %s", c->errstr);
            sent++;
        }
        void *r;
        if (rowanGetReply(c, &r) == ROWAN_OK) {
            redisReply *rr = r;
            CHECK(rr->type == REDIS_REPLY_INTEGER, "INCR reply type %d %s", rr->type,
                  rr->str ? rr->str : "");
            CHECK(rr->integer >= 1 && rr->integer <= n, "INCR value %lld out of range", rr->integer);
            CHECK(!seen[rr->integer], "INCR value %lld acknowledged twice", rr->integer);
            seen[rr->integer] = 1;
            if (rr->integer > maxv) maxv = rr->integer;
            acked++;
            freeReplyObject(r);
        } else {
            failed++;
            if (errors_logged++ < 5) fprintf(stderr, "INCR failed: %d %s\n", c->err, c->errstr);
        }
        if (rowanGetReply(c, &r) == ROWAN_OK) {
            CHECK(((redisReply *)r)->type == REDIS_REPLY_STATUS, "SET reply");
            setacked[got] = 1;
            freeReplyObject(r);
        } else {
            failed++;
            if (errors_logged++ < 5) fprintf(stderr, "SET failed: %d %s\n", c->err, c->errstr);
        }
        got++;
    }
    printf("acked=%d\nfailed=%d\nmax=%lld\n", acked, failed, maxv);
    printf("set_acked=");
    for (int i = 0, first = 1; i < n; i++)
        if (setacked[i]) { printf(first ? "%d" : ",%d", i); first = 0; }
    printf("\n");
    rowanStats st;
    rowanGetStats(c, &st);
    print_stats(&st);
    free(seen);
    free(setacked);
    rowanFree(c);
    return 0;
}

/* SET of N keys spread over the slots, each read back: in a cluster they
 * land on every primary; prints the library's redirect count. */
static int mode_spread(const char *host, int port, int n) {
    rowanContext *c = connect_or_die(host, port);
    for (int i = 0; i < n; i++) {
        char key[32];
        snprintf(key, sizeof key, "lr:s:%d", i);
        CHECK(rowanAppendCommand(c, "SET %s v%d", key, i) == ROWAN_OK, "append %s", c->errstr);
    }
    for (int i = 0; i < n; i++) {
        void *r;
        CHECK(rowanGetReply(c, &r) == ROWAN_OK, "SET %d: %s", i, c->errstr);
        CHECK(((redisReply *)r)->type == REDIS_REPLY_STATUS, "SET %d reply: %s", i,
              ((redisReply *)r)->str);
        freeReplyObject(r);
    }
    for (int i = 0; i < n; i++) {
        char key[32], want[32];
        snprintf(key, sizeof key, "lr:s:%d", i);
        snprintf(want, sizeof want, "v%d", i);
        redisReply *r = cmd_ok(c, rowanCommand(c, "GET %s", key), "GET");
        CHECK(r->type == REDIS_REPLY_STRING && !strcmp(r->str, want), "GET %s: %s", key,
              r->str ? r->str : "(nil)");
        freeReplyObject(r);
    }
    rowanStats st;
    rowanGetStats(c, &st);
    print_stats(&st);
    printf("term=%llu\nok=1\n", rowanTerm(c));
    rowanFree(c);
    return 0;
}

/* INCR KEY once per MS milliseconds for SECONDS, through whatever happens
 * to the cluster meanwhile; failures are counted, not fatal. */
static int mode_steady(const char *host, int port, const char *key, double seconds, int ms) {
    rowanContext *c = connect_or_die(host, port);
    struct timeval tv = {1, 0};
    rowanSetTimeout(c, tv);
    double end = now_s() + seconds;
    int acked = 0, failed = 0, acked_new_term = 0, logged = 0;
    long long last = 0;
    char lastmsg[256] = "";
    unsigned long long term0 = rowanTerm(c);
    while (now_s() < end) {
        redisReply *r = rowanCommand(c, "INCR %s", key);
        if (r && r->type == REDIS_REPLY_INTEGER) {
            CHECK(r->integer > last, "INCR went from %lld to %lld", last, r->integer);
            last = r->integer;
            acked++;
            acked_new_term += rowanTerm(c) > term0;
        } else {
            failed++;
            /* the first few, then each change of cause (a false failover
             * under load must not hide the errors of a later kill) */
            const char *msg = r ? r->str : c->errstr;
            if ((failed <= 5 || strcmp(msg, lastmsg)) && logged++ < 40)
                fprintf(stderr, "INCR: %s\n", msg);
            snprintf(lastmsg, sizeof(lastmsg), "%s", msg);
        }
        if (r) freeReplyObject(r);
        struct timespec ts = {0, ms * 1000000L};
        nanosleep(&ts, NULL);
    }
    printf("acked=%d\nfailed=%d\nlast=%lld\nterm0=%llu\nterm=%llu\nacked_new_term=%d\n", acked,
           failed, last, term0, rowanTerm(c), acked_new_term);
    rowanStats st;
    rowanGetStats(c, &st);
    print_stats(&st);
    rowanFree(c);
    return 0;
}

/* The async API: N INCRs in flight at once, then a GET. */
static struct { int done, n, bad; long long max; struct event_base *base; } A;

static void on_incr(rowanAsyncContext *ac, void *reply, void *priv) {
    redisReply *r = reply;
    (void)priv;
    if (!r || r->type != REDIS_REPLY_INTEGER) {
        fprintf(stderr, "async INCR: %s\n", r ? r->str : ac->errstr);
        A.bad++;
    } else if (r->integer > A.max) {
        A.max = r->integer;
    }
    if (++A.done == A.n) event_base_loopbreak(A.base);
}

static int mode_async(const char *host, int port, const char *key, int n) {
    A.base = event_base_new();
    A.n = n;
    rowanAsyncContext *ac = rowanAsyncConnect(host, port);
    CHECK(ac && !ac->err, "async connect: %s", ac ? ac->errstr : "oom");
    CHECK(rowanLibeventAttach(ac, A.base) == ROWAN_OK, "attach");
    for (int i = 0; i < n; i++)
        CHECK(rowanAsyncCommand(ac, on_incr, NULL, "INCR %s", key) == ROWAN_OK, "send %s",
              ac->errstr);
    char big[5000];
    memset(big, 'y', sizeof big);
    CHECK(rowanAsyncCommand(ac, on_incr, NULL, "SET %s %b", key, big, sizeof big) == ROWAN_ERR &&
          ac->err == ROWAN_ERR_TOOBIG, "async oversized request refused");
    event_base_dispatch(A.base);
    rowanStats st;
    rowanAsyncGetStats(ac, &st);
    print_stats(&st);
    printf("done=%d\nbad=%d\nmax=%lld\n", A.done, A.bad, A.max);
    rowanAsyncFree(ac);
    event_base_free(A.base);
    return A.bad ? 1 : 0;
}

/* ---- contexts sharing an event base (and so a socket per node) ----
 *
 * shared PREFIX K N: K async contexts on one event base, each INCRing its
 * own key PREFIX:{i} N times, one at a time (the next from the callback:
 * -P 1). Context 0 is freed from context 1's callback halfway, while its
 * INCR may be in flight; the others go on. Prints the UDP sockets the
 * process holds at the end, the others still attached (one per node used,
 * when shared), each context's acknowledged count, and the stats summed. */
#define SH_MAX 16
static struct {
    struct event_base *base;
    rowanAsyncContext *ac[SH_MAX];
    int k, n, acked[SH_MAX], sent[SH_MAX], failed[SH_MAX], finished, freed;
    const char *prefix;
    rowanStats st;
} SH;

static void sh_next(int i);

static void sh_add_stats(const rowanAsyncContext *ac) {
    rowanStats st;
    rowanAsyncGetStats(ac, &st);
    SH.st.sent += st.sent;
    SH.st.retransmits += st.retransmits;
    SH.st.received += st.received;
    SH.st.duplicated += st.duplicated;
    SH.st.dropped_send += st.dropped_send;
    SH.st.dropped_recv += st.dropped_recv;
}

static void sh_reply(rowanAsyncContext *ac, void *reply, void *priv) {
    int i = (int)(long)priv;
    redisReply *r = reply;
    (void)ac;
    if (i == 0 && SH.freed) {       /* failed by the free: it may or may not have run */
        SH.failed[0]++;
        return;
    }
    CHECK(r && r->type == REDIS_REPLY_INTEGER, "ctx %d INCR: %s", i, r ? r->str : ac->errstr);
    SH.acked[i]++;
    CHECK(r->integer == SH.acked[i], "ctx %d: INCR gave %lld after %d acknowledged", i,
          r->integer, SH.acked[i]);
    if (i == 1 && SH.acked[1] == SH.n / 2 && !SH.freed) {
        SH.freed = 1;               /* another context, with a request perhaps in flight */
        sh_add_stats(SH.ac[0]);
        rowanAsyncFree(SH.ac[0]);
        SH.ac[0] = NULL;
        if (SH.acked[0] < SH.n) SH.finished++;
    }
    if (SH.acked[i] == SH.n) {
        if (++SH.finished == SH.k) event_base_loopbreak(SH.base);
        return;
    }
    if (i != 0 || !SH.freed) sh_next(i);
}

static void sh_next(int i) {
    SH.sent[i]++;
    CHECK(rowanAsyncCommand(SH.ac[i], sh_reply, (void *)(long)i, "INCR %s:{%d}", SH.prefix, i) ==
          ROWAN_OK, "ctx %d send: %s", i, SH.ac[i]->errstr);
}

static int udp_sockets(void) {   /* sockets this process holds */
    char path[64], link[64];
    int n = 0;
    for (int fd = 0; fd < 1024; fd++) {
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        ssize_t l = readlink(path, link, sizeof link - 1);
        if (l > 0 && (link[l] = 0, !strncmp(link, "socket:", 7))) n++;
    }
    return n;
}

static int mode_shared(const char *host, int port, const char *prefix, int k, int n) {
    CHECK(k >= 2 && k <= SH_MAX && n >= 2, "shared: 2 <= K <= %d, N >= 2", SH_MAX);
    SH.base = event_base_new();
    SH.k = k;
    SH.n = n;
    SH.prefix = prefix;
    for (int i = 0; i < k; i++) {
        SH.ac[i] = rowanAsyncConnect(host, port);
        CHECK(SH.ac[i] && !SH.ac[i]->err, "async connect: %s", SH.ac[i] ? SH.ac[i]->errstr : "oom");
        CHECK(rowanLibeventAttach(SH.ac[i], SH.base) == ROWAN_OK, "attach");
    }
    for (int i = 0; i < k; i++) sh_next(i);
    event_base_dispatch(SH.base);
    printf("sockets=%d\n", udp_sockets());   /* the others still attached */
    for (int i = 1; i < k; i++) {
        sh_add_stats(SH.ac[i]);
        rowanAsyncFree(SH.ac[i]);
    }
    printf("sockets_after=%d\n", udp_sockets());
    for (int i = 0; i < k; i++) printf("acked_%d=%d\n", i, SH.acked[i]);
    printf("sent_0=%d\nfailed_0=%d\n", SH.sent[0], SH.failed[0]);
    print_stats(&SH.st);
    event_base_free(SH.base);
    return 0;
}

/* sharedfo PREFIX K SECONDS: K async contexts on one event base (so
 * sharing a socket per node) each INCR their own key PREFIX:{i}, one at a
 * time, for SECONDS, through whatever happens to the cluster meanwhile
 * (failovers, a primary killed): a failed INCR (NULL or an error reply:
 * it may or may not have run) is counted, logged and followed by the next
 * one 5 ms later. Each acknowledged value must lie between the count of
 * acknowledged INCRs and that plus the failed ones (none ran twice, none
 * acknowledged was lost). Prints per context acked_i, failed_i, last_i,
 * maxlat_i (ms, the longest any one INCR took to its callback) and late_i
 * (INCRs acknowledged in the last 1.5 s: it recovered), and the stats
 * summed. SIGUSR1 (sent just before the test kills a node) ends the first
 * phase: early_i counts the INCRs failed before it, each logged with its
 * phase. */
static struct {
    struct event_base *base;
    rowanAsyncContext *ac[SH_MAX];
    struct event *retry[SH_MAX];
    int k, acked[SH_MAX], failed[SH_MAX], early[SH_MAX], late[SH_MAX], running, logged, phase;
    long long last[SH_MAX];
    double t_sent[SH_MAX], maxlat[SH_MAX], end;
    const char *prefix;
    char lastmsg[256];
} FO;

static void fo_send(int i);

static void fo_reply(rowanAsyncContext *ac, void *reply, void *priv) {
    int i = (int)(long)priv;
    redisReply *r = reply;
    double t = now_s(), lat = t - FO.t_sent[i];
    if (lat > FO.maxlat[i]) FO.maxlat[i] = lat;
    if (r && r->type == REDIS_REPLY_INTEGER) {
        FO.acked[i]++;
        CHECK(r->integer > FO.last[i], "ctx %d: INCR went from %lld to %lld", i, FO.last[i],
              r->integer);
        CHECK(r->integer >= FO.acked[i] && r->integer <= FO.acked[i] + FO.failed[i],
              "ctx %d: INCR gave %lld after %d acknowledged and %d failed", i, r->integer,
              FO.acked[i], FO.failed[i]);
        FO.last[i] = r->integer;
        if (t > FO.end - 1.5) FO.late[i]++;
    } else {
        FO.failed[i]++;
        FO.early[i] += FO.phase == 0;
        const char *msg = r ? (r->str ? r->str : "(error reply)") : ac->errstr;
        if ((FO.failed[i] <= 2 || strcmp(msg, FO.lastmsg)) && FO.logged++ < 60)
            fprintf(stderr, "phase %d ctx %d INCR %s: %s\n", FO.phase, i,
                    r ? "error reply" : "failed", msg);
        snprintf(FO.lastmsg, sizeof FO.lastmsg, "%s", msg);
    }
    if (t >= FO.end) {
        if (--FO.running == 0) event_base_loopbreak(FO.base);
        return;
    }
    if (r && r->type == REDIS_REPLY_INTEGER) {
        fo_send(i);
    } else {               /* not in a tight loop while a node is gone */
        struct timeval tv = {0, 5000};
        evtimer_add(FO.retry[i], &tv);
    }
}

static void fo_retry(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    fo_send((int)(long)arg);
}

static void fo_phase(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what, (void)arg;
    FO.phase = 1;
}

static void fo_send(int i) {
    FO.t_sent[i] = now_s();
    CHECK(rowanAsyncCommand(FO.ac[i], fo_reply, (void *)(long)i, "INCR %s:{%d}", FO.prefix, i) ==
          ROWAN_OK, "ctx %d send: %s", i, FO.ac[i]->errstr);
}

static int mode_sharedfo(const char *host, int port, const char *prefix, int k, double seconds) {
    CHECK(k >= 2 && k <= SH_MAX && seconds > 0, "sharedfo: 2 <= K <= %d", SH_MAX);
    FO.base = event_base_new();
    FO.k = FO.running = k;
    FO.prefix = prefix;
    struct timeval tv = {1, 0};
    for (int i = 0; i < k; i++) {
        FO.ac[i] = rowanAsyncConnect(host, port);
        CHECK(FO.ac[i] && !FO.ac[i]->err, "async connect: %s", FO.ac[i] ? FO.ac[i]->errstr : "oom");
        rowanAsyncSetTimeout(FO.ac[i], tv);
        CHECK(rowanLibeventAttach(FO.ac[i], FO.base) == ROWAN_OK, "attach");
        FO.retry[i] = evtimer_new(FO.base, fo_retry, (void *)(long)i);
    }
    struct event *usr1 = evsignal_new(FO.base, SIGUSR1, fo_phase, NULL);
    CHECK(usr1 && evsignal_add(usr1, NULL) == 0, "SIGUSR1 event");
    FO.end = now_s() + seconds;
    for (int i = 0; i < k; i++) fo_send(i);
    printf("ready=1\n");
    event_base_dispatch(FO.base);
    printf("sockets=%d\n", udp_sockets());
    rowanStats sum = {0};
    for (int i = 0; i < k; i++) {
        rowanStats st;
        rowanAsyncGetStats(FO.ac[i], &st);
        sum.sent += st.sent;
        sum.retransmits += st.retransmits;
        sum.received += st.received;
        sum.refreshes += st.refreshes;
        sum.redirects += st.redirects;
        printf("acked_%d=%d\nfailed_%d=%d\nlast_%d=%lld\nmaxlat_%d=%.0f\nlate_%d=%d\n"
               "refreshes_%d=%llu\nearly_%d=%d\n", i, FO.acked[i], i, FO.failed[i], i, FO.last[i], i,
               FO.maxlat[i] * 1000, i, FO.late[i], i, st.refreshes, i, FO.early[i]);
        event_free(FO.retry[i]);
        rowanAsyncFree(FO.ac[i]);
    }
    printf("sockets_after=%d\n", udp_sockets());
    print_stats(&sum);
    event_free(usr1);
    event_base_free(FO.base);
    return 0;
}

/* ---- pub/sub and MONITOR (the Python side publishes with redis-py) ----
 *
 * sub / asub (blocking / async API) [KEEPALIVE_MS]: SUBSCRIBE lr:ch1 lr:ch2
 * (one command, two confirmations) and PSUBSCRIBE lr:p:*, print ready=1,
 * then print each message as msg=KIND|PATTERN|CHANNEL|PAYLOAD. Payload
 * "unsub" unsubscribes lr:ch1 (unsubscribed=COUNT), "punsub" the pattern
 * (punsubscribed=COUNT), "quit" ends (done=1). monitor / amonitor: MONITOR,
 * ready=1, then line=TEXT per line until one names lr:mon:quit. */
static void print_message(const redisReply *r) {
    if (r->type == REDIS_REPLY_STATUS) {
        printf("line=%s\n", r->str);
        return;
    }
    if (r->type == REDIS_REPLY_ERROR) {   /* a pushed notice (a message too large) */
        printf("pusherror=%s\n", r->str);
        return;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 3) {
        printf("other=%d\n", r->type);
        return;
    }
    const char *kind = r->element[0]->str;
    if (!strcmp(kind, "pmessage") && r->elements == 4)
        printf("msg=pmessage|%s|%s|%s\n", r->element[1]->str, r->element[2]->str,
               r->element[3]->str);
    else if (!strcmp(kind, "message"))
        printf("msg=message||%s|%s\n", r->element[1]->str, r->element[2]->str);
    else if (r->element[2]->type == REDIS_REPLY_INTEGER)
        printf("%s=%s|%lld\n", kind, r->element[1]->str ? r->element[1]->str : "",
               r->element[2]->integer);
}

static const char *payload_of(const redisReply *r) {
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 3) return "";
    if (!strcmp(r->element[0]->str, "message")) return r->element[2]->str;
    if (!strcmp(r->element[0]->str, "pmessage") && r->elements == 4) return r->element[3]->str;
    return "";
}

static int mode_sub(const char *host, int port, int keepalive_ms) {
    rowanContext *c = connect_or_die(host, port);
    struct timeval tv = {20, 0};
    rowanSetTimeout(c, tv);
    if (keepalive_ms > 0) {
        struct timeval ka = {keepalive_ms / 1000, (keepalive_ms % 1000) * 1000};
        CHECK(rowanSetKeepalive(c, ka) == ROWAN_OK, "keepalive");
    }
    void *v = NULL;
    CHECK(rowanGetReply(c, &v) == ROWAN_ERR && c->err == ROWAN_ERR_OTHER,
          "GetReply with nothing appended and no subscription");
    redisReply *r = cmd_ok(c, rowanCommand(c, "SUBSCRIBE lr:ch1 lr:ch2"), "SUBSCRIBE");
    CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 3 && !strcmp(r->element[1]->str, "lr:ch1") &&
          r->element[2]->integer == 1, "first confirmation");
    freeReplyObject(r);
    CHECK(rowanGetReply(c, &v) == ROWAN_OK, "second confirmation: %s", c->errstr);
    r = v;
    CHECK(r->type == REDIS_REPLY_ARRAY && !strcmp(r->element[1]->str, "lr:ch2") &&
          r->element[2]->integer == 2, "second confirmation");
    freeReplyObject(r);
    r = cmd_ok(c, rowanCommand(c, "PSUBSCRIBE lr:p:*"), "PSUBSCRIBE");
    CHECK(r->type == REDIS_REPLY_ARRAY && r->element[2]->integer == 3, "pattern confirmation");
    freeReplyObject(r);
    printf("ready=1\n");
    for (;;) {
        if (rowanGetReply(c, &v) != ROWAN_OK) {
            printf("error=%d %s\n", c->err, c->errstr);
            rowanFree(c);
            return 1;
        }
        r = v;
        print_message(r);
        const char *p = payload_of(r);
        int quit = !strcmp(p, "quit"), unsub = !strcmp(p, "unsub"), punsub = !strcmp(p, "punsub");
        freeReplyObject(r);
        if (quit) break;
        if (unsub || punsub) {
            r = cmd_ok(c, unsub ? rowanCommand(c, "UNSUBSCRIBE lr:ch1")
                                : rowanCommand(c, "PUNSUBSCRIBE lr:p:*"), "UNSUBSCRIBE");
            printf("%s=%lld\n", unsub ? "unsubscribed" : "punsubscribed", r->element[2]->integer);
            freeReplyObject(r);
        }
    }
    printf("done=1\n");
    rowanFree(c);
    return 0;
}

static struct { struct event_base *base; rowanAsyncContext *ac; int confirmations, quit; } S;

static void on_unsub(rowanAsyncContext *ac, void *reply, void *priv) {
    redisReply *r = reply;
    (void)ac;
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 3)
        printf("%s=%lld\n", (const char *)priv, r->element[2]->integer);
}

static void on_message(rowanAsyncContext *ac, void *reply, void *priv) {
    redisReply *r = reply;
    if (!r) {
        printf("error=%d %s\n", ac->err, ac->errstr);
        event_base_loopbreak(S.base);
        return;
    }
    print_message(r);
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
        r->element[2]->type == REDIS_REPLY_INTEGER) {
        if (++S.confirmations == 3) printf("ready=1\n");   /* lr:ch1, lr:ch2, lr:p:* */
        return;
    }
    const char *p = payload_of(r);
    printf("priv=%s\n", (const char *)priv);
    if (!strcmp(p, "quit")) {
        S.quit = 1;
        event_base_loopbreak(S.base);
    } else if (!strcmp(p, "unsub")) {
        CHECK(rowanAsyncCommand(ac, on_unsub, "ignored", "UNSUBSCRIBE lr:ch1") == ROWAN_OK, "unsub");
    } else if (!strcmp(p, "punsub")) {
        CHECK(rowanAsyncCommand(ac, NULL, NULL, "PUNSUBSCRIBE lr:p:*") == ROWAN_OK, "punsub");
    }
}

static int mode_asub(const char *host, int port, int keepalive_ms) {
    S.base = event_base_new();
    rowanAsyncContext *ac = rowanAsyncConnect(host, port);
    CHECK(ac && !ac->err, "async connect: %s", ac ? ac->errstr : "oom");
    if (keepalive_ms > 0) {
        struct timeval ka = {keepalive_ms / 1000, (keepalive_ms % 1000) * 1000};
        CHECK(rowanAsyncSetKeepalive(ac, ka) == ROWAN_OK, "keepalive");
    }
    CHECK(rowanLibeventAttach(ac, S.base) == ROWAN_OK, "attach");
    CHECK(rowanAsyncCommand(ac, on_message, "chan", "SUBSCRIBE lr:ch1 lr:ch2") == ROWAN_OK, "sub");
    CHECK(rowanAsyncCommand(ac, on_message, "pat", "PSUBSCRIBE lr:p:*") == ROWAN_OK, "psub");
    event_base_dispatch(S.base);
    printf("done=%d\n", S.quit);
    rowanAsyncFree(ac);
    event_base_free(S.base);
    return S.quit ? 0 : 1;
}

static int is_quit_line(const redisReply *r) {
    return r->type == REDIS_REPLY_STATUS && strstr(r->str, "lr:mon:quit") != NULL;
}

static int mode_monitor(const char *host, int port) {
    rowanContext *c = connect_or_die(host, port);
    struct timeval tv = {20, 0};
    rowanSetTimeout(c, tv);
    redisReply *r = cmd_ok(c, rowanCommand(c, "MONITOR"), "MONITOR");
    printf("reply=%d %s\n", r->type, r->str ? r->str : "");
    int ok = r->type == REDIS_REPLY_STATUS;
    freeReplyObject(r);
    if (!ok) {
        rowanFree(c);
        return 0;
    }
    printf("ready=1\n");
    for (;;) {
        void *v;
        if (rowanGetReply(c, &v) != ROWAN_OK) {
            printf("error=%d %s\n", c->err, c->errstr);
            rowanFree(c);
            return 1;
        }
        r = v;
        print_message(r);
        int quit = is_quit_line(r);
        freeReplyObject(r);
        if (quit) break;
    }
    printf("done=1\n");
    rowanFree(c);
    return 0;
}

static void on_monitor(rowanAsyncContext *ac, void *reply, void *priv) {
    redisReply *r = reply;
    (void)priv;
    if (!r) {
        printf("error=%d %s\n", ac->err, ac->errstr);
        event_base_loopbreak(S.base);
        return;
    }
    if (r->type == REDIS_REPLY_STATUS && !strcmp(r->str, "OK")) {
        printf("ready=1\n");
        return;
    }
    print_message(r);
    if (is_quit_line(r)) {
        S.quit = 1;
        event_base_loopbreak(S.base);
    }
}

static int mode_amonitor(const char *host, int port) {
    S.base = event_base_new();
    rowanAsyncContext *ac = rowanAsyncConnect(host, port);
    CHECK(ac && !ac->err, "async connect: %s", ac ? ac->errstr : "oom");
    CHECK(rowanLibeventAttach(ac, S.base) == ROWAN_OK, "attach");
    CHECK(rowanAsyncCommand(ac, on_monitor, NULL, "MONITOR") == ROWAN_OK, "monitor");
    event_base_dispatch(S.base);
    printf("done=%d\n", S.quit);
    rowanAsyncFree(ac);
    event_base_free(S.base);
    return S.quit ? 0 : 1;
}

/* Connect to something that is not a live server: prints err and the time
 * it took. */
static int mode_unreachable(const char *host, int port, double seconds) {
    struct timeval tv = {(time_t)seconds, (suseconds_t)((seconds - (time_t)seconds) * 1e6)};
    double t0 = now_s();
    rowanContext *c = rowanConnectWithTimeout(host, port, tv);
    CHECK(c, "oom");
    printf("err=%d\nerrstr=%s\nelapsed=%.3f\n", c->err, c->errstr, now_s() - t0);
    rowanFree(c);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: librowan-test HOST PORT MODE [ARGS]\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *host = argv[1], *mode = argv[3];
    int port = atoi(argv[2]);
    if (!strcmp(mode, "basic")) return mode_basic(host, port);
    if (!strcmp(mode, "pipeline")) return mode_pipeline(host, port, argc > 4 ? atoi(argv[4]) : 100);
    if (!strcmp(mode, "incr") && argc > 6)
        return mode_incr(host, port, argv[4], atoi(argv[5]), atoi(argv[6]),
                         argc > 7 ? atof(argv[7]) : 0);
    if (!strcmp(mode, "spread")) return mode_spread(host, port, argc > 4 ? atoi(argv[4]) : 200);
    if (!strcmp(mode, "steady") && argc > 6)
        return mode_steady(host, port, argv[4], atof(argv[5]), atoi(argv[6]));
    if (!strcmp(mode, "async") && argc > 5) return mode_async(host, port, argv[4], atoi(argv[5]));
    if (!strcmp(mode, "shared") && argc > 6)
        return mode_shared(host, port, argv[4], atoi(argv[5]), atoi(argv[6]));
    if (!strcmp(mode, "sharedfo") && argc > 6)
        return mode_sharedfo(host, port, argv[4], atoi(argv[5]), atof(argv[6]));
    if (!strcmp(mode, "sub")) return mode_sub(host, port, argc > 4 ? atoi(argv[4]) : 0);
    if (!strcmp(mode, "asub")) return mode_asub(host, port, argc > 4 ? atoi(argv[4]) : 0);
    if (!strcmp(mode, "monitor")) return mode_monitor(host, port);
    if (!strcmp(mode, "amonitor")) return mode_amonitor(host, port);
    if (!strcmp(mode, "unreachable"))
        return mode_unreachable(host, port, argc > 4 ? atof(argv[4]) : 1);
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
}
