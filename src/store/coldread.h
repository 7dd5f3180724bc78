/* coldread.h -- read the pages of cold keys on reader threads, so a worker
 * never waits on the device for them (issue 14, data larger than memory).
 *
 * A pool on block storage is a shared mapping left to the page cache. A GET
 * of a key whose entry is not in memory faults inside the worker, and the
 * worker waits for that one device read: with 2 workers, at most 2 reads
 * are in flight, while the device does several times more random reads per
 * second at a deeper queue (utils/bench-randread.c). So before a command
 * runs, the dispatcher asks which pages its keys' entries are on and
 * whether they are resident (mincore); if some are not, the command is not
 * run yet (the connection stops there, like CLIENT PAUSE), the pages go to
 * a pool of reader threads that fault them in (each reader keeps one read
 * in flight, so the device sees up to cold-read-threads), and when the last
 * one is in, the owning worker runs the command as usual. Nothing about the
 * command changes: it runs later, on warm pages, with the same locks, the
 * same durability gates and the same reply order. A page evicted again
 * before the command runs only makes it fault as before.
 *
 * The check reads nothing of the pool that is not resident: the index gives
 * the candidate references (items whose hash bits agree, without comparing
 * keys, which would read the entry), and an entry's length is read from its
 * header only once mincore says the header is in memory. DRAM objects
 * (collections, large strings) are never cold.
 *
 * Only pools on block storage (not pmem) use it. DEBUG COLDREAD FORCE 1
 * sends every pool reference through the readers, resident or not, so tests
 * exercise the path with any data; DEBUG COLDREAD DROP evicts the pool's
 * clean pages so the next reads are really cold. */
#ifndef ROWAN_COLDREAD_H
#define ROWAN_COLDREAD_H
#include <stddef.h>
#include <stdint.h>

struct worker;
typedef struct coldread_req coldread_req;

/* Is the cold-read path on (cold-read-threads > 0, a pool on block
 * storage)? */
int coldread_enabled(void);
/* Add the non-resident pages of the entries key may be in (logical db) to
 * *r, creating it for worker w and owner on the first one. Takes the key's
 * shard lock briefly (skips the key if it is busy: the command then simply
 * faults). Returns the number of pages added. */
int coldread_add_key(coldread_req **r, struct worker *w, void *owner, int db,
                     const char *key, size_t klen);
/* Should worker w skip checking this command? (It samples while it finds
 * everything resident; see coldread.c.) Then tell it what a check found. */
int coldread_skip(struct worker *w);
void coldread_checked(struct worker *w, int found_cold);
/* Pages in r so far. */
int coldread_pages(const coldread_req *r);
/* Called on the owning worker's thread when a request's pages are in. */
typedef void coldread_done_fn(void *owner);
/* Hand r's pages to the readers. When all are in, the owning worker calls
 * done(owner) on its own thread, unless r was cancelled. */
void coldread_submit(coldread_req *r, coldread_done_fn *done);
/* The owner is gone (worker thread only): r is freed when its reads end. */
void coldread_cancel(coldread_req *r);

/* Shutdown, before the pool is unmapped: the readers stop, and none is
 * reading when it returns. */
void coldread_stop(void);
/* Tests: 1 = treat every pool reference as cold. */
void coldread_set_force(int on);
/* Tests: evict the pool's clean pages from the page cache. */
void coldread_drop_cache(void);
/* Statistics: requests submitted, pages read by the readers. */
long long coldread_stat_requests(void);
long long coldread_stat_pages(void);

#endif
