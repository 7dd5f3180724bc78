/* acl.c -- users and permissions: Redis 7.0's ACL.
 *
 * Design
 * ------
 * A user is a name, on/off, its passwords (SHA-256, hex), and one root
 * selector: key patterns (with %R/%W read/write flags), channel patterns
 * and the commands it may run. Selectors beyond the root one ("(...)") are
 * not supported and refused with an error.
 *
 * Commands are numbered by their row in the command table (commands.c and
 * the cmds_*.def files), then the containers' subcommand rows
 * (cmds_subcommands.def) after them: a user keeps one byte per row
 * (allowed or not), so "+config|get" and the categories reach each
 * subcommand as in Redis (a container itself is only @slow, its
 * subcommands have their own categories; allowing or denying the container
 * does it for all its subcommands). A short list of exceptions by first
 * argument remains for the rest: an allowed first argument of a command
 * ("+select|0"), and a subcommand of a container without subcommand rows
 * (ROWAN), as Redis does. The categories of a row (@read, @string, @fast,
 * ...) are derived from the table's flags and group, with the few
 * differences from Redis's own lists corrected in cat_fixes[]; ACL
 * GETUSER/LIST describe the commands with Redis 7.0's best-fit algorithm
 * over those categories, subcommands included.
 *
 * Threads: the users live in one sorted array under one rwlock. Workers
 * read it (permission checks, AUTH) under the read lock; ACL SETUSER,
 * DELUSER and LOAD change it under the write lock. SETUSER applies its
 * rules to a copy, so a bad rule changes nothing, then moves the copy into
 * the user in place: clients keep pointing at the same user. A client
 * holds a reference on its user; a deleted user is freed when its last
 * client lets go (always under the write lock, so a reader holding the
 * read lock never sees it freed). The client registry's lock is never
 * taken while the ACL lock is held (CLIENT LIST takes them the other way).
 *
 * requirepass is the default user's password, as in Redis: a change of
 * server.cfg.requirepass (CONFIG SET) is noticed by pointer (config.c never
 * frees an old value) and applied to the default user as "resetpass >pw",
 * or "nopass" when empty.
 *
 * ACL LOG keeps the last acllog-max-len denials, merging a repeat of the
 * same (reason, context, object, user) within 60 seconds as Redis does.
 * ACL SAVE writes the ACL LIST lines to aclfile through a temporary file,
 * fsync and rename, so a crash leaves the old file or the new one. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include "acl.h"
#include "commands.h"
#include "config.h"
#include "multi.h"
#include "pubsub.h"
#include "server.h"
#include "util.h"
#include "edge_state.h"

#define U_ON          (1u << 0)
#define U_NOPASS      (1u << 1)
#define U_ALLKEYS     (1u << 2)
#define U_ALLCHANNELS (1u << 3)
#define U_ALLCOMMANDS (1u << 4)  /* +@all: commands added later are allowed too */
#define U_SANITIZE    (1u << 5)  /* shown only: RESTORE payloads are always checked */
#define U_SKIP_SANITIZE (1u << 6)

#define KEY_READ  1
#define KEY_WRITE 2
#define KEY_ALL   (KEY_READ | KEY_WRITE)

typedef struct keypat { char *pat; int flags; } keypat;
typedef struct subrule { int cmd; char *arg; } subrule;

typedef struct acl_user {
    char *name;
    unsigned flags;
    int npass;
    char (*pass)[65];        /* SHA-256 of each password, lower-case hex */
    int nkeys;
    keypat *keys;
    int nchans;
    char **chans;
    uint8_t *cmds;           /* one per command table row: allowed */
    int nsubs;
    subrule *subs;           /* first-argument exceptions, see the top */
    _Atomic int refs;        /* the table's and each bound client's */
    int deleted;
} acl_user;

/* ---- the categories ---- */

static const char *const cat_names[] = {
    "keyspace", "read", "write", "set", "sortedset", "list", "hash", "string", "bitmap",
    "hyperloglog", "geo", "stream", "pubsub", "admin", "fast", "slow", "blocking",
    "dangerous", "connection", "transaction", "scripting",
};
#define NCATS ((int)(sizeof(cat_names) / sizeof(cat_names[0])))
static const char *const cat_at_names[] = {
    "@keyspace", "@read", "@write", "@set", "@sortedset", "@list", "@hash", "@string", "@bitmap",
    "@hyperloglog", "@geo", "@stream", "@pubsub", "@admin", "@fast", "@slow", "@blocking",
    "@dangerous", "@connection", "@transaction", "@scripting",
};
_Static_assert(sizeof(cat_at_names) == sizeof(cat_names), "one @name per category");
enum { C_KEYSPACE, C_READ, C_WRITE, C_SET, C_SORTEDSET, C_LIST, C_HASH, C_STRING, C_BITMAP,
       C_HLL, C_GEO, C_STREAM, C_PUBSUB, C_ADMIN, C_FAST, C_SLOW, C_BLOCKING, C_DANGEROUS,
       C_CONNECTION, C_TRANSACTION, C_SCRIPTING };

/* The category a command group implies ("sorted-set" -> sortedset). */
static int group_category(const char *group)
{
    static const struct { const char *group; int cat; } map[] = {
        { "string", C_STRING }, { "generic", C_KEYSPACE }, { "keyspace", C_KEYSPACE },
        { "hash", C_HASH }, { "list", C_LIST }, { "set", C_SET },
        { "sorted-set", C_SORTEDSET }, { "sorted_set", C_SORTEDSET }, { "zset", C_SORTEDSET },
        { "bitmap", C_BITMAP }, { "hyperloglog", C_HLL }, { "geo", C_GEO },
        { "stream", C_STREAM }, { "pubsub", C_PUBSUB }, { "connection", C_CONNECTION },
        { "transactions", C_TRANSACTION }, { "scripting", C_SCRIPTING },
    };
    if (!group) return -1;
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
        if (!strcasecmp(group, map[i].group)) return map[i].cat;
    return -1;
}

/* Where Redis 7.0's categories differ from what the flags and group say
 * (blocking commands carry no flag of their own here). */
static const struct { const char *cmd; uint32_t add, drop; } cat_fixes[] = {
#define B(c) (1u << (c))
    { "asking", B(C_CONNECTION), 0 },
    { "readonly", B(C_CONNECTION), 0 },
    { "readwrite", B(C_CONNECTION), 0 },
    { "command", B(C_CONNECTION), 0 },
    { "dbsize", B(C_KEYSPACE), 0 },
    { "flushall", B(C_KEYSPACE) | B(C_DANGEROUS), 0 },
    { "flushdb", B(C_KEYSPACE) | B(C_DANGEROUS), 0 },
    { "swapdb", B(C_KEYSPACE) | B(C_DANGEROUS), 0 },
    { "info", B(C_DANGEROUS), 0 },
    { "lastsave", B(C_ADMIN) | B(C_DANGEROUS), 0 },
    { "sort", B(C_SET) | B(C_SORTEDSET) | B(C_LIST) | B(C_DANGEROUS), B(C_KEYSPACE) },
    { "sort_ro", B(C_SET) | B(C_SORTEDSET) | B(C_LIST) | B(C_DANGEROUS), B(C_KEYSPACE) },
    { "wait", B(C_CONNECTION), B(C_KEYSPACE) },
    { "waitaof", B(C_CONNECTION), B(C_KEYSPACE) },
    { "blpop", B(C_BLOCKING), 0 }, { "brpop", B(C_BLOCKING), 0 },
    { "brpoplpush", B(C_BLOCKING), 0 }, { "blmove", B(C_BLOCKING), 0 },
    { "blmpop", B(C_BLOCKING), 0 }, { "bzpopmin", B(C_BLOCKING), 0 },
    { "bzpopmax", B(C_BLOCKING), 0 }, { "bzmpop", B(C_BLOCKING), 0 },
    { "xread", B(C_BLOCKING), 0 }, { "xreadgroup", B(C_BLOCKING), 0 },
    { "eval_ro", 0, B(C_READ) }, { "evalsha_ro", 0, B(C_READ) },
    { "fcall_ro", 0, B(C_READ) },   /* as EVAL_RO: readonly, yet not @read */
    { "role", B(C_ADMIN) | B(C_DANGEROUS), 0 },
    { "migrate", B(C_DANGEROUS), 0 }, { "restore", B(C_DANGEROUS), 0 },
    { "restore-asking", B(C_DANGEROUS) | B(C_KEYSPACE), 0 },
    { "pubsub|help", 0, B(C_PUBSUB) },
#undef B
};

static uint32_t derive_categories(const struct rcommand *cmd)
{
    uint32_t m = 0;
    int g = group_category(cmd->group);
    if (cmd->flags & CMD_WRITE) m |= 1u << C_WRITE;
    if (cmd->flags & CMD_READONLY) m |= 1u << C_READ;
    if (g >= 0) m |= 1u << g;
    if (cmd->flags & CMD_ADMIN) m |= 1u << C_ADMIN;
    if (cmd->flags & CMD_PUBSUB) m |= 1u << C_PUBSUB;
    m |= 1u << ((cmd->flags & CMD_FAST) ? C_FAST : C_SLOW);
    if (cmd->flags & (CMD_ADMIN | CMD_KEYSEARCH)) m |= 1u << C_DANGEROUS;
    /* a subcommand ("command|info") shares its container's fixes */
    size_t nlen = strcspn(cmd->name, "|");
    for (size_t i = 0; i < sizeof(cat_fixes) / sizeof(cat_fixes[0]); i++)
        if (!strcmp(cmd->name, cat_fixes[i].cmd) ||
            (strlen(cat_fixes[i].cmd) == nlen && !strncmp(cmd->name, cat_fixes[i].cmd, nlen)))
            m = (m | cat_fixes[i].add) & ~cat_fixes[i].drop;
    return m;
}

int acl_command_categories(const struct rcommand *cmd, const char **cats)
{
    int n = 0;
    uint32_t m = derive_categories(cmd);
    for (int j = 0; j < NCATS && n < 8; j++)
        if (m & (1u << j)) cats[n++] = cat_at_names[j];
    return n;
}

