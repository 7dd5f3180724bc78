/* dgram.h -- the wire format of the native UD RPC path (paper §5.2).
 *
 * One request is one datagram, client to server; its reply is one datagram
 * or a few numbered fragments, server to client. The same format runs over
 * both backends: UDP sockets (tests, CI, machines without an RDMA NIC) and
 * verbs UD queue pairs. The codec here is pure (no sockets, no state) and is
 * shared by the server edge (rdma/native.c) and the client library
 * (librowan), so both sides decode with one implementation, and the fuzzer
 * (tests/fuzz) drives the decoder the way fuzz-resp drives the RESP parser.
 *
 * Sizes. A datagram is at most DGRAM_MTU bytes (the UD MTU; on UDP it is the
 * payload of one datagram). A REQUEST must fit one datagram: the client
 * library refuses a larger one before sending it, with an error telling the
 * caller to use TCP, so a request is never half-received and never applied
 * from pieces. A REPLY may be larger (a GET of a large value, LRANGE): it
 * travels as DGRAM_REPLY fragments 0..nfrag-1 of one (client, request id),
 * each carrying its byte offset, and the client joins them; replies larger
 * than DGRAM_REPLY_MAX are replaced by an error reply. Why fragments for
 * replies but not requests: a write has run before its reply exists, so
 * refusing a large reply would lose it; a request can be refused before
 * anything runs.
 *
 * Payloads. A request's payload is its argument vector: u16 argc, then per
 * argument u32 length and the bytes. A reply's payload is the reply encoded
 * in RESP (protocol 2 unless the session said HELLO 3), because the client
 * library hands out hiredis's redisReply and decodes with hiredis's reader.
 *
 * Exactly once. Request ids of one client start at 1 and grow by one per
 * request. The client retransmits a request with the same id after a
 * timeout. The server keeps, per client, the replies of its recent request
 * ids: a duplicate of a request that has been applied gets the original
 * reply again (it is not run twice); a duplicate of one still running (a
 * held reply, a blocked command) is dropped. `acked` in every request says
 * "I have the replies of every id below this", so the server forgets those
 * and the cache stays bounded.
 *
 * Terms. A request carries the configuration term its sender routed by (0:
 * unknown, standalone). A server whose term is newer refuses it with
 * DGRAM_REFUSE / DGRAM_R_STALE and its own term; nothing runs, and the
 * client refreshes its configuration and retries.
 *
 * Fragments are cut at fixed places: fragment i starts at byte
 * i * DGRAM_PAYLOAD_MAX and every fragment but the last is full, so nfrag
 * = max(1, ceil(total / DGRAM_PAYLOAD_MAX)) and a decoder checks each
 * fragment's frag, nfrag, off and length against total alone. A refusal
 * and a request carry 0 in the fields they do not use (nfrag, total, off);
 * a request's id is at least 1.
 *
 * Resuming a large reply. The fragments of a reply leave in one burst,
 * which a client's socket buffer may not hold (a 1 MB reply is 260
 * datagrams; Linux's default rmem_max is 208 KB). So a request's `frag` is
 * the first fragment its sender still needs: 0 on the first transmission,
 * and on a retransmission of an id whose reply is partly joined, the first
 * missing index. The server then sends the fragments from there to the end
 * (the reply is cached: nothing runs again), so every round delivers at
 * least what the client's buffer holds.
 *
 * Pushed replies. What no request asked for (pub/sub messages, MONITOR
 * lines: the server's session output outside any reply) travels as
 * replies with request id 0, which nothing caches or retransmits: a lost
 * datagram loses its messages. The server groups whole RESP values, up to
 * one datagram's payload per pushed reply; a larger value travels alone,
 * in the usual fragments, and then carries in `acked` its push number
 * (per client, from 1, growing by one per fragmented push; 0 in a push of
 * one datagram), so the client joins the fragments of one number and drops
 * an incomplete join when another number begins. A value larger than
 * DGRAM_REPLY_MAX is not sent: the subscriber gets, in its place, a pushed
 * error saying so and telling it to use TCP.
 *
 * Packed frames (version 2). One request per datagram costs a pipelined
 * client one trip through the kernel's UDP path per request where TCP
 * carries a whole pipeline in one segment. So a version 2 datagram may
 * pack several small requests (DGRAM_PACKED_REQUESTS, client to server)
 * or several whole small replies and refusals (DGRAM_PACKED_REPLIES,
 * server to client) of ONE client. The header then carries what the
 * entries share -- client id, term, and for requests `acked` -- with req,
 * shard, frag, total and off 0 and `nfrag` the number of entries (>= 1);
 * each entry is a 16-byte entry header (u64 request id; u16 x, u16 y;
 * u32 length) and its payload:
 *   - a request entry: x = shard, y = first reply fragment still needed
 *     (as `frag` of a single request), payload = the argument vector; ids
 *     >= 1 and strictly increasing within the datagram;
 *   - a reply entry: x = DGRAM_REPLY with y = 0 and payload = the WHOLE
 *     reply (total = length, one fragment), or x = DGRAM_REFUSE with y =
 *     the refusal code and payload = the message; ids >= 1, any order.
 * Nothing else changes: each packed request keeps its own id, reply-cache
 * record, retransmission and place in the acked window, exactly as if it
 * had come alone (the server unpacks and handles entries one by one);
 * replies larger than what fits one entry still leave alone, fragmented.
 * Versions: a version 1 datagram is one of types 1-3 exactly as before;
 * version 2 adds types 4-5, and a peer stamps its single datagrams with
 * the version it speaks. A sender of version 2 declares that it reads
 * packed replies: the server packs replies only for a client whose latest
 * request was version 2, and answers a version 1 client in version 1, so
 * old clients keep working unchanged.
 *
 * All integers are little-endian. */
