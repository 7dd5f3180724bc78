/* transport_verbs.c -- the verbs (RDMA) backend of the replication
 * transport (transport.h; DESIGN.md §2, §5; Rowan-KV §3, §5.2).
 *
 * Nothing here can run without an RDMA device: link_open and
 * verbs_receiver_start then fail with "no RDMA device found" and touch
 * nothing else. No verbs call is ever faked. The sockets backend
 * (src/repl/transport_tcp.c) keeps the same message format and ack semantics.
 *
 * ---- Connection ----
 * One RC QP per link, set up with librdmacm (RDMA_PS_TCP ids on the peer's
 * replication port). The 32-byte repl_hello (same bytes as the TCP backend's
 * first message) travels as the connect request's private data, so a refused
 * hello never gets a QP: the receiver rdma_reject()s with a small reason
 * record (bad hello / term or config digest mismatch / unsupported mode /
 * out of resources) and link_open fails with that reason. An accepted
 * connection's reply private data (struct vb_accept) carries the receive
 * buffer size (the largest message), the ack mode, the address and rkey
 * of the receiver's 1-byte READ target, and the peer handshake's challenge.
 *
 * Authentication (src/repl/peer_auth.c, the same handshake as the TCP backend's):
 * the private-data hello above is only a cheap early check of the
 * configuration; nothing is trusted on it. The receiver's challenge travels
 * in the accept record; the sender's FIRST SEND on the QP is its handshake
 * response (which repeats the hello, now under the MAC), and the receiver's
 * first SEND back is its proof. The receiver lands nothing from a QP before
 * that response verified (and drops what follows a failed one), and the
 * sender counts no ack before the proof verified. A link that has not
 * authenticated within VB_AUTH_TIMEOUT_MS is disconnected.
 *
 * ---- Sender (a worker's event loop) ----
 * Each link has its own PD, CQ and completion channel; the channel's fd and
 * the rdma_cm event channel's fd are events on the worker's event_base, so
 * completions and disconnects are handled by the worker's loop. link_send
 * copies the entry into a registered staging ring slot (zero padded to its
 * 64-byte span) and posts, in ONE ibv_post_send call, an unsignaled SEND of
 * the span followed by a signaled 1-byte RDMA READ whose wr_id is the
 * message's sequence number (Rowan-KV §5.2). The ring has sq_msgs slots
 * (the send queue holds 2 WRs per message); when sq_msgs messages are in
 * flight, further messages are copied to a DRAM FIFO and posted as READ
 * completions free slots (link_flush and the completion handler drain it),
 * so link_send never blocks. An entry whose span exceeds the receiver's
 * buffer size (VERBS_MSG_MAX, 4 KiB, the largest IB MTU) is queued whole
 * and goes out as blocks (below), one SEND + READ per block, each block
 * cut straight into its ring slot as the send queue frees up. Since a SEND
 * is no longer a message, the sender counts both: `posted`/`completed` in
 * SENDs (ring slots), `posted_msgs` in messages, and each slot remembers
 * how many messages were wholly posted with it, so a READ completion (the
 * ack in VB_ACK_READ mode) maps back to messages. Only an empty entry or
 * one over LOG_MAX_ENTRY is refused; because link_send's 0 means "the link
 * is down" (transport.h), that also takes the link down (on_down says why)
 * rather than silently leaving a hole in the link's sequence. Any error
 * completion or rdma_cm disconnect takes the link down; on_down is
 * delivered once, from the event loop.
 *
 * ---- Multi-block entries (Rowan-KV §4.2.2; src/repl/vblock.c) ----
 * Wire format of one block SEND (little endian), 64-byte header + payload:
 *
 *   off size field
 *    0   4   crc        CRC32C over bytes [4, 64 + plen) of the block
 *    4   1   0          (an entry's type byte, never 0: tells a block)
 *    5   1   'B'
 *    6   2   shard      } the entry's metadata, at its header's offsets
 *    8   8   verdb      }
 *   16   8   msg        the entry's sequence number on the link
 *   24   4   entry_len  the entry's bytes, unpadded (<= LOG_MAX_ENTRY)
 *   28   4   cnt        ceil(entry_len / (msg_max - 64))
 *   32   4   seq        0 .. cnt-1: payload = entry bytes from seq*(msg_max-64)
 *   36   4   plen       msg_max - 64, or the rest for the last block
 *   40  24   zero
 *
 * The receiver reassembles one entry per link in a buffer of its span (any
 * block order; each block exactly once, checked against the first block's
 * msg/cnt/len/metadata, msg being the link's next message number). When
 * all cnt blocks are in and the whole entry's crc and metadata check, the
 * entry lands in the b-log as ONE message (contiguous, byte for byte what
 * the TCP transport lands) and counts as one for the cumulative acks. A
 * lost, duplicated, foreign or damaged block, or a whole entry arriving
 * while blocks are missing, is a protocol error on an RC QP: the link
 * breaks and its partial entry is freed, never landed. Whole entries keep
 * the old format, so small entries pay nothing.
 *
 * ---- Receiver (the control thread) ----
 * verbs_receiver_start() listens; every accepted QP is attached to ONE SRQ
 * with ONE CQ (Rowan-KV Fig. 4a). verbs_receiver_poll() is a complete
 * control-thread round: accept/close connections, drain the CQ, land every
 * received message in the b-log in completion order (a block only once it
 * completes its entry), blog_persist(), then ack each link with the
 * cumulative count of its messages now persisted.
 *
 * Multi-packet SRQ: not available. Debian's rdma-core (mlx5dv.h) exposes a
 * striding RQ only through mlx5dv_create_wq(), i.e. for WQs of RAW_PACKET
 * QPs; there is no multi-packet SRQ that RC QPs can share (that was
 * MLNX_OFED's experimental ibv_exp_* API). When the device is an mlx5 we
 * still query and log its striding-RQ caps, so the gap is visible.
 *
 * Receive buffers: fixed VERBS_MSG_MAX-byte buffers in a registered DRAM
 * ring; on completion the control thread copies the message's span into the
 * b-log with blog_land() and reposts the buffer. The trade-off (asked for:
 * carve the buffers out of the b-log so the NIC lands in place) is:
 *   - landing in place saves one memcpy per message (a few hundred ns for
 *     small entries, nothing next to blog_persist on block storage), but
 *     with fixed buffers every message occupies a whole 4 KiB slot: for the
 *     ~100-byte entries Rowan targets that wastes >95% of the b-log and
 *     leaves a zero hole after every entry, which defeats the point of one
 *     dense b-log (few write streams, combined XPLines);
 *   - copying keeps the b-log byte-for-byte what the TCP backend produces
 *     (dense, 64-byte aligned, no holes) at the cost of the copy and a DRAM
 *     ring (1024 x 4 KiB per receiver).
 * In-place landing is also not possible with the b-log as it is: log.c's
 * writer contract is one outstanding reservation at a time (the SRQ needs
 * hundreds posted ahead), recovery reports a reserved-but-unwritten zero
 * hole as damage, blog_persist publishes the reservation frontier (which
 * would include posted-but-empty buffers), and on a non-pmem pool
 * blog_wrote() pwrite()s its staging buffer over the reserved range. And on
 * block storage the NIC must not DMA into a pinned file mapping at all:
 * writeback does not see DMA'd pages as dirty (kernels >= 6.5 refuse such
 * long-term pins on non-shmem files); only ODP MRs would be coherent. With
 * a multi-packet SRQ, a pmem pool and a b-log API for "reserve a whole
 * segment ahead, report landed runs", in-place landing becomes worth it.
 *
 * Persistence handshake: the READ after each SEND gives remote persistence
 * only when the SEND's bytes were DMA'd straight into persistent memory
 * with DDIO off (the READ's response then follows the write out of the
 * PCIe/memory-controller queues into the ADR domain). That never holds here:
 * the bytes land in a DRAM ring and even in place, on a non-pmem pool only
 * blog_persist() (fdatasync) makes them durable. A READ of "a flag the
 * control thread sets after blog_persist" does not help either: the
 * responder NIC executes the READ as soon as it arrives, it cannot wait for
 * the CPU, so the sender would have to re-issue READs until it saw the flag.
 * So the receiver acknowledges explicitly: after blog_persist() it posts,
 * per link, a 16-byte SEND {magic, n} meaning "the first n messages of this
 * connection are persisted" (at most one ack in flight per link; the
 * newest count goes next, acks being cumulative). The sender keeps a few
 * receive buffers for them and calls on_ack(n). The per-message READ is
 * still posted: it is the signaled WR that recycles the send queue and ring
 * slots, and the accept record's ack_mode (VB_ACK_READ) lets a future
 * in-place pmem + DDIO-off receiver make the READ completion the ack, as in
 * the paper, without changing senders.
 *
 * Ordering: SRQ buffers are consumed in posting order, but landing follows
 * completion order, which on one CQ is arrival order; per link (one RC QP)
 * messages arrive and complete in sequence order, which is all the
 * cumulative acks need. A full pool stops landing: the received buffers stay
 * queued (not reposted, nothing acked), senders see RNR back-pressure (RNR
 * retry is infinite) and landing resumes when blog_land succeeds again. */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "blog.h"
