/* blog.c -- the backup log (see blog.h).
 *
 * One log_writer owned by the control thread (owner OWNER_CONTROL). The
 * digest thread learns what it may read through a published frontier: the
 * ordered list of b-log segments and the number of persisted bytes in the
 * last of them. Everything before the frontier is durable, so the digest
 * never indexes a byte that a crash could take back.
 *
 * The frontier is published under a mutex once per control-thread round
 * (after the flush), not per message: the digest lags by at most a round. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "blog.h"
#include "digest.h"
#include "log.h"
#include "pool.h"
#include "server.h"

/* The b-log's state: one per server (server.blog), allocated by blog_init
 * (a server that backs nothing up has none). */
struct blog_state {
    log_writer log;
    uint64_t landed_bytes;          /* control thread only */
    _Atomic uint64_t persisted_bytes;
};

void blog_init(void) {
    struct blog_state *b = server.blog;
    if (!b) b = server.blog = calloc(1, sizeof(*b));
    /* No on_sealed: a filled b-log segment stays USED until the digest
     * commits it (MaxVer <= CommitVer). */
    log_writer_init(&b->log, server.pool, OWNER_CONTROL, 0);
}

void blog_free(void) {
    free(server.blog);
    server.blog = NULL;
}

uint64_t blog_reserve(size_t span) {
    log_writer *lw = &server.blog->log;
    int32_t before = lw->seg;
    uint64_t off = log_writer_reserve(lw, span, -1);
    if (off && lw->seg != before) digest_segment_started((uint32_t)lw->seg);
    return off;
}

void blog_wrote(uint64_t off, size_t span) {
    log_writer_wrote(&server.blog->log, off, span);
    server.blog->landed_bytes += span;
}

uint64_t blog_land(const void *msg, size_t span) {
    uint64_t off = blog_reserve(span);
    if (!off) return 0;
    void *dst = log_writer_dst(&server.blog->log, off, span);
    memcpy(dst, msg, span);
    blog_wrote(off, span);
    return off;
}

void blog_flush_begin(blog_flush *f) {
    log_writer_detach(&server.blog->log, &f->log);
    f->bytes = server.blog->landed_bytes;
}

void blog_flush_end(const blog_flush *f) {
    log_writer_flushed(&server.blog->log, &f->log);
    if (f->log.head >= 0) digest_publish((uint32_t)f->log.head, f->log.head_pos);
    atomic_store(&server.blog->persisted_bytes, f->bytes);
}

void blog_persist(void) {
    /* One device flush for everything (like the workers' syncer), then the
     * filled segments become USED. On pmem each landing was persisted. */
    blog_flush f;
    blog_flush_begin(&f);
    pool_sync_all(server.pool);
    blog_flush_end(&f);
}

uint64_t blog_bytes_landed(void) {
    return server.blog ? atomic_load(&server.blog->persisted_bytes) : 0;
}
