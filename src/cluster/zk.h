/* zk.h -- the ZooKeeper session of a managed cluster node (the
 * multithreaded C client, libzookeeper-mt).
 *
 * Every call is synchronous and safe from any thread; each returns ZK_OK,
 * or ZK_NONODE / ZK_EXISTS / ZK_BADVERSION for the outcomes callers act
 * on, or ZK_FAIL (connection loss, a dead session, anything else; err says
 * what). Watches are one-shot and only wake: any watch firing bumps a
 * counter that zk_wait returns on, and the waiter re-reads what it cares
 * about. A session that expires is replaced by a new one (its ephemeral
 * znodes are gone: callers re-create them, zk_session_id tells them
 * when). */
#ifndef ROWAN_ZK_H
#define ROWAN_ZK_H
#include <stddef.h>
#include <stdint.h>

enum { ZK_OK = 0, ZK_NONODE = 1, ZK_EXISTS = 2, ZK_BADVERSION = 3, ZK_FAIL = -1 };

/* Connect (waits up to timeout_ms for the session). 0 / -1 with err. */
int zk_open(const char *hosts, int session_ms, int timeout_ms, char *err, size_t errlen);
void zk_close(void);
/* A number that changes whenever the session was replaced. */
uint64_t zk_session_id(void);
/* Monotonic microseconds of the last moment the session was known to be
 * alive (a successful call or a connected event); 0 if never. */
int64_t zk_alive_us(void);

/* Create path and its missing parents (persistent, empty). */
int zk_ensure(const char *path);
/* flags: 0 persistent, or ZK_EPHEMERAL | ZK_SEQUENTIAL. out (if not NULL)
 * gets the created path (with the sequence number). */
#define ZK_EPHEMERAL  1
#define ZK_SEQUENTIAL 2
int zk_create(const char *path, const void *data, size_t len, int flags, char *out, size_t outlen);
/* *data malloc'd (NUL-terminated), *version the znode's version. watch:
 * also set a data watch. */
int zk_get(const char *path, int watch, char **data, size_t *len, int *version);
/* Compare-and-set on version (-1: any). *new_version (if not NULL). */
int zk_set(const char *path, const void *data, size_t len, int version, int *new_version);
/* zk_set, done only if the znode guard exists, in one ZooKeeper
 * transaction (multi: check + set). ZK_NONODE when guard is gone (an
 * ephemeral znode of an expired session: a fence). */
int zk_set_guarded(const char *path, const void *data, size_t len, int version,
                   const char *guard, int *new_version);
int zk_delete(const char *path, int version);
/* Children names, sorted; free with zk_free_names. watch: a child watch. */
int zk_children(const char *path, int watch, char ***names, int *n);
void zk_free_names(char **names, int n);
/* Set an existence watch on path (fires when it is created or deleted). */
int zk_watch_exists(const char *path, int *exists);
/* The session owning ephemeral znode path (0: not ephemeral). */
int zk_owner(const char *path, uint64_t *owner);
/* ZooKeeper's id of the current session (what zk_owner reports for the
 * znodes it made), 0 before one is established. */
uint64_t zk_client_session(void);

/* Wait until a watch fired since `seen` (the value a previous call
 * returned; 0 first) or timeout_ms passed; returns the new value. */
uint64_t zk_wait(uint64_t seen, int timeout_ms);
/* Wake zk_wait callers (another thread has news for them). */
void zk_poke(void);
const char *zk_errstr(int rc);

#endif