static int category_find(const char *s, size_t len)
{
    for (int j = 0; j < NCATS; j++)
        if (strcaseeqlen(s, len, cat_names[j])) return j;
    return -1;
}

/* ---- the command table, numbered ---- */

static struct rcommand *cmd_base;   /* row 0 of the table (one static array) */
static int ncmd;
static int nall;                    /* ncmd + every subcommand row */
static uint32_t *cmd_cats;          /* per row, subcommand rows included */
static const struct rcommand **sub_rows;   /* [nall - ncmd]: the subcommand rows */
static int *first_sub, *nsub;       /* [ncmd]: a container's rows in sub_rows */

static void base_cb(struct rcommand *cmd, void *arg)
{
    (void)arg;
    if (!cmd_base) cmd_base = cmd;
}

static int cmd_index(const struct rcommand *cmd) { return (int)(cmd - cmd_base); }

/* A rule names a command by its original name, as Redis's ACL does, also
 * when rename-command gave it another one (command_lookup's). -1: none. */
static int cmd_find(const char *name, size_t len)
{
    for (int i = 0; i < ncmd; i++)
        if (strcaseeqlen(name, len, cmd_base[i].name)) return i;
    return -1;
}

/* Redis's container commands: their "cmd|sub" names a subcommand. */
static int is_container(int i)
{
    static const char *const containers[] = {
        "acl", "client", "cluster", "command", "config", "function", "latency", "memory",
        "module", "object", "pubsub", "script", "slowlog", "xinfo", "xgroup", "rowan",
    };
    for (size_t j = 0; j < sizeof(containers) / sizeof(containers[0]); j++)
        if (!strcmp(cmd_base[i].name, containers[j])) return 1;
    return 0;
}

/* ---- users ---- */

/* This file's state, one per server (server.h). */
struct acl_state {
    pthread_rwlock_t acl_lock;
    acl_user **users;   /* sorted by name (bytewise) */
    int nusers;
    acl_user *default_user;
};

void acl_state_new(void) {
    struct acl_state *st = calloc(1, sizeof(*st));
    if (!st) abort();
    pthread_rwlock_init(&st->acl_lock, NULL);
    server.edge_state->acl = st;
}

static void user_free(acl_user *u);

void acl_state_free(void)
{
    struct acl_state *st = server.edge_state->acl;
    for (int i = 0; i < st->nusers; i++) user_free(st->users[i]);
    free(st->users);
    pthread_rwlock_destroy(&st->acl_lock);
    free(st);
}

#define acl_lock (server.edge_state->acl->acl_lock)
#define users (server.edge_state->acl->users)   /* sorted by name (bytewise) */
#define nusers (server.edge_state->acl->nusers)
#define default_user (server.edge_state->acl->default_user)

static char *xstrndup(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

static acl_user *user_new(const char *name, size_t len)
{
    acl_user *u = calloc(1, sizeof(*u));
    u->name = xstrndup(name, len);
    u->cmds = calloc((size_t)nall, 1);
    atomic_store(&u->refs, 1);
    return u;
}

/* A user as ACL SETUSER creates it: off, no passwords, keys or commands,
 * and the channels acl-pubsub-default gives. */
static acl_user *user_new_default(const char *name, size_t len)
{
    acl_user *u = user_new(name, len);
    if (__atomic_load_n(&server.cfg.acl_pubsub_default, __ATOMIC_RELAXED)) u->flags |= U_ALLCHANNELS;
    return u;
}

static void user_clear_subs(acl_user *u, int cmd)
{
    int n = 0;
    for (int i = 0; i < u->nsubs; i++) {
        if (cmd < 0 || u->subs[i].cmd == cmd) free(u->subs[i].arg);
        else u->subs[n++] = u->subs[i];
    }
    u->nsubs = n;
}

static void user_clear_keys(acl_user *u)
{
    for (int i = 0; i < u->nkeys; i++) free(u->keys[i].pat);
    u->nkeys = 0;
}

static void user_clear_chans(acl_user *u)
{
    for (int i = 0; i < u->nchans; i++) free(u->chans[i]);
    u->nchans = 0;
}

/* Free what u owns, not u itself nor its name. */
static void user_free_contents(acl_user *u)
{
    user_clear_subs(u, -1);
    user_clear_keys(u);
    user_clear_chans(u);
    free(u->subs);
    free(u->keys);
    free(u->chans);
    free(u->pass);
    free(u->cmds);
}

static void user_free(acl_user *u)
{
    user_free_contents(u);
    free(u->name);
    free(u);
}

/* A deep copy of u's rules (for SETUSER's all-or-nothing). */
static acl_user *user_dup(const acl_user *u)
{
    acl_user *d = user_new(u->name, strlen(u->name));
    d->flags = u->flags;
    d->npass = u->npass;
    d->pass = malloc(sizeof(*d->pass) * (size_t)(u->npass + 1));
    if (u->npass) memcpy(d->pass, u->pass, sizeof(*d->pass) * (size_t)u->npass);
    d->nkeys = u->nkeys;
    d->keys = malloc(sizeof(keypat) * (size_t)(u->nkeys + 1));
    for (int i = 0; i < u->nkeys; i++)
        d->keys[i] = (keypat){ strdup(u->keys[i].pat), u->keys[i].flags };
    d->nchans = u->nchans;
    d->chans = malloc(sizeof(char *) * (size_t)(u->nchans + 1));
    for (int i = 0; i < u->nchans; i++) d->chans[i] = strdup(u->chans[i]);
    memcpy(d->cmds, u->cmds, (size_t)nall);
    d->nsubs = u->nsubs;
    d->subs = malloc(sizeof(subrule) * (size_t)(u->nsubs + 1));
    for (int i = 0; i < u->nsubs; i++) d->subs[i] = (subrule){ u->subs[i].cmd, strdup(u->subs[i].arg) };
    return d;
}

/* Move src's rules into dst (dst keeps its identity and name); frees src. */
static void user_move(acl_user *dst, acl_user *src)
{
    user_free_contents(dst);
    dst->flags = src->flags;
    dst->npass = src->npass; dst->pass = src->pass;
    dst->nkeys = src->nkeys; dst->keys = src->keys;
    dst->nchans = src->nchans; dst->chans = src->chans;
    dst->cmds = src->cmds;
    dst->nsubs = src->nsubs; dst->subs = src->subs;
    free(src->name);
    free(src);
}

/* Drop a reference; the last one frees u. Caller holds the write lock. */
static void user_unref_locked(acl_user *u)
{
    if (atomic_fetch_sub(&u->refs, 1) == 1) user_free(u);
}

static void user_unref(acl_user *u)
{
    if (!u) return;
    pthread_rwlock_wrlock(&acl_lock);
    user_unref_locked(u);
    pthread_rwlock_unlock(&acl_lock);
}

static int user_pos(const char *name, size_t len, int *found)
{
    int lo = 0, hi = nusers;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        const char *n = users[mid]->name;
        size_t nl = strlen(n);
        int cmp = memcmp(n, name, nl < len ? nl : len);
        if (cmp == 0) cmp = nl < len ? -1 : nl > len ? 1 : 0;
        if (cmp == 0) { *found = 1; return mid; }
        if (cmp < 0) lo = mid + 1; else hi = mid;
    }
    *found = 0;
    return lo;
}

static acl_user *user_find(const char *name, size_t len)
{
    int found, i = user_pos(name, len, &found);
    return found ? users[i] : NULL;
}

static void user_insert(acl_user *u)
{
    int found, i = user_pos(u->name, strlen(u->name), &found);
    users = realloc(users, sizeof(*users) * (size_t)(nusers + 1));
    memmove(users + i + 1, users + i, sizeof(*users) * (size_t)(nusers - i));
    users[i] = u;
    nusers++;
}

static void user_remove_at(int i)
{
    memmove(users + i, users + i + 1, sizeof(*users) * (size_t)(nusers - i - 1));
    nusers--;
}

/* ---- rules ---- */

enum rule_err { RE_OK, RE_SYNTAX, RE_NOENT, RE_KEYS_ALL, RE_CHANS_ALL, RE_NOPASS, RE_BADHASH, RE_SELECTOR,
                RE_DUPLICATE };

static const char *rule_error(int e)
{
    switch (e) {
    case RE_NOENT: return "Unknown command or category name in ACL";
    case RE_SYNTAX: return "Syntax error";
    case RE_KEYS_ALL:
        return "Adding a pattern after the * pattern (or the 'allkeys' flag) is not valid and "
               "does not have any effect. Try 'resetkeys' to start with an empty list of patterns";
    case RE_CHANS_ALL:
        return "Adding a pattern after the * pattern (or the 'allchannels' flag) is not valid and "
               "does not have any effect. Try 'resetchannels' to start with an empty list of "
               "channels";
    case RE_NOPASS: return "The password you are trying to remove from the user does not exist";
    case RE_BADHASH:
        return "The password hash must be exactly 64 characters and contain only lowercase "
               "hexadecimal characters";
    case RE_SELECTOR: return "Selectors are not supported by Rowan";
    case RE_DUPLICATE:
        return "Duplicate user found. A user can only be defined once in config files";
    default: return "Wrong format";
    }
}

static void sha256_hex(const char *p, size_t n, char out[65])
{
    unsigned char md[SHA256_DIGEST_LENGTH];
    SHA256((const unsigned char *)p, n, md);
    for (int i = 0; i < SHA256_DIGEST_LENGTH; i++) snprintf(out + 2 * i, 3, "%02x", md[i]);
}

static int pass_find(const acl_user *u, const char *hex)
{
    for (int i = 0; i < u->npass; i++)
        if (!memcmp(u->pass[i], hex, 64)) return i;
    return -1;
}

static void pass_add(acl_user *u, const char *hex)
{
    if (pass_find(u, hex) >= 0) return;
    u->pass = realloc(u->pass, sizeof(*u->pass) * (size_t)(u->npass + 1));
    memcpy(u->pass[u->npass], hex, 64);
    u->pass[u->npass++][64] = 0;
}

static int pass_del(acl_user *u, const char *hex)
{
    int i = pass_find(u, hex);
    if (i < 0) return RE_NOPASS;
    memmove(u->pass + i, u->pass + i + 1, sizeof(*u->pass) * (size_t)(u->npass - i - 1));
    u->npass--;
    return RE_OK;
}

