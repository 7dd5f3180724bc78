/* bench-transport.c -- what the kernel's loopback path allows a
 * request/reply edge, UDP datagrams against TCP, with nothing else running:
 * a trivial echo server and closed-loop clients, the same pipelining and
 * the same number of clients on each transport.
 *
 * Why: the native edge (rdma/native.c) runs over kernel UDP on machines
 * without an RDMA NIC, and most of its server CPU is the kernel's network
 * path (BENCHMARKS.md, "Native datagrams"). Whatever Rowan's native/RESP
 * ratio is, it cannot beat what an echo gets out of the same kernel paths:
 * this tool measures that bound, so the native edge's ratio can be read as
 * a share of it.
 *
 * Modes (each a server of W worker threads in a forked process, and C
 * client connections spread over T client threads in this one):
 *   udp     one request per datagram, as the native edge's version 1: the
 *           server takes datagrams with recvmmsg and answers each with its
 *           own datagram, all of one wake-up in one sendmmsg; one
 *           SO_REUSEPORT socket per worker (as native_udp.c);
 *   packed  a pipeline's P requests in ONE datagram and the P replies in
 *           one (the native edge's packed frames, version 2);
 *   tcp     P requests in one write, the P replies in one write (RESP
 *           pipelining); one SO_REUSEPORT listener per worker, epoll;
 *   shared  as udp on the server, but each client THREAD has one UDP
 *           socket for all its connections (each datagram names its
 *           connection): a wake-up takes the replies of many connections
 *           in one recvmmsg, and the requests they trigger leave together
 *           in one sendmmsg -- a UD queue pair per thread, as eRPC-style
 *           clients do, instead of a socket per connection. (The server's
 *           SO_REUSEPORT hash then puts each client thread on one worker.)
 * A request and a reply are S bytes (-s, default 64; the first 8 carry the
 * client's round number, so a late datagram of an earlier round is told
 * apart). The server echoes what it reads: no parsing, no work. A client
 * sends its P requests, waits for all P replies, and starts again; a UDP
 * round with no progress for 200 ms is sent again (counted as "lost").
 *
 * Measured per run (after a 0.5 s warm-up): operations per second, the
 * server process's CPU (utime + stime from /proc/PID/stat) per million
 * operations, and this process's (the clients') CPU per million. Modes run
 * in interleaved rounds (the order rotates); the table shows medians and
 * each mode's ratio to tcp.
 *
 * Build and run (not part of `make`; nothing but libc):
 *   make (builds utils/bench-transport), or by hand:
 *   cc -O2 -pthread -o /tmp/bench-transport utils/bench-transport.c
 *   utils/bench-transport [-m udp,packed,tcp,shared] [-c 50] [-P 1] [-s 64]
 *                        [-w 2] [-t 2] [-d 5] [-r 3] */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAXP 64          /* pipeline depth limit */
#define MAXS 4096        /* request size limit (and datagram size) */
#define SBATCH 64        /* datagrams per recvmmsg/sendmmsg on the server */

enum { M_UDP, M_PACKED, M_TCP, M_SHARED, M_N };
static const char *mode_name[] = {"udp", "packed", "tcp", "shared"};

static int conns = 50, pipe_n = 1, size = 64, workers = 2, cthreads = 2, rounds = 3;
static double seconds = 5;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *what) {
    perror(what);
    exit(1);
}

/* ---------------- the echo server (a child process) ---------------- */

static struct sockaddr_in loopback(int port) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
}

static int bound_socket(int type, int port) {
    int fd = socket(AF_INET, type | SOCK_CLOEXEC, 0), one = 1;
    if (fd < 0) die("socket");
    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    struct sockaddr_in a = loopback(port);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0) die("bind");
    int buf = 4 << 20;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
    return fd;
}

typedef struct { int mode, port; } srv_arg;

/* Everything waiting on fd, up to SBATCH datagrams, without blocking:
 * datagram i lands in buf[i] (iov[i], m[i].msg_len), its sender in from[i]
 * when from is given. */
static int recv_batch(int fd, unsigned char (*buf)[MAXS], struct mmsghdr *m, struct iovec *iov,
                      struct sockaddr_in *from) {
    for (int i = 0; i < SBATCH; i++) {
        iov[i].iov_base = buf[i];
        iov[i].iov_len = MAXS;
        memset(&m[i].msg_hdr, 0, sizeof m[i].msg_hdr);
        m[i].msg_hdr.msg_iov = &iov[i];
        m[i].msg_hdr.msg_iovlen = 1;
        if (from) {
            m[i].msg_hdr.msg_name = &from[i];
            m[i].msg_hdr.msg_namelen = sizeof from[i];
        }
    }
    return recvmmsg(fd, m, SBATCH, MSG_DONTWAIT, NULL);
}

