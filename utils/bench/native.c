/* native.c -- see native.h. */
#include "native.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/rowan.h"

#define NATIVE_MAX_ARGS 256

static void on_native_reply(rowanAsyncContext *ac, void *reply, void *priv) {
    static __thread int warned;   /* once per thread: a dead server must not flood */
    if (!reply && !warned) {
        warned = 1;
        fprintf(stderr, "rowan-bench: native: %s\n", ac->errstr);
    }
    ((native_reply_fn *)ac->data)(reply, priv);
}

void *native_connect(struct event_base *base, const char *host, int port,
                     native_reply_fn *fn, char *err, size_t errlen) {
    rowanAsyncContext *ac = rowanAsyncConnect(host, port);
    if (!ac || ac->err) {
        snprintf(err, errlen, "native %s:%d: %s", host, port, ac ? ac->errstr : "out of memory");
        if (ac) rowanAsyncFree(ac);
        return NULL;
    }
    ac->data = (void *)fn;
    if (rowanLibeventAttach(ac, base) != ROWAN_OK) {
        snprintf(err, errlen, "native %s:%d: cannot attach to the event base", host, port);
        rowanAsyncFree(ac);
        return NULL;
    }
    return ac;
}

/* "$<n>\r\n" or "*<n>\r\n" at *p: n, advancing past the CRLF; -1 if not. */
static long resp_len(const char **p, const char *end, char type) {
    const char *s = *p;
    if (s >= end || *s != type) return -1;
    long n = 0;
    for (s++; s < end && *s >= '0' && *s <= '9'; s++) n = n * 10 + (*s - '0');
    if (end - s < 2 || s[0] != '\r' || s[1] != '\n') return -1;
    *p = s + 2;
    return n;
}

int native_send(void *ctx, const char *resp, size_t len, void *priv) {
    const char *p = resp, *end = resp + len;
    const char *argv[NATIVE_MAX_ARGS];
    size_t argvlen[NATIVE_MAX_ARGS];
    long argc = resp_len(&p, end, '*');
    if (argc <= 0 || argc > NATIVE_MAX_ARGS) return -1;
    for (long i = 0; i < argc; i++) {
        long n = resp_len(&p, end, '$');
        if (n < 0 || end - p < n + 2) return -1;
        argv[i] = p;
        argvlen[i] = (size_t)n;
        p += n + 2;
    }
    return rowanAsyncCommandArgv(ctx, on_native_reply, priv, (int)argc, argv, argvlen) == ROWAN_OK
               ? 0 : -1;
}

void native_close(void *ctx) {
    rowanAsyncFree(ctx);
}
