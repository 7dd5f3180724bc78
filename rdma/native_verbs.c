/* native_verbs.c -- the verbs UD backend of the native edge
 * (native_transport.h): the same datagrams as the UDP backend, carried by
 * one unreliable-datagram queue pair per worker.
 *
 * Per endpoint: the first RDMA device, its port 1, a PD, a receive CQ with
 * a completion channel (its fd is what the worker's loop polls) and a send
 * CQ without one, one UD QP with qkey NATIVE_QKEY_BASE | native-port, and
 * two registered rings: RECV_DEPTH receive buffers of GRH (40 bytes) +
 * DGRAM_MTU, all posted at start and reposted as each is consumed, and
 * SEND_DEPTH send slots of DGRAM_MTU. A received datagram's source is its
 * GRH's source GID, the completion's source QPN, LID and SL; a reply goes
 * to it through an address handle with a GRH (so RoCE works), taken from a
 * small cache (AH_CACHE entries, least recently used replaced) because
 * creating one per reply would dominate the cost. A send that finds every
 * slot still in flight first reaps the send CQ; if nothing is free the
 * datagram is dropped and the client retransmits, as with a full UDP
 * socket buffer. The GID index is the one whose GID is native-bind's IPv4
 * address as ::ffff:a.b.c.d (RoCE v2), else 0.
 *
 * Clients find an endpoint by the QPN and GID INFO native lists (one
 * endpoint per worker: a client sends to worker (client id mod workers),
 * which is what the UDP backend's steering does in the kernel).
 *
 * Nothing here runs without an RDMA device: open fails with "no RDMA
 * device found" and leaves nothing behind. It compiles in every build;
 * tests/unit/test-native-verbs.c exercises it where a device exists and
 * says SKIPPED where none does. No verbs call is ever faked. */
#include "native_transport.h"
#include "dgram.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>

#define NATIVE_QKEY_BASE 0x52570000u
#define GRH_LEN 40
#define RECV_DEPTH 512
#define SEND_DEPTH 256
#define AH_CACHE 64
#define SEND_TAG (1ull << 63)

struct ah_entry {
    struct ibv_ah *ah;
    uint8_t gid[16];
    uint16_t lid;
    uint8_t sl;
    uint64_t used;
};

struct native_endpoint {
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_comp_channel *ch;
    struct ibv_cq *rcq, *scq;
    struct ibv_qp *qp;
    struct ibv_mr *rmr, *smr;
    unsigned char *rbuf, *sbuf;
    int send_free[SEND_DEPTH];
    int nfree;
    uint8_t port;
    int gid_index;
    union ibv_gid gid;
    uint16_t lid;
    uint32_t qkey;
    struct ah_entry ahs[AH_CACHE];
    uint64_t clock;
    char devname[64];
};

static void vclose(native_endpoint *e) {
    if (!e) return;
    for (int i = 0; i < AH_CACHE; i++)
        if (e->ahs[i].ah) ibv_destroy_ah(e->ahs[i].ah);
    if (e->qp) ibv_destroy_qp(e->qp);
    if (e->rcq) ibv_destroy_cq(e->rcq);
    if (e->scq) ibv_destroy_cq(e->scq);
    if (e->ch) ibv_destroy_comp_channel(e->ch);
    if (e->rmr) ibv_dereg_mr(e->rmr);
    if (e->smr) ibv_dereg_mr(e->smr);
    if (e->pd) ibv_dealloc_pd(e->pd);
    if (e->ctx) ibv_close_device(e->ctx);
    free(e->rbuf);
    free(e->sbuf);
    free(e);
}

static int post_recv(native_endpoint *e, int slot) {
    struct ibv_sge sge = {
        .addr = (uintptr_t)(e->rbuf + (size_t)slot * (GRH_LEN + DGRAM_MTU)),
        .length = GRH_LEN + DGRAM_MTU, .lkey = e->rmr->lkey,
    };
    struct ibv_recv_wr wr = {.wr_id = (uint64_t)slot, .sg_list = &sge, .num_sge = 1}, *bad;
    return ibv_post_recv(e->qp, &wr, &bad);
}

/* The GID index of the bind address (::ffff:a.b.c.d), else 0. */
static int pick_gid(native_endpoint *e, const char *bind) {
    struct in_addr a;
    if (!bind || inet_pton(AF_INET, bind, &a) != 1) return 0;
    struct ibv_port_attr pa;
    if (ibv_query_port(e->ctx, e->port, &pa) != 0) return 0;
    for (int i = 0; i < pa.gid_tbl_len && i < 256; i++) {
        union ibv_gid g;
        if (ibv_query_gid(e->ctx, e->port, i, &g) != 0) continue;
        static const uint8_t v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (!memcmp(g.raw, v4mapped, 12) && !memcmp(g.raw + 12, &a, 4)) return i;
    }
    return 0;
}