#include "log.h"
#include "peer_auth.h"
#include "server.h"
#include "transport.h"
#include "transport_verbs.h"
#include "vblock.h"

/* ---- wire records (little endian) ---- */

#define VB_ACCEPT_MAGIC 0x3142525643574f52ULL /* "ROWCVRB1" */
#define VB_REJECT_MAGIC 0x314a525643574f52ULL /* "ROWCVRJ1" */
#define VB_ACK_MAGIC    0x314b434143574f52ULL /* "ROWCACK1" */
#define VB_VERSION      3   /* 2: the accept record carries the handshake challenge;
                             * 3: multi-block entries (an older receiver would land
                             * blocks as entries, so versions must match) */

enum { VB_ACK_SEND = 0, VB_ACK_READ = 1 };
enum { VB_REJ_BAD_HELLO = 1, VB_REJ_CONFIG = 2, VB_REJ_MODE = 3, VB_REJ_RESOURCES = 4,
       VB_REJ_NO_SECRET = 5 };

#define VB_AUTH_TIMEOUT_MS 5000

/* Accept reply (REP private data; 64 bytes fit IB's 196 and iWARP's 512). */
struct vb_accept {
    uint64_t magic;
    uint32_t version;
    uint32_t ack_mode;    /* VB_ACK_* */
    uint32_t msg_max;     /* receive buffer size: largest span per SEND */
    uint32_t flush_rkey;  /* READ target */
    uint64_t flush_addr;
    uint8_t challenge[PAUTH_CHALLENGE_LEN]; /* the peer handshake's */
};

/* Receive buffers for what a receiver sends a sender: acks, and first the
 * handshake's proof (or refusal). */
#define VB_CTL_MSG 64
_Static_assert(PAUTH_REPLY_LEN <= VB_CTL_MSG && sizeof(struct vb_accept) == 64,
               "verbs control messages");

struct vb_reject {
    uint64_t magic;
    uint32_t reason;      /* VB_REJ_* */
    uint32_t pad;
};

struct vb_ack {
    uint64_t magic;
    uint64_t acked;
};

static const char *vb_reject_str(uint32_t reason) {
    switch (reason) {
    case VB_REJ_BAD_HELLO: return "malformed hello";
    case VB_REJ_CONFIG: return "term or configuration digest differs from the peer's "
                               "(stale or mismatched configuration)";
    case VB_REJ_MODE: return "replication mode not served by the verbs receiver";
    case VB_REJ_RESOURCES: return "receiver out of resources (see its log)";
    case VB_REJ_NO_SECRET: return "the receiver takes no peers without a cluster secret "
                                  "(see its log)";
    default: return "unknown reason";
    }
}

static void hello_encode(uint8_t out[32], const repl_hello *h) {
    uint64_t v64;
    uint16_t v16;
    uint32_t v32;
    v64 = htole64(h->magic); memcpy(out + 0, &v64, 8);
    v16 = htole16(h->node); memcpy(out + 8, &v16, 2);
    v16 = htole16(h->sender); memcpy(out + 10, &v16, 2);
    v32 = htole32(h->mode); memcpy(out + 12, &v32, 4);
    v64 = htole64(h->term); memcpy(out + 16, &v64, 8);
    v64 = htole64(h->config_digest); memcpy(out + 24, &v64, 8);
}

static void hello_decode(repl_hello *h, const uint8_t in[32]) {
    uint64_t v64;
    uint16_t v16;
    uint32_t v32;
    memcpy(&v64, in + 0, 8); h->magic = le64toh(v64);
    memcpy(&v16, in + 8, 2); h->node = le16toh(v16);
    memcpy(&v16, in + 10, 2); h->sender = le16toh(v16);
    memcpy(&v32, in + 12, 4); h->mode = le32toh(v32);
    memcpy(&v64, in + 16, 8); h->term = le64toh(v64);
    memcpy(&v64, in + 24, 8); h->config_digest = le64toh(v64);
}

