/* test-librowan.c -- librowan (rdma/client/) against a scripted fake server.
 *
 * The real server is exercised by tests/integration/test_librowan.py; this
 * test drives the library through what a real server rarely does on cue:
 * replies lost on their first send, fragments in reverse order and twice,
 * BUSY refusals, stale-term refusals after a failover, -MOVED after a slot
 * moved under the same term, -TRYAGAIN while a shard is being checked, a
 * node a moment behind the others' term (-MOVED by its old map). The fake (a thread with two UDP sockets, the
 * nodes of a 2-node "cluster", or one standalone node) speaks the real wire
 * format through the server's codec (rdma/dgram.c), keeps a reply cache per
 * (client id, request id) as the server does, and counts the INCRs it
 * really ran, so "applied once" is checked at the source. */
#include "client/rowan.h"
#include "dgram.h"
#include "hash.h"
#include "unit.h"

#include <event2/event.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---------------- the fake server ---------------- */

typedef struct cached { uint64_t client, id; char *resp; size_t len; } cached;

static struct {
    int fd[2], port[2];
    pthread_mutex_t lock;        /* the knobs below, changed by the test */
    int cluster;                 /* 0: node 0 alone, standalone */
    uint64_t term;
    int flip;                    /* slots 0-8191 on node 1 instead of node 0 */
    int drop_every;              /* drop every k-th reply on its first send */
    int busy_every;              /* refuse request ids divisible by k once, BUSY */
    int reverse, dup;            /* fragments in reverse order / the first twice */
    int tryagain;                /* answer the next k INCRs -TRYAGAIN (ran nowhere) */
    int lag_node, lag_left;      /* node lag_node has not adopted F.term for its next
                                  * lag_left INCRs: answers with term - 1, by the old map */
    cached *cache;
    size_t ncache, cap;
    char keys[256][32];
    long long vals[256];
    int nkeys;
    long long incr_runs[2];      /* INCRs really run, per node */
    long long replies, stale, busy, moved;
    long long packs;             /* packed request frames received */
    uint64_t busy_seen[4096];
    int nbusy;
    _Atomic int stop;
} F;

static int owner_of(unsigned slot) { return (slot < 8192) ^ F.flip ? 0 : 1; }

static int lagging(int me) { return F.lag_left > 0 && me == F.lag_node; }

static long long *kv(const char *k, size_t len) {
    for (int i = 0; i < F.nkeys; i++)
        if (strlen(F.keys[i]) == len && !memcmp(F.keys[i], k, len)) return &F.vals[i];
    if (F.nkeys == 256 || len >= 32) abort();
    memcpy(F.keys[F.nkeys], k, len);
    F.keys[F.nkeys][len] = 0;
    F.vals[F.nkeys] = 0;
    return &F.vals[F.nkeys++];
}

static char *fmt(size_t *len, const char *f, ...) {
    char *s = NULL;
    va_list ap;
    va_start(ap, f);
    int n = vasprintf(&s, f, ap);
    va_end(ap);
    *len = (size_t)n;
    return s;
}

static int arg_is(const char *a, size_t l, const char *s) {
    return strlen(s) == l && !strncasecmp(a, s, l);
}

