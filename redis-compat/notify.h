/* notify.h -- keyspace notifications (notify-keyspace-events).
 *
 * Command families raise an event where the change happens, with one call:
 * notify_key(c, NOTIFY_STRING, "set", argv index) or notify_event(...) for
 * a key that is not an argument. Expired keys are reported from the core
 * through db_expired_hook, which notify_init installs. */
#ifndef ROWAN_NOTIFY_H
#define ROWAN_NOTIFY_H
#include <stddef.h>
#include "client.h"
#include "config.h"   /* NOTIFY_* */

/* Publish event for key in logical db on __keyspace@db__:key and
 * __keyevent@db__:event, when notify-keyspace-events enables type. */
void notify_event(int type, const char *event, const char *key, size_t klen, int db);
/* The same for argument i of c's command, in c's db. */
void notify_key(client *c, int type, const char *event, int i);
/* A command that runs another one to do its work (SORT ... STORE runs
 * RPUSH) raises its own event instead: mute (1) around the inner call,
 * unmute (0) after. Per thread. */
void notify_mute(int on);
/* Install the core's expiry hook (before the workers start). */
void notify_init(void);

#endif