/* ---- helpers ---- */

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int set_nonblock(int fd) {
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* 1 when at least one RDMA device exists; otherwise 0 with err filled. */
static int vb_have_device(char *err, size_t errlen) {
    int n = 0;
    errno = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    int e = errno;
    if (list) ibv_free_device_list(list);
    if (list && n > 0) return 1;
    snprintf(err, errlen, "no RDMA device found (ibv_get_device_list returned 0 devices%s%s)",
             !list && e ? ": " : "", !list && e ? strerror(e) : "");
    return 0;
}

/* Wait for the next rdma_cm event on ch until deadline (monotonic ms). */
static struct rdma_cm_event *cm_wait(struct rdma_event_channel *ch, int64_t deadline,
                                     const char *what, char *err, size_t errlen) {
    for (;;) {
        int64_t left = deadline - now_ms();
        if (left <= 0) {
            snprintf(err, errlen, "timed out waiting for %s", what);
            return NULL;
        }
        struct pollfd pfd = {.fd = ch->fd, .events = POLLIN};
        int rc = poll(&pfd, 1, (int)(left > 1000000 ? 1000000 : left));
        if (rc < 0 && errno == EINTR) continue;
        if (rc < 0) {
            snprintf(err, errlen, "poll: %s", strerror(errno));
            return NULL;
        }
        if (rc == 0) continue;
        struct rdma_cm_event *ev = NULL;
        if (rdma_get_cm_event(ch, &ev) == 0) return ev;
        if (errno == EAGAIN || errno == EINTR) continue;
        snprintf(err, errlen, "rdma_get_cm_event: %s", strerror(errno));
        return NULL;
    }
}

/* Wait for event `want`; anything else is an error described in err. */
static int cm_expect(struct rdma_event_channel *ch, enum rdma_cm_event_type want, int64_t deadline,
                     char *err, size_t errlen) {
    struct rdma_cm_event *ev = cm_wait(ch, deadline, rdma_event_str(want), err, errlen);
    if (!ev) return -1;
    int ok = ev->event == want;
    if (!ok)
        snprintf(err, errlen, "expected %s, got %s (status %d)", rdma_event_str(want),
                 rdma_event_str(ev->event), ev->status);
    rdma_ack_cm_event(ev);
    return ok ? 0 : -1;
}

/* ================= sender ================= */

#define VB_SQ_MSGS    128  /* messages in flight per link (2 WRs each) */
#define VB_ACK_RECVS  8    /* receive buffers for acks */
#define VB_READ_DEPTH 16   /* outstanding READs we ask for */

/* A message waiting for send queue room: a whole entry padded to its
 * span (cnt 0), or an entry of len bytes still to be cut into cnt blocks
 * from next_blk on (src/repl/vblock.c). */
struct vb_queued {
    struct vb_queued *next;
    uint64_t msg;         /* its sequence number on the link */
    size_t span;          /* cnt 0: bytes to send; else the entry's length */
    uint32_t cnt, next_blk;
    uint8_t data[];
};

/* Registered per-link scratch: the READ's local target, the receive
 * buffers for the receiver's messages, and our handshake response. */
struct vb_misc {
    uint8_t read_dst[64];
    uint8_t acks[VB_ACK_RECVS][VB_CTL_MSG];
    uint8_t auth_out[PAUTH_MSG_MAX];
};

struct repl_link {
    struct event_base *base;
    repl_link_cbs cbs;
    struct rdma_event_channel *cm_ch;
    struct rdma_cm_id *id;
    struct ibv_pd *pd;
    struct ibv_comp_channel *comp_ch;
    struct ibv_cq *cq;
    struct ibv_mr *ring_mr, *misc_mr;
    uint8_t *ring;
    struct vb_misc *misc;
    struct event *ev_comp, *ev_cm, *ev_down;
    uint32_t sq_msgs, msg_max, ack_mode, flush_rkey;
    uint64_t flush_addr;
    uint64_t next_seq;    /* last sequence number handed out */
    uint64_t posted;      /* SENDs posted (an entry, or one block of one) */
    uint64_t completed;   /* highest READ completion (implies all before) */
    uint64_t posted_msgs; /* messages whose every SEND is posted */
    uint64_t completed_msgs; /* ... and whose last SEND's READ completed */
    uint64_t *slot_msgs;  /* per ring slot: posted_msgs once its SEND was posted */
    uint64_t acked;       /* last count given to on_ack */
    pauth auth;           /* acks count only once it is done */
    struct vb_queued *qhead, *qtail;
    int qp_created, connected, down, closing, in_cb;
    char why[200];
};

static void link_destroy(repl_link *l) {
    if (l->ev_comp) event_free(l->ev_comp);
    if (l->ev_cm) event_free(l->ev_cm);
    if (l->ev_down) event_free(l->ev_down);
    if (l->connected) rdma_disconnect(l->id);
    if (l->qp_created) rdma_destroy_qp(l->id);
    if (l->ring_mr) ibv_dereg_mr(l->ring_mr);
    if (l->misc_mr) ibv_dereg_mr(l->misc_mr);
    if (l->cq) ibv_destroy_cq(l->cq);
    if (l->comp_ch) ibv_destroy_comp_channel(l->comp_ch);
    if (l->pd) ibv_dealloc_pd(l->pd);
    if (l->id) rdma_destroy_id(l->id);
    if (l->cm_ch) rdma_destroy_event_channel(l->cm_ch);
    free(l->ring);
    free(l->slot_msgs);
    free(l->misc);
    while (l->qhead) {
        struct vb_queued *q = l->qhead;
        l->qhead = q->next;
        free(q);
    }
    free(l);
}

static void vb_on_down_cb(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    repl_link *l = arg;
    if (l->closing) return;
    if (l->cbs.on_down) {
        l->in_cb++;
        l->cbs.on_down(l->cbs.ctx, l->why);
        l->in_cb--;
    }
    if (l->closing) link_destroy(l);
}

/* Mark the link dead; on_down follows from the event loop, once. */
static void vb_set_down(repl_link *l, const char *why) {
    if (l->down) return;
    l->down = 1;
    snprintf(l->why, sizeof(l->why), "%s", why);
    while (l->qhead) { /* lost, never retried (transport.h) */
        struct vb_queued *q = l->qhead;
        l->qhead = q->next;
        free(q);
    }
    l->qtail = NULL;
    if (l->ev_comp) event_del(l->ev_comp);
    if (l->ev_cm) event_del(l->ev_cm);
    if (l->ev_down) event_active(l->ev_down, EV_TIMEOUT, 0);
}

static int vb_post_ack_recv(repl_link *l, uint32_t i) {
    struct ibv_sge sge = {.addr = (uintptr_t)l->misc->acks[i], .length = VB_CTL_MSG,
                          .lkey = l->misc_mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = i, .sg_list = &sge, .num_sge = 1}, *bad = NULL;
    return ibv_post_recv(l->id->qp, &wr, &bad);
}

/* The ring slot of the next SEND (posted + 1). */
static uint8_t *vb_next_slot(repl_link *l) {
    return l->ring + (size_t)(l->posted % l->sq_msgs) * l->msg_max;
}

/* Post the next slot's first span bytes as SEND number seq = posted + 1:
 * SEND (unsignaled) + 1-byte READ (signaled, wr_id = seq) in one
 * ibv_post_send. msgs is how many messages are wholly posted with it. */
static void vb_post_slot(repl_link *l, size_t span, uint64_t msgs) {
    uint64_t seq = l->posted + 1;
    uint8_t *slot = vb_next_slot(l);
    struct ibv_sge send_sge = {.addr = (uintptr_t)slot, .length = (uint32_t)span,
                               .lkey = l->ring_mr->lkey};
    struct ibv_sge read_sge = {.addr = (uintptr_t)l->misc->read_dst, .length = 1,
                               .lkey = l->misc_mr->lkey};
    struct ibv_send_wr rd, snd, *bad = NULL;
    memset(&rd, 0, sizeof(rd));
    memset(&snd, 0, sizeof(snd));
    rd.wr_id = seq;
    rd.sg_list = &read_sge;
    rd.num_sge = 1;
    rd.opcode = IBV_WR_RDMA_READ;
    rd.send_flags = IBV_SEND_SIGNALED;
    rd.wr.rdma.remote_addr = l->flush_addr;
    rd.wr.rdma.rkey = l->flush_rkey;
    snd.wr_id = 0;
    snd.next = &rd;
    snd.sg_list = &send_sge;
    snd.num_sge = 1;
    snd.opcode = IBV_WR_SEND;
    snd.send_flags = 0; /* unsignaled */
    int rc = ibv_post_send(l->id->qp, &snd, &bad);
    if (rc) {
        char why[160];
        snprintf(why, sizeof(why), "ibv_post_send: %s", strerror(rc));
        vb_set_down(l, why);
        return;
    }
    l->slot_msgs[(seq - 1) % l->sq_msgs] = msgs;
    l->posted = seq;
    l->posted_msgs = msgs;
}

/* Post a whole entry (len bytes, padded to span) as message msg. */
static void vb_post_msg(repl_link *l, const void *data, size_t len, size_t span, uint64_t msg) {
    uint8_t *slot = vb_next_slot(l);
    memcpy(slot, data, len);
    if (span > len) memset(slot + len, 0, span - len);
    vb_post_slot(l, span, msg);
}

/* Post SENDs from the queue while the send queue has room; a multi-block
 * entry goes out a block per SEND, its blocks cut straight into the slots. */
static void vb_drain_queue(repl_link *l) {
    while (!l->down && l->qhead && l->posted - l->completed < l->sq_msgs) {
        struct vb_queued *q = l->qhead;
        int last = 1;
        if (q->cnt == 0) {
            vb_post_msg(l, q->data, q->span, q->span, q->msg);
        } else {
            uint32_t b = q->next_blk++;
            size_t n = vblk_encode(vb_next_slot(l), q->data, q->span, q->msg, b, l->msg_max);
            last = q->next_blk == q->cnt;
            vb_post_slot(l, n, last ? q->msg : q->msg - 1);
        }
        if (l->down) return; /* vb_set_down freed the queue, q included */
        if (!last) continue;
        l->qhead = q->next;
        if (!l->qhead) l->qtail = NULL;
        free(q);
    }
}

/* Drain the CQ. Returns -1 when the link was closed from a callback (l is
 * freed), else 0. */
static int vb_process_cq(repl_link *l) {
    uint64_t best = l->acked;
    struct ibv_wc wc[16];
    while (!l->down) {
        int n = ibv_poll_cq(l->cq, 16, wc);
        if (n < 0) {
            vb_set_down(l, "ibv_poll_cq failed");
            break;
        }
        if (n == 0) break;
        for (int i = 0; i < n && !l->down; i++) {
            if (wc[i].status != IBV_WC_SUCCESS) {
                char why[200];
                snprintf(why, sizeof(why), "completion error: %s (opcode %d, vendor_err 0x%x)",
                         ibv_wc_status_str(wc[i].status), (int)wc[i].opcode, wc[i].vendor_err);
                vb_set_down(l, why);
                break;
            }
            if (wc[i].opcode == IBV_WC_RDMA_READ) {
                if (wc[i].wr_id > l->completed && wc[i].wr_id <= l->posted) {
                    /* read the slot's count before a new SEND reuses it */
                    l->completed = wc[i].wr_id;
                    l->completed_msgs = l->slot_msgs[(l->completed - 1) % l->sq_msgs];
                }
            } else if (wc[i].opcode == IBV_WC_RECV) {
                uint32_t k = (uint32_t)wc[i].wr_id;
                if (k >= VB_ACK_RECVS) {
                    vb_set_down(l, "protocol error: unknown receive completion");
                    break;
                }
                if (!pauth_done(&l->auth)) {
                    /* the receiver's first message: its proof */
                    char why[256];
                    uint8_t none[PAUTH_MSG_MAX];
                    size_t nonelen = 0;
                    if (wc[i].byte_len != PAUTH_REPLY_LEN ||
                        pauth_feed(&l->auth, l->misc->acks[k], PAUTH_REPLY_LEN, none, &nonelen, why,
                                   sizeof(why)) <= 0) {
                        vb_set_down(l, wc[i].byte_len != PAUTH_REPLY_LEN
                                           ? "protocol error: the receiver did not answer our "
                                             "handshake" : why);
                        break;
                    }
                } else {
                    struct vb_ack a;
                    memcpy(&a, l->misc->acks[k], sizeof(a));
                    uint64_t n_acked = le64toh(a.acked);
                    if (wc[i].byte_len != sizeof(a) || le64toh(a.magic) != VB_ACK_MAGIC ||
                        n_acked > l->posted_msgs) {
                        vb_set_down(l, "protocol error: malformed ack from the receiver");
                        break;
                    }
                    if (n_acked > best) best = n_acked;
                }
                int rc = vb_post_ack_recv(l, k);
                if (rc) {
                    char why[160];
                    snprintf(why, sizeof(why), "ibv_post_recv: %s", strerror(rc));
                    vb_set_down(l, why);
                }
            }
        }
    }
    /* READ mode: a READ's completion is its message's ack, once the
     * receiver proved who it is */
    if (l->ack_mode == VB_ACK_READ && pauth_done(&l->auth) && l->completed_msgs > best)
        best = l->completed_msgs;
    vb_drain_queue(l);
    if (best > l->acked && !l->closing) {
        l->acked = best;
        if (l->cbs.on_ack) {
            l->in_cb++;
            l->cbs.on_ack(l->cbs.ctx, best);
            l->in_cb--;
        }
        if (l->closing) {
            link_destroy(l);
            return -1;
        }
    }
    return 0;
}

static void vb_on_comp(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    repl_link *l = arg;
    struct ibv_cq *cq;
    void *ctx;
    while (ibv_get_cq_event(l->comp_ch, &cq, &ctx) == 0)
        ibv_ack_cq_events(cq, 1);
    if (l->down) return;
    if (ibv_req_notify_cq(l->cq, 0)) {
        vb_set_down(l, "ibv_req_notify_cq failed");
        return;
    }
    vb_process_cq(l);
}

static void vb_on_cm(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    repl_link *l = arg;
    struct rdma_cm_event *ev;
    while (!l->down && rdma_get_cm_event(l->cm_ch, &ev) == 0) {
        enum rdma_cm_event_type t = ev->event;
        int status = ev->status;
        rdma_ack_cm_event(ev);
        char why[160];
        switch (t) {
        case RDMA_CM_EVENT_DISCONNECTED:
            l->connected = 0;
            vb_set_down(l, "the peer disconnected");
            break;
        case RDMA_CM_EVENT_DEVICE_REMOVAL:
            vb_set_down(l, "RDMA device removed");
            break;
        default:
            snprintf(why, sizeof(why), "unexpected connection event %s (status %d)",
                     rdma_event_str(t), status);
            vb_set_down(l, why);
            break;
        }
    }
}

/* Answer the receiver's challenge: our handshake response is the first
 * SEND on the QP (unsignaled; the next signaled READ retires it), so it
 * precedes every message. */
static int vb_send_response(repl_link *l, const uint8_t challenge[PAUTH_CHALLENGE_LEN], char *err,
                            size_t errlen) {
    size_t outlen = 0;
    if (pauth_feed(&l->auth, challenge, PAUTH_CHALLENGE_LEN, l->misc->auth_out, &outlen, err,
                   errlen) <= 0)
        return -1;
    struct ibv_sge sge = {.addr = (uintptr_t)l->misc->auth_out, .length = (uint32_t)outlen,
                          .lkey = l->misc_mr->lkey};
    struct ibv_send_wr wr, *bad = NULL;
    memset(&wr, 0, sizeof(wr));
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    int rc = ibv_post_send(l->id->qp, &wr, &bad);
    if (rc) {
        snprintf(err, errlen, "ibv_post_send (handshake): %s", strerror(rc));
        return -1;
    }
    return 0;
}

static repl_link *vb_open(struct event_base *base, const char *host, int port,
                          const repl_hello *hello, const repl_link_cbs *cbs, int timeout_ms,
                          char *err, size_t errlen) {
    char e2[200];
    if (!vb_have_device(e2, sizeof(e2))) {
        snprintf(err, errlen, "verbs: %s", e2);
        return NULL;
    }
    int64_t deadline = now_ms() + (timeout_ms > 0 ? timeout_ms : 5000);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV}, *res = NULL;
    char portstr[16];
    snprintf(portstr, sizeof(portstr), "%d", port);
    int rc = getaddrinfo(host, portstr, &hints, &res);
    if (rc != 0) {
        snprintf(err, errlen, "verbs: %s:%d: %s", host, port, gai_strerror(rc));
        return NULL;
    }
    repl_link *l = calloc(1, sizeof(*l));
    if (!l) {
        freeaddrinfo(res);
        snprintf(err, errlen, "verbs: out of memory");
        return NULL;
    }
    l->base = base;
    l->cbs = *cbs;
#define FAIL(...) do { snprintf(e2, sizeof(e2), __VA_ARGS__); goto fail; } while (0)
    l->cm_ch = rdma_create_event_channel();
    if (!l->cm_ch) FAIL("rdma_create_event_channel: %s", strerror(errno));
    if (rdma_create_id(l->cm_ch, &l->id, l, RDMA_PS_TCP))
        FAIL("rdma_create_id: %s", strerror(errno));
    if (rdma_resolve_addr(l->id, NULL, res->ai_addr, (int)(deadline - now_ms())))
        FAIL("rdma_resolve_addr: %s", strerror(errno));
    if (cm_expect(l->cm_ch, RDMA_CM_EVENT_ADDR_RESOLVED, deadline, e2, sizeof(e2))) goto fail;
    if (rdma_resolve_route(l->id, (int)(deadline - now_ms())))
        FAIL("rdma_resolve_route: %s", strerror(errno));
    if (cm_expect(l->cm_ch, RDMA_CM_EVENT_ROUTE_RESOLVED, deadline, e2, sizeof(e2))) goto fail;

    struct ibv_device_attr da;
    if (ibv_query_device(l->id->verbs, &da)) FAIL("ibv_query_device: %s", strerror(errno));
    l->sq_msgs = VB_SQ_MSGS;
    if (da.max_qp_wr > 0 && (uint32_t)da.max_qp_wr / 2 < l->sq_msgs)
        l->sq_msgs = (uint32_t)da.max_qp_wr / 2;
    if (l->sq_msgs < 1) FAIL("device send queue too small (max_qp_wr %d)", da.max_qp_wr);
    l->pd = ibv_alloc_pd(l->id->verbs);
    if (!l->pd) FAIL("ibv_alloc_pd: %s", strerror(errno));
    l->comp_ch = ibv_create_comp_channel(l->id->verbs);
    if (!l->comp_ch) FAIL("ibv_create_comp_channel: %s", strerror(errno));
    l->cq = ibv_create_cq(l->id->verbs, (int)(2 * l->sq_msgs + VB_ACK_RECVS + 8), l, l->comp_ch, 0);
    if (!l->cq) FAIL("ibv_create_cq: %s", strerror(errno));
    struct ibv_qp_init_attr qa;
    memset(&qa, 0, sizeof(qa));
    qa.send_cq = l->cq;
    qa.recv_cq = l->cq;
    qa.qp_type = IBV_QPT_RC;
    qa.cap.max_send_wr = 2 * l->sq_msgs + 1; /* + the handshake response */
    qa.cap.max_recv_wr = VB_ACK_RECVS;
    qa.cap.max_send_sge = 1;
    qa.cap.max_recv_sge = 1;
    qa.sq_sig_all = 0;
    if (rdma_create_qp(l->id, l->pd, &qa)) FAIL("rdma_create_qp: %s", strerror(errno));
    l->qp_created = 1;
    l->misc = aligned_alloc(64, sizeof(struct vb_misc));
    if (!l->misc) FAIL("out of memory");
    memset(l->misc, 0, sizeof(*l->misc));
    l->misc_mr = ibv_reg_mr(l->pd, l->misc, sizeof(*l->misc), IBV_ACCESS_LOCAL_WRITE);
    if (!l->misc_mr) FAIL("ibv_reg_mr: %s", strerror(errno));
    for (uint32_t i = 0; i < VB_ACK_RECVS; i++)
        if ((rc = vb_post_ack_recv(l, i))) FAIL("ibv_post_recv: %s", strerror(rc));

    uint8_t pd_hello[32];
    hello_encode(pd_hello, hello);
    pauth_client_begin(&l->auth, pd_hello, sizeof(pd_hello));
    struct rdma_conn_param cp;
    memset(&cp, 0, sizeof(cp));
    cp.private_data = pd_hello;
    cp.private_data_len = sizeof(pd_hello);
    cp.initiator_depth = (uint8_t)(da.max_qp_init_rd_atom < VB_READ_DEPTH
                                       ? da.max_qp_init_rd_atom : VB_READ_DEPTH);
    cp.responder_resources = 0;
    cp.retry_count = 7;
    cp.rnr_retry_count = 7; /* infinite: an empty SRQ is back-pressure */
    if (rdma_connect(l->id, &cp)) FAIL("rdma_connect: %s", strerror(errno));
    struct rdma_cm_event *ev = cm_wait(l->cm_ch, deadline, "the peer's answer", e2, sizeof(e2));
    if (!ev) goto fail;
    if (ev->event != RDMA_CM_EVENT_ESTABLISHED) {
        struct vb_reject rj;
        memset(&rj, 0, sizeof(rj));
        if (ev->event == RDMA_CM_EVENT_REJECTED && ev->param.conn.private_data &&
            ev->param.conn.private_data_len >= sizeof(rj))
            memcpy(&rj, ev->param.conn.private_data, sizeof(rj));
        if (ev->event == RDMA_CM_EVENT_REJECTED && le64toh(rj.magic) == VB_REJECT_MAGIC)
            snprintf(e2, sizeof(e2), "the peer refused the link: %s", vb_reject_str(le32toh(rj.reason)));
        else
            snprintf(e2, sizeof(e2), "connect failed: %s (status %d)", rdma_event_str(ev->event),
                     ev->status);
        rdma_ack_cm_event(ev);
        goto fail;
    }
    l->connected = 1;
    struct vb_accept acc;
    memset(&acc, 0, sizeof(acc));
    if (ev->param.conn.private_data && ev->param.conn.private_data_len >= sizeof(acc))
        memcpy(&acc, ev->param.conn.private_data, sizeof(acc));
    rdma_ack_cm_event(ev);
    l->msg_max = le32toh(acc.msg_max);
    l->ack_mode = le32toh(acc.ack_mode);
    l->flush_rkey = le32toh(acc.flush_rkey);
    l->flush_addr = le64toh(acc.flush_addr);
    if (le64toh(acc.magic) != VB_ACCEPT_MAGIC || le32toh(acc.version) != VB_VERSION ||
        l->msg_max < LOG_ALIGN || l->msg_max % LOG_ALIGN || l->msg_max > (1u << 20) ||
        l->ack_mode > VB_ACK_READ || l->msg_max < PAUTH_MSG_MAX || l->msg_max <= VBLK_HDR)
        FAIL("protocol error: the peer's accept record is missing or malformed (another "
             "Rowan version?)");
    if (vb_send_response(l, acc.challenge, e2, sizeof(e2)) != 0) goto fail;
    l->ring = aligned_alloc(4096, (size_t)l->sq_msgs * l->msg_max);
    l->slot_msgs = calloc(l->sq_msgs, sizeof(*l->slot_msgs));
    if (!l->ring || !l->slot_msgs) FAIL("out of memory");
    l->ring_mr = ibv_reg_mr(l->pd, l->ring, (size_t)l->sq_msgs * l->msg_max, 0);
    if (!l->ring_mr) FAIL("ibv_reg_mr: %s", strerror(errno));
    if (set_nonblock(l->comp_ch->fd) || set_nonblock(l->cm_ch->fd))
        FAIL("fcntl: %s", strerror(errno));
    l->ev_comp = event_new(base, l->comp_ch->fd, EV_READ | EV_PERSIST, vb_on_comp, l);
    l->ev_cm = event_new(base, l->cm_ch->fd, EV_READ | EV_PERSIST, vb_on_cm, l);
    l->ev_down = event_new(base, -1, 0, vb_on_down_cb, l);
    if (!l->ev_comp || !l->ev_cm || !l->ev_down) FAIL("event_new failed");
    if (ibv_req_notify_cq(l->cq, 0)) FAIL("ibv_req_notify_cq failed");
    if (event_add(l->ev_comp, NULL) || event_add(l->ev_cm, NULL)) FAIL("event_add failed");
#undef FAIL
    freeaddrinfo(res);
    return l;
fail:
    freeaddrinfo(res);
    snprintf(err, errlen, "verbs: %s:%d: %s", host, port, e2);
    link_destroy(l);
    return NULL;
}