/* Run one command on node `me`; a malloc'd RESP reply. */
static char *run_cmd(int me, int argc, const char **argv, const size_t *len, size_t *rlen) {
    if (arg_is(argv[0], len[0], "cluster") && argc == 2 && arg_is(argv[1], len[1], "info")) {
        if (!F.cluster) return fmt(rlen, "-ERR This instance has cluster support disabled\r\n");
        char body[128];
        int n = snprintf(body, sizeof body, "cluster_state:ok\r\ncluster_current_epoch:%llu\r\n",
                         (unsigned long long)F.term);
        return fmt(rlen, "$%d\r\n%s\r\n", n, body);
    }
    if (arg_is(argv[0], len[0], "cluster") && argc == 2 && arg_is(argv[1], len[1], "slots")) {
        int a = F.flip, b = !F.flip;
        return fmt(rlen, "*2\r\n*3\r\n:0\r\n:8191\r\n*4\r\n$9\r\n127.0.0.1\r\n:%d\r\n$2\r\nn%d\r\n*0\r\n"
                   "*3\r\n:8192\r\n:16383\r\n*4\r\n$9\r\n127.0.0.1\r\n:%d\r\n$2\r\nn%d\r\n*0\r\n",
                   F.port[a], a, F.port[b], b);
    }
    if (arg_is(argv[0], len[0], "config") && argc == 3) {
        if (arg_is(argv[2], len[2], "port")) {
            char p[16];
            int n = snprintf(p, sizeof p, "%d", F.port[me]);   /* native = RESP port number */
            return fmt(rlen, "*2\r\n$4\r\nport\r\n$%d\r\n%s\r\n", n, p);
        }
        return fmt(rlen, "*2\r\n$6\r\nshards\r\n$2\r\n16\r\n");
    }
    if (arg_is(argv[0], len[0], "command") && argc == 1)
        return fmt(rlen, "*2\r\n*6\r\n$4\r\nincr\r\n:2\r\n*0\r\n:1\r\n:1\r\n:1\r\n"
                   "*6\r\n$3\r\nget\r\n:2\r\n*0\r\n:1\r\n:1\r\n:1\r\n");
    if (arg_is(argv[0], len[0], "ping")) return fmt(rlen, "+PONG\r\n");
    if (arg_is(argv[0], len[0], "big") && argc == 2) {
        size_t n = (size_t)atol(argv[1]);
        char *r = malloc(n + 32);
        int h = sprintf(r, "$%zu\r\n", n);
        for (size_t i = 0; i < n; i++) r[h + i] = (char)('a' + i % 26);
        memcpy(r + h + n, "\r\n", 2);
        *rlen = (size_t)h + n + 2;
        return r;
    }
    if ((arg_is(argv[0], len[0], "incr") || arg_is(argv[0], len[0], "get")) && argc == 2) {
        unsigned slot = hash_slot(argv[1], len[1]);
        int lag = lagging(me) && arg_is(argv[0], len[0], "incr");
        if (lag) F.lag_left--;
        if (F.cluster && (owner_of(slot) != me) != lag) {   /* a lagging node: the old map */
            F.moved++;
            return fmt(rlen, "-MOVED %u 127.0.0.1:%d\r\n", slot, F.port[owner_of(slot) ^ lag]);
        }
        if (F.tryagain > 0 && arg_is(argv[0], len[0], "incr")) {
            F.tryagain--;
            return fmt(rlen, "-TRYAGAIN Hash slot %u: shard is being checked; try again\r\n",
                       slot);
        }
        long long *v = kv(argv[1], len[1]);
        if (arg_is(argv[0], len[0], "incr")) {
            F.incr_runs[me]++;
            ++*v;
        }
        return fmt(rlen, ":%lld\r\n", *v);
    }
    return fmt(rlen, "-ERR unknown command\r\n");
}

static void send_reply(int me, const struct sockaddr_in *to, const dgram_hdr *rq, const char *resp,
                       size_t len, int first) {
    if (first && F.drop_every && ++F.replies % F.drop_every == 0) return;   /* lost */
    unsigned n = dgram_reply_nfrag(len);
    unsigned char buf[DGRAM_MTU];
    dgram_hdr h = *rq;
    h.term = F.term - (F.lag_left > 0 && me == F.lag_node);
    for (unsigned k = 0; k < n; k++) {
        unsigned i = F.reverse ? n - 1 - k : k;
        long l = dgram_put_reply(buf, &h, resp, len, i);
        for (int c = 0; c < ((F.dup && i == 0) ? 2 : 1); c++)
            sendto(F.fd[me], buf, (size_t)l, 0, (const struct sockaddr *)to, sizeof *to);
    }
}

/* One request (alone, or an entry of a packed frame): h, and its
 * argument vector in pl[0..plen). Called with F.lock held. */
