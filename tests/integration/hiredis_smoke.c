/* hiredis_smoke.c -- a C client against a running server (built and run by
 * test_protocol.py::test_hiredis_smoke).
 *
 *   hiredis_smoke PORT
 *
 * Pipelines SETs and GETs of binary values (NUL, CR, LF, every byte value,
 * lengths from 0 to 200 KB, binary keys), then checks every reply's type and
 * contents, plus nil, integer, array and error replies. Exit 0 only when
 * every check passed; each failure is printed on stderr. */
#include <hiredis/hiredis.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int checks, failures;

#define CHECK(cond, ...)                                                     \
    do {                                                                     \
        checks++;                                                            \
        if (!(cond)) {                                                       \
            failures++;                                                      \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);  \
            fprintf(stderr, __VA_ARGS__);                                    \
            fputc('\n', stderr);                                             \
        }                                                                    \
    } while (0)

#define NVALS 300

static const char *type_name(int t) {
    switch (t) {
    case REDIS_REPLY_STRING: return "string";
    case REDIS_REPLY_ARRAY: return "array";
    case REDIS_REPLY_INTEGER: return "integer";
    case REDIS_REPLY_NIL: return "nil";
    case REDIS_REPLY_STATUS: return "status";
    case REDIS_REPLY_ERROR: return "error";
    default: return "?";
    }
}

/* Deterministic bytes: a small LCG seeded per value. */
static size_t make_value(int i, unsigned char **out) {
    size_t len;
    if (i == 0) len = 0;
    else if (i % 97 == 0) len = 200000;
    else if (i % 13 == 0) len = 16384 + (size_t)i;
    else len = (size_t)((i * 37) % 3000) + 1;
    unsigned char *v = malloc(len ? len : 1);
    if (!v) { perror("malloc"); exit(2); }
    uint32_t x = 2166136261u ^ (uint32_t)i;
    for (size_t j = 0; j < len; j++) {
        x = x * 1664525u + 1013904223u;
        v[j] = (unsigned char)(x >> 24);
        if (j % 17 == 0) v[j] = "\0\r\n$*"[j % 5];
    }
    *out = v;
    return len;
}

static redisReply *next_reply(redisContext *c) {
    void *r = NULL;
    if (redisGetReply(c, &r) != REDIS_OK || r == NULL) {
        fprintf(stderr, "FATAL: reading a reply failed: %s\n", c->errstr);
        exit(2);
    }
    return r;
}

