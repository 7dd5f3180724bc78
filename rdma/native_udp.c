/* native_udp.c -- the UDP backend of the native edge (native_transport.h).
 *
 * One UDP socket per worker, all bound to native-bind:native-port with
 * SO_REUSEPORT, so the kernel delivers each datagram straight to one
 * worker's socket and no thread hands requests to another.
 *
 * Steering by client id. The kernel's default choice among a reuseport
 * group hashes the 4-tuple, which keeps one client SOCKET on one worker but
 * not one CLIENT: a client that reopens its socket (librowan after an
 * error) would meet a worker without its session or reply cache, and a
 * retransmitted INCR would run twice. So worker 0's socket attaches a
 * classic BPF program to the group (SO_ATTACH_REUSEPORT_CBPF) that picks
 * socket (low 32 bits of the header's client id) mod nworkers; the kernel
 * hands the program the UDP payload, and the sockets' indexes in the group
 * are their bind order, which is worker order (native_transport.h). A
 * datagram too short to carry a client id makes the load fail and goes to
 * worker 0, which drops it as malformed. Without the program (an old
 * kernel) the 4-tuple hash still keeps each socket's datagrams on one
 * worker, and a warning is logged.
 *
 * A second server on the same port. listen.c refuses SO_REUSEPORT for TCP
 * because a second rowan-server would silently share the port. Here the
 * port is first probed with a plain bind (no SO_REUSEPORT): if anything
 * holds it, startup fails with "Address already in use". And a socket that
 * joined the group later would sit at an index >= nworkers, which the
 * steering program never picks, so it could not take our datagrams. */
#include "native_transport.h"
#include "dgram.h"
#include "server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <linux/filter.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef SO_ATTACH_REUSEPORT_CBPF
#define SO_ATTACH_REUSEPORT_CBPF 51
#endif

/* Datagrams taken per recvmmsg: under load one system call serves a
 * batch; recv hands them out one by one. */
#define UDP_BATCH 16
/* Datagrams queued for one sendmmsg. send copies each reply here and the
 * worker flushes the queue before it sleeps, so a round that answers a
 * pipeline of 16 (or 16 clients) makes one system call, not 16, as RESP's
 * one write per connection does. A full queue is sent at once (a large
 * reply's fragments). */
#define UDP_TX_BATCH 64

struct native_endpoint {
    int fd;
    int port;
    int next, count;                        /* the batch: handed out / received */
    int drained;                            /* the last batch was short: queue empty */
    struct mmsghdr msgs[UDP_BATCH];
    struct iovec iov[UDP_BATCH];
    struct sockaddr_storage from[UDP_BATCH];
    unsigned char buf[UDP_BATCH][DGRAM_MTU + 1];
    /* the send queue */
    int ntx;
    int lost;                               /* since the last flush */
    size_t lost_bytes;
    long long calls;
    struct mmsghdr txmsgs[UDP_TX_BATCH];
    struct iovec txiov[UDP_TX_BATCH];
    struct sockaddr_storage to[UDP_TX_BATCH];
    unsigned char txbuf[UDP_TX_BATCH][DGRAM_MTU];
};