/* UDP (both modes): wait, take everything waiting (recvmmsg), answer it
 * with one sendmmsg, as a native worker's round does. */
static void *udp_worker(void *p) {
    srv_arg *a = p;
    int fd = bound_socket(SOCK_DGRAM, a->port);
    static __thread unsigned char buf[SBATCH][MAXS];
    struct mmsghdr m[SBATCH];
    struct iovec iov[SBATCH];
    struct sockaddr_in from[SBATCH];
    for (;;) {
        struct pollfd pf = {fd, POLLIN, 0};
        if (poll(&pf, 1, -1) < 0 && errno != EINTR) die("poll");
        for (;;) {
            int n = recv_batch(fd, buf, m, iov, from);
            if (n <= 0) break;
            for (int i = 0; i < n; i++) iov[i].iov_len = m[i].msg_len;   /* echo: same bytes back */
            for (int done = 0; done < n;) {
                int r = sendmmsg(fd, m + done, (unsigned)(n - done), MSG_DONTWAIT);
                done += r > 0 ? r : 1;
            }
            if (n < SBATCH) break;
        }
    }
    return NULL;
}

/* TCP: epoll over this worker's connections; echo what each read brings. */
static void *tcp_worker(void *p) {
    srv_arg *a = p;
    int lfd = bound_socket(SOCK_STREAM, a->port);
    if (listen(lfd, 1024) != 0) die("listen");
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = lfd};
    epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
    static __thread char buf[1 << 16];
    struct epoll_event evs[256];
    for (;;) {
        int n = epoll_wait(ep, evs, 256, -1);
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            if (fd == lfd) {
                int c = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (c < 0) continue;
                int one = 1;
                setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                struct epoll_event ce = {.events = EPOLLIN, .data.fd = c};
                epoll_ctl(ep, EPOLL_CTL_ADD, c, &ce);
                continue;
            }
            ssize_t r = read(fd, buf, sizeof buf);
            if (r <= 0) {
                if (r == 0 || errno != EAGAIN) close(fd);
                continue;
            }
            for (ssize_t off = 0; off < r;) {   /* a small reply: the buffer takes it */
                ssize_t w = write(fd, buf + off, (size_t)(r - off));
                if (w > 0) off += w;
                else if (errno != EAGAIN && errno != EINTR) break;
            }
        }
    }
    return NULL;
}

static pid_t server_start(int mode, int port) {
    pid_t pid = fork();
    if (pid < 0) die("fork");
    if (pid > 0) return pid;
    pthread_t th[64];
    static srv_arg a;
    a.mode = mode;
    a.port = port;
    for (int i = 0; i < workers; i++)
        pthread_create(&th[i], NULL, mode == M_TCP ? tcp_worker : udp_worker, &a);
    pause();
    _exit(0);
}

static double proc_cpu(pid_t pid) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    unsigned long long ut = 0, st = 0;
    if (p) sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st);
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* ---------------- the clients ---------------- */

typedef struct conn {
    int fd;
    uint64_t round;
    int got;              /* replies (or reply bytes, tcp) of this round */
    double sent_at;
} conn;

typedef struct {
    int mode, port, first, count;
    _Atomic long long *ops, *lost;
    _Atomic int *stop;
} cli_arg;