static int valid_hash(const char *h, size_t n)
{
    if (n != 64) return 0;
    for (size_t i = 0; i < n; i++)
        if (!isdigit((unsigned char)h[i]) && !(h[i] >= 'a' && h[i] <= 'f')) return 0;
    return 1;
}

static int sub_find(const acl_user *u, int cmd, const char *arg, size_t len)
{
    for (int i = 0; i < u->nsubs; i++)
        if (u->subs[i].cmd == cmd && strcaseeqlen(arg, len, u->subs[i].arg)) return i;
    return -1;
}

static void sub_set(acl_user *u, int cmd, const char *arg, size_t len, int present)
{
    int i = sub_find(u, cmd, arg, len);
    if (present && i < 0) {
        u->subs = realloc(u->subs, sizeof(subrule) * (size_t)(u->nsubs + 1));
        char *a = xstrndup(arg, len);
        for (char *p = a; *p; p++) *p = (char)tolower((unsigned char)*p);
        u->subs[u->nsubs++] = (subrule){ cmd, a };
    } else if (!present && i >= 0) {
        free(u->subs[i].arg);
        memmove(u->subs + i, u->subs + i + 1, sizeof(subrule) * (size_t)(u->nsubs - i - 1));
        u->nsubs--;
    }
}

/* Redis's ACLChangeSelectorPerm: command i and all its subcommands. */
static void set_bits(uint8_t *bits, int i, int allow)
{
    bits[i] = (uint8_t)allow;
    for (int j = 0; j < nsub[i]; j++) bits[ncmd + first_sub[i] + j] = (uint8_t)allow;
}

static void set_cmd(acl_user *u, int i, int allow)
{
    set_bits(u->cmds, i, allow);
    user_clear_subs(u, i);
}

/* The row of container i's subcommand arg, or -1. */
static int sub_row(int i, const char *arg, size_t len)
{
    const struct rcommand *s = command_subcommand(&cmd_base[i], arg, len);
    for (int j = 0; s && j < nsub[i]; j++)
        if (sub_rows[first_sub[i] + j] == s) return ncmd + first_sub[i] + j;
    return -1;
}

static void set_category(uint8_t *bits, int cat, int allow)
{
    for (int i = 0; i < nall; i++)
        if (cmd_cats[i] & (1u << cat)) {
            if (i < ncmd) set_bits(bits, i, allow);
            else bits[i] = (uint8_t)allow;
        }
}

/* +cmd -cmd +cmd|sub -cmd|sub */
static int rule_command(acl_user *u, const char *op, size_t len)
{
    int allow = op[0] == '+';
    const char *name = op + 1, *bar = memchr(name, '|', len - 1);
    size_t nlen = bar ? (size_t)(bar - name) : len - 1;
    int i = cmd_find(name, nlen);
    if (i < 0) return RE_NOENT;
    if (!bar) {
        set_cmd(u, i, allow);
        return RE_OK;
    }
    const char *arg = bar + 1;
    size_t alen = len - 1 - nlen - 1;
    if (alen == 0 || memchr(arg, '|', alen)) return RE_SYNTAX;
    if (nsub[i]) {
        /* a subcommand row ("+config|nosuch" names no command) */
        int j = sub_row(i, arg, alen);
        if (j < 0) return RE_NOENT;
        u->cmds[j] = (uint8_t)allow;
        return RE_OK;
    }
    if (is_container(i)) {
        /* an exception is a denied subcommand when the command is allowed,
         * an allowed one when it is not */
        sub_set(u, i, arg, alen, u->cmds[i] ? !allow : allow);
        return RE_OK;
    }
    if (!allow) return RE_NOENT;   /* Redis: "-cmd|arg" names no command */
    if (!u->cmds[i]) sub_set(u, i, arg, alen, 1);
    return RE_OK;
}

/* ~pattern %R~pattern %W~pattern %RW~pattern */
static int rule_keys(acl_user *u, const char *op, size_t len)
{
    int flags = 0;
    size_t off = 1;
    if (op[0] == '%') {
        for (; off < len; off++) {
            char ch = (char)toupper((unsigned char)op[off]);
            if (ch == 'R' && !(flags & KEY_READ)) flags |= KEY_READ;
            else if (ch == 'W' && !(flags & KEY_WRITE)) flags |= KEY_WRITE;
            else if (op[off] == '~') { off++; break; }
            else return RE_SYNTAX;
        }
        if (off > len || op[off - 1] != '~' || !flags) return RE_SYNTAX;
    } else {
        flags = KEY_ALL;
    }
    const char *pat = op + off;
    size_t plen = len - off;
    if (flags == KEY_ALL && plen == 1 && pat[0] == '*') {
        user_clear_keys(u);
        u->flags |= U_ALLKEYS;
        return RE_OK;
    }
    if (u->flags & U_ALLKEYS) return RE_KEYS_ALL;
    for (int i = 0; i < u->nkeys; i++)
        if (strlen(u->keys[i].pat) == plen && !memcmp(u->keys[i].pat, pat, plen)) {
            u->keys[i].flags |= flags;
            return RE_OK;
        }
    u->keys = realloc(u->keys, sizeof(keypat) * (size_t)(u->nkeys + 1));
    u->keys[u->nkeys++] = (keypat){ xstrndup(pat, plen), flags };
    return RE_OK;
}

/* &pattern */
static int rule_channel(acl_user *u, const char *op, size_t len)
{
    if (len == 2 && op[1] == '*') {
        user_clear_chans(u);
        u->flags |= U_ALLCHANNELS;
        return RE_OK;
    }
    if (u->flags & U_ALLCHANNELS) return RE_CHANS_ALL;
    for (int i = 0; i < u->nchans; i++)
        if (strlen(u->chans[i]) == len - 1 && !memcmp(u->chans[i], op + 1, len - 1)) return RE_OK;
    u->chans = realloc(u->chans, sizeof(char *) * (size_t)(u->nchans + 1));
    u->chans[u->nchans++] = xstrndup(op + 1, len - 1);
    return RE_OK;
}

static int rule_is(const char *op, size_t len, const char *lit)
{
    return strcaseeqlen(op, len, lit);
}

static int rule_apply(acl_user *u, const char *op, size_t len)
{
    char hex[65];
    if (len == 0) return RE_SYNTAX;
    if (rule_is(op, len, "on")) u->flags |= U_ON;
    else if (rule_is(op, len, "off")) u->flags &= ~U_ON;
    else if (rule_is(op, len, "skip-sanitize-payload"))
        u->flags = (u->flags & ~U_SANITIZE) | U_SKIP_SANITIZE;
    else if (rule_is(op, len, "sanitize-payload"))
        u->flags = (u->flags & ~U_SKIP_SANITIZE) | U_SANITIZE;
    else if (rule_is(op, len, "clearselectors")) {
        /* there are no selectors besides the root one */
    } else if (rule_is(op, len, "allkeys")) return rule_apply(u, "~*", 2);
    else if (rule_is(op, len, "resetkeys")) { user_clear_keys(u); u->flags &= ~U_ALLKEYS; }
    else if (rule_is(op, len, "allchannels")) return rule_apply(u, "&*", 2);
    else if (rule_is(op, len, "resetchannels")) { user_clear_chans(u); u->flags &= ~U_ALLCHANNELS; }
    else if (rule_is(op, len, "allcommands") || rule_is(op, len, "+@all")) {
        memset(u->cmds, 1, (size_t)nall);
        user_clear_subs(u, -1);
        u->flags |= U_ALLCOMMANDS;
    } else if (rule_is(op, len, "nocommands") || rule_is(op, len, "-@all")) {
        memset(u->cmds, 0, (size_t)nall);
        user_clear_subs(u, -1);
        u->flags &= ~U_ALLCOMMANDS;
    } else if (rule_is(op, len, "nopass")) { u->flags |= U_NOPASS; u->npass = 0; }
    else if (rule_is(op, len, "resetpass")) { u->flags &= ~U_NOPASS; u->npass = 0; }
    else if (rule_is(op, len, "reset")) {
        rule_apply(u, "resetpass", 9);
        rule_apply(u, "resetkeys", 9);
        rule_apply(u, "resetchannels", 13);
        if (__atomic_load_n(&server.cfg.acl_pubsub_default, __ATOMIC_RELAXED))
            rule_apply(u, "allchannels", 11);
        rule_apply(u, "off", 3);
        rule_apply(u, "sanitize-payload", 16);
        rule_apply(u, "-@all", 5);
    } else if (op[0] == '>' || op[0] == '<') {
        sha256_hex(op + 1, len - 1, hex);
        if (op[0] == '<') return pass_del(u, hex);
        pass_add(u, hex);
        u->flags &= ~U_NOPASS;
    } else if (op[0] == '#' || op[0] == '!') {
        if (!valid_hash(op + 1, len - 1)) return RE_BADHASH;
        memcpy(hex, op + 1, 64);
        hex[64] = 0;
        if (op[0] == '!') return pass_del(u, hex);
        pass_add(u, hex);
        u->flags &= ~U_NOPASS;
    } else if (op[0] == '~' || op[0] == '%') return rule_keys(u, op, len);
    else if (op[0] == '&') return rule_channel(u, op, len);
    else if ((op[0] == '+' || op[0] == '-') && len > 1 && op[1] == '@') {
        int cat = category_find(op + 2, len - 2);
        if (cat < 0) return RE_NOENT;
        for (int i = 0; i < ncmd; i++)
            if (cmd_cats[i] & (1u << cat)) set_cmd(u, i, op[0] == '+');
        set_category(u->cmds, cat, op[0] == '+');   /* the subcommand rows */
    } else if ((op[0] == '+' || op[0] == '-') && len > 1) return rule_command(u, op, len);
    else if (op[0] == '(') return RE_SELECTOR;
    else return RE_SYNTAX;
    return RE_OK;
}

/* Apply rules to a copy of u; on success move it into u. Returns the index
 * of the failing rule, or -1 (*err gets its error). Write lock held. */
