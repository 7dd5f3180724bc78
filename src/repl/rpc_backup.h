/* rpc_backup.h -- replication-mode rpc: the paper's RPC-KV baseline, kept
 * as an ablation knob for the benchmark (BENCHMARKS.md). See rpc_backup.c. */
#ifndef ROWAN_RPC_BACKUP_H
#define ROWAN_RPC_BACKUP_H
#include <stddef.h>
#include <stdint.h>

struct worker;

/* Control thread: a link whose hello was accepted goes to a worker, with
 * the cap its hello declared (transport.h) and the bytes already read
 * after the hello. */
void rpcb_adopt(int fd, int node, int sender, uint32_t msg_max, const void *pending, size_t n);
/* Worker: set up / tear down; adopt queued links and ack what its syncs
 * made durable (each round). */
void rpcb_worker_init(struct worker *w);
void rpcb_worker_free(struct worker *w);
void rpcb_worker_round(struct worker *w);

#endif