static void conn_send(int mode, conn *c) {
    static __thread unsigned char req[MAXP][MAXS];
    c->round++;
    c->got = 0;
    c->sent_at = now_s();
    for (int i = 0; i < pipe_n; i++) {
        memset(req[i], 'x', (size_t)size);
        memcpy(req[i], &c->round, 8);
    }
    if (mode == M_UDP) {
        struct mmsghdr m[MAXP];
        struct iovec iov[MAXP];
        for (int i = 0; i < pipe_n; i++) {
            iov[i].iov_base = req[i];
            iov[i].iov_len = (size_t)size;
            memset(&m[i], 0, sizeof m[i]);
            m[i].msg_hdr.msg_iov = &iov[i];
            m[i].msg_hdr.msg_iovlen = 1;
        }
        for (int done = 0; done < pipe_n;) {
            int r = sendmmsg(c->fd, m + done, (unsigned)(pipe_n - done), 0);
            done += r > 0 ? r : 1;
        }
        return;
    }
    /* packed and tcp: the P requests back to back, one send */
    static __thread unsigned char all[MAXP * MAXS];
    for (int i = 0; i < pipe_n; i++) memcpy(all + (size_t)i * (size_t)size, req[i], (size_t)size);
    size_t len = (size_t)pipe_n * (size_t)size;
    for (size_t off = 0; off < len;) {
        ssize_t w = send(c->fd, all + off, len - off, MSG_NOSIGNAL);
        if (w > 0) off += (size_t)w;
        else if (errno != EINTR && errno != EAGAIN) break;
    }
}

/* Read what is there; 1 when the round is complete. */
static int conn_read(int mode, conn *c) {
    static __thread unsigned char buf[1 << 16];
    for (;;) {
        ssize_t r = recv(c->fd, buf, sizeof buf, MSG_DONTWAIT);
        if (r <= 0) return 0;
        if (mode == M_TCP) {
            c->got += (int)r;
            if (c->got >= pipe_n * size) return 1;
            continue;
        }
        uint64_t rnd;
        memcpy(&rnd, buf, 8);
        if (r < 8 || rnd != c->round) continue;       /* a late one of an earlier round */
        c->got += mode == M_PACKED ? pipe_n : 1;
        if (c->got >= pipe_n) return 1;
    }
}

/* mode shared: one socket per client thread. A datagram's bytes 8..12
 * name its connection; requests queue and leave in one sendmmsg per wake. */
typedef struct {
    int fd, n;
    struct mmsghdr m[SBATCH];
    struct iovec iov[SBATCH];
    unsigned char buf[SBATCH][MAXS];
} shq;

static void shq_flush(shq *q) {
    for (int done = 0; done < q->n;) {
        int r = sendmmsg(q->fd, q->m + done, (unsigned)(q->n - done), 0);
        done += r > 0 ? r : 1;
    }
    q->n = 0;
}

static void shq_round(shq *q, conn *c, uint32_t idx) {
    c->round++;
    c->got = 0;
    c->sent_at = now_s();
    for (int i = 0; i < pipe_n; i++) {
        if (q->n == SBATCH) shq_flush(q);
        unsigned char *b = q->buf[q->n];
        memset(b, 'x', (size_t)size);
        memcpy(b, &c->round, 8);
        memcpy(b + 8, &idx, 4);
        q->iov[q->n].iov_base = b;
        q->iov[q->n].iov_len = (size_t)size;
        memset(&q->m[q->n], 0, sizeof q->m[q->n]);
        q->m[q->n].msg_hdr.msg_iov = &q->iov[q->n];
        q->m[q->n].msg_hdr.msg_iovlen = 1;
        q->n++;
    }
}

