/* native_transport.h -- the datagram backends of the native RPC edge.
 *
 * The native edge (rdma/native.c) moves rdma/dgram.h datagrams through one
 * small interface with two implementations:
 *   - UDP (native_udp.c): one UDP socket per worker, all bound to the
 *     native port with SO_REUSEPORT; what tests, CI and machines without an
 *     RDMA NIC run;
 *   - verbs UD (native_verbs.c): one unreliable-datagram queue pair per
 *     worker on the first RDMA device, replies through address handles
 *     built from each request's GRH.
 * Each worker owns one endpoint, polled by that worker's event loop through
 * the endpoint's file descriptor (the socket, or the completion channel),
 * so a request enters the worker that will run it and no datagram is ever
 * handed between threads. A peer's address is opaque to the edge: it is
 * copied from a received datagram and given back to send the reply.
 *
 * Endpoints are opened for workers 0..n-1 in order (the UDP backend's
 * steering relies on it) before the workers start; after that an endpoint
 * is used by its worker's thread only. */
#ifndef ROWAN_NATIVE_TRANSPORT_H
#define ROWAN_NATIVE_TRANSPORT_H
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

enum { NATIVE_TRANSPORT_UDP = 0, NATIVE_TRANSPORT_VERBS = 1 };

/* A peer: a socket address (UDP), or a UD destination (verbs). */
typedef struct native_addr {
    union {
        struct sockaddr_storage ss;
        struct {
            uint8_t gid[16];      /* from the request's GRH */
            uint32_t qpn;         /* the sender's queue pair */
            uint16_t lid;         /* the sender's LID (InfiniBand) */
            uint8_t sl;
        } ud;
    } u;
    socklen_t len;                /* UDP: sockaddr length; verbs: 0 */
} native_addr;

typedef struct native_endpoint native_endpoint;

typedef struct native_backend {
    const char *name;
    /* Open worker `worker`'s endpoint (of nworkers) on bind:port. NULL with
     * a reason in err. */
    native_endpoint *(*open)(int worker, int nworkers, const char *bind, int port, char *err,
                             size_t errlen);
    /* The descriptor that becomes readable when datagrams may be waiting. */
    int (*fd)(native_endpoint *e);
    /* One waiting datagram into buf[cap]: its length (0 for an empty
     * datagram; above cap when it was cut), or -1 when none is waiting
     * (call again after the next readiness) or on an error. */
    ssize_t (*recv)(native_endpoint *e, unsigned char *buf, size_t cap, native_addr *from);
    /* Optional: as recv, without the copy: *buf points into the backend's
     * own buffer (room for DGRAM_MTU + 1 bytes), valid until the next call
     * of recv or recv_ref. */
    ssize_t (*recv_ref)(native_endpoint *e, const unsigned char **buf, native_addr *from);
    /* Send one datagram (fire and forget: a datagram that cannot be sent is
     * lost like any other, and the client retransmits). 0 or -1. */
    int (*send)(native_endpoint *e, const unsigned char *buf, size_t len, const native_addr *to);
    /* Optional (backends with flush): as send, without the copy: buf must
     * stay as it is until the next flush returns. */
    int (*send_ref)(native_endpoint *e, const unsigned char *buf, size_t len,
                    const native_addr *to);
    /* A backend may queue what send takes (UDP: for one sendmmsg) until
     * flush, which the worker calls before it sleeps; the queue keeps send
     * order. flush returns how many queued datagrams could not be sent
     * (their bytes in *lost_bytes), counted since the last flush, and in
     * *calls the system calls that sent them (INFO native_send_calls).
     * NULL when send transmits at once (verbs: the post is already the
     * batch). */
    int (*flush)(native_endpoint *e, size_t *lost_bytes, long long *calls);
    /* A one-line description of the endpoint for INFO (port, or QPN/GID). */
    void (*describe)(native_endpoint *e, char *buf, size_t len);
    /* Is the peer on this host? (protected mode) */
    int (*is_local)(native_endpoint *e, const native_addr *a);
    void (*close)(native_endpoint *e);
} native_backend;

extern const native_backend native_udp_backend;
extern const native_backend native_verbs_backend;
/* The verbs endpoint's own UD address (its QPN, GID, LID): where a client
 * (or the self-test) sends. */
int native_verbs_self(native_endpoint *e, native_addr *self);

/* A peer address as text ("ip:port", or "ud:qpn@gid"), for logs and INFO. */
void native_addr_string(const native_addr *a, char *buf, size_t len);

#endif
