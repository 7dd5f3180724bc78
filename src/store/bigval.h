/* bigval.h -- values larger than one log segment (design: bigval.c).
 *
 * An entry (a string's LOG_SET, a collection's LOG_COLL_OP or LOG_SNAPSHOT)
 * that does not fit one 4 MiB segment is logged as a run of LOG_CHUNK
 * entries followed by the entry's header flagged LOG_F_CHUNKED whose
 * payload is a descriptor (below); it is applied only when that final entry
 * is, so a crash in the middle leaves the old value. In DRAM a large string
 * is an robj of type OBJ_STRING holding the bytes; its history (object.h)
 * is its chunks and the final entry, so the cleaner moves each piece like a
 * collection's effect entry (a large collection entry's chunks join the
 * collection's history the same way).
 *
 * Descriptor (the final entry's payload, little endian, BIGVAL_DESC_LEN):
 *   0  u64  value length
 *   8  u32  number of chunks
 *  12  u32  0 (reserved)
 *  16  u64  version of the first chunk: the chunks of a write are the
 *           versions [first, final) of the shard; a re-sync's chunks all
 *           carry the re-sync's version (first == the final's version). */
#ifndef ROWAN_BIGVAL_H
#define ROWAN_BIGVAL_H
#include <stddef.h>
#include <stdint.h>
#include "log.h"
#include "object.h"

struct shard;

#define BIGVAL_DESC_LEN 24
/* The longest key of a chunked value: each chunk carries its key, and
 * still carries more value than key (bigval_chunk_len). A longer key
 * works only with a value that fits one entry with it. */
#define BIGVAL_MAX_KEY  (1024 * 1024)
/* A value length must fit the 32-bit offsets and lengths of entries. */
#define BIGVAL_MAX_LEN  ((uint64_t)UINT32_MAX)

/* Does a string entry with this key and value need chunks? */
static inline int bigval_needed(size_t klen, size_t vlen) {
    return log_entry_len(klen, vlen) > LOG_MAX_ENTRY;
}
/* Bytes of value one chunk carries for a key of klen bytes: its entry
 * spans a quarter of a segment, so chunks pack segments without waste. */
size_t bigval_chunk_len(size_t klen);
/* Number of chunks for a value of vlen bytes. */
uint32_t bigval_nchunks(size_t klen, size_t vlen);
/* Log bytes its chunks span, at most (the last one may be shorter). */
uint64_t bigval_run_bytes(size_t klen, size_t vlen);
/* Segments the chunks and the final entry of such a value need at most. */
uint32_t bigval_segments(size_t klen, size_t vlen);
void bigval_desc_encode(char out[BIGVAL_DESC_LEN], uint64_t len, uint32_t nchunks,
                        uint64_t first_ver);
/* Splitting an entry e too large for one segment (LOG_SET, LOG_COLL_OP,
 * LOG_SNAPSHOT): its i-th chunk (i < bigval_nchunks(e->klen, e->vlen)),
 * pointing into e's payload, with e's LOG_F_RESYNC flag; and the final
 * entry (e's header, LOG_F_CHUNKED, desc as payload) once the first chunk's
 * version is known. */
void bigval_chunk(const log_entry *e, uint32_t i, log_entry *c);
void bigval_final(const log_entry *e, uint32_t n, uint64_t first, char desc[BIGVAL_DESC_LEN],
                  log_entry *f);

/* ---- applying (caller holds the shard lock, as for db_apply_entry) ---- */
void bigval_init(int nshards);
void bigval_free_all(void);
/* Every entry db_apply_entry applies is shown here first: a LOG_CHUNK is
 * remembered as pending, by key; any other entry of the shard ends the
 * pending chunks it cannot complete (an abandoned write; which ones depends
 * on the order, bigval.c). */
void bigval_note(struct shard *s, uint64_t ref, const log_entry *e);
/* Entries of shard s come in pool order (recovery and DEBUG RELOAD:
 * each key's versions and the shard's barriers in order, nothing else)
 * while on, in version order otherwise (the default). */
void bigval_pool_order(struct shard *s, int on);
/* A run of chunks joined. */
typedef struct bigval_run {
    char *buf;             /* the joined payload (NULL unless asked for) */
    size_t len;
    uint64_t *refs;        /* the chunks' pool references, in offset order */
    uint32_t n;
    void *base;            /* allocation behind buf (private) */
} bigval_run;
/* The final entry e: take its run out of the pending chunks and, with
 * want_bytes, join their payloads. 0, or -1 if chunks are missing or do not
 * tile the payload (damage) or the descriptor is malformed; the run is
 * forgotten either way. Free run with bigval_run_free. */
int bigval_join(struct shard *s, const log_entry *e, int want_bytes, bigval_run *run);
void bigval_run_free(bigval_run *run);
/* The joined run of a final LOG_SET e as a new OBJ_STRING robj owning the
 * bytes (expiry, version set; no history, not indexed). */
robj *bigval_string(const log_entry *e, uint64_t ref, bigval_run *run);
/* Forget every pending chunk of the shard (end of its recovery, a shard
 * cleared, a write refused half-way); returns how many there were. */
size_t bigval_forget(struct shard *s);
/* Cleaner support: is ref a pending chunk; move it. */
int bigval_pending(struct shard *s, uint64_t ref);
void bigval_pending_move(struct shard *s, uint64_t old_ref, uint64_t new_ref);

/* The bytes of an OBJ_STRING robj. */
const char *bigval_bytes(const robj *o, size_t *len);
void bigval_free_data(void *data);

/* ---- argument buffers (bigval.c, "DRAM") ----
 * A buffer of len bytes (and slack more for the caller's own use, never
 * part of the value) that a large string can be stored as without a copy:
 * the edge receives a large argument into one, and a batch copies a large
 * value into one. Reference counted: bigval_buf_new returns it with one
 * reference, which bigval_buf_release drops (NULL: nothing); the last one
 * frees it. */
char *bigval_buf_new(size_t len, size_t slack);
size_t bigval_buf_len(const char *bytes);
/* Every buffer keeps BIGVAL_ROOM free bytes right in front of its bytes, so
 * that a collection write whose effects end with a whole argument can put
 * the effects' other bytes there and log and apply the argument in place,
 * without copying it (db_obj_write_ops_tail). The n bytes in front of
 * `bytes`, or NULL when n > BIGVAL_ROOM. Only the holder of the argument
 * (the command running) writes there. */
#define BIGVAL_ROOM 128
char *bigval_buf_room(const char *bytes, size_t n);
void bigval_buf_retain(const char *bytes);
void bigval_buf_release(const char *bytes);
/* Like bigval_string, but the object's bytes are the argument buffer
 * `bytes` (a new reference to it; its length is the final entry's) and run
 * (bigval_join without want_bytes) gives only the chunks' references. */
robj *bigval_adopt(const log_entry *e, const char *bytes, bigval_run *run);

#endif