static int user_set_rules(acl_user *u, int n, const char *const *ops, const size_t *lens, int *err)
{
    acl_user *d = user_dup(u);
    for (int i = 0; i < n; i++) {
        *err = rule_apply(d, ops[i], lens[i]);
        if (*err != RE_OK) {
            user_free(d);
            return i;
        }
    }
    user_move(u, d);
    return -1;
}

/* ---- describing a user (ACL LIST, GETUSER, SAVE) ---- */

static void describe_commands(const acl_user *u, rbuf *out)
{
    int additive = !(u->flags & U_ALLCOMMANDS);
    uint8_t *fake = malloc((size_t)nall), *temp = malloc((size_t)nall);
    memset(fake, additive ? 0 : 1, (size_t)nall);
    memcpy(temp, u->cmds, (size_t)nall);
    rbuf_appendf(out, "%s", additive ? "-@all" : "+@all");
    /* Redis 7.0's best fit: apply the category closest to the bits left to
     * explain, until none is closer than it is far. */
    char applied[NCATS] = { 0 };
    for (;;) {
        int best = -1;
        unsigned long mindiff = INT_MAX, maxsame = 0;
        for (int j = 0; j < NCATS; j++) {
            if (applied[j]) continue;
            unsigned long on = 0, off = 0;
            for (int i = 0; i < nall; i++)
                if (cmd_cats[i] & (1u << j)) { if (temp[i]) on++; else off++; }
            unsigned long diff = additive ? off : on, same = additive ? on : off;
            if (same > diff && (diff < mindiff || (diff == mindiff && same > maxsame))) {
                best = j;
                mindiff = diff;
                maxsame = same;
            }
        }
        if (best < 0) break;
        set_category(fake, best, additive);
        set_category(temp, best, !additive);
        rbuf_appendf(out, " %c@%s", additive ? '+' : '-', cat_names[best]);
        applied[best] = 1;
    }
    for (int i = 0; i < ncmd; i++) {
        if (u->cmds[i] != fake[i]) {
            rbuf_appendf(out, " %c%s", u->cmds[i] ? '+' : '-', cmd_base[i].name);
            set_bits(fake, i, u->cmds[i]);
        }
        for (int j = ncmd + first_sub[i]; j < ncmd + first_sub[i] + nsub[i]; j++)
            if (u->cmds[j] != fake[j])
                rbuf_appendf(out, " %c%s", u->cmds[j] ? '+' : '-', sub_rows[j - ncmd]->name);
        for (int s = 0; s < u->nsubs; s++)
            if (u->subs[s].cmd == i)
                rbuf_appendf(out, " %c%s|%s", u->cmds[i] ? '-' : '+', cmd_base[i].name, u->subs[s].arg);
    }
    free(fake);
    free(temp);
}

static void describe_keypat(const keypat *k, rbuf *out)
{
    if (k->flags == KEY_ALL) rbuf_appendf(out, "~%s", k->pat);
    else rbuf_appendf(out, "%%%s~%s", k->flags == KEY_READ ? "R" : "W", k->pat);
}

static void describe_keys(const acl_user *u, rbuf *out)
{
    if (u->flags & U_ALLKEYS) { rbuf_appendf(out, "~*"); return; }
    for (int i = 0; i < u->nkeys; i++) {
        if (i) rbuf_append(out, " ", 1);
        describe_keypat(&u->keys[i], out);
    }
}

static void describe_channels(const acl_user *u, rbuf *out)
{
    if (u->flags & U_ALLCHANNELS) { rbuf_appendf(out, "&*"); return; }
    for (int i = 0; i < u->nchans; i++) rbuf_appendf(out, "%s&%s", i ? " " : "", u->chans[i]);
}

/* "user NAME on nopass #... ~... resetchannels &... -@all +get" (no NUL). */
static void describe_user(const acl_user *u, rbuf *out)
{
    rbuf_appendf(out, "user %s %s", u->name, (u->flags & U_ON) ? "on" : "off");
    if (u->flags & U_NOPASS) rbuf_appendf(out, " nopass");
    if (u->flags & U_SKIP_SANITIZE) rbuf_appendf(out, " skip-sanitize-payload");
    if (u->flags & U_SANITIZE) rbuf_appendf(out, " sanitize-payload");
    for (int i = 0; i < u->npass; i++) rbuf_appendf(out, " #%s", u->pass[i]);
    if ((u->flags & U_ALLKEYS) || u->nkeys) {
        rbuf_append(out, " ", 1);
        describe_keys(u, out);
    }
    if (u->flags & U_ALLCHANNELS) rbuf_appendf(out, " &*");
    else rbuf_appendf(out, " resetchannels");
    for (int i = 0; i < u->nchans; i++) rbuf_appendf(out, " &%s", u->chans[i]);
    rbuf_append(out, " ", 1);
    describe_commands(u, out);
}

/* ---- requirepass = the default user's password ---- */

static const char *seen_requirepass = "";  /* never a config value */

static void sync_requirepass(void)
{
    const char *p = __atomic_load_n(&server.cfg.requirepass, __ATOMIC_ACQUIRE);
    if (p == __atomic_load_n(&seen_requirepass, __ATOMIC_ACQUIRE)) return;
    pthread_rwlock_wrlock(&acl_lock);
    if (p != seen_requirepass) {
        if (p && *p) {
            char hex[65];
            sha256_hex(p, strlen(p), hex);
            rule_apply(default_user, "resetpass", 9);
            pass_add(default_user, hex);
        } else {
            rule_apply(default_user, "nopass", 6);
        }
        __atomic_store_n(&seen_requirepass, p, __ATOMIC_RELEASE);
    }
    pthread_rwlock_unlock(&acl_lock);
}

int acl_default_nopass(void)
{
    sync_requirepass();
    pthread_rwlock_rdlock(&acl_lock);
    int r = (default_user->flags & (U_NOPASS | U_ON)) == (U_NOPASS | U_ON);
    pthread_rwlock_unlock(&acl_lock);
    return r;
}

/* ---- clients ---- */

static acl_user *user_ref(acl_user *u)
{
    atomic_fetch_add(&u->refs, 1);
    return u;
}

static void client_bind(client *c, acl_user *u)
{
    acl_user *old = c->user;
    __atomic_store_n(&c->user, u, __ATOMIC_RELEASE);
    user_unref(old);
}

void acl_client_init(client *c)
{
    c->user = user_ref(default_user);
    c->authenticated = acl_default_nopass();
}

void acl_client_free(client *c)
{
    acl_user *u = c->user;
    c->user = NULL;
    user_unref(u);
}

void acl_client_reset(client *c)
{
    client_bind(c, user_ref(default_user));
    c->authenticated = acl_default_nopass();
}

int acl_user_exists(const char *name, size_t len)
{
    pthread_rwlock_rdlock(&acl_lock);
    int r = user_find(name, len) != NULL;
    pthread_rwlock_unlock(&acl_lock);
    return r;
}

int acl_client_is_user(client *c, const char *name, size_t len)
{
    pthread_rwlock_rdlock(&acl_lock);
    acl_user *u = __atomic_load_n(&c->user, __ATOMIC_ACQUIRE);
    int r = u && strlen(u->name) == len && !memcmp(u->name, name, len);
    pthread_rwlock_unlock(&acl_lock);
    return r;
}

void acl_client_username(client *c, char *buf, size_t len)
{
    pthread_rwlock_rdlock(&acl_lock);
    acl_user *u = __atomic_load_n(&c->user, __ATOMIC_ACQUIRE);
    snprintf(buf, len, "%s", u ? u->name : "default");
    pthread_rwlock_unlock(&acl_lock);
}

/* ---- ACL LOG ---- */

enum { DENIED_OK, DENIED_CMD, DENIED_KEY, DENIED_CHANNEL, DENIED_AUTH };
static const char *const deny_reason[] = { "", "command", "key", "channel", "auth" };

typedef struct acl_log_entry {
    long long count;
    int reason;
    const char *context;
    char *object, *username, *cinfo;
    long long ctime_ms;
    struct acl_log_entry *next;
} acl_log_entry;

/* This file's state, one per server (server.h). */
struct acl_log_state {
    pthread_mutex_t log_mu;
    acl_log_entry *log_head;   /* newest first */
    long long log_len;
};

void acl_log_state_new(void) {
    struct acl_log_state *st = calloc(1, sizeof(*st));
    if (!st) abort();
    pthread_mutex_init(&st->log_mu, NULL);
    server.edge_state->acl_log = st;
}

static void log_entry_free(acl_log_entry *e);

void acl_log_state_free(void)
{
    struct acl_log_state *st = server.edge_state->acl_log;
    for (acl_log_entry *e = st->log_head, *next; e; e = next) {
        next = e->next;
        log_entry_free(e);
    }
    pthread_mutex_destroy(&st->log_mu);
    free(st);
}

#define log_mu (server.edge_state->acl_log->log_mu)
#define log_head (server.edge_state->acl_log->log_head)   /* newest first */
#define log_len (server.edge_state->acl_log->log_len)

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void log_entry_free(acl_log_entry *e)
{
    free(e->object);
    free(e->username);
    free(e->cinfo);
    free(e);
}

static void log_trim_locked(long long max)
{
    acl_log_entry **pp = &log_head;
    long long n = 0;
    while (*pp && n < max) { pp = &(*pp)->next; n++; }
    while (*pp) {
        acl_log_entry *e = *pp;
        *pp = e->next;
        log_entry_free(e);
        log_len--;
    }
}

static void acl_log_add(client *c, int reason, const char *object, size_t olen,
                        const char *username, size_t ulen)
{
    rbuf info;
    rbuf_init(&info);
    client_info_line(c, &info);
    rbuf_append(&info, "", 1);
    const char *context = multi_active(c) ? "multi" : "toplevel";
    long long now = now_ms();
    pthread_mutex_lock(&log_mu);
    acl_log_entry **pp = &log_head, *e = NULL;
    for (; *pp; pp = &(*pp)->next) {
        acl_log_entry *x = *pp;
        if (x->reason == reason && !strcmp(x->context, context) && strlen(x->object) == olen &&
            !memcmp(x->object, object, olen) && strlen(x->username) == ulen &&
            !memcmp(x->username, username, ulen) && now - x->ctime_ms < 60000) {
            *pp = x->next;   /* a repeat: count it and move it to the front */
            e = x;
            log_len--;
            break;
        }
    }
    if (e) {
        e->count++;
        free(e->cinfo);
    } else {
        e = calloc(1, sizeof(*e));
        e->count = 1;
        e->reason = reason;
        e->context = context;
        e->object = xstrndup(object, olen);
        e->username = xstrndup(username, ulen);
    }
    e->cinfo = info.buf;
    e->ctime_ms = now;
    e->next = log_head;
    log_head = e;
    log_len++;
    log_trim_locked(__atomic_load_n(&server.cfg.acllog_max_len, __ATOMIC_RELAXED));
    pthread_mutex_unlock(&log_mu);
}