static redisReply *command(redisContext *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    if (r == NULL) {
        fprintf(stderr, "FATAL: command failed: %s\n", c->errstr);
        exit(2);
    }
    return r;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s PORT\n", argv[0]);
        return 2;
    }
    int port = atoi(argv[1]);
    struct timeval tv = {15, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (c == NULL || c->err) {
        fprintf(stderr, "FATAL: connect: %s\n", c ? c->errstr : "no memory");
        return 2;
    }
    redisSetTimeout(c, tv);

    unsigned char *vals[NVALS];
    size_t lens[NVALS];
    for (int i = 0; i < NVALS; i++) lens[i] = make_value(i, &vals[i]);

    /* one pipeline: all SETs, then all GETs, then the binary-key round */
    for (int i = 0; i < NVALS; i++)
        redisAppendCommand(c, "SET bin:%d %b", i, vals[i], lens[i]);
    for (int i = 0; i < NVALS; i++)
        redisAppendCommand(c, "GET bin:%d", i);
    static const char bkey[] = "k\0\r\n\xff";
    redisAppendCommand(c, "SET %b %b", bkey, sizeof bkey - 1, vals[5], lens[5]);
    redisAppendCommand(c, "GET %b", bkey, sizeof bkey - 1);
    redisAppendCommand(c, "GET %b", bkey, sizeof bkey - 2);

    for (int i = 0; i < NVALS; i++) {
        redisReply *r = next_reply(c);
        CHECK(r->type == REDIS_REPLY_STATUS && r->len == 2 && memcmp(r->str, "OK", 2) == 0,
              "SET bin:%d: got %s %.*s", i, type_name(r->type), (int)(r->len > 80 ? 80 : r->len),
              r->str ? r->str : "");
        freeReplyObject(r);
    }
    for (int i = 0; i < NVALS; i++) {
        redisReply *r = next_reply(c);
        CHECK(r->type == REDIS_REPLY_STRING, "GET bin:%d: type %s", i, type_name(r->type));
        if (r->type == REDIS_REPLY_STRING) {
            CHECK((size_t)r->len == lens[i], "GET bin:%d: length %zu, want %zu", i,
                  (size_t)r->len, lens[i]);
            CHECK((size_t)r->len == lens[i] && memcmp(r->str, vals[i], lens[i]) == 0,
                  "GET bin:%d: bytes differ", i);
        }
        freeReplyObject(r);
    }
    redisReply *r = next_reply(c);
    CHECK(r->type == REDIS_REPLY_STATUS, "SET binary key: %s", type_name(r->type));
    freeReplyObject(r);
    r = next_reply(c);
    CHECK(r->type == REDIS_REPLY_STRING && (size_t)r->len == lens[5] &&
          memcmp(r->str, vals[5], lens[5]) == 0, "GET binary key: %s", type_name(r->type));
    freeReplyObject(r);
    r = next_reply(c);
    CHECK(r->type == REDIS_REPLY_NIL, "GET of a key prefix: %s", type_name(r->type));
    freeReplyObject(r);

    /* other reply types */
    r = command(c, "GET nosuch:key");
    CHECK(r->type == REDIS_REPLY_NIL, "GET missing: %s", type_name(r->type));
    freeReplyObject(r);
    r = command(c, "DEL smoke:ctr");
    CHECK(r->type == REDIS_REPLY_INTEGER, "DEL: %s", type_name(r->type));
    freeReplyObject(r);
    for (int i = 1; i <= 3; i++) {
        r = command(c, "INCR smoke:ctr");
        CHECK(r->type == REDIS_REPLY_INTEGER && r->integer == i, "INCR: %s %lld",
              type_name(r->type), r->integer);
        freeReplyObject(r);
    }
    r = command(c, "MGET bin:1 nosuch:key smoke:ctr");
    CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 3, "MGET: %s", type_name(r->type));
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 3) {
        CHECK(r->element[0]->type == REDIS_REPLY_STRING && (size_t)r->element[0]->len == lens[1] &&
              memcmp(r->element[0]->str, vals[1], lens[1]) == 0, "MGET[0]");
        CHECK(r->element[1]->type == REDIS_REPLY_NIL, "MGET[1]: %s", type_name(r->element[1]->type));
        CHECK(r->element[2]->type == REDIS_REPLY_STRING && r->element[2]->len == 1 &&
              r->element[2]->str[0] == '3', "MGET[2]");
    }
    freeReplyObject(r);
    r = command(c, "GET");
    CHECK(r->type == REDIS_REPLY_ERROR &&
          strcmp(r->str, "ERR wrong number of arguments for 'get' command") == 0,
          "GET without key: %s %s", type_name(r->type), r->str ? r->str : "");
    freeReplyObject(r);
    r = command(c, "APPEND bin:0 %b", "\0\r\n", (size_t)3);
    CHECK(r->type == REDIS_REPLY_INTEGER && r->integer == 3, "APPEND: %s %lld",
          type_name(r->type), r->integer);
    freeReplyObject(r);
    r = command(c, "GET bin:0");
    CHECK(r->type == REDIS_REPLY_STRING && r->len == 3 && memcmp(r->str, "\0\r\n", 3) == 0,
          "GET after APPEND");
    freeReplyObject(r);
    r = command(c, "PING");
    CHECK(r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0, "PING: %s",
          type_name(r->type));
    freeReplyObject(r);
    r = command(c, "EXISTS bin:1 bin:2 nosuch:key");
    CHECK(r->type == REDIS_REPLY_INTEGER && r->integer == 2, "EXISTS: %lld", r->integer);
    freeReplyObject(r);

    for (int i = 0; i < NVALS; i++) free(vals[i]);
    redisFree(c);
    printf("hiredis_smoke: %d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