#ifndef ROWAN_DGRAM_H
#define ROWAN_DGRAM_H
#include <stddef.h>
#include <stdint.h>

#define DGRAM_MAGIC      0x314e5752u   /* "RWN1" read as little-endian */
#define DGRAM_VERSION    2             /* newest: packed frames */
#define DGRAM_VERSION_1  1             /* one request or reply per datagram */
#define DGRAM_MTU        4096          /* largest datagram, header included */
#define DGRAM_HDR_LEN    52
#define DGRAM_PAYLOAD_MAX (DGRAM_MTU - DGRAM_HDR_LEN)
#define DGRAM_REPLY_MAX  (1u << 20)    /* largest joined reply */
/* Fragments of the largest reply: fragment i carries bytes
 * [i * DGRAM_PAYLOAD_MAX, min(total, (i + 1) * DGRAM_PAYLOAD_MAX)). */
#define DGRAM_MAX_FRAGS  ((DGRAM_REPLY_MAX + DGRAM_PAYLOAD_MAX - 1) / DGRAM_PAYLOAD_MAX)
#define DGRAM_MAX_ARGS   1024          /* a request's argc limit */
#define DGRAM_ENTRY_HDR_LEN 16         /* a packed entry's header */
/* Largest payload of one packed entry (a pack of that one entry). */
#define DGRAM_ENTRY_MAX  (DGRAM_PAYLOAD_MAX - DGRAM_ENTRY_HDR_LEN)

enum dgram_type {
    DGRAM_REQUEST = 1,   /* client -> server: payload = argument vector */
    DGRAM_REPLY   = 2,   /* server -> client: payload = RESP bytes [off, off+len) */
    DGRAM_REFUSE  = 3,   /* server -> client: nothing ran; code in `frag`, payload = message */
    DGRAM_PACKED_REQUESTS = 4,  /* version 2, client -> server: nfrag request entries */
    DGRAM_PACKED_REPLIES  = 5,  /* version 2, server -> client: nfrag reply/refusal entries */
};

/* Codes of DGRAM_REFUSE (carried in `frag`). */
enum dgram_refusal {
    DGRAM_R_STALE    = 1,  /* the request's term is older than the server's (term = server's) */
    DGRAM_R_MALFORMED = 2, /* the datagram did not decode */
    DGRAM_R_BUSY     = 3,  /* too many clients or requests in flight: retry later */
    DGRAM_R_LOADING  = 4,  /* recovery still running */
};

/* The fixed header (DGRAM_HDR_LEN bytes on the wire, in this order). */
typedef struct dgram_hdr {
    uint32_t magic;
    uint8_t  version;
    uint8_t  type;        /* enum dgram_type */
    uint16_t shard;       /* shard the sender routed by, 0xffff: none */
    uint64_t client;      /* client id: random, chosen by the client */
    uint64_t req;         /* request id (>= 1) */
    uint64_t term;        /* configuration term (requests: the sender's; refusals: the server's) */
    uint64_t acked;       /* requests: every id below this has its reply */
    uint16_t frag;        /* replies: fragment index; refusals: enum dgram_refusal;
                             requests: first fragment of the reply still needed */
    uint16_t nfrag;       /* replies: number of fragments (>= 1) */
    uint32_t total;       /* replies: length of the joined reply */
    uint32_t off;         /* replies: byte offset of this fragment's payload */
} dgram_hdr;

/* Encoders stamp h->version when it is DGRAM_VERSION_1 or DGRAM_VERSION,
 * else (0) DGRAM_VERSION_1; packed frames are always DGRAM_VERSION. */

/* Encode h into buf[DGRAM_HDR_LEN]. */
void dgram_put_hdr(unsigned char *buf, const dgram_hdr *h);
/* Decode and check a datagram's header: length (DGRAM_HDR_LEN..DGRAM_MTU),
 * magic, version, type; a request's id >= 1 and frag < DGRAM_MAX_FRAGS;
 * unused fields 0; a refusal's
 * code known; and for replies the fixed fragment layout: total <=
 * DGRAM_REPLY_MAX, nfrag as total implies, frag < nfrag, off = frag *
 * DGRAM_PAYLOAD_MAX and the payload exactly the fragment's length; for
 * packed frames (version 2 only) the shared fields as described above
 * and every entry in bounds and well-formed, the payload consumed to its
 * last byte (so dgram_pack_next needs no checks of its own).
 * Returns 0, or -1 with a short reason in *why. */