static void client_shared(cli_arg *a) {
    conn *cs = calloc((size_t)a->count, sizeof *cs);
    shq *q = calloc(1, sizeof *q);
    static __thread unsigned char rx[SBATCH][MAXS];
    struct mmsghdr m[SBATCH];
    struct iovec iov[SBATCH];
    q->fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in s = loopback(a->port);
    if (connect(q->fd, (struct sockaddr *)&s, sizeof s) != 0) die("connect");
    int buf = 4 << 20;
    setsockopt(q->fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
    for (int i = 0; i < a->count; i++) shq_round(q, &cs[i], (uint32_t)i);
    shq_flush(q);
    double last_check = now_s();
    while (!atomic_load(a->stop)) {
        struct pollfd pf = {q->fd, POLLIN, 0};
        if (poll(&pf, 1, 50) <= 0) goto check;
        long long done = 0;
        for (;;) {
            int n = recv_batch(q->fd, rx, m, iov, NULL);
            if (n <= 0) break;
            for (int i = 0; i < n; i++) {
                uint64_t rnd;
                uint32_t idx;
                if (m[i].msg_len < 12) continue;
                memcpy(&rnd, rx[i], 8);
                memcpy(&idx, rx[i] + 8, 4);
                if (idx >= (uint32_t)a->count || rnd != cs[idx].round) continue;
                if (++cs[idx].got >= pipe_n) {
                    done += pipe_n;
                    shq_round(q, &cs[idx], idx);
                }
            }
            if (n < SBATCH) break;
        }
        shq_flush(q);   /* what this wake-up's replies triggered, together */
        if (done) atomic_fetch_add(a->ops, done);
    check:;
        double t = now_s();
        if (t - last_check > 0.05) {   /* a lost datagram: that round again */
            last_check = t;
            for (int i = 0; i < a->count; i++)
                if (t - cs[i].sent_at > 0.2) {
                    atomic_fetch_add(a->lost, 1);
                    shq_round(q, &cs[i], (uint32_t)i);
                }
            shq_flush(q);
        }
    }
    close(q->fd);
    free(q);
    free(cs);
}

static void *client_main(void *p) {
    cli_arg *a = p;
    if (a->mode == M_SHARED) {
        client_shared(a);
        return NULL;
    }
    conn *cs = calloc((size_t)a->count, sizeof *cs);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    for (int i = 0; i < a->count; i++) {
        int fd = socket(AF_INET, (a->mode == M_TCP ? SOCK_STREAM : SOCK_DGRAM) | SOCK_CLOEXEC, 0);
        struct sockaddr_in s = loopback(a->port);
        for (int tries = 0; connect(fd, (struct sockaddr *)&s, sizeof s) != 0; tries++) {
            if (tries > 200) die("connect");
            usleep(10000);
        }
        int one = 1, buf = 1 << 20;
        if (a->mode == M_TCP) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
        cs[i].fd = fd;
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
        epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
        conn_send(a->mode, &cs[i]);
    }
    struct epoll_event evs[256];
    double last_check = now_s();
    while (!atomic_load(a->stop)) {
        int n = epoll_wait(ep, evs, 256, 50);
        long long done = 0;
        for (int i = 0; i < n; i++) {
            conn *c = &cs[evs[i].data.u32];
            if (conn_read(a->mode, c)) {
                done += pipe_n;
                conn_send(a->mode, c);
            }
        }
        if (done) atomic_fetch_add(a->ops, done);
        double t = now_s();
        if (a->mode != M_TCP && t - last_check > 0.05) {   /* a lost datagram: that round again */
            last_check = t;
            for (int i = 0; i < a->count; i++)
                if (t - cs[i].sent_at > 0.2) {
                    atomic_fetch_add(a->lost, 1);
                    conn_send(a->mode, &cs[i]);
                }
        }
    }
    for (int i = 0; i < a->count; i++) close(cs[i].fd);
    free(cs);
    close(ep);
    return NULL;
}

static double self_cpu(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec / 1e6;
}

typedef struct { double ops_s, srv_cpu_m, cli_cpu_m, srv_util; long long lost; } result;

static int free_port(int type) {
    int fd = socket(AF_INET, type, 0);
    struct sockaddr_in a = loopback(0);
    bind(fd, (struct sockaddr *)&a, sizeof a);
    socklen_t l = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &l);
    close(fd);
    return ntohs(a.sin_port);
}