/* ---- AUTH ---- */

static int user_password_ok(const acl_user *u, const char *pass, size_t plen)
{
    if (!(u->flags & U_ON)) return 0;
    if (u->flags & U_NOPASS) return 1;
    char hex[65];
    sha256_hex(pass, plen, hex);
    int ok = 0;
    for (int i = 0; i < u->npass; i++) ok |= CRYPTO_memcmp(u->pass[i], hex, 64) == 0;
    return ok;
}

int acl_authenticate(client *c, const char *user, size_t ulen, const char *pass, size_t plen)
{
    sync_requirepass();
    if (!user) { user = "default"; ulen = 7; }
    pthread_rwlock_rdlock(&acl_lock);
    acl_user *u = user_find(user, ulen);
    int ok = u && user_password_ok(u, pass, plen);
    if (ok) user_ref(u);
    pthread_rwlock_unlock(&acl_lock);
    if (!ok) {
        acl_log_add(c, DENIED_AUTH, c->argv[0], c->argvlen[0], user, ulen);  /* as sent */
        return 0;
    }
    client_bind(c, u);
    c->authenticated = 1;
    return 1;
}

/* ---- permission checks ---- */

static int key_allowed(const acl_user *u, const char *key, size_t klen, int need)
{
    if (u->flags & U_ALLKEYS) return 1;
    for (int i = 0; i < u->nkeys; i++)
        if ((u->keys[i].flags & need) == need &&
            stringmatchlen(u->keys[i].pat, strlen(u->keys[i].pat), key, klen, 0))
            return 1;
    return 0;
}

/* is_pattern: PSUBSCRIBE's argument must be one of the user's patterns
 * literally (a pattern may match more than any of them). */
static int channel_allowed(const acl_user *u, const char *ch, size_t len, int is_pattern)
{
    if (u->flags & U_ALLCHANNELS) return 1;
    for (int i = 0; i < u->nchans; i++) {
        const char *p = u->chans[i];
        size_t plen = strlen(p);
        if (is_pattern ? (plen == len && !memcmp(p, ch, len)) : stringmatchlen(p, plen, ch, len, 0))
            return 1;
    }
    return 0;
}

static int command_allowed(const acl_user *u, int i, int argc, const char *const *argv,
                           const size_t *argvlen)
{
    if (nsub[i] && argc > 1) {
        int j = sub_row(i, argv[1], argvlen[1]);
        return u->cmds[j >= 0 ? j : i];   /* an unknown one gets its error from the command */
    }
    int has_sub = argc > 1 && sub_find(u, i, argv[1], argvlen[1]) >= 0;
    if (u->cmds[i]) return !(has_sub && is_container(i));
    return has_sub;
}

/* The channels a command names: from argv[*first] on, *last included. */
static int command_channels(const struct rcommand *cmd, int argc, int *first, int *last,
                            int *is_pattern)
{
    *is_pattern = 0;
    const char *n = cmd->name;
    if (!strcmp(n, "subscribe") || !strcmp(n, "ssubscribe")) { *first = 1; *last = argc - 1; }
    else if (!strcmp(n, "psubscribe")) { *first = 1; *last = argc - 1; *is_pattern = 1; }
    else if (!strcmp(n, "publish") || !strcmp(n, "spublish")) { *first = 1; *last = 1; }
    else return 0;
    return 1;
}

/* Commands whose keys follow a count (Redis's "movable keys"): the table's
 * first/last/step span the count and the options too, which are no keys
 * to check against patterns. dest: argv[1] is a key as well, written
 * only, and the counted keys are read only. */
static const struct { const char *cmd; int dest, countpos; } numkeys_cmds[] = {
    { "zunionstore", 1, 2 }, { "zinterstore", 1, 2 }, { "zdiffstore", 1, 2 },
    { "zunion", 0, 1 }, { "zinter", 0, 1 }, { "zdiff", 0, 1 }, { "zintercard", 0, 1 },
    { "sintercard", 0, 1 }, { "lmpop", 0, 1 }, { "zmpop", 0, 1 }, { "blmpop", 0, 2 },
    { "bzmpop", 0, 2 }, { "fcall", 0, 2 }, { "fcall_ro", 0, 2 },
    { "eval", 0, 2 }, { "evalsha", 0, 2 }, { "eval_ro", 0, 2 }, { "evalsha_ro", 0, 2 },
};

/* The argv positions of cmd's keys into pos and the access each needs into
 * need (both with room for argc). A read-only command reads its keys; any
 * other reads and writes them, except where the roles are known (a STORE
 * destination is only written, its sources only read): the table has no
 * per-key flags. */
static int acl_command_keys(const struct rcommand *cmd, int argc, const char *const *argv,
                            const size_t *argvlen, int *pos, int *need)
{
    int dflt = (cmd->flags & CMD_READONLY) ? KEY_READ : KEY_ALL, n = 0;
    for (size_t i = 0; i < sizeof(numkeys_cmds) / sizeof(numkeys_cmds[0]); i++) {
        if (strcmp(cmd->name, numkeys_cmds[i].cmd)) continue;
        int cp = numkeys_cmds[i].countpos;
        long long nk;
        if (cp >= argc || !string2ll(argv[cp], argvlen[cp], &nk) || nk < 1 || nk > argc - cp - 1)
            break;   /* the command refuses it: check what the table names */
        if (numkeys_cmds[i].dest) { need[n] = KEY_WRITE; pos[n++] = 1; }
        for (int j = 0; j < nk; j++) {
            need[n] = numkeys_cmds[i].dest ? KEY_READ : dflt;
            pos[n++] = cp + 1 + j;
        }
        return n;
    }
    if ((!strcmp(cmd->name, "sort") || !strcmp(cmd->name, "sort_ro")) && argc > 1) {
        need[n] = KEY_READ;
        pos[n++] = 1;
        for (int j = 2; j < argc; j++) {
            if (strcaseeqlen(argv[j], argvlen[j], "limit")) j += 2;
            else if (strcaseeqlen(argv[j], argvlen[j], "by") || strcaseeqlen(argv[j], argvlen[j], "get")) j++;
            else if (strcaseeqlen(argv[j], argvlen[j], "store") && j + 1 < argc) {
                need[n] = KEY_WRITE;
                pos[n++] = ++j;
            }
        }
        return n;
    }
    n = command_keys(cmd, argc, pos, argc);
    for (int k = 0; k < n; k++) need[k] = dflt;
    return n;
}

/* DENIED_* with *pos the argv index of the refused key or channel. Read
 * lock held. */
static int user_check(const acl_user *u, const struct rcommand *cmd, int argc,
                      const char *const *argv, const size_t *argvlen, int *pos)
{
    *pos = 0;
    if (cmd->flags & CMD_NOAUTH) return DENIED_OK;
    if (u->deleted) return DENIED_CMD;
    if (!command_allowed(u, cmd_index(cmd), argc, argv, argvlen)) return DENIED_CMD;
    if (!(u->flags & U_ALLKEYS)) {
        int stack[2 * 64];
        int *kp = argc <= 64 ? stack : malloc(2 * sizeof(int) * (size_t)argc), *need = kp + argc;
        int nk = acl_command_keys(cmd, argc, argv, argvlen, kp, need), denied = 0;
        for (int k = 0; k < nk && !denied; k++)
            if (!key_allowed(u, argv[kp[k]], argvlen[kp[k]], need[k])) { denied = 1; *pos = kp[k]; }
        if (kp != stack) free(kp);
        if (denied) return DENIED_KEY;
    }
    int first, last, is_pattern;
    if (!(u->flags & U_ALLCHANNELS) && command_channels(cmd, argc, &first, &last, &is_pattern))
        for (int j = first; j <= last && j < argc; j++)
            if (!channel_allowed(u, argv[j], argvlen[j], is_pattern)) { *pos = j; return DENIED_CHANNEL; }
    return DENIED_OK;
}

/* "config|get" for a container's subcommand, else the command's name. */
static void command_fullname(const struct rcommand *cmd, int argc, const char *const *argv,
                             const size_t *argvlen, char *buf, size_t len)
{
    if (argc > 1 && is_container(cmd_index(cmd))) {
        int n = snprintf(buf, len, "%s|%.*s", cmd->name, (int)(argvlen[1] > 64 ? 64 : argvlen[1]), argv[1]);
        for (int i = 0; i < n && (size_t)i < len; i++) buf[i] = (char)tolower((unsigned char)buf[i]);
    } else {
        snprintf(buf, len, "%s", cmd->name);
    }
}

/* May u read any key (SORT's BY and GET patterns)? Read lock held. */
static int full_key_access(const acl_user *u)
{
    if (u->flags & U_ALLKEYS) return 1;
    for (int i = 0; i < u->nkeys; i++)
        if ((u->keys[i].flags & KEY_READ) && !strcmp(u->keys[i].pat, "*")) return 1;
    return 0;
}

/* SORT BY <pattern> and GET read keys that no key position names: Redis
 * refuses them to a user without access to every key. 0 or -1 (replied). */
static int sort_patterns_check(client *c)
{
    for (int j = 2; j < c->argc; j++) {
        if (arg_is(c, j, "limit")) { j += 2; continue; }
        if (arg_is(c, j, "store")) { j++; continue; }
        int by = arg_is(c, j, "by");
        if (!by && !arg_is(c, j, "get")) continue;
        if (j + 1 >= c->argc) return 0;
        j++;
        if (by && !memchr(c->argv[j], '*', c->argvlen[j])) continue;   /* BY nosort */
        resp_add_errorf(&c->out, "ERR %s option of SORT denied due to insufficient ACL permissions.",
                        by ? "BY" : "GET");
        return -1;
    }
    return 0;
}