static void on_one(int me, dgram_hdr h, const unsigned char *pl, size_t plen,
                   const struct sockaddr_in *from) {
    const char *why;
    const char *argv[64];
    size_t alen[64];
    for (size_t i = 0; i < F.ncache; i++)
        if (F.cache[i].client == h.client && F.cache[i].id == h.req) {
            send_reply(me, from, &h, F.cache[i].resp, F.cache[i].len, 0);
            goto out;
        }
    unsigned char buf[DGRAM_MTU];
    if (h.term != 0 && h.term < F.term) {
        F.stale++;
        long l = dgram_put_refuse(buf, &(dgram_hdr){.client = h.client, .req = h.req,
                                                   .term = F.term, .shard = h.shard},
                                  DGRAM_R_STALE, "stale");
        sendto(F.fd[me], buf, (size_t)l, 0, (const struct sockaddr *)from, sizeof *from);
        goto out;
    }
    if (F.busy_every && h.req % (uint64_t)F.busy_every == 0) {
        int seen = 0;
        for (int i = 0; i < F.nbusy; i++) seen |= F.busy_seen[i] == (h.client ^ h.req);
        if (!seen && F.nbusy < 4096) {
            F.busy_seen[F.nbusy++] = h.client ^ h.req;
            F.busy++;
            long l = dgram_put_refuse(buf, &(dgram_hdr){.client = h.client, .req = h.req,
                                                       .term = F.term, .shard = h.shard},
                                      DGRAM_R_BUSY, "busy");
            sendto(F.fd[me], buf, (size_t)l, 0, (const struct sockaddr *)from, sizeof *from);
            goto out;
        }
    }
    int argc = dgram_get_args(pl, plen, argv, alen, 64, &why);
    if (argc < 0) goto out;
    size_t rlen;
    char *resp = run_cmd(me, argc, argv, alen, &rlen);
    if (F.ncache == F.cap) {
        F.cap = F.cap ? 2 * F.cap : 1024;
        F.cache = realloc(F.cache, F.cap * sizeof *F.cache);
    }
    F.cache[F.ncache++] = (cached){h.client, h.req, resp, rlen};
    send_reply(me, from, &h, resp, rlen, 1);
out:;
}

/* A datagram from librowan: one request, or a packed frame of several
 * (answered one datagram each: librowan reads both). */
static void on_request(int me, const unsigned char *d, size_t len, const struct sockaddr_in *from) {
    dgram_hdr h;
    const char *why;
    if (dgram_get_hdr(d, len, &h, &why) < 0) return;
    pthread_mutex_lock(&F.lock);
    if (h.type == DGRAM_REQUEST) {
        on_one(me, h, d + DGRAM_HDR_LEN, len - DGRAM_HDR_LEN, from);
    } else if (h.type == DGRAM_PACKED_REQUESTS) {
        F.packs++;
        dgram_entry e;
        size_t pos = 0;
        while (dgram_pack_next(d + DGRAM_HDR_LEN, len - DGRAM_HDR_LEN, h.type, &pos, &e)) {
            dgram_hdr eh = h;
            eh.type = DGRAM_REQUEST;
            eh.req = e.req;
            eh.shard = e.shard;
            eh.frag = e.frag;
            on_one(me, eh, e.payload, e.len, from);
        }
    }
    pthread_mutex_unlock(&F.lock);
}

static void *fake_main(void *arg) {
    (void)arg;
    unsigned char d[DGRAM_MTU + 16];
    while (!atomic_load(&F.stop)) {
        struct pollfd pf[2] = {{F.fd[0], POLLIN, 0}, {F.fd[1], POLLIN, 0}};
        if (poll(pf, 2, 50) <= 0) continue;
        for (int i = 0; i < 2; i++) {
            if (!(pf[i].revents & POLLIN)) continue;
            struct sockaddr_in from;
            socklen_t fl = sizeof from;
            ssize_t n = recvfrom(F.fd[i], d, sizeof d, 0, (struct sockaddr *)&from, &fl);
            if (n > 0) on_request(i, d, (size_t)n, &from);
        }
    }
    return NULL;
}