static uint64_t vb_send(repl_link *l, const void *entry, size_t len) {
    if (!l || l->down || l->closing) return 0;
    size_t span = log_entry_span(len);
    if (len == 0 || len > LOG_MAX_ENTRY) {
        char why[200];
        snprintf(why, sizeof(why), "entry of %zu bytes: entries are 1 to %u bytes", len,
                 (unsigned)LOG_MAX_ENTRY);
        vb_set_down(l, why);
        return 0;
    }
    uint64_t seq = ++l->next_seq;
    int whole = span <= l->msg_max;
    if (whole && !l->qhead && l->posted - l->completed < l->sq_msgs) {
        vb_post_msg(l, entry, len, span, seq);
        return l->down ? 0 : seq;
    }
    /* queued whole and padded, or (larger than one SEND) as the entry,
     * cut into blocks as slots free up */
    size_t qlen = whole ? span : len;
    struct vb_queued *q = malloc(sizeof(*q) + qlen);
    if (!q) {
        vb_set_down(l, "out of memory queueing a message");
        return 0;
    }
    q->next = NULL;
    q->msg = seq;
    q->span = qlen;
    q->cnt = whole ? 0 : vblk_count(len, l->msg_max);
    q->next_blk = 0;
    memcpy(q->data, entry, len);
    memset(q->data + len, 0, qlen - len);
    if (l->qtail) l->qtail->next = q;
    else l->qhead = q;
    l->qtail = q;
    if (!whole) vb_drain_queue(l);
    return l->down ? 0 : seq;
}