/* Check c->cmd with c->argv for c's user; a refusal goes to ACL LOG and
 * full gets the command's full name. Returns DENIED_*; *full_keys: may
 * the user read any key. */
static int check_and_log(client *c, char *full, size_t fullen, int *full_keys)
{
    char *uname = NULL;
    pthread_rwlock_rdlock(&acl_lock);
    const acl_user *u = c->user;
    int pos, r = user_check(u, c->cmd, c->argc, c->argv, c->argvlen, &pos);
    *full_keys = full_key_access(u);
    if (r != DENIED_OK) uname = strdup(u->name);
    pthread_rwlock_unlock(&acl_lock);
    if (r == DENIED_OK) return r;
    command_fullname(c->cmd, c->argc, c->argv, c->argvlen, full, fullen);
    if (r == DENIED_CMD) acl_log_add(c, r, full, strlen(full), uname, strlen(uname));
    else acl_log_add(c, r, c->argv[pos], c->argvlen[pos], uname, strlen(uname));
    free(uname);
    return r;
}

int acl_check_command(client *c)
{
    char full[160];
    int full_keys;
    if (c->cmd->flags & CMD_NOAUTH) return 0;
    int r = check_and_log(c, full, sizeof(full), &full_keys);
    if (r == DENIED_OK) {
        if (!full_keys && (!strcmp(c->cmd->name, "sort") || !strcmp(c->cmd->name, "sort_ro")))
            return sort_patterns_check(c);
        return 0;
    }
    if (r == DENIED_CMD)
        resp_add_errorf(&c->out, "NOPERM this user has no permissions to run the '%s' command", full);
    else
        resp_add_errorf(&c->out, "NOPERM this user has no permissions to access one of the %s used "
                                 "as arguments", r == DENIED_KEY ? "keys" : "channels");
    return -1;
}

int acl_check_queued(client *c)
{
    static const char *const why[] = {
        "", "no permission to execute the command or subcommand",
        "no permission to touch the specified keys",
        "no permission to access one of the channels used as arguments",
    };
    char full[160];
    int full_keys;
    int r = check_and_log(c, full, sizeof(full), &full_keys);
    if (r == DENIED_OK) return 0;
    resp_add_errorf(&c->out, "NOPERM ACLs rules changed between the moment the transaction was "
                             "accumulated and the EXEC call. This command is no longer allowed for "
                             "the following reason: %s", why[r]);
    return -1;
}

/* ---- killing the clients of a user ---- */

struct kill_args { client *self; acl_user **victims; int n; };

static void kill_cb(client *c, void *arg)
{
    struct kill_args *k = arg;
    acl_user *u = __atomic_load_n(&c->user, __ATOMIC_ACQUIRE);
    for (int i = 0; i < k->n; i++) {
        if (u != k->victims[i]) continue;
        if (c == k->self) c->flags |= CLIENT_CLOSE_AFTER_REPLY;
        else client_kill_async(c);
    }
}

/* Disconnect every client bound to one of victims (the caller keeps a
 * reference on each, so none is freed meanwhile). No ACL lock held. */
static void kill_clients_of(client *self, acl_user **victims, int n)
{
    if (n == 0) return;
    struct kill_args k = { self, victims, n };
    client_foreach(kill_cb, &k);
}

/* After SETUSER: a subscriber of u to a channel (or pattern) its rules no
 * longer allow is disconnected, as Redis 7.0 does. rules is a copy of u's
 * new rules (no ACL lock held here). */
struct pubsub_kill { client *self; const acl_user *u, *rules; };

static void pubsub_kill_cb(void *arg, client *c, const char *name, size_t len, int is_pattern)
{
    struct pubsub_kill *k = arg;
    if (__atomic_load_n(&c->user, __ATOMIC_ACQUIRE) != k->u) return;
    if (channel_allowed(k->rules, name, len, is_pattern)) return;
    if (c == k->self) c->flags |= CLIENT_CLOSE_AFTER_REPLY;
    else client_kill_async(c);
}

static void kill_pubsub_clients(client *self, const acl_user *u, acl_user *rules)
{
    if (!(rules->flags & U_ALLCHANNELS)) {
        struct pubsub_kill k = { self, u, rules };
        pubsub_foreach_subscription(pubsub_kill_cb, &k);
    }
    user_free(rules);
}

/* ---- the ACL command ---- */

#define ARGFMT "%.*s"
#define ARGP(c, i) (int)((c)->argvlen[i] > 128 ? 128 : (c)->argvlen[i]), (c)->argv[i]

static int valid_username(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (s[i] == ' ' || s[i] == 0) return 0;
    return len > 0;
}

static void acl_setuser(client *c)
{
    const char *name = c->argv[2];
    size_t nlen = c->argvlen[2];
    if (!valid_username(name, nlen)) {
        resp_add_error(&c->out, "ERR Usernames can't contain spaces or null characters");
        return;
    }
    sync_requirepass();
    pthread_rwlock_wrlock(&acl_lock);
    acl_user *u = user_find(name, nlen);
    int created = !u, err = 0;
    if (created) u = user_new_default(name, nlen);
    int bad = user_set_rules(u, c->argc - 3, c->argv + 3, c->argvlen + 3, &err);
    if (bad >= 0) {
        if (created) user_free(u);
        pthread_rwlock_unlock(&acl_lock);
        resp_add_errorf(&c->out, "ERR Error in ACL SETUSER modifier '" ARGFMT "': %s",
                        ARGP(c, bad + 3), rule_error(err));
        return;
    }
    if (created) user_insert(u);
    acl_user *rules = created ? NULL : user_dup(u);
    pthread_rwlock_unlock(&acl_lock);
    if (rules) kill_pubsub_clients(c, u, rules);
    resp_add_ok(&c->out);
}

static void acl_getuser(client *c)
{
    pthread_rwlock_rdlock(&acl_lock);
    acl_user *u = user_find(c->argv[2], c->argvlen[2]);
    if (!u) {
        pthread_rwlock_unlock(&acl_lock);
        resp_add_null(&c->out);
        return;
    }
    resp_add_map(&c->out, 6);
    resp_add_bulkstr(&c->out, "flags");
    unsigned shown = u->flags & (U_NOPASS | U_SANITIZE | U_SKIP_SANITIZE);
    resp_add_set(&c->out, 1 + __builtin_popcount(shown));
    resp_add_bulkstr(&c->out, (u->flags & U_ON) ? "on" : "off");
    if (u->flags & U_NOPASS) resp_add_bulkstr(&c->out, "nopass");
    if (u->flags & U_SKIP_SANITIZE) resp_add_bulkstr(&c->out, "skip-sanitize-payload");
    if (u->flags & U_SANITIZE) resp_add_bulkstr(&c->out, "sanitize-payload");
    resp_add_bulkstr(&c->out, "passwords");
    resp_add_array(&c->out, u->npass);
    for (int i = 0; i < u->npass; i++) resp_add_bulk(&c->out, u->pass[i], 64);
    rbuf b;
    rbuf_init(&b);
    resp_add_bulkstr(&c->out, "commands");
    describe_commands(u, &b);
    resp_add_bulk(&c->out, b.buf, b.len);
    b.len = 0;
    resp_add_bulkstr(&c->out, "keys");
    describe_keys(u, &b);
    resp_add_bulk(&c->out, b.buf ? b.buf : "", b.len);
    b.len = 0;
    resp_add_bulkstr(&c->out, "channels");
    describe_channels(u, &b);
    resp_add_bulk(&c->out, b.buf ? b.buf : "", b.len);
    rbuf_free(&b);
    resp_add_bulkstr(&c->out, "selectors");
    resp_add_array(&c->out, 0);
    pthread_rwlock_unlock(&acl_lock);
}

static void acl_deluser(client *c)
{
    int n = c->argc - 2, deleted = 0;
    acl_user **victims = malloc(sizeof(*victims) * (size_t)n);
    pthread_rwlock_wrlock(&acl_lock);
    for (int j = 2; j < c->argc; j++) {
        if (c->argvlen[j] == 7 && !memcmp(c->argv[j], "default", 7)) {
            pthread_rwlock_unlock(&acl_lock);
            for (int i = 0; i < deleted; i++) user_unref(victims[i]);
            free(victims);
            resp_add_error(&c->out, "ERR The 'default' user cannot be removed");
            return;
        }
    }
    for (int j = 2; j < c->argc; j++) {
        int found, i = user_pos(c->argv[j], c->argvlen[j], &found);
        if (!found) continue;
        acl_user *u = users[i];
        user_remove_at(i);
        u->deleted = 1;
        victims[deleted++] = u;   /* the table's reference, dropped below */
    }
    pthread_rwlock_unlock(&acl_lock);
    kill_clients_of(c, victims, deleted);
    for (int i = 0; i < deleted; i++) user_unref(victims[i]);
    free(victims);
    resp_add_int(&c->out, deleted);
}

static void acl_users(client *c)
{
    pthread_rwlock_rdlock(&acl_lock);
    resp_add_array(&c->out, nusers);
    for (int i = 0; i < nusers; i++) resp_add_bulkstr(&c->out, users[i]->name);
    pthread_rwlock_unlock(&acl_lock);
}

static void acl_list(client *c)
{
    rbuf b;
    rbuf_init(&b);
    pthread_rwlock_rdlock(&acl_lock);
    resp_add_array(&c->out, nusers);
    for (int i = 0; i < nusers; i++) {
        b.len = 0;
        describe_user(users[i], &b);
        resp_add_bulk(&c->out, b.buf, b.len);
    }
    pthread_rwlock_unlock(&acl_lock);
    rbuf_free(&b);
}

static void acl_whoami(client *c)
{
    pthread_rwlock_rdlock(&acl_lock);
    resp_add_bulkstr(&c->out, c->user->name);
    pthread_rwlock_unlock(&acl_lock);
}

struct cat_list { client *c; int cat; long long n; int emit; };