static result run(int mode) {
    int port = free_port(mode == M_TCP ? SOCK_STREAM : SOCK_DGRAM);
    pid_t srv = server_start(mode == M_SHARED ? M_UDP : mode, port);
    usleep(100000);
    _Atomic long long ops = 0, lost = 0;
    _Atomic int stop = 0;
    pthread_t th[64];
    cli_arg args[64];
    int per = conns / cthreads, extra = conns % cthreads, first = 0;
    for (int i = 0; i < cthreads; i++) {
        int n = per + (i < extra);
        args[i] = (cli_arg){mode, port, first, n, &ops, &lost, &stop};
        first += n;
        pthread_create(&th[i], NULL, client_main, &args[i]);
    }
    usleep(500000);   /* warm-up */
    long long o0 = atomic_load(&ops), l0 = atomic_load(&lost);
    double s0 = proc_cpu(srv), c0 = self_cpu(), t0 = now_s();
    usleep((useconds_t)(seconds * 1e6));
    long long o1 = atomic_load(&ops), l1 = atomic_load(&lost);
    double s1 = proc_cpu(srv), c1 = self_cpu(), t1 = now_s();
    atomic_store(&stop, 1);
    for (int i = 0; i < cthreads; i++) pthread_join(th[i], NULL);
    kill(srv, SIGKILL);
    waitpid(srv, NULL, 0);
    double n = (double)(o1 - o0);
    result r = {n / (t1 - t0), (s1 - s0) / (n > 0 ? n : 1) * 1e6, (c1 - c0) / (n > 0 ? n : 1) * 1e6,
                (s1 - s0) / (t1 - t0), l1 - l0};
    return r;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double med(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv) {
    int modes[M_N], nmodes = 0;
    const char *mlist = "udp,packed,tcp";
    int opt;
    while ((opt = getopt(argc, argv, "m:c:P:s:w:t:d:r:")) != -1) {
        switch (opt) {
        case 'm': mlist = optarg; break;
        case 'c': conns = atoi(optarg); break;
        case 'P': pipe_n = atoi(optarg); break;
        case 's': size = atoi(optarg); break;
        case 'w': workers = atoi(optarg); break;
        case 't': cthreads = atoi(optarg); break;
        case 'd': seconds = atof(optarg); break;
        case 'r': rounds = atoi(optarg); break;
        default:
            fprintf(stderr, "usage: %s [-m udp,packed,tcp,shared] [-c conns] [-P pipeline] [-s bytes] "
                    "[-w server threads] [-t client threads] [-d seconds] [-r rounds]\n", argv[0]);
            return 2;
        }
    }
    if (pipe_n < 1 || pipe_n > MAXP || size < 8 || size > MAXS || conns < 1 || cthreads < 1 ||
        cthreads > 64 || workers < 1 || workers > 64 || rounds < 1 || rounds > 50) {
        fprintf(stderr, "bench-transport: a setting is out of range\n");
        return 2;
    }
    if ((long)pipe_n * size > MAXS) {
        fprintf(stderr, "bench-transport: P * s must fit one datagram (%d bytes)\n", MAXS);
        return 2;
    }
    for (char *save = NULL, *tok = strtok_r(strdup(mlist), ",", &save); tok && nmodes < M_N;
         tok = strtok_r(NULL, ",", &save))
        for (int m = 0; m < M_N; m++)
            if (!strcmp(tok, mode_name[m])) modes[nmodes++] = m;
    if (!nmodes) return 2;
    signal(SIGPIPE, SIG_IGN);
    static double ops[M_N][50], scpu[M_N][50], ccpu[M_N][50], util[M_N][50];
    long long lost[M_N] = {0};
    for (int r = 0; r < rounds; r++)
        for (int k = 0; k < nmodes; k++) {
            int m = modes[(k + r) % nmodes];   /* the order rotates per round */
            result x = run(m);
            ops[m][r] = x.ops_s;
            scpu[m][r] = x.srv_cpu_m;
            ccpu[m][r] = x.cli_cpu_m;
            util[m][r] = x.srv_util;
            lost[m] += x.lost;
            fprintf(stderr, "bench-transport: round %d %-6s %9.0f ops/s  server %.2f CPU-s/M "
                    "(%.0f%% CPU)  clients %.2f CPU-s/M  lost rounds %lld\n", r + 1,
                    mode_name[m], x.ops_s, x.srv_cpu_m, 100 * x.srv_util, x.cli_cpu_m, x.lost);
        }
    printf("echo over loopback: %d connections, pipeline %d, %d-byte requests and replies, "
           "%d server threads, %d client threads, %.0f s per run, %d interleaved rounds "
           "(medians)\n\n", conns, pipe_n, size, workers, cthreads, seconds, rounds);
    printf("| mode | ops/s | server CPU-s per M ops | server CPU | client CPU-s per M ops | "
           "ops/s vs tcp | server CPU per op vs tcp |\n|---|---|---|---|---|---|---|\n");
    double tops = 0, tcpu = 0;
    int have_tcp = 0;
    for (int k = 0; k < nmodes; k++)
        if (modes[k] == M_TCP) {
            tops = med(ops[M_TCP], rounds);
            tcpu = med(scpu[M_TCP], rounds);
            have_tcp = 1;
        }
    for (int k = 0; k < nmodes; k++) {
        int m = modes[k];
        double o = med(ops[m], rounds), s = med(scpu[m], rounds);
        printf("| %s | %.0f | %.2f | %.0f%% | %.2f |", mode_name[m], o, s,
               100 * med(util[m], rounds), med(ccpu[m], rounds));
        if (have_tcp) printf(" %.2fx | %.2fx |\n", o / tops, s / tcpu);
        else printf(" - | - |\n");
        if (lost[m]) printf("(%s: %lld rounds lost and sent again)\n", mode_name[m], lost[m]);
    }
    return 0;
}