static void vb_flush(repl_link *l) {
    if (l && !l->down && !l->closing) vb_drain_queue(l);
}

static void vb_close(repl_link *l) {
    if (!l) return;
    l->closing = 1;
    if (l->in_cb) return; /* freed when the callback returns */
    link_destroy(l);
}

const transport_ops transport_verbs = {
    .name = "verbs",
    .link_open = vb_open,
    .link_send = vb_send,
    .link_flush = vb_flush,
    .link_close = vb_close,
};

/* ================= receiver (control thread) ================= */

#define RX_BUFS      1024  /* receive buffers (capped by the device's max_srq_wr) */
#define RX_MAX_LINKS 256
#define RX_ACK_DEPTH 4     /* send queue of a receiver QP: acks only */
/* wr_id of an ack SEND: link uid with this bit (receive wr_ids are buffer
 * numbers); error completions carry no valid opcode, so wr_id tells. */
#define RX_WR_ACK    (1ULL << 63)

struct rx_link {
    uint64_t uid;
    struct rdma_cm_id *id;
    uint32_t qp_num;
    struct ibv_mr *ack_mr;
    uint8_t *ack_buf;       /* VB_CTL_MSG bytes: the handshake reply, then acks */
    uint64_t landed;     /* messages of this connection landed in the b-log */
    uint64_t persisted;  /* ... and persisted (blog_persist) */
    uint64_t ack_sent;
    int ack_inflight, broken;
    uint16_t node, sender;
    pauth auth;             /* nothing lands before it is done */
    uint8_t hello[32];      /* the connect request's (unauthenticated) hello */
    int refused;            /* handshake failed: disconnect once the refusal is out */
    int64_t deadline_ms;    /* of the handshake */
    vblk_asm as;            /* the multi-block entry in reassembly (vblock.h) */
};

struct rx_pending { uint32_t buf, len; uint64_t uid; };

static struct {
    int running;
    struct rdma_event_channel *cm_ch;
    struct rdma_cm_id *listen_id;
    uint64_t term, digest;
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_comp_channel *comp_ch;
    struct ibv_cq *cq;
    struct ibv_srq *srq;
    uint8_t *ring;
    struct ibv_mr *ring_mr;
    uint32_t nbufs;
    uint8_t *flush;
    struct ibv_mr *flush_mr;
    uint8_t responder_resources;
    struct rx_pending *pend;     /* received, not landed yet (FIFO) */
    uint32_t phead, pcount;
    uint32_t *repost;            /* landed buffers to post again */
    uint32_t nrepost;
    struct rx_link *links[RX_MAX_LINKS];
    int nlinks;
    uint64_t next_uid;
    verbs_receiver_stats st;
} rx;

static struct rx_link *rx_find_qp(uint32_t qp_num) {
    for (int i = 0; i < rx.nlinks; i++)
        if (rx.links[i]->qp_num == qp_num) return rx.links[i];
    return NULL;
}

static struct rx_link *rx_find_uid(uint64_t uid) {
    for (int i = 0; i < rx.nlinks; i++)
        if (rx.links[i]->uid == uid) return rx.links[i];
    return NULL;
}

static struct rx_link *rx_find_id(struct rdma_cm_id *id) {
    for (int i = 0; i < rx.nlinks; i++)
        if (rx.links[i]->id == id) return rx.links[i];
    return NULL;
}

static void rx_break(struct rx_link *k, const char *why) {
    if (k->broken) return;
    k->broken = 1;
    serverLog(LL_WARNING, "verbs: link from node %u sender %u broken: %s", k->node, k->sender, why);
    rdma_disconnect(k->id); /* DISCONNECTED follows and frees it */
}

static void rx_post_bufs(void) {
    if (!rx.nrepost) return;
    struct ibv_recv_wr wrs[64];
    struct ibv_sge sges[64];
    uint32_t done = 0;
    while (done < rx.nrepost) {
        uint32_t n = rx.nrepost - done < 64 ? rx.nrepost - done : 64;
        for (uint32_t i = 0; i < n; i++) {
            uint32_t b = rx.repost[done + i];
            sges[i] = (struct ibv_sge){.addr = (uintptr_t)(rx.ring + (size_t)b * VERBS_MSG_MAX),
                                       .length = VERBS_MSG_MAX, .lkey = rx.ring_mr->lkey};
            wrs[i] = (struct ibv_recv_wr){.wr_id = b, .sg_list = &sges[i], .num_sge = 1,
                                          .next = i + 1 < n ? &wrs[i + 1] : NULL};
        }
        struct ibv_recv_wr *bad = NULL;
        int rc = ibv_post_srq_recv(rx.srq, wrs, &bad);
        if (rc) {
            /* Keep the unposted ones for the next round. */
            uint32_t posted = bad ? (uint32_t)(bad - wrs) : 0;
            serverLog(LL_WARNING, "verbs: ibv_post_srq_recv: %s", strerror(rc));
            done += posted;
            memmove(rx.repost, rx.repost + done, (rx.nrepost - done) * sizeof(uint32_t));
            rx.nrepost -= done;
            return;
        }
        done += n;
    }
    rx.nrepost = 0;
}