int dgram_get_hdr(const unsigned char *buf, size_t len, dgram_hdr *h, const char **why);

/* Encode a request's argument vector after the header. Returns the
 * datagram's total length, or -1 if it would not fit DGRAM_MTU (or argc is
 * 0 or above DGRAM_MAX_ARGS). */
long dgram_put_request(unsigned char *buf, const dgram_hdr *h, int argc,
                       const char *const *argv, const size_t *argvlen);
/* Decode a request's payload (the bytes after the header) in place: argv[i]
 * points into payload. max is the capacity of argv/argvlen. Returns argc,
 * or -1 with a reason in *why (truncated, trailing bytes, too many
 * arguments). Never reads outside [payload, payload + len). */
int dgram_get_args(const unsigned char *payload, size_t len, const char **argv,
                   size_t *argvlen, int max, const char **why);

/* Replies. The number of fragments a reply of total bytes travels in, or 0
 * when total exceeds DGRAM_REPLY_MAX. */
unsigned dgram_reply_nfrag(size_t total);
/* Encode fragment `frag` of the reply resp[0..total) for (h->client,
 * h->req, h->term, h->shard; for a pushed reply, req 0, h->acked: its push
 * number) into buf[DGRAM_MTU]. Returns the datagram's
 * length, or -1 when total exceeds DGRAM_REPLY_MAX or frag is out of range. */
long dgram_put_reply(unsigned char *buf, const dgram_hdr *h, const char *resp,
                     size_t total, unsigned frag);
/* Encode a refusal (code: enum dgram_refusal, msg: a short text, cut to
 * fit) for (h->client, h->req); h->term is the server's term. Returns the
 * datagram's length. */
long dgram_put_refuse(unsigned char *buf, const dgram_hdr *h, int code, const char *msg);

/* One entry of a packed frame. Requests: type DGRAM_REQUEST, shard, frag
 * (first reply fragment needed). Replies: type DGRAM_REPLY (frag 0) or
 * DGRAM_REFUSE (frag = refusal code). payload points into the datagram. */
typedef struct dgram_entry {
    uint64_t req;
    uint8_t type;
    uint16_t shard;
    uint16_t frag;
    uint32_t len;
    const unsigned char *payload;
} dgram_entry;

/* Building a packed frame in buf[DGRAM_MTU]: begin with the shared header
 * fields (h: client, term, and for requests acked; type
 * DGRAM_PACKED_REQUESTS or DGRAM_PACKED_REPLIES), add entries while they
 * fit, end to write the header. */
typedef struct dgram_pack {
    unsigned char *buf;
    size_t len;                /* bytes used, header included */
    dgram_hdr h;
    uint64_t last;             /* requests: the id of the last entry */
} dgram_pack;
void dgram_pack_begin(dgram_pack *p, unsigned char *buf, const dgram_hdr *h, int type);
/* Can an entry of len payload bytes still go in? (Requests: with an id
 * above the last one's.) */
int dgram_pack_room(const dgram_pack *p, size_t len);
/* Add e (its type must suit the pack: DGRAM_REQUEST in a request pack,
 * DGRAM_REPLY or DGRAM_REFUSE in a reply pack). 0, or -1 when it does
 * not fit or is out of order (nothing written). */
int dgram_pack_add(dgram_pack *p, const dgram_entry *e);
/* Write the header (nfrag = entries); the datagram's length, or -1 when
 * the pack is empty. */
long dgram_pack_end(dgram_pack *p);
/* The entries of a packed frame that dgram_get_hdr accepted (type: the
 * header's): *pos starts at 0; returns 1 with the next entry in *e, or 0
 * after the last. */
int dgram_pack_next(const unsigned char *payload, size_t len, int type, size_t *pos,
                    dgram_entry *e);

/* Joining a reply's fragments (client side; used by librowan and the
 * tests). Fragments may arrive in any order and more than once. */
typedef struct dgram_join {
    uint64_t client, req;   /* the reply being joined (set by the first fragment) */
    uint32_t total;
    uint16_t nfrag, got;
    unsigned char *buf;     /* total bytes (malloc'd), the joined reply once complete */
    uint64_t have[(DGRAM_MAX_FRAGS + 63) / 64];
} dgram_join;
void dgram_join_init(dgram_join *j);
/* Add one decoded reply fragment (h from dgram_get_hdr, payload its bytes
 * after the header). Returns 1 when the reply is complete (j->buf holds
 * j->total bytes), 0 when more fragments are needed (a duplicate changes
 * nothing), -1 when it does not belong to the reply begun (other client,
 * request, total or nfrag) or memory ran out. */
int dgram_join_add(dgram_join *j, const dgram_hdr *h, const unsigned char *payload, size_t len);
/* Release the buffer and start over (j can be reused). */
void dgram_join_free(dgram_join *j);

#endif
