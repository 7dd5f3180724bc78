/* example.c -- librowan in a few lines: rowan-example [host [native-port]]
 *
 * Built by `make` as build/<variant>/rowan-example. With librowan
 * installed: cc example.c $(pkg-config --cflags --libs rowan) -levent_core */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <event2/event.h>
#include "rowan.h"

static void on_get(rowanAsyncContext *ac, void *reply, void *privdata) {
    redisReply *r = reply;
    if (r == NULL) printf("async GET failed: %s\n", ac->errstr);
    else printf("async GET %s -> %s\n", (const char *)privdata, r->str ? r->str : "(nil)");
    event_base_loopbreak((struct event_base *)ac->data);
}

int main(int argc, char **argv) {
    const char *host = argc > 1 ? argv[1] : "127.0.0.1";
    int port = argc > 2 ? atoi(argv[2]) : 6380;

    /* blocking */
    rowanContext *c = rowanConnect(host, port);
    if (c == NULL || c->err) {
        fprintf(stderr, "connect: %s\n", c ? c->errstr : "out of memory");
        rowanFree(c);
        return 1;
    }
    const char *val = "hello, datagram";
    redisReply *r = rowanCommand(c, "SET %s %b", "example:key", val, strlen(val));
    if (r == NULL) {
        fprintf(stderr, "SET: %s\n", c->errstr);
        rowanFree(c);
        return 1;
    }
    printf("SET -> %s\n", r->str);
    freeReplyObject(r);

    /* pipelining: three commands in flight, replies in order */
    for (int i = 0; i < 3; i++) rowanAppendCommand(c, "INCR %s", "example:counter");
    for (int i = 0; i < 3; i++) {
        void *reply;
        if (rowanGetReply(c, &reply) == ROWAN_OK) {
            printf("INCR -> %lld\n", ((redisReply *)reply)->integer);
            freeReplyObject(reply);
        } else {
            printf("INCR failed: %s\n", c->errstr);
        }
    }
    rowanFree(c);

    /* asynchronous, on libevent */
    struct event_base *base = event_base_new();
    rowanAsyncContext *ac = rowanAsyncConnect(host, port);
    if (ac == NULL || ac->err) {
        fprintf(stderr, "async connect: %s\n", ac ? ac->errstr : "out of memory");
        return 1;
    }
    ac->data = base;
    rowanLibeventAttach(ac, base);
    rowanAsyncCommand(ac, on_get, "example:key", "GET %s", "example:key");
    event_base_dispatch(base);
    rowanAsyncFree(ac);
    event_base_free(base);
    return 0;
}