static void cat_cb(struct rcommand *cmd, void *arg)
{
    struct cat_list *l = arg;
    int i = cmd_index(cmd);
    if (cmd_cats[i] & (1u << l->cat)) {
        l->n++;
        if (l->emit) resp_add_bulkstr(&l->c->out, cmd->name);
    }
    for (int j = ncmd + first_sub[i]; j < ncmd + first_sub[i] + nsub[i]; j++) {
        if (!(cmd_cats[j] & (1u << l->cat))) continue;
        l->n++;
        if (l->emit) resp_add_bulkstr(&l->c->out, sub_rows[j - ncmd]->name);
    }
}

static void acl_cat(client *c)
{
    if (c->argc == 2) {
        resp_add_array(&c->out, NCATS);
        for (int j = 0; j < NCATS; j++) resp_add_bulkstr(&c->out, cat_names[j]);
        return;
    }
    if (c->argc != 3) { reply_sub_arity(c, "acl"); return; }
    int cat = category_find(c->argv[2], c->argvlen[2]);
    if (cat < 0) {
        resp_add_errorf(&c->out, "ERR Unknown category '" ARGFMT "'", ARGP(c, 2));
        return;
    }
    struct cat_list l = { c, cat, 0, 0 };
    command_foreach(cat_cb, &l);
    resp_add_array(&c->out, l.n);
    l.emit = 1;
    command_foreach(cat_cb, &l);
}

static void acl_genpass(client *c)
{
    long long bits = 256;
    if (c->argc == 3 && !string2ll(c->argv[2], c->argvlen[2], &bits)) {
        resp_add_error(&c->out, ERR_NOTINT);
        return;
    }
    if (bits <= 0 || bits > 4096) {
        resp_add_error(&c->out, "ERR ACL GENPASS argument must be the number of bits for the "
                                "output password, a positive number up to 4096");
        return;
    }
    if (c->argc > 3) { reply_sub_arity(c, "acl"); return; }
    int chars = (int)((bits + 3) / 4);
    unsigned char raw[512];
    char hex[1025];
    if (RAND_bytes(raw, (chars + 1) / 2) != 1) {
        for (int i = 0; i < (chars + 1) / 2; i++) raw[i] = (unsigned char)rnd64();
    }
    for (int i = 0; i < (chars + 1) / 2; i++) snprintf(hex + 2 * i, 3, "%02x", raw[i]);
    resp_add_bulk(&c->out, hex, (size_t)chars);
}

static void acl_dryrun(client *c)
{
    struct rcommand *cmd = command_lookup(c->argv[3], c->argvlen[3]);
    pthread_rwlock_rdlock(&acl_lock);
    acl_user *u = user_find(c->argv[2], c->argvlen[2]);
    if (!u) {
        pthread_rwlock_unlock(&acl_lock);
        resp_add_errorf(&c->out, "ERR User '" ARGFMT "' not found", ARGP(c, 2));
        return;
    }
    if (!cmd) {
        pthread_rwlock_unlock(&acl_lock);
        resp_add_errorf(&c->out, "ERR Command '" ARGFMT "' not found", ARGP(c, 3));
        return;
    }
    int argc = c->argc - 3;
    if ((cmd->arity > 0 && argc != cmd->arity) || argc < -cmd->arity) {
        pthread_rwlock_unlock(&acl_lock);
        resp_add_errorf(&c->out, "ERR wrong number of arguments for '%s' command", cmd->name);
        return;
    }
    int pos, r = user_check(u, cmd, argc, c->argv + 3, c->argvlen + 3, &pos);
    pthread_rwlock_unlock(&acl_lock);
    if (r == DENIED_OK) { resp_add_ok(&c->out); return; }
    char full[160];
    rbuf b;
    rbuf_init(&b);
    command_fullname(cmd, argc, c->argv + 3, c->argvlen + 3, full, sizeof(full));
    if (r == DENIED_CMD) rbuf_appendf(&b, "This user has no permissions to run the '%s' command", full);
    else rbuf_appendf(&b, "This user has no permissions to access the '%.*s' %s",
                      (int)c->argvlen[3 + pos], c->argv[3 + pos], r == DENIED_KEY ? "key" : "channel");
    resp_add_bulk(&c->out, b.buf, b.len);
    rbuf_free(&b);
}

static void acl_log(client *c)
{
    long long count = 10;
    if (c->argc == 3) {
        if (arg_is(c, 2, "reset")) {
            pthread_mutex_lock(&log_mu);
            log_trim_locked(0);
            pthread_mutex_unlock(&log_mu);
            resp_add_ok(&c->out);
            return;
        }
        if (!string2ll(c->argv[2], c->argvlen[2], &count)) {
            resp_add_error(&c->out, ERR_NOTINT);
            return;
        }
        if (count < 0) count = LLONG_MAX;  /* Redis counts down from it: all */
    } else if (c->argc > 3) {
        reply_sub_arity(c, "acl");
        return;
    }
    long long now = now_ms();
    pthread_mutex_lock(&log_mu);
    long long n = count < log_len ? count : log_len;
    resp_add_array(&c->out, n);
    acl_log_entry *e = log_head;
    for (long long i = 0; i < n; i++, e = e->next) {
        resp_add_map(&c->out, 7);
        resp_add_bulkstr(&c->out, "count");
        resp_add_int(&c->out, e->count);
        resp_add_bulkstr(&c->out, "reason");
        resp_add_bulkstr(&c->out, deny_reason[e->reason]);
        resp_add_bulkstr(&c->out, "context");
        resp_add_bulkstr(&c->out, e->context);
        resp_add_bulkstr(&c->out, "object");
        resp_add_bulkstr(&c->out, e->object);
        resp_add_bulkstr(&c->out, "username");
        resp_add_bulkstr(&c->out, e->username);
        resp_add_bulkstr(&c->out, "age-seconds");
        resp_add_double(&c->out, (double)(now - e->ctime_ms) / 1000.0);
        resp_add_bulkstr(&c->out, "client-info");
        resp_add_bulkstr(&c->out, e->cinfo);
    }
    pthread_mutex_unlock(&log_mu);
}

/* ---- aclfile: ACL LOAD / ACL SAVE ---- */

static const char *no_aclfile_msg =
    "ERR This Redis instance is not configured to use an ACL file. You may want to specify "
    "users via the ACL SETUSER command and then issue a CONFIG REWRITE (assuming you have a "
    "Redis configuration file set) in order to store users in the Redis configuration.";

/* The words of a line (split at spaces and tabs, NUL-terminated in place). */
typedef struct words { int n, cap; char **w; size_t *len; } words;

static void split_words(char *line, words *ws)
{
    ws->n = 0;
    for (char *p = line; *p;) {
        while (*p == ' ' || *p == '\t' || *p == '\r') p++;
        if (!*p) break;
        if (ws->n == ws->cap) {
            ws->cap = ws->cap ? ws->cap * 2 : 16;
            ws->w = realloc(ws->w, sizeof(char *) * (size_t)ws->cap);
            ws->len = realloc(ws->len, sizeof(size_t) * (size_t)ws->cap);
        }
        char *start = p;
        while (*p && *p != ' ' && *p != '\t' && *p != '\r') p++;
        ws->w[ws->n] = start;
        ws->len[ws->n++] = (size_t)(p - start);
        if (*p) *p++ = 0;
    }
}

static void words_free(words *ws)
{
    free(ws->w);
    free(ws->len);
}

/* One user declaration (the words after "user": name, rules) into the set
 * being built (*n users). Returns RE_OK; RE_DUPLICATE; RE_SYNTAX for a bad
 * name; or the failing rule's error with *bad its index in w. */
static int declare_user(char **w, size_t *wl, int nw, acl_user ***set, int *n, int *bad)
{
    *bad = 0;
    if (nw < 1 || !valid_username(w[0], wl[0])) return RE_SYNTAX;
    for (int i = 0; i < *n; i++)
        if (strlen((*set)[i]->name) == wl[0] && !memcmp((*set)[i]->name, w[0], wl[0]))
            return RE_DUPLICATE;
    acl_user *u = user_new_default(w[0], wl[0]);
    int e = RE_OK, i = user_set_rules(u, nw - 1, (const char *const *)w + 1, wl + 1, &e);
    if (i >= 0) {
        *bad = i + 1;
        user_free(u);
        return e;
    }
    *set = realloc(*set, sizeof(**set) * (size_t)(*n + 1));
    (*set)[(*n)++] = u;
    return RE_OK;
}

static void set_free(acl_user **set, int n)
{
    for (int i = 0; i < n; i++) user_free(set[i]);
    free(set);
}

/* Replace every user with set (the default user keeps its identity and
 * takes the rules of set's "default", or becomes the default default).
 * Clients of the replaced users are disconnected, as in Redis 7.0. */
static void users_replace(client *self, acl_user **set, int n)
{
    acl_user *newdef = NULL;
    for (int i = 0; i < n; i++)
        if (!strcmp(set[i]->name, "default")) { newdef = set[i]; set[i] = set[--n]; break; }
    if (!newdef) {
        newdef = user_new("default", 7);
        const char *ops[] = { "on", "nopass", "~*", "&*", "+@all" };
        for (int i = 0; i < 5; i++) rule_apply(newdef, ops[i], strlen(ops[i]));
    }
    pthread_rwlock_wrlock(&acl_lock);
    acl_user **old = users;
    int nold = nusers;
    users = NULL;
    nusers = 0;
    user_move(default_user, newdef);
    user_insert(default_user);
    for (int i = 0; i < n; i++) user_insert(set[i]);
    int nv = 0;
    for (int i = 0; i < nold; i++) {
        if (old[i] == default_user) continue;
        old[i]->deleted = 1;
        old[nv++] = old[i];
    }
    pthread_rwlock_unlock(&acl_lock);
    kill_clients_of(self, old, nv);
    for (int i = 0; i < nv; i++) user_unref(old[i]);
    free(old);
}

/* Parse the aclfile into a new set of users. 0 ok, -1 with err = Redis's
 * text (the first error, then its "WARNING: ACL errors detected..."). */