/* SEND the first len bytes of k's control buffer (at most one in flight). */
static int rx_post_ctl(struct rx_link *k, size_t len) {
    struct ibv_sge sge = {.addr = (uintptr_t)k->ack_buf, .length = (uint32_t)len,
                          .lkey = k->ack_mr->lkey};
    struct ibv_send_wr wr, *bad = NULL;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = k->uid | RX_WR_ACK;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    int rc = ibv_post_send(k->id->qp, &wr, &bad);
    if (rc) {
        char why[120];
        snprintf(why, sizeof(why), "ibv_post_send (control): %s", strerror(rc));
        rx_break(k, why);
        return -1;
    }
    k->ack_inflight = 1;
    return 0;
}

static void rx_send_ack(struct rx_link *k) {
    if (k->broken || k->ack_inflight || k->persisted <= k->ack_sent) return;
    struct vb_ack a = {htole64(VB_ACK_MAGIC), htole64(k->persisted)};
    memcpy(k->ack_buf, &a, sizeof(a));
    if (rx_post_ctl(k, sizeof(a)) != 0) return;
    k->ack_sent = k->persisted;
    rx.st.acks_sent++;
}

/* Check a link's first message, its handshake response; send the proof
 * (or a refusal, after which the link is disconnected). 0 if the link is
 * now authenticated. */
static int rx_authenticate(struct rx_link *k, const uint8_t *msg, size_t len) {
    char why[256];
    size_t outlen = 0;
    long n = pauth_feed(&k->auth, msg, len, k->ack_buf, &outlen, why, sizeof(why));
    if (n > 0 && ((size_t)n != len || k->auth.hello_len != sizeof(k->hello) ||
                  memcmp(k->auth.hello, k->hello, sizeof(k->hello)) != 0)) {
        snprintf(why, sizeof(why), "its authenticated hello differs from its connect request's");
        k->auth.state = PAUTH_FAILED;
        n = -1;
        outlen = 0;
    }
    if (n > 0) {
        if (rx_post_ctl(k, outlen) != 0) return -1;
        serverLog(LL_VERBOSE, "verbs: link from node %u sender %u authenticated", k->node, k->sender);
        return 0;
    }
    pauth_refused_addr(rdma_get_peer_addr(k->id), n == 0 ? "a truncated handshake response" : why);
    k->refused = 1;
    if (!outlen || rx_post_ctl(k, outlen) != 0) {
        k->broken = 1;
        rdma_disconnect(k->id);
    }
    return -1;
}

/* Drain the CQ into the pending FIFO (receives) and ack bookkeeping. */
static void rx_process_cq(void) {
    if (!rx.cq) return;
    struct ibv_wc wc[32];
    for (;;) {
        int n = ibv_poll_cq(rx.cq, 32, wc);
        if (n <= 0) {
            if (n < 0) serverLog(LL_WARNING, "verbs: ibv_poll_cq failed");
            return;
        }
        for (int i = 0; i < n; i++) {
            struct ibv_wc *w = &wc[i];
            if (!(w->wr_id & RX_WR_ACK)) { /* a receive (wr_id = buffer) */
                struct rx_link *k = rx_find_qp(w->qp_num);
                if (w->status != IBV_WC_SUCCESS) {
                    if (w->wr_id < rx.nbufs) rx.repost[rx.nrepost++] = (uint32_t)w->wr_id;
                    if (k) rx_break(k, ibv_wc_status_str(w->status));
                    continue;
                }
                rx.pend[(rx.phead + rx.pcount) % rx.nbufs] =
                    (struct rx_pending){(uint32_t)w->wr_id, w->byte_len, k ? k->uid : 0};
                rx.pcount++;
            } else { /* an ack SEND (wr_id = link uid) */
                struct rx_link *k = rx_find_uid(w->wr_id & ~RX_WR_ACK);
                if (!k) continue;
                k->ack_inflight = 0;
                if (k->refused && !k->broken) { /* the refusal is out: now disconnect */
                    k->broken = 1;
                    rdma_disconnect(k->id);
                } else if (w->status != IBV_WC_SUCCESS) {
                    rx_break(k, ibv_wc_status_str(w->status));
                }
            }
        }
    }
}

/* A block of k's multi-block entry: feed it to the reassembly. 1 when the
 * entry is complete and checked (it is in k->as.buf, to be landed), 0 when
 * more blocks are due, -1 when the link broke over it. */
static int rx_feed_block(struct rx_link *k, const uint8_t *buf, size_t len) {
    char why[200];
    int rc = vblk_asm_feed(&k->as, buf, len, VERBS_MSG_MAX, LOG_MAX_ENTRY, k->landed + 1, why,
                           sizeof(why));
    if (rc == 1 && vblk_check_entry(&k->as, why, sizeof(why)) != 0) rc = -1;
    if (rc < 0) {
        vblk_asm_done(&k->as);
        rx_break(k, why);
    }
    return rc;
}

/* Copy pending messages into the b-log, in arrival order. Only messages of
 * authenticated links land: a link's first message is its handshake
 * response; what arrives from a refused, broken or vanished link is dropped
 * (none of it was acked). A block (vblock.h) lands nothing until it
 * completes its entry, which then lands whole, as one message. */
static int rx_land(void) {
    int landed = 0;
    while (rx.pcount) {
        struct rx_pending *p = &rx.pend[rx.phead];
        uint8_t *buf = rx.ring + (size_t)p->buf * VERBS_MSG_MAX;
        size_t len = p->len > VERBS_MSG_MAX ? VERBS_MSG_MAX : p->len;
        size_t span = log_entry_span(len);
        const uint8_t *msg = buf;
        struct rx_link *k = p->uid ? rx_find_uid(p->uid) : NULL;
        if (k && (!pauth_done(&k->auth) || k->refused)) {
            if (!k->refused) rx_authenticate(k, buf, len);
            k = NULL;
            len = 0;
        } else if (!k || k->broken) {
            k = NULL;
            len = 0;
        } else if (vblk_asm_complete(&k->as)) {
            /* completed by this very block on an earlier round that found
             * the pool full: land it now */
            msg = k->as.buf;
            span = log_entry_span(k->as.h.entry_len);
        } else if (vblk_is_block(buf, len)) {
            rx.st.blocks++;
            int rc = rx_feed_block(k, buf, len);
            if (rc != 1) k = NULL, len = 0;
            else msg = k->as.buf, span = log_entry_span(k->as.h.entry_len);
        } else if (k->as.active) {
            char why[160];
            snprintf(why, sizeof(why), "an entry arrived while message %llu had %u of %u blocks",
                     (unsigned long long)k->as.h.msg, k->as.got, k->as.h.cnt);
            vblk_asm_done(&k->as);
            rx_break(k, why);
            k = NULL;
            len = 0;
        }
        if (len > 0) {
            if (msg == buf && span > len) memset(buf + len, 0, span - len);
            if (!blog_land(msg, span)) {
                rx.st.pool_full_waits++;
                break; /* pool full: keep it (and everything after) for later */
            }
            rx.st.landed++;
            rx.st.landed_bytes += span;
            landed++;
            if (msg != buf) {
                rx.st.block_entries++;
                vblk_asm_done(&k->as);
            }
        }
        if (k) k->landed++;
        rx.repost[rx.nrepost++] = p->buf;
        rx.phead = (rx.phead + 1) % rx.nbufs;
        rx.pcount--;
    }
    return landed;
}

static void rx_link_free(struct rx_link *k) {
    /* Completions already in the CQ still belong to it: take them first. */
    rx_process_cq();
    for (int i = 0; i < rx.nlinks; i++)
        if (rx.links[i] == k) {
            rx.links[i] = rx.links[--rx.nlinks];
            break;
        }
    if (k->id->qp) rdma_destroy_qp(k->id);
    if (k->ack_mr) ibv_dereg_mr(k->ack_mr);
    free(k->ack_buf);
    vblk_asm_done(&k->as); /* a partial entry never lands */
    rdma_destroy_id(k->id);
    free(k);
    rx.st.links = (uint64_t)rx.nlinks;
}

static void rx_shared_free(void) {
    if (rx.srq) ibv_destroy_srq(rx.srq);
    if (rx.ring_mr) ibv_dereg_mr(rx.ring_mr);
    if (rx.flush_mr) ibv_dereg_mr(rx.flush_mr);
    if (rx.cq) ibv_destroy_cq(rx.cq);
    if (rx.comp_ch) ibv_destroy_comp_channel(rx.comp_ch);
    if (rx.pd) ibv_dealloc_pd(rx.pd);
    free(rx.ring);
    free(rx.flush);
    free(rx.pend);
    free(rx.repost);
    rx.srq = NULL; rx.ring_mr = NULL; rx.flush_mr = NULL; rx.cq = NULL;
    rx.comp_ch = NULL; rx.pd = NULL; rx.ring = NULL; rx.flush = NULL;
    rx.pend = NULL; rx.repost = NULL; rx.ctx = NULL;
    rx.nbufs = rx.phead = rx.pcount = rx.nrepost = 0;
}

