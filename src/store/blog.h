/* blog.h -- the backup log (b-log): the ONE log every incoming replication
 * write lands in (DESIGN.md §3, §5; Rowan-KV §4.3).
 *
 * Only the control thread writes it (whichever transport backend drives the
 * control thread: TCP reads, or an SRQ's completions). Messages land in
 * arrival order at the next 64-byte aligned offset of the current b-log
 * segment, byte for byte; nothing is parsed beyond the entry header's
 * lengths. blog_persist() makes everything landed so far durable and
 * publishes it to the digest thread, which is the only reader.
 *
 * Segments: a fresh b-log segment is all zeroes (pool invariant), so a
 * reader can tell written from unwritten space by the first 8 bytes of each
 * slot (never zero in a valid entry). Filled segments go USING -> USED; the
 * digest thread turns USED into COMMITTED by the MaxVer <= CommitVer rule
 * (digest.c), after which the cleaner may reclaim them. */
#ifndef ROWAN_BLOG_H
#define ROWAN_BLOG_H
#include <stddef.h>
#include <stdint.h>
#include "log.h"

/* Set up the b-log writer, and server.blog the first time (after recovery,
 * before the control thread). */
void blog_init(void);
/* Free the state blog_init made (its threads stopped); boot.c's teardown. */
void blog_free(void);
/* Land one message of span bytes (a multiple of 64, <= one segment) by
 * copying it. Returns its pool offset, or 0 when the pool has no free
 * segment left (the caller must then stop acknowledging: nothing landed). */
uint64_t blog_land(const void *msg, size_t span);
/* Reserve span bytes for a message the caller (or its NIC) writes itself
 * at pool_ptr(offset); then blog_wrote(offset, span). 0 = pool full. */
uint64_t blog_reserve(size_t span);
void blog_wrote(uint64_t off, size_t span);
/* Make every landed message durable (one device flush on block storage;
 * on pmem, landing persisted already) and publish it to the digest. Acks
 * for those messages may be sent once this returns. */
void blog_persist(void);
/* The same in two steps around a device flush made elsewhere (the syncer):
 * begin notes what has landed so far; once a pool_sync_all that started
 * after begin has returned, end seals and publishes exactly that. */
typedef struct blog_flush {
    log_flush log;     /* segments to seal; its head is the frontier to publish */
    uint64_t bytes;
} blog_flush;
void blog_flush_begin(blog_flush *f);
void blog_flush_end(const blog_flush *f);
/* Bytes landed and persisted since start (INFO). */
uint64_t blog_bytes_landed(void);

#endif
