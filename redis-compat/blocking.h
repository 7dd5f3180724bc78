/* blocking.h -- clients blocked on list keys (BLPOP, BRPOP, BLMOVE,
 * BRPOPLPUSH, BLMPOP). See blocking.c for the design. */
#ifndef ROWAN_BLOCKING_H
#define ROWAN_BLOCKING_H
#include <stddef.h>
#include <stdint.h>
#include "client.h"

struct worker;

/* ---- for the blocking commands (t_list.c), with their shard locks held ---- */
/* May c take elements from key (logical db c->db) now? No while an earlier
 * blocked client waits on it (FIFO per key, as in Redis). */
int blocking_may_take(client *c, const char *key, size_t klen);
/* 1 when c is being re-run while blocked and argv[i] now holds a value of
 * another type than want (OBJ_LIST...): the caller skips that key as if it
 * were missing, so the client stays blocked. Redis serves a waiter only
 * from a key of the type it waits for (LPUSH l x; DEL l; SET l foo in one
 * EXEC leaves a BLPOP l blocked, not answered WRONGTYPE). */
int blocking_rerun_skips(client *c, int i, int want);
/* SWAPDB swapped logical db: after the command, every client blocked on a
 * key of it is re-run (served if the key now has what it waits for). */
void blocking_signal_db(int db);
/* 0 where a command must not block (inside a batch, i.e. EXEC): it then
 * answers as if it timed out at once. */
int blocking_allowed(const client *c);
/* Block c on argv[first .. first+nkeys-1] until deadline_ms (absolute unix
 * ms, 0 = forever). The command replies nothing. When c is already blocked
 * (its command is being re-run and found nothing) this does nothing. */
void blocking_block(client *c, int first, int nkeys, int64_t deadline_ms);

/* ---- for every write that adds elements to a list ----
 * Called under the key's shard lock; the waiting clients are woken after
 * the command, once its shard locks are released. */
void blocking_signal_key(int db, const char *key, size_t klen);
/* The same, waking every client waiting on the key, not only the first: a
 * stream entry is for every XREAD reader whose ID it follows (t_stream.c);
 * a waiter it does not serve stays blocked, keeping its place. */
void blocking_signal_key_all(int db, const char *key, size_t klen);

/* ---- hooks (networking.c, worker.c) ---- */
/* Is c blocked (its input waits)? Owner worker thread only. */
int blocking_is_blocked(const client *c);
/* Wake the clients waiting on the keys signalled by the command that just
 * ran (client_call, after releasing the shard locks). */
void blocking_flush_signals(void);
/* Re-run the commands of w's clients whose keys got elements (worker's
 * before_sleep). */
void blocking_run_ready(struct worker *w);
/* c is being freed (disconnect, CLIENT KILL, shutdown): forget it. */
void blocking_client_freed(client *c);
/* Number of blocked clients (INFO blocked_clients). Any thread. */
long long blocking_count(void);
/* CLIENT UNBLOCK id [TIMEOUT|ERROR]: 1 if client id is blocked here (its
 * worker then answers it: a null array, or with error != 0 "-UNBLOCKED
 * client unblocked via CLIENT UNBLOCK"), 0 if not. Any thread. */
int blocking_unblock_id(uint64_t id, int error);

/* Parse a blocking timeout (argv[i], seconds): 0 = forever, else the
 * absolute unix-ms deadline. -1 after replying Redis's error. */
int arg_block_deadline(client *c, int i, int64_t *ms);

/* ---- provided by networking.c for blocking.c ---- */
/* Dispatch c->argv as a command (client_call). */
void blocking_client_rerun(client *c);
/* Process what waits in c's query buffer (client_process_input). */
void blocking_client_resume(client *c);
/* c's blocked command was answered outside a call (timeout, CLIENT UNBLOCK)
 * with the output from `start` on: its reply; then as blocking_client_resume. */
void blocking_client_answered(client *c, size_t start);

#endif