static void rx_log_striding_caps(struct ibv_context *ctx) {
    if (!mlx5dv_is_supported(ctx->device)) {
        serverLog(LL_NOTICE, "verbs: %s is not an mlx5 device: no multi-packet receive queue; "
                  "using fixed %d-byte receive buffers", ibv_get_device_name(ctx->device),
                  VERBS_MSG_MAX);
        return;
    }
    struct mlx5dv_context c;
    memset(&c, 0, sizeof(c));
    c.comp_mask = MLX5DV_CONTEXT_MASK_STRIDING_RQ;
    if (mlx5dv_query_device(ctx, &c) == 0 && (c.comp_mask & MLX5DV_CONTEXT_MASK_STRIDING_RQ))
        serverLog(LL_NOTICE, "verbs: %s offers a striding RQ (strides 2^%u..2^%u bytes, QP types "
                  "0x%x) but rdma-core exposes it only for WQs of RAW_PACKET QPs, not for an SRQ "
                  "shared by RC QPs; using fixed %d-byte receive buffers",
                  ibv_get_device_name(ctx->device),
                  c.striding_rq_caps.min_single_stride_log_num_of_bytes,
                  c.striding_rq_caps.max_single_stride_log_num_of_bytes,
                  c.striding_rq_caps.supported_qpts, VERBS_MSG_MAX);
    else
        serverLog(LL_NOTICE, "verbs: %s has no striding RQ; using fixed %d-byte receive buffers",
                  ibv_get_device_name(ctx->device), VERBS_MSG_MAX);
}

/* PD, CQ, SRQ and the receive ring on the device connections arrive on. */
static int rx_shared_setup(struct ibv_context *ctx, char *err, size_t errlen) {
    struct ibv_device_attr da;
    if (ibv_query_device(ctx, &da)) {
        snprintf(err, errlen, "ibv_query_device: %s", strerror(errno));
        return -1;
    }
    if (da.max_srq <= 0 || da.max_srq_wr <= 0) {
        snprintf(err, errlen, "device %s has no shared receive queues",
                 ibv_get_device_name(ctx->device));
        return -1;
    }
    rx.ctx = ctx;
    rx.nbufs = RX_BUFS;
    if ((uint32_t)da.max_srq_wr < rx.nbufs) rx.nbufs = (uint32_t)da.max_srq_wr;
    rx.responder_resources = (uint8_t)(da.max_qp_rd_atom < VB_READ_DEPTH ? da.max_qp_rd_atom
                                                                         : VB_READ_DEPTH);
    rx_log_striding_caps(ctx);
#define SFAIL(...) do { snprintf(err, errlen, __VA_ARGS__); rx_shared_free(); return -1; } while (0)
    rx.pd = ibv_alloc_pd(ctx);
    if (!rx.pd) SFAIL("ibv_alloc_pd: %s", strerror(errno));
    rx.comp_ch = ibv_create_comp_channel(ctx);
    if (!rx.comp_ch) SFAIL("ibv_create_comp_channel: %s", strerror(errno));
    if (set_nonblock(rx.comp_ch->fd)) SFAIL("fcntl: %s", strerror(errno));
    int cqe = (int)rx.nbufs + RX_MAX_LINKS * RX_ACK_DEPTH + 16;
    if (da.max_cqe > 0 && cqe > da.max_cqe) cqe = da.max_cqe;
    rx.cq = ibv_create_cq(ctx, cqe, NULL, rx.comp_ch, 0);
    if (!rx.cq) SFAIL("ibv_create_cq: %s", strerror(errno));
    struct ibv_srq_init_attr sa;
    memset(&sa, 0, sizeof(sa));
    sa.attr.max_wr = rx.nbufs;
    sa.attr.max_sge = 1;
    rx.srq = ibv_create_srq(rx.pd, &sa);
    if (!rx.srq) SFAIL("ibv_create_srq: %s", strerror(errno));
    size_t ring_bytes = (size_t)rx.nbufs * VERBS_MSG_MAX;
    rx.ring = aligned_alloc(4096, ring_bytes);
    rx.flush = aligned_alloc(64, 64);
    rx.pend = calloc(rx.nbufs, sizeof(*rx.pend));
    rx.repost = calloc(rx.nbufs, sizeof(*rx.repost));
    if (!rx.ring || !rx.flush || !rx.pend || !rx.repost) SFAIL("out of memory");
    memset(rx.flush, 0, 64);
    rx.ring_mr = ibv_reg_mr(rx.pd, rx.ring, ring_bytes, IBV_ACCESS_LOCAL_WRITE);
    if (!rx.ring_mr) SFAIL("ibv_reg_mr (receive ring): %s", strerror(errno));
    rx.flush_mr = ibv_reg_mr(rx.pd, rx.flush, 64, IBV_ACCESS_REMOTE_READ);
    if (!rx.flush_mr) SFAIL("ibv_reg_mr (READ target): %s", strerror(errno));
    if (ibv_req_notify_cq(rx.cq, 0)) SFAIL("ibv_req_notify_cq failed");
    for (uint32_t b = 0; b < rx.nbufs; b++) rx.repost[rx.nrepost++] = b;
    rx_post_bufs();
    if (rx.nrepost) SFAIL("could not post the receive buffers");
#undef SFAIL
    serverLog(LL_NOTICE, "verbs: receiver on %s: one SRQ, %u receive buffers of %d bytes",
              ibv_get_device_name(ctx->device), rx.nbufs, VERBS_MSG_MAX);
    return 0;
}

static void rx_reject(struct rdma_cm_id *id, uint32_t reason) {
    struct vb_reject rj = {htole64(VB_REJECT_MAGIC), htole32(reason), 0};
    rdma_reject(id, &rj, sizeof(rj));
    rx.st.refused++;
}

/* CONNECT_REQUEST. Returns 1 when id must be destroyed (after the ack). */
static int rx_on_connect(struct rdma_cm_event *ev) {
    struct rdma_cm_id *id = ev->id;
    repl_hello h;
    memset(&h, 0, sizeof(h));
    if (!ev->param.conn.private_data || ev->param.conn.private_data_len < 32) {
        rx_reject(id, VB_REJ_BAD_HELLO);
        return 1;
    }
    hello_decode(&h, ev->param.conn.private_data);
    if (h.magic != REPL_HELLO_MAGIC) {
        rx_reject(id, VB_REJ_BAD_HELLO);
        return 1;
    }
    if (h.term != rx.term || h.config_digest != rx.digest) {
        serverLog(LL_WARNING, "verbs: refused a link from node %u sender %u: term %llu digest "
                  "%016llx, ours term %llu digest %016llx", h.node, h.sender,
                  (unsigned long long)h.term, (unsigned long long)h.config_digest,
                  (unsigned long long)rx.term, (unsigned long long)rx.digest);
        rx_reject(id, VB_REJ_CONFIG);
        return 1;
    }
    if (h.mode != REPL_MODE_ROWAN) {
        rx_reject(id, VB_REJ_MODE);
        return 1;
    }
    char err[200];
    if (!rx.ctx && rx_shared_setup(id->verbs, err, sizeof(err))) {
        serverLog(LL_WARNING, "verbs: receiver setup failed: %s", err);
        rx_reject(id, VB_REJ_RESOURCES);
        return 1;
    }
    if (id->verbs != rx.ctx || rx.nlinks == RX_MAX_LINKS) {
        serverLog(LL_WARNING, "verbs: refused a link from node %u: %s", h.node,
                  id->verbs != rx.ctx ? "it arrived on another RDMA device than the SRQ's"
                                      : "too many links");
        rx_reject(id, VB_REJ_RESOURCES);
        return 1;
    }
    struct rx_link *k = calloc(1, sizeof(*k));
    if (!k) {
        rx_reject(id, VB_REJ_RESOURCES);
        return 1;
    }
    k->id = id;
    k->uid = ++rx.next_uid;
    k->node = h.node;
    k->sender = h.sender;
    memcpy(k->hello, ev->param.conn.private_data, sizeof(k->hello));
    k->deadline_ms = now_ms() + VB_AUTH_TIMEOUT_MS;
    struct vb_accept acc;
    memset(&acc, 0, sizeof(acc));
    if (pauth_server_begin(&k->auth, acc.challenge, err, sizeof(err)) != 0) {
        pauth_refused_addr(rdma_get_peer_addr(id), err);
        rx_reject(id, VB_REJ_NO_SECRET);
        free(k);
        return 1;
    }
    k->ack_buf = aligned_alloc(64, VB_CTL_MSG);
    if (k->ack_buf) k->ack_mr = ibv_reg_mr(rx.pd, k->ack_buf, VB_CTL_MSG, 0);
    struct ibv_qp_init_attr qa;
    memset(&qa, 0, sizeof(qa));
    qa.send_cq = rx.cq;
    qa.recv_cq = rx.cq;
    qa.srq = rx.srq;
    qa.qp_type = IBV_QPT_RC;
    qa.cap.max_send_wr = RX_ACK_DEPTH;
    qa.cap.max_send_sge = 1;
    if (!k->ack_mr || rdma_create_qp(id, rx.pd, &qa)) {
        serverLog(LL_WARNING, "verbs: cannot set up a link: %s",
                  !k->ack_mr ? "ibv_reg_mr failed" : strerror(errno));
        rx_reject(id, VB_REJ_RESOURCES);
        if (k->ack_mr) ibv_dereg_mr(k->ack_mr);
        free(k->ack_buf);
        free(k);
        return 1;
    }
    k->qp_num = id->qp->qp_num;
    acc.magic = htole64(VB_ACCEPT_MAGIC);
    acc.version = htole32(VB_VERSION);
    acc.ack_mode = htole32(VB_ACK_SEND);
    acc.msg_max = htole32(VERBS_MSG_MAX);
    acc.flush_rkey = htole32(rx.flush_mr->rkey);
    acc.flush_addr = htole64((uintptr_t)rx.flush);
    struct rdma_conn_param cp;
    memset(&cp, 0, sizeof(cp));
    cp.private_data = &acc;
    cp.private_data_len = sizeof(acc);
    cp.responder_resources = ev->param.conn.initiator_depth < rx.responder_resources
                                 ? ev->param.conn.initiator_depth : rx.responder_resources;
    cp.initiator_depth = 0;
    cp.rnr_retry_count = 7;
    rx.links[rx.nlinks++] = k;
    rx.st.links = (uint64_t)rx.nlinks;
    if (rdma_accept(id, &cp)) {
        serverLog(LL_WARNING, "verbs: rdma_accept: %s", strerror(errno));
        rx.nlinks--;
        rdma_destroy_qp(id);
        ibv_dereg_mr(k->ack_mr);
        free(k->ack_buf);
        free(k);
        rx.st.links = (uint64_t)rx.nlinks;
        return 1;
    }
    rx.st.accepted++;
    serverLog(LL_VERBOSE, "verbs: link from node %u sender %u connected; authenticating", h.node,
              h.sender);
    return 0;
}

