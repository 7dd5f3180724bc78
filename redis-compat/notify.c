/* notify.c -- keyspace notifications, as Redis's notify.c.
 *
 * An event is two PUBLISHes: on __keyspace@<db>__:<key> with the event name
 * as the message (flag K), and on __keyevent@<db>__:<event> with the key as
 * the message (flag E), when notify-keyspace-events enables the event's
 * class. Event names are Redis 7.0's.
 *
 * Events are raised at the RESP edge, where a command changes a key; only
 * expiry happens in the core (a lookup or active expiry deletes the key), so
 * the core calls db_expired_hook and this file publishes "expired".
 *
 * Every key change also invalidates the key for client-side caching
 * (tracking.c), whatever notify-keyspace-events says.
 *
 * Every event is published without a publishing client (pubsub_publish with
 * pub NULL): subscribers get it from their inbox at their worker's next
 * round, so the events of one command, including an "expired" raised in the
 * middle of it, reach a subscriber in the order they happened. The cost
 * when notifications are off is one load of the flags.
 *
 * "keymiss" (m) comes from the core too (db_miss_hook), when a read that
 * counts a keyspace miss finds nothing.
 *
 * Like PUBLISH's messages, events are not gated on durability: a
 * subscriber may see an event before the write it reports is durable (and
 * inside EXEC, before the transaction's single entry is known to fit the
 * pool). Redis with appendfsync everysec behaves alike.
 *
 * "evicted" comes from the core as well (db_evicted_hook, maxmemory's
 * evictions, evict.c). Not raised: "new" (n), which the flags accept as
 * Redis's do. Events are raised by the node that runs the command;
 * replicas and backups applying its log raise none. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "notify.h"
#include "pubsub.h"
#include "tracking.h"
#include "db.h"
#include "server.h"

static void publish_pair(const char *prefix, int db, const char *suffix, size_t slen,
                         const char *msg, size_t mlen) {
    char head[64], stack[512];
    int hl = snprintf(head, sizeof(head), "__%s@%d__:", prefix, db);
    size_t clen = (size_t)hl + slen;
    char *ch = clen <= sizeof(stack) ? stack : malloc(clen);
    memcpy(ch, head, (size_t)hl);
    memcpy(ch + hl, suffix, slen);
    pubsub_publish(NULL, ch, clen, msg, mlen);
    if (ch != stack) free(ch);
}

static __thread int muted;

void notify_mute(int on) { muted = on; }

void notify_event(int type, const char *event, const char *key, size_t klen, int db) {
    if (muted) return;
    if (type != NOTIFY_KEY_MISS) tracking_invalidate_key(key, klen);   /* every change */
    int flags = __atomic_load_n(&server.cfg.notify_keyspace_events, __ATOMIC_RELAXED);
    if (!(flags & type)) return;
    size_t elen = strlen(event);
    if (flags & NOTIFY_KEYSPACE) publish_pair("keyspace", db, key, klen, event, elen);
    if (flags & NOTIFY_KEYEVENT) publish_pair("keyevent", db, event, elen, key, klen);
}

void notify_key(client *c, int type, const char *event, int i) {
    notify_event(type, event, c->argv[i], c->argvlen[i], c->db);
}

static void expired(int db, const char *key, size_t klen) {
    notify_event(NOTIFY_EXPIRED, "expired", key, klen, db);
}

static void missed(int db, const char *key, size_t klen) {
    notify_event(NOTIFY_KEY_MISS, "keymiss", key, klen, db);
}

static void evicted(int db, const char *key, size_t klen) {
    notify_event(NOTIFY_EVICTED, "evicted", key, klen, db);
}

void notify_init(void) {
    db_expired_hook = expired;
    db_miss_hook = missed;
    db_evicted_hook = evicted;
}