static int to_rts(native_endpoint *e, char *err, size_t errlen) {
    struct ibv_qp_attr at = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = e->port,
                             .qkey = e->qkey};
    if (ibv_modify_qp(e->qp, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY)) {
        snprintf(err, errlen, "native verbs: QP to INIT: %s", strerror(errno));
        return -1;
    }
    memset(&at, 0, sizeof(at));
    at.qp_state = IBV_QPS_RTR;
    if (ibv_modify_qp(e->qp, &at, IBV_QP_STATE)) {
        snprintf(err, errlen, "native verbs: QP to RTR: %s", strerror(errno));
        return -1;
    }
    memset(&at, 0, sizeof(at));
    at.qp_state = IBV_QPS_RTS;
    at.sq_psn = 0;
    if (ibv_modify_qp(e->qp, &at, IBV_QP_STATE | IBV_QP_SQ_PSN)) {
        snprintf(err, errlen, "native verbs: QP to RTS: %s", strerror(errno));
        return -1;
    }
    return 0;
}

static native_endpoint *vopen(int worker, int nworkers, const char *bind, int port, char *err,
                              size_t errlen) {
    (void)worker;
    (void)nworkers;
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (!list || n == 0) {
        snprintf(err, errlen, "native-transport verbs: no RDMA device found "
                 "(ibv_get_device_list returned 0 devices)");
        if (list) ibv_free_device_list(list);
        return NULL;
    }
    native_endpoint *e = calloc(1, sizeof(*e));
    snprintf(e->devname, sizeof(e->devname), "%s", ibv_get_device_name(list[0]));
    e->ctx = ibv_open_device(list[0]);
    ibv_free_device_list(list);
    const char *step = "ibv_open_device";
    if (!e->ctx) goto fail;
    e->port = 1;
    e->qkey = NATIVE_QKEY_BASE | (uint32_t)(port & 0xffff);
    struct ibv_port_attr pa;
    step = "ibv_query_port";
    if (ibv_query_port(e->ctx, e->port, &pa) != 0) goto fail;
    e->lid = pa.lid;
    e->gid_index = pick_gid(e, bind);
    step = "ibv_query_gid";
    if (ibv_query_gid(e->ctx, e->port, e->gid_index, &e->gid) != 0) goto fail;
    step = "ibv_alloc_pd";
    if (!(e->pd = ibv_alloc_pd(e->ctx))) goto fail;
    step = "ibv_create_comp_channel";
    if (!(e->ch = ibv_create_comp_channel(e->ctx))) goto fail;
    fcntl(e->ch->fd, F_SETFL, fcntl(e->ch->fd, F_GETFL) | O_NONBLOCK);
    step = "ibv_create_cq";
    if (!(e->rcq = ibv_create_cq(e->ctx, RECV_DEPTH, NULL, e->ch, 0))) goto fail;
    if (!(e->scq = ibv_create_cq(e->ctx, SEND_DEPTH, NULL, NULL, 0))) goto fail;
    struct ibv_qp_init_attr qa = {
        .send_cq = e->scq, .recv_cq = e->rcq, .qp_type = IBV_QPT_UD,
        .cap = {.max_send_wr = SEND_DEPTH, .max_recv_wr = RECV_DEPTH, .max_send_sge = 1,
                .max_recv_sge = 1},
    };
    step = "ibv_create_qp";
    if (!(e->qp = ibv_create_qp(e->pd, &qa))) goto fail;
    size_t rlen = (size_t)RECV_DEPTH * (GRH_LEN + DGRAM_MTU), slen = (size_t)SEND_DEPTH * DGRAM_MTU;
    e->rbuf = malloc(rlen);
    e->sbuf = malloc(slen);
    step = "ibv_reg_mr";
    if (!e->rbuf || !e->sbuf || !(e->rmr = ibv_reg_mr(e->pd, e->rbuf, rlen, IBV_ACCESS_LOCAL_WRITE)) ||
        !(e->smr = ibv_reg_mr(e->pd, e->sbuf, slen, 0)))
        goto fail;
    if (to_rts(e, err, errlen) != 0) {
        vclose(e);
        return NULL;
    }
    step = "ibv_post_recv";
    for (int i = 0; i < RECV_DEPTH; i++)
        if (post_recv(e, i) != 0) goto fail;
    for (int i = 0; i < SEND_DEPTH; i++) e->send_free[i] = i;
    e->nfree = SEND_DEPTH;
    step = "ibv_req_notify_cq";
    if (ibv_req_notify_cq(e->rcq, 0) != 0) goto fail;
    return e;
fail:
    snprintf(err, errlen, "native-transport verbs on %s: %s failed: %s", e->devname, step,
             strerror(errno));
    vclose(e);
    return NULL;
}

static int vfd(native_endpoint *e) { return e->ch->fd; }