static int aclfile_parse(const char *path, acl_user ***set, int *n, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "Error loading ACLs, opening file '%s': %s", path, strerror(errno));
        return -1;
    }
    char *line = NULL;
    size_t cap = 0;
    int lineno = 0, rc = 0;
    words ws = { 0, 0, NULL, NULL };
    while (rc == 0 && getline(&line, &cap, f) >= 0) {
        lineno++;
        line[strcspn(line, "\n")] = 0;
        split_words(line, &ws);
        if (ws.n == 0) continue;   /* blank; a comment is an error, as in Redis */
        int bad, e = RE_SYNTAX;
        if (strcmp(ws.w[0], "user") || ws.n < 2) {
            snprintf(err, errlen, "%s:%d should start with user keyword followed by the username. ",
                     path, lineno);
        } else if ((e = declare_user(ws.w + 1, ws.len + 1, ws.n - 1, set, n, &bad)) == RE_DUPLICATE) {
            snprintf(err, errlen, "WARNING: Duplicate user '%s' found on line %d. ", ws.w[1], lineno);
        } else if (e == RE_NOENT) {   /* Redis finds the others in a first pass */
            snprintf(err, errlen, "%s:%d: Error in applying operation '%s': %s. ", path, lineno,
                     ws.w[1 + bad], rule_error(e));
        } else if (e != RE_OK) {
            snprintf(err, errlen, "%s:%d: %s. ", path, lineno, rule_error(e));
        }
        if (e != RE_OK) rc = -1;
    }
    words_free(&ws);
    free(line);
    fclose(f);
    if (rc != 0) {
        size_t used = strlen(err);
        snprintf(err + used, errlen - used, "WARNING: ACL errors detected, no change to the "
                                            "previously active ACL rules was performed");
        set_free(*set, *n);
        *set = NULL;
        *n = 0;
    }
    return rc;
}

static int aclfile_configured(void)
{
    return server.cfg.aclfile && server.cfg.aclfile[0];
}

static void acl_load(client *c)
{
    if (!aclfile_configured()) { resp_add_error(&c->out, no_aclfile_msg); return; }
    acl_user **set = NULL;
    int n = 0;
    char err[1024];
    if (aclfile_parse(server.cfg.aclfile, &set, &n, err, sizeof(err)) != 0) {
        resp_add_errorf(&c->out, "ERR %s", err);
        return;
    }
    users_replace(c, set, n);
    free(set);
    resp_add_ok(&c->out);
}

/* Write the ACL LIST lines to aclfile: a temporary file, fsync, rename,
 * then fsync the directory so the rename itself is durable. */
static int aclfile_save(const char *path)
{
    rbuf b;
    rbuf_init(&b);
    pthread_rwlock_rdlock(&acl_lock);
    for (int i = 0; i < nusers; i++) {
        describe_user(users[i], &b);
        rbuf_append(&b, "\n", 1);
    }
    pthread_rwlock_unlock(&acl_lock);
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof(tmp), "%s.tmp-%d", path, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644), rc = -1;
    if (fd >= 0) {
        size_t off = 0;
        while (off < b.len) {
            ssize_t w = write(fd, b.buf + off, b.len - off);
            if (w <= 0) break;
            off += (size_t)w;
        }
        if (off == b.len && fsync(fd) == 0 && close(fd) == 0) {
            fd = -1;
            if (rename(tmp, path) == 0) rc = 0;
        }
        if (fd >= 0) close(fd);
        if (rc != 0) unlink(tmp);
    }
    if (rc == 0) {
        char dir[PATH_MAX];
        snprintf(dir, sizeof(dir), "%s", path);
        char *slash = strrchr(dir, '/');
        if (slash) *(slash == dir ? slash + 1 : slash) = 0;
        else snprintf(dir, sizeof(dir), ".");
        int dfd = open(dir, O_RDONLY);
        if (dfd >= 0) { fsync(dfd); close(dfd); }
    } else {
        serverLog(LL_WARNING, "Saving the ACLs to %s: %s", path, strerror(errno));
    }
    rbuf_free(&b);
    return rc;
}

static void acl_save(client *c)
{
    if (!aclfile_configured()) { resp_add_error(&c->out, no_aclfile_msg); return; }
    if (aclfile_save(server.cfg.aclfile) != 0) {
        resp_add_error(&c->out, "ERR There was an error trying to save the ACLs. Please check "
                                "the server logs for more information");
        return;
    }
    resp_add_ok(&c->out);
}

static void acl_help(client *c)
{
    static const char *const lines[] = {
        "ACL <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "CAT [<category>]",
        "    List all commands that belong to <category>, or all command categories",
        "    when no category is specified.",
        "DELUSER <username> [<username> ...]",
        "    Delete a list of users.",
        "DRYRUN <username> <command> [<arg> ...]",
        "    Returns whether the user can execute the given command without executing the command.",
        "GETUSER <username>",
        "    Get the user's details.",
        "GENPASS [<bits>]",
        "    Generate a secure 256-bit user password. The optional `bits` argument can",
        "    be used to specify a different size.",
        "LIST",
        "    Show users details in config file format.",
        "LOAD",
        "    Reload users from the ACL file.",
        "LOG [<count> | RESET]",
        "    Show the ACL log entries.",
        "SAVE",
        "    Save the current config to the ACL file.",
        "SETUSER <username> <attribute> [<attribute> ...]",
        "    Create or modify a user with the specified attributes.",
        "USERS",
        "    List all the registered usernames.",
        "WHOAMI",
        "    Return the current connection username.",
        "HELP",
        "    Print this help.",
        NULL,
    };
    reply_help(c, lines);
}

void aclCommand(client *c)
{
    static const subcommand subs[] = {
        { "cat", -2, acl_cat }, { "deluser", -3, acl_deluser }, { "dryrun", -4, acl_dryrun },
        { "genpass", -2, acl_genpass }, { "getuser", 3, acl_getuser }, { "list", 2, acl_list },
        { "load", 2, acl_load }, { "log", -2, acl_log }, { "save", 2, acl_save },
        { "setuser", -3, acl_setuser }, { "users", 2, acl_users }, { "whoami", 2, acl_whoami },
        { "help", 2, acl_help }, { NULL, 0, NULL },
    };
    sync_requirepass();  /* a CONFIG SET requirepass shows in GETUSER default */
    subcommand_dispatch(c, subs, "acl");
}

/* CONFIG REWRITE (config.c): every user as a `user` line, or none when
 * the users live in the aclfile, as Redis does. */
static void config_user_lines(rbuf *out)
{
    if (aclfile_configured()) return;
    sync_requirepass();   /* a CONFIG SET requirepass just before */
    pthread_rwlock_rdlock(&acl_lock);
    for (int i = 0; i < nusers; i++) {
        describe_user(users[i], out);
        rbuf_append(out, "\n", 1);
    }
    pthread_rwlock_unlock(&acl_lock);
}

/* ---- startup ---- */

/* The command rows and their categories are the process's, as the command
 * table is: built once, by whichever server starts first. */
static void rows_build(void)
{
    command_foreach(base_cb, NULL);
    ncmd = command_count();
    first_sub = calloc((size_t)ncmd, sizeof(int));
    nsub = calloc((size_t)ncmd, sizeof(int));
    nall = ncmd;
    for (int i = 0; i < ncmd; i++)
        for (const struct rcommand *s = cmd_base[i].subcommands; s && s->name; s++) nall++;
    sub_rows = calloc((size_t)(nall - ncmd + 1), sizeof(*sub_rows));
    cmd_cats = calloc((size_t)nall, sizeof(*cmd_cats));
    for (int i = 0, k = 0; i < ncmd; i++) {
        cmd_cats[i] = derive_categories(&cmd_base[i]);
        first_sub[i] = k;
        for (const struct rcommand *s = cmd_base[i].subcommands; s && s->name; s++, k++) {
            sub_rows[k] = s;
            cmd_cats[ncmd + k] = derive_categories(s);
            nsub[i]++;
        }
        /* a container is only @slow, as in Redis: its subcommands carry
         * the categories (COMMAND is not: it runs on its own too) */
        if (nsub[i] && cmd_base[i].proc != commandCommand) cmd_cats[i] = 1u << C_SLOW;
    }
}

int acl_init(char *err, size_t errlen)
{
    static pthread_once_t rows_once = PTHREAD_ONCE_INIT;
    pthread_once(&rows_once, rows_build);
    config_set_user_lines(config_user_lines);
    /* the default user: everything, no password (requirepass sets one) */
    acl_user **set = NULL;
    int n = 0;
    default_user = user_new("default", 7);
    users_replace(NULL, set, 0);
    sync_requirepass();
    int nlines = server.cfg.acl_nuser_lines;
    if (nlines && aclfile_configured()) {
        snprintf(err, errlen, "Configuring Redis with users defined in redis.conf and at the same "
                              "setting an ACL file path is invalid. This setup is very likely to "
                              "lead to configuration errors and security holes, please define "
                              "either an ACL file or declare users directly in your redis.conf, "
                              "but not both.");
        return -1;
    }
    if (aclfile_configured()) {
        /* a missing file too stops the server, as in Redis */
        char why[1024];
        if (aclfile_parse(server.cfg.aclfile, &set, &n, why, sizeof(why)) != 0) {
            snprintf(err, errlen, "Aborting startup because of ACL errors: %s", why);
            return -1;
        }
    }
    words ws = { 0, 0, NULL, NULL };
    for (int i = 0; i < nlines; i++) {
        char *line = strdup(server.cfg.acl_user_lines[i]);
        split_words(line, &ws);
        int bad, e = declare_user(ws.w, ws.len, ws.n, &set, &n, &bad);
        if (e != RE_OK)
            snprintf(err, errlen, "Error in user declaration '%s': %s",
                     bad ? ws.w[bad] : server.cfg.acl_user_lines[i],
                     e == RE_SYNTAX && !bad ? "Usernames can't contain spaces or null characters"
                                           : rule_error(e));
        free(line);
        if (e != RE_OK) {
            words_free(&ws);
            set_free(set, n);
            return -1;
        }
    }
    words_free(&ws);
    if (n) {
        /* a declared default user replaces the default default; requirepass,
         * when set, still gives it its password (applied first in Redis) */
        users_replace(NULL, set, n);
    }
    free(set);
    return 0;
}