static void fake_start(pthread_t *thr) {
    pthread_mutex_init(&F.lock, NULL);
    for (int i = 0; i < 2; i++) {
        F.fd[i] = socket(AF_INET, SOCK_DGRAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        bind(F.fd[i], (struct sockaddr *)&a, sizeof a);
        socklen_t l = sizeof a;
        getsockname(F.fd[i], (struct sockaddr *)&a, &l);
        F.port[i] = ntohs(a.sin_port);
    }
    pthread_create(thr, NULL, fake_main, NULL);
}

static void knobs(int cluster, uint64_t term, int flip, int drop, int busy, int rev, int dup) {
    pthread_mutex_lock(&F.lock);
    F.cluster = cluster;
    F.term = term;
    F.flip = flip;
    F.drop_every = drop;
    F.busy_every = busy;
    F.reverse = rev;
    F.dup = dup;
    pthread_mutex_unlock(&F.lock);
}

static long long runs(void) {
    pthread_mutex_lock(&F.lock);
    long long n = F.incr_runs[0] + F.incr_runs[1];
    pthread_mutex_unlock(&F.lock);
    return n;
}

/* ---------------- the tests ---------------- */

/* The replies of n pipelined INCRs of one key: each of 1..n exactly once.
 * Not necessarily in order: a request refused BUSY or lost runs after the
 * ones sent behind it (datagrams have no order; replies are handed back in
 * the order appended, values are what each INCR saw). */
static int replies_are_1_to_n(rowanContext *c, int n) {
    char *seen = calloc((size_t)n + 1, 1);
    int ok = 1;
    for (int i = 1; i <= n; i++) {
        void *rp;
        if (rowanGetReply(c, &rp) != ROWAN_OK) { ok = 0; continue; }
        long long v = ((redisReply *)rp)->integer;
        ok &= v >= 1 && v <= n && !seen[v];
        if (v >= 1 && v <= n) seen[v] = 1;
        freeReplyObject(rp);
    }
    free(seen);
    return ok;
}

static void test_standalone_lossy(void) {
    knobs(0, 0, 0, 3, 7, 1, 1);
    rowanContext *c = rowanConnect("127.0.0.1", F.port[0]);
    CHECK(c && !c->err);
    long long before = runs();
    int ok = 1;
    for (int i = 1; i <= 200; i++) {
        redisReply *r = rowanCommand(c, "INCR %s", "counter");
        ok &= r && r->type == REDIS_REPLY_INTEGER && r->integer == i;
        if (r) freeReplyObject(r);
    }
    CHECK(ok);
    CHECK_EQ_LL(runs() - before, 200);          /* every INCR ran exactly once */
    rowanStats st;
    rowanGetStats(c, &st);
    CHECK(st.retransmits > 0);
    CHECK_EQ_LL(rowanTerm(c), 0);

    /* a reply in 49 fragments, sent in reverse order, the first twice */
    redisReply *r = rowanCommand(c, "BIG %d", 200000);
    CHECK(r && r->type == REDIS_REPLY_STRING && r->len == 200000);
    int same = r != NULL;
    for (size_t i = 0; r && i < 200000; i++) same &= r->str[i] == (char)('a' + i % 26);
    CHECK(same);
    if (r) freeReplyObject(r);

    /* pipelining through loss and BUSY refusals */
    pthread_mutex_lock(&F.lock);
    long long packs_before = F.packs;
    pthread_mutex_unlock(&F.lock);
    for (int i = 0; i < 300; i++) CHECK(rowanAppendCommand(c, "INCR %s", "pipe") == ROWAN_OK);
    CHECK(replies_are_1_to_n(c, 300));
    pthread_mutex_lock(&F.lock);
    CHECK(F.packs > packs_before);             /* the pipeline went out in packed frames */
    pthread_mutex_unlock(&F.lock);

    /* the library's own fault hook, both ways, with duplicates */
    knobs(0, 0, 0, 0, 0, 0, 0);
    rowanSetFaults(c, 0.25, 0.25, 0.25, 42);
    /* Pipelined requests and replies travel packed, so a batch may be only
     * a few datagrams each way, and how many depends on timing: batches go
     * on (each on a key of its own) until every kind of fault has hit. */
    int batches = 0;
    do {
        char key[32];
        snprintf(key, sizeof key, "hook%d", batches++);
        before = runs();
        for (int i = 0; i < 200; i++) CHECK(rowanAppendCommand(c, "INCR %s", key) == ROWAN_OK);
        CHECK(replies_are_1_to_n(c, 200));
        CHECK_EQ_LL(runs() - before, 200);
        rowanGetStats(c, &st);
    } while (!(st.dropped_send > 0 && st.dropped_recv > 0 && st.duplicated > 0) && batches < 20);
    CHECK(st.dropped_send > 0 && st.dropped_recv > 0 && st.duplicated > 0);
    rowanSetFaults(c, 0, 0, 0, 1);

    /* refused before sending: too large */
    static char big[5000];
    CHECK(rowanCommand(c, "SET k %b", big, sizeof big) == NULL && c->err == ROWAN_ERR_TOOBIG);
    r = rowanCommand(c, "PING");
    CHECK(r && c->err == 0 && !strcmp(r->str, "PONG"));
    if (r) freeReplyObject(r);
    rowanFree(c);
}

static int node_of_key(const char *k) {
    return owner_of(hash_slot(k, strlen(k)));
}

static void test_cluster_routing_and_failover(void) {
    knobs(1, 3, 0, 0, 0, 0, 0);
    rowanContext *c = rowanConnect("127.0.0.1", F.port[1]);   /* seed: node 1 */
    CHECK(c && !c->err);
    CHECK_EQ_LL(rowanTerm(c), 3);
    long long r0 = F.incr_runs[0], r1 = F.incr_runs[1];
    char key[32];
    int ok = 1;
    for (int i = 0; i < 100; i++) {
        snprintf(key, sizeof key, "k%d", i);
        redisReply *r = rowanCommand(c, "INCR %s", key);
        ok &= r && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
        if (r) freeReplyObject(r);
    }
    CHECK(ok);
    rowanStats st;
    rowanGetStats(c, &st);
    CHECK_EQ_LL(st.redirects, 0);                  /* routed to the owner first */
    CHECK(F.incr_runs[0] > r0 && F.incr_runs[1] > r1);
    CHECK_EQ_LL(F.moved, 0);

    /* failover: the slots swap under a new term; the old term is refused */
    knobs(1, 4, 1, 0, 0, 0, 0);
    long long before = runs();
    ok = 1;
    for (int i = 0; i < 100; i++) {
        snprintf(key, sizeof key, "k%d", i);
        redisReply *r = rowanCommand(c, "INCR %s", key);
        ok &= r && r->type == REDIS_REPLY_INTEGER && r->integer == 2;
        if (r) freeReplyObject(r);
    }
    CHECK(ok);
    CHECK_EQ_LL(runs() - before, 100);
    CHECK_EQ_LL(rowanTerm(c), 4);
    CHECK(F.stale > 0);
    rowanGetStats(c, &st);
    CHECK(st.refreshes >= 2 && st.redirects > 0);

    /* the slots move back under the same term: -MOVED, followed */
    knobs(1, 4, 0, 0, 0, 0, 0);
    long long moved0 = F.moved;
    ok = 1;
    for (int i = 0; i < 100; i++) {
        snprintf(key, sizeof key, "k%d", i);
        redisReply *r = rowanCommand(c, "GET %s", key);
        ok &= r && r->type == REDIS_REPLY_INTEGER && r->integer == 2;
        if (r) freeReplyObject(r);
    }
    CHECK(ok);
    CHECK(F.moved > moved0);
    /* and the map was corrected: a second pass meets no -MOVED */
    moved0 = F.moved;
    for (int i = 0; i < 100; i++) {
        snprintf(key, sizeof key, "k%d", i);
        redisReply *r = rowanCommand(c, "GET %s", key);
        if (r) freeReplyObject(r);
    }
    CHECK_EQ_LL(F.moved, moved0);
    (void)node_of_key;
    rowanFree(c);
}

/* -TRYAGAIN (a shard checked after a failover, reconcile.h) is asked again
 * until the request's timeout however often it comes, not a bounded number
 * of times (a check longer than 8 tries used to reach the caller); past
 * the timeout the caller gets the -TRYAGAIN, which ran nowhere. */
static void test_tryagain_until_timeout(void) {
    knobs(1, 4, 0, 0, 0, 0, 0);
    rowanContext *c = rowanConnect("127.0.0.1", F.port[0]);
    CHECK(c && !c->err);
    pthread_mutex_lock(&F.lock);
    F.tryagain = 20;                               /* ~400 ms of 20 ms waits */
    pthread_mutex_unlock(&F.lock);
    long long before = runs();
    redisReply *r = rowanCommand(c, "INCR %s", "tryagain");
    CHECK(r && r->type == REDIS_REPLY_INTEGER && r->integer == 1);
    if (r) freeReplyObject(r);
    CHECK_EQ_LL(runs() - before, 1);
    pthread_mutex_lock(&F.lock);
    CHECK_EQ_LL(F.tryagain, 0);
    F.tryagain = 1000000;                          /* never served in time */
    pthread_mutex_unlock(&F.lock);
    struct timeval tv = {0, 300000};
    rowanSetTimeout(c, tv);
    r = rowanCommand(c, "INCR %s", "tryagain");
    CHECK(r && r->type == REDIS_REPLY_ERROR && !strncmp(r->str, "TRYAGAIN", 8));
    if (r) freeReplyObject(r);
    CHECK_EQ_LL(runs() - before, 1);
    pthread_mutex_lock(&F.lock);
    F.tryagain = 0;
    pthread_mutex_unlock(&F.lock);
    rowanFree(c);
}

/* A planned handover's new primary a moment behind the old one: the old
 * primary (term 4) sends -MOVED to it, and it, under term 3 still, sends
 * -MOVED back by its old map. The library waits for it (its reply's term
 * is behind ours) instead of bouncing until its reroutes run out. */
static void test_moved_from_a_lagging_node(void) {
    knobs(1, 4, 1, 0, 0, 0, 0);
    rowanContext *c = rowanConnect("127.0.0.1", F.port[0]);
    CHECK(c && !c->err);
    char key[32];
    int i = 0;
    do snprintf(key, sizeof key, "lag%d", i++); while (node_of_key(key) != 1);
    pthread_mutex_lock(&F.lock);
    F.lag_node = 1;
    F.lag_left = 15;                               /* 15 tries: ~300 ms */
    long long moved0 = F.moved;
    pthread_mutex_unlock(&F.lock);
    long long before = runs();
    redisReply *r = rowanCommand(c, "INCR %s", key);
    CHECK(r && r->type == REDIS_REPLY_INTEGER && r->integer == 1);
    if (r) freeReplyObject(r);
    CHECK_EQ_LL(runs() - before, 1);
    pthread_mutex_lock(&F.lock);
    CHECK_EQ_LL(F.lag_left, 0);
    CHECK(F.moved - moved0 >= 15);
    pthread_mutex_unlock(&F.lock);
    rowanFree(c);
}

static struct { int done, bad; struct event_base *base; } A;

static void on_incr(rowanAsyncContext *ac, void *reply, void *priv) {
    redisReply *r = reply;
    (void)ac;
    if (!r || r->type != REDIS_REPLY_INTEGER || r->integer != (long long)(intptr_t)priv) A.bad++;
    if (++A.done == 300) event_base_loopbreak(A.base);
}

static void test_async_lossy(void) {
    knobs(1, 4, 0, 4, 0, 1, 1);
    A.base = event_base_new();
    rowanAsyncContext *ac = rowanAsyncConnect("127.0.0.1", F.port[0]);
    CHECK(ac && !ac->err);
    CHECK(rowanLibeventAttach(ac, A.base) == ROWAN_OK);
    long long before = runs();
    /* one key: replies must come back 1..300 in the order sent */
    for (int i = 1; i <= 300; i++)
        CHECK(rowanAsyncCommand(ac, on_incr, (void *)(intptr_t)i, "INCR %s", "{a}x") == ROWAN_OK);
    event_base_dispatch(A.base);
    CHECK_EQ_LL(A.done, 300);
    CHECK_EQ_LL(A.bad, 0);
    CHECK_EQ_LL(runs() - before, 300);
    rowanAsyncFree(ac);
    event_base_free(A.base);
}

/* rowanAsyncFree from inside a callback, with commands still outstanding:
 * they get their callback with NULL, once, and nothing is touched after. */
static struct { int replies, nulls; rowanAsyncContext *ac; } B;

static void on_free_cb(rowanAsyncContext *ac, void *reply, void *priv) {
    (void)priv;
    if (!reply) { B.nulls++; return; }
    if (++B.replies == 1) rowanAsyncFree(ac);
}

static void test_async_free_in_callback(void) {
    knobs(0, 0, 0, 0, 0, 0, 0);
    struct event_base *base = event_base_new();
    memset(&B, 0, sizeof B);
    B.ac = rowanAsyncConnect("127.0.0.1", F.port[0]);
    CHECK(B.ac && !B.ac->err);
    CHECK(rowanLibeventAttach(B.ac, base) == ROWAN_OK);
    for (int i = 0; i < 50; i++)
        CHECK(rowanAsyncCommand(B.ac, on_free_cb, NULL, "INCR %s", "free") == ROWAN_OK);
    event_base_dispatch(base);           /* returns once the freed context's events are gone */
    CHECK(B.replies >= 1);
    CHECK_EQ_LL(B.replies + B.nulls, 50);
    event_base_free(base);
}

int main(void) {
    pthread_t thr;
    fake_start(&thr);
    test_standalone_lossy();
    test_cluster_routing_and_failover();
    test_tryagain_until_timeout();
    test_moved_from_a_lagging_node();
    test_async_lossy();
    test_async_free_in_callback();
    atomic_store(&F.stop, 1);
    pthread_join(thr, NULL);
    for (size_t i = 0; i < F.ncache; i++) free(F.cache[i].resp);
    free(F.cache);
    return UNIT_DONE("test-librowan");
}