static ssize_t vrecv(native_endpoint *e, unsigned char *buf, size_t cap, native_addr *from) {
    struct ibv_cq *cq;
    void *cctx;
    int rearm = 0;
    while (ibv_get_cq_event(e->ch, &cq, &cctx) == 0) {
        ibv_ack_cq_events(cq, 1);
        rearm = 1;
    }
    if (rearm) ibv_req_notify_cq(e->rcq, 0);
    for (;;) {
        struct ibv_wc wc;
        int n = ibv_poll_cq(e->rcq, 1, &wc);
        if (n <= 0) return -1;
        int slot = (int)wc.wr_id;
        if (wc.status != IBV_WC_SUCCESS || wc.byte_len < GRH_LEN) {
            post_recv(e, slot);
            continue;
        }
        const unsigned char *b = e->rbuf + (size_t)slot * (GRH_LEN + DGRAM_MTU);
        size_t len = wc.byte_len - GRH_LEN;
        memset(from, 0, sizeof(*from));
        memcpy(from->u.ud.gid, b + 8, 16);   /* the GRH's source GID */
        from->u.ud.qpn = wc.src_qp;
        from->u.ud.lid = wc.slid;
        from->u.ud.sl = wc.sl;
        from->len = 0;
        size_t take = len < cap ? len : cap;
        memcpy(buf, b + GRH_LEN, take);
        post_recv(e, slot);
        return (ssize_t)len;
    }
}

static struct ibv_ah *ah_for(native_endpoint *e, const native_addr *to) {
    struct ah_entry *victim = &e->ahs[0];
    for (int i = 0; i < AH_CACHE; i++) {
        struct ah_entry *a = &e->ahs[i];
        if (a->ah && a->lid == to->u.ud.lid && a->sl == to->u.ud.sl &&
            !memcmp(a->gid, to->u.ud.gid, 16)) {
            a->used = ++e->clock;
            return a->ah;
        }
        if (!a->ah || a->used < victim->used) victim = a;
    }
    struct ibv_ah_attr at = {.dlid = to->u.ud.lid, .sl = to->u.ud.sl, .port_num = e->port,
                             .is_global = 1};
    memcpy(at.grh.dgid.raw, to->u.ud.gid, 16);
    at.grh.sgid_index = (uint8_t)e->gid_index;
    at.grh.hop_limit = 64;
    struct ibv_ah *ah = ibv_create_ah(e->pd, &at);
    if (!ah) return NULL;
    if (victim->ah) ibv_destroy_ah(victim->ah);
    victim->ah = ah;
    memcpy(victim->gid, to->u.ud.gid, 16);
    victim->lid = to->u.ud.lid;
    victim->sl = to->u.ud.sl;
    victim->used = ++e->clock;
    return ah;
}

static void reap_sends(native_endpoint *e) {
    struct ibv_wc wc[16];
    int n;
    while ((n = ibv_poll_cq(e->scq, 16, wc)) > 0)
        for (int i = 0; i < n; i++) e->send_free[e->nfree++] = (int)(wc[i].wr_id & ~SEND_TAG);
}

static int vsend(native_endpoint *e, const unsigned char *buf, size_t len, const native_addr *to) {
    if (len > DGRAM_MTU || to->len != 0) return -1;
    if (e->nfree == 0) reap_sends(e);
    if (e->nfree == 0) return -1;
    struct ibv_ah *ah = ah_for(e, to);
    if (!ah) return -1;
    int slot = e->send_free[--e->nfree];
    unsigned char *p = e->sbuf + (size_t)slot * DGRAM_MTU;
    memcpy(p, buf, len);
    struct ibv_sge sge = {.addr = (uintptr_t)p, .length = (uint32_t)len, .lkey = e->smr->lkey};
    struct ibv_send_wr wr = {.wr_id = SEND_TAG | (uint64_t)slot, .sg_list = &sge, .num_sge = 1,
                             .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED}, *bad;
    wr.wr.ud.ah = ah;
    wr.wr.ud.remote_qpn = to->u.ud.qpn;
    wr.wr.ud.remote_qkey = e->qkey;
    if (ibv_post_send(e->qp, &wr, &bad) != 0) {
        e->send_free[e->nfree++] = slot;
        return -1;
    }
    return 0;
}

static void vdescribe(native_endpoint *e, char *buf, size_t len) {
    char gid[INET6_ADDRSTRLEN];
    inet_ntop(AF_INET6, e->gid.raw, gid, sizeof(gid));
    snprintf(buf, len, "verbs:%s port=%u qpn=%u qkey=0x%x gid=%s lid=%u", e->devname, e->port,
             e->qp->qp_num, e->qkey, gid, e->lid);
}

/* Same host: the peer sends from our own port's GID. */
static int vis_local(native_endpoint *e, const native_addr *a) {
    return a->len == 0 && !memcmp(a->u.ud.gid, e->gid.raw, 16);
}

const native_backend native_verbs_backend = {
    .name = "verbs", .open = vopen, .fd = vfd, .recv = vrecv, .send = vsend,
    .describe = vdescribe, .is_local = vis_local, .close = vclose,
};

int native_verbs_self(native_endpoint *e, native_addr *self) {
    memset(self, 0, sizeof(*self));
    memcpy(self->u.ud.gid, e->gid.raw, 16);
    self->u.ud.qpn = e->qp->qp_num;
    self->u.ud.lid = e->lid;
    return 0;
}