/* The address to bind: AF_INET or AF_INET6 by the text, "*" = any. */
static int resolve(const char *bind, int port, struct sockaddr_storage *ss, socklen_t *len,
                   char *err, size_t errlen) {
    int af = strchr(bind, ':') ? AF_INET6 : AF_INET;
    const char *host = (!strcmp(bind, "*") || !strcmp(bind, "::*")) ? NULL : bind;
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = af;
    hints.ai_socktype = SOCK_DGRAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICHOST;
    char portstr[16];
    snprintf(portstr, sizeof(portstr), "%d", port);
    int rc = getaddrinfo(host, portstr, &hints, &res);
    if (rc != 0) {
        snprintf(err, errlen, "native-bind %s: %s", bind, gai_strerror(rc));
        return -1;
    }
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

static int udp_socket(const struct sockaddr_storage *ss, socklen_t len, int reuseport,
                      char *err, size_t errlen) {
    int fd = socket(ss->ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, errlen, "socket: %s", strerror(errno));
        return -1;
    }
    int one = 1;
    if (ss->ss_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    if (reuseport && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) != 0) {
        snprintf(err, errlen, "setsockopt SO_REUSEPORT: %s", strerror(errno));
        close(fd);
        return -1;
    }
    if (bind(fd, (const struct sockaddr *)ss, len) != 0) {
        int e = errno;
        snprintf(err, errlen, "bind: %s", strerror(e));
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

/* The steering program: A = payload[8..12) (big-endian, which only
 * permutes the id's low 32 bits), A %= n, return A. */
static int attach_steering(int fd, int nworkers) {
    struct sock_filter code[] = {
        {BPF_LD | BPF_W | BPF_ABS, 0, 0, 8},
        {BPF_ALU | BPF_MOD | BPF_K, 0, 0, (uint32_t)nworkers},
        {BPF_RET | BPF_A, 0, 0, 0},
    };
    struct sock_fprog prog = {.len = sizeof(code) / sizeof(code[0]), .filter = code};
    return setsockopt(fd, SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &prog, sizeof(prog));
}

static native_endpoint *udp_open(int worker, int nworkers, const char *bind, int port,
                                 char *err, size_t errlen) {
    struct sockaddr_storage ss;
    socklen_t len;
    char why[200];
    if (resolve(bind, port, &ss, &len, err, errlen) != 0) return NULL;
    if (worker == 0) {
        /* the probe: fails if any socket, ours or another server's, holds the port */
        int probe = udp_socket(&ss, len, 0, why, sizeof(why));
        if (probe < 0) {
            snprintf(err, errlen, "Could not create server UDP native socket %s:%d: %s", bind,
                     port, why);
            return NULL;
        }
        close(probe);
    }
    int fd = udp_socket(&ss, len, 1, why, sizeof(why));
    if (fd < 0) {
        snprintf(err, errlen, "Could not create server UDP native socket %s:%d: %s", bind, port,
                 why);
        return NULL;
    }
    /* Room for a burst of requests and for the fragments of large replies
     * (a 1 MB reply is 260 datagrams). The kernel caps it at rmem_max /
     * wmem_max; what does not fit is lost and retransmitted. */
    int buf = 4 << 20;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
    if (worker == 0 && nworkers > 1 && attach_steering(fd, nworkers) != 0)
        serverLog(LL_WARNING, "native: could not attach the client-id steering program (%s); "
                  "datagrams are spread by source address instead", strerror(errno));
    native_endpoint *e = calloc(1, sizeof(*e));
    e->fd = fd;
    struct sockaddr_storage bound;
    socklen_t blen = sizeof(bound);
    if (getsockname(fd, (struct sockaddr *)&bound, &blen) == 0)
        e->port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                                    : ((struct sockaddr_in *)&bound)->sin_port);
    return e;
}

static int udp_fd(native_endpoint *e) { return e->fd; }

/* Refill the batch. Errors, including the ICMP errors of earlier sends
 * (ECONNREFUSED...), just mean "nothing now": the socket stays usable. */
static int udp_fill(native_endpoint *e) {
    for (int i = 0; i < UDP_BATCH; i++) {
        e->iov[i].iov_base = e->buf[i];
        e->iov[i].iov_len = sizeof(e->buf[i]);
        memset(&e->msgs[i].msg_hdr, 0, sizeof(e->msgs[i].msg_hdr));
        e->msgs[i].msg_hdr.msg_iov = &e->iov[i];
        e->msgs[i].msg_hdr.msg_iovlen = 1;
        e->msgs[i].msg_hdr.msg_name = &e->from[i];
        e->msgs[i].msg_hdr.msg_namelen = sizeof(e->from[i]);
    }
    int n = recvmmsg(e->fd, e->msgs, UDP_BATCH, MSG_DONTWAIT, NULL);
    e->next = 0;
    e->count = n > 0 ? n : 0;
    e->drained = e->count < UDP_BATCH;
    return e->count;
}

/* The next datagram of the batch: its index, or -1. */
static int udp_next(native_endpoint *e) {
    if (e->next == e->count) {
        /* A short batch emptied the queue: report "none" without another
         * recvmmsg that would only hear EAGAIN (one system call per wake-up
         * saved at low load). What arrived since makes the socket readable
         * again: the loop's poll is level-triggered. */
        if (e->drained) {
            e->drained = 0;
            return -1;
        }
        if (udp_fill(e) == 0) return -1;
    }
    return e->next++;
}

/* Datagram i's length (a datagram longer than the buffer: a length above
 * it, cut) and sender. */
static size_t udp_took(native_endpoint *e, int i, native_addr *from) {
    struct msghdr *m = &e->msgs[i].msg_hdr;
    memcpy(&from->u.ss, &e->from[i], m->msg_namelen);
    from->len = m->msg_namelen;
    return (m->msg_flags & MSG_TRUNC) ? sizeof(e->buf[i]) + 1 : e->msgs[i].msg_len;
}

static ssize_t udp_recv(native_endpoint *e, unsigned char *buf, size_t cap, native_addr *from) {
    int i = udp_next(e);
    if (i < 0) return -1;
    size_t got = e->msgs[i].msg_len;
    memcpy(buf, e->buf[i], got < cap ? got : cap);
    return (ssize_t)udp_took(e, i, from);
}

/* The batch's buffers stay put until the next udp_fill, which only the
 * next call can make. */
static ssize_t udp_recv_ref(native_endpoint *e, const unsigned char **buf, native_addr *from) {
    int i = udp_next(e);
    if (i < 0) return -1;
    *buf = e->buf[i];
    return (ssize_t)udp_took(e, i, from);
}

/* Send the queue. A datagram the kernel refuses (ENOBUFS, EAGAIN with a
 * full socket buffer, an unroutable address) is lost like any other: it
 * is skipped and the rest still go; the client retransmits. */
static void udp_push(native_endpoint *e) {
    for (int done = 0; done < e->ntx;) {
        int r = sendmmsg(e->fd, e->txmsgs + done, (unsigned)(e->ntx - done), MSG_DONTWAIT);
        e->calls++;
        if (r > 0) {
            done += r;
            continue;
        }
        if (r < 0 && errno == EINTR) continue;
        e->lost++;
        e->lost_bytes += e->txiov[done].iov_len;
        done++;
    }
    e->ntx = 0;
}

/* Queue buf (copied into the queue unless ref: then it is sent from
 * where it is, and must stay until the queue is pushed). */
static int udp_queue(native_endpoint *e, const unsigned char *buf, size_t len,
                     const native_addr *to, int ref) {
    if (len > DGRAM_MTU || to->len == 0 || to->len > sizeof(e->to[0])) return -1;
    if (e->ntx == UDP_TX_BATCH) udp_push(e);
    int i = e->ntx++;
    if (!ref) memcpy(e->txbuf[i], buf, len);
    memcpy(&e->to[i], &to->u.ss, to->len);
    e->txiov[i].iov_base = ref ? (void *)buf : e->txbuf[i];
    e->txiov[i].iov_len = len;
    memset(&e->txmsgs[i], 0, sizeof(e->txmsgs[i]));
    e->txmsgs[i].msg_hdr.msg_iov = &e->txiov[i];
    e->txmsgs[i].msg_hdr.msg_iovlen = 1;
    e->txmsgs[i].msg_hdr.msg_name = &e->to[i];
    e->txmsgs[i].msg_hdr.msg_namelen = to->len;
    return 0;
}

static int udp_send(native_endpoint *e, const unsigned char *buf, size_t len, const native_addr *to) {
    return udp_queue(e, buf, len, to, 0);
}

static int udp_send_ref(native_endpoint *e, const unsigned char *buf, size_t len,
                        const native_addr *to) {
    return udp_queue(e, buf, len, to, 1);
}

static int udp_flush(native_endpoint *e, size_t *lost_bytes, long long *calls) {
    if (e->ntx) udp_push(e);
    int lost = e->lost;
    *lost_bytes = e->lost_bytes;
    *calls = e->calls;
    e->lost = 0;
    e->lost_bytes = 0;
    e->calls = 0;
    return lost;
}

static void udp_describe(native_endpoint *e, char *buf, size_t len) {
    snprintf(buf, len, "udp:%d", e->port);
}

static int udp_is_local(native_endpoint *e, const native_addr *a) {
    (void)e;
    const struct sockaddr *sa = (const struct sockaddr *)&a->u.ss;
    if (sa->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *x = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        return IN6_IS_ADDR_LOOPBACK(x) || (IN6_IS_ADDR_V4MAPPED(x) && x->s6_addr[12] == 127);
    }
    return 0;
}

static void udp_close(native_endpoint *e) {
    if (!e) return;
    if (e->ntx) udp_push(e);
    close(e->fd);
    free(e);
}

const native_backend native_udp_backend = {
    .name = "udp", .open = udp_open, .fd = udp_fd, .recv = udp_recv, .recv_ref = udp_recv_ref,
    .send = udp_send, .send_ref = udp_send_ref, .flush = udp_flush,
    .describe = udp_describe, .is_local = udp_is_local, .close = udp_close,
};

void native_addr_string(const native_addr *a, char *buf, size_t len) {
    if (a->len == 0) {   /* a UD destination */
        char gid[INET6_ADDRSTRLEN];
        inet_ntop(AF_INET6, a->u.ud.gid, gid, sizeof(gid));
        snprintf(buf, len, "ud:%u@%s", a->u.ud.qpn, gid);
        return;
    }
    const struct sockaddr *sa = (const struct sockaddr *)&a->u.ss;
    char ip[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (sa->sa_family == AF_INET) {
        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, ip, sizeof(ip));
        port = ntohs(((const struct sockaddr_in *)sa)->sin_port);
    } else if (sa->sa_family == AF_INET6) {
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, ip, sizeof(ip));
        port = ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
    }
    snprintf(buf, len, "%s:%d", ip, port);
}