static void rx_cm_events(void) {
    struct rdma_cm_event *ev;
    while (rdma_get_cm_event(rx.cm_ch, &ev) == 0) {
        struct rdma_cm_id *id = ev->id;
        enum rdma_cm_event_type t = ev->event;
        int destroy = 0;
        struct rx_link *k = NULL;
        switch (t) {
        case RDMA_CM_EVENT_CONNECT_REQUEST:
            destroy = rx_on_connect(ev);
            break;
        case RDMA_CM_EVENT_ESTABLISHED:
            break;
        case RDMA_CM_EVENT_DISCONNECTED:
        case RDMA_CM_EVENT_REJECTED:
        case RDMA_CM_EVENT_UNREACHABLE:
        case RDMA_CM_EVENT_CONNECT_ERROR:
        case RDMA_CM_EVENT_DEVICE_REMOVAL:
            k = rx_find_id(id);
            break;
        default:
            break;
        }
        rdma_ack_cm_event(ev);
        if (destroy) rdma_destroy_id(id);
        if (k) {
            if (t == RDMA_CM_EVENT_DISCONNECTED) rdma_disconnect(id); /* finish the handshake */
            serverLog(LL_NOTICE, "verbs: link from node %u sender %u closed (%s)", k->node,
                      k->sender, rdma_event_str(t));
            rx_link_free(k);
        }
    }
}

/* Disconnect links whose handshake is overdue. */
static void rx_expire_handshakes(void) {
    int64_t now = now_ms();
    for (int i = 0; i < rx.nlinks; i++) {
        struct rx_link *k = rx.links[i];
        if (k->broken || pauth_done(&k->auth) || now < k->deadline_ms) continue;
        pauth_refused_addr(rdma_get_peer_addr(k->id), "no handshake in time");
        k->broken = 1;
        rdma_disconnect(k->id);
    }
}

int verbs_receiver_start(const char *bind, int port, uint64_t term, uint64_t config_digest,
                         char *err, size_t errlen) {
    char e2[200];
    if (rx.running) {
        snprintf(err, errlen, "verbs: receiver already running");
        return -1;
    }
    if (!vb_have_device(e2, sizeof(e2))) {
        snprintf(err, errlen, "verbs: %s", e2);
        return -1;
    }
    if (!server.pool) {
        snprintf(err, errlen, "verbs: the pool is not open (blog_init must come first)");
        return -1;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV | AI_PASSIVE}, *res = NULL;
    char portstr[16];
    snprintf(portstr, sizeof(portstr), "%d", port);
    int rc = getaddrinfo(bind, portstr, &hints, &res);
    if (rc != 0) {
        snprintf(err, errlen, "verbs: %s:%d: %s", bind ? bind : "*", port, gai_strerror(rc));
        return -1;
    }
    memset(&rx, 0, sizeof(rx));
    rx.term = term;
    rx.digest = config_digest;
#define RFAIL(...) do { snprintf(e2, sizeof(e2), __VA_ARGS__); goto fail; } while (0)
    rx.cm_ch = rdma_create_event_channel();
    if (!rx.cm_ch) RFAIL("rdma_create_event_channel: %s", strerror(errno));
    if (set_nonblock(rx.cm_ch->fd)) RFAIL("fcntl: %s", strerror(errno));
    if (rdma_create_id(rx.cm_ch, &rx.listen_id, NULL, RDMA_PS_TCP))
        RFAIL("rdma_create_id: %s", strerror(errno));
    if (rdma_bind_addr(rx.listen_id, res->ai_addr)) RFAIL("rdma_bind_addr: %s", strerror(errno));
    if (rdma_listen(rx.listen_id, 128)) RFAIL("rdma_listen: %s", strerror(errno));
    /* Bound to one device's address: post the receive buffers now. */
    if (rx.listen_id->verbs && rx_shared_setup(rx.listen_id->verbs, e2, sizeof(e2))) goto fail;
#undef RFAIL
    freeaddrinfo(res);
    rx.running = 1;
    serverLog(LL_NOTICE, "verbs: replication receiver listening on %s:%d", bind ? bind : "*",
              verbs_receiver_port());
    return 0;
fail:
    freeaddrinfo(res);
    rx_shared_free();
    if (rx.listen_id) rdma_destroy_id(rx.listen_id);
    if (rx.cm_ch) rdma_destroy_event_channel(rx.cm_ch);
    memset(&rx, 0, sizeof(rx));
    snprintf(err, errlen, "verbs: receiver on %s:%d: %s", bind ? bind : "*", port, e2);
    return -1;
}

int verbs_receiver_poll(int timeout_ms) {
    if (!rx.running) return -1;
    if (rx.pcount && (timeout_ms < 0 || timeout_ms > 10)) timeout_ms = 10; /* pool full: retry */
    struct pollfd pfd[2] = {{.fd = rx.cm_ch->fd, .events = POLLIN},
                            {.fd = rx.comp_ch ? rx.comp_ch->fd : -1, .events = POLLIN}};
    int rc = poll(pfd, 2, timeout_ms);
    if (rc < 0 && errno != EINTR) serverLog(LL_WARNING, "verbs: poll: %s", strerror(errno));
    if (rc > 0 && (pfd[0].revents & POLLIN)) rx_cm_events();
    if (rx.comp_ch) {
        struct ibv_cq *cq;
        void *ctx;
        while (ibv_get_cq_event(rx.comp_ch, &cq, &ctx) == 0)
            ibv_ack_cq_events(cq, 1);
        ibv_req_notify_cq(rx.cq, 0);
    }
    rx_process_cq();
    rx_expire_handshakes();
    int landed = rx_land();
    rx_post_bufs();
    if (landed) {
        blog_persist();
        for (int i = 0; i < rx.nlinks; i++) rx.links[i]->persisted = rx.links[i]->landed;
    }
    for (int i = 0; i < rx.nlinks; i++) rx_send_ack(rx.links[i]);
    return landed;
}

void verbs_receiver_set_config(uint64_t term, uint64_t config_digest) {
    rx.term = term;
    rx.digest = config_digest;
}

int verbs_receiver_port(void) {
    if (!rx.listen_id) return -1;
    return (int)ntohs(rdma_get_src_port(rx.listen_id));
}

void verbs_receiver_stop(void) {
    if (!rx.running) return;
    while (rx.nlinks) {
        struct rx_link *k = rx.links[rx.nlinks - 1];
        rdma_disconnect(k->id);
        rx_link_free(k);
    }
    /* Whatever was received but not landed yet is dropped: it was never acked. */
    rx_shared_free();
    rdma_destroy_id(rx.listen_id);
    rdma_destroy_event_channel(rx.cm_ch);
    memset(&rx, 0, sizeof(rx));
}

void verbs_receiver_get_stats(verbs_receiver_stats *out) {
    *out = rx.st;
    out->links = (uint64_t)rx.nlinks;
}
