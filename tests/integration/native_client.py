"""A small client of the native datagram protocol (rdma/dgram.h), written
from the header's description with socket and struct only: independent of
the server's codec (rdma/dgram.c) and of librowan, so a test that passes
through it checks the wire format as documented, not one implementation
against itself.

Request: 52-byte header (magic "RWN1", version 1, type 1, shard, client id,
request id, term, acked, then frag/nfrag/total/off = 0), payload u16 argc
then per argument u32 length and bytes, all little-endian. Replies are
DGRAM_REPLY fragments (fragment i at byte i * 4044 of the joined RESP
reply) or a DGRAM_REFUSE whose `frag` field is the refusal code.

Packed frames (version 2, dgram.h "Packed frames"): the header's req,
shard, frag, total and off are 0 and nfrag counts the entries; each entry
is u64 request id, u16 x, u16 y, u32 length, then its bytes. Requests: x
= shard, y = first fragment wanted, bytes = the argument vector, ids
increasing. Replies: x = 2 (reply, y = 0, bytes = the whole RESP reply)
or 3 (refusal, y = code, bytes = the message). A client created with
version=2 stamps its datagrams version 2, which tells the server it reads
packed replies; messages() splits any datagram into per-request
messages, so the rest of this file handles a packed reply like a single
one.

call() sends a request and waits for its whole reply, retransmitting the
same request id after a timeout (as the protocol says a client does);
pipeline() sends many at once (packed, version 2) and retransmits the
unanswered ones, packed again; lower-level send()/send_pack()/recv_for()
let tests duplicate, drop and reorder.
Replies come back as raw RESP bytes; parse_resp() turns them into Python
values (bytes, int, list, None, RespError)."""
import os
import socket
import struct
import time

MAGIC = 0x314E5752
VERSION = 1
VERSION2 = 2
REQUEST, REPLY, REFUSE, PACKED_REQUESTS, PACKED_REPLIES = 1, 2, 3, 4, 5
R_STALE, R_MALFORMED, R_BUSY, R_LOADING = 1, 2, 3, 4
HDR = struct.Struct("<IBBHQQQQHHII")
HDR_LEN = HDR.size
ENTRY = struct.Struct("<QHHI")
MTU = 4096
PAYLOAD_MAX = MTU - HDR_LEN
assert HDR_LEN == 52


class RespError(Exception):
    def __eq__(self, other):
        return isinstance(other, RespError) and str(self) == str(other)

    def __hash__(self):
        return hash(str(self))


class Refused(Exception):
    def __init__(self, code, term, msg):
        super().__init__("refused code=%d term=%d %s" % (code, term, msg))
        self.code, self.term, self.msg = code, term, msg


def encode_args(args):
    args = [a if isinstance(a, bytes) else str(a).encode() for a in args]
    body = struct.pack("<H", len(args))
    for a in args:
        body += struct.pack("<I", len(a)) + a
    return body


def encode_request(client, req, args, term=0, acked=0, shard=0xFFFF, frag=0, version=VERSION):
    return HDR.pack(MAGIC, version, REQUEST, shard, client, req, term, acked, frag, 0, 0,
                    0) + encode_args(args)


def encode_pack(client, entries, term=0, acked=0):
    """A packed request frame: entries are (req, args) or (req, args, shard, frag)."""
    body = b""
    for e in entries:
        req, args = e[0], e[1]
        shard, frag = (e[2], e[3]) if len(e) > 2 else (0xFFFF, 0)
        a = args if isinstance(args, bytes) else encode_args(args)
        body += ENTRY.pack(req, shard, frag, len(a)) + a
    return HDR.pack(MAGIC, VERSION2, PACKED_REQUESTS, 0, client, 0, term, acked, 0,
                    len(entries), 0, 0) + body


def pack_room(entries):
    """Bytes a packed request frame of these (req, args) entries takes."""
    return HDR_LEN + sum(ENTRY.size + len(encode_args(e[1])) for e in entries)


def decode(dg):
    """(fields dict, payload) of a datagram from the server."""
    f = HDR.unpack_from(dg)
    names = ("magic", "version", "type", "shard", "client", "req", "term", "acked",
             "frag", "nfrag", "total", "off")
    return dict(zip(names, f)), dg[HDR_LEN:]


def messages(dg):
    """The per-request messages of a datagram from the server: [(fields,
    payload)], one for a single datagram, one per entry of a packed reply
    frame (fields as a single REPLY of one fragment, or a REFUSE)."""
    h, payload = decode(dg)
    if h["type"] != PACKED_REPLIES:
        return [(h, payload)]
    assert h["version"] == VERSION2 and h["req"] == 0 and h["nfrag"] >= 1, h
    out, pos = [], 0
    for _ in range(h["nfrag"]):
        req, x, y, n = ENTRY.unpack_from(payload, pos)
        pos += ENTRY.size
        body = payload[pos:pos + n]
        pos += n
        assert len(body) == n and req >= 1, (h, req, n)
        m = dict(h, req=req, type=x)
        if x == REPLY:
            assert y == 0
            m.update(frag=0, nfrag=1, total=n, off=0)
        else:
            assert x == REFUSE and 1 <= y <= 4, (x, y)
            m.update(frag=y, nfrag=0, total=0, off=0)
        out.append((m, body))
    assert pos == len(payload), (pos, len(payload))
    return out


def parse_resp(buf, pos=0):
    """(value, next position) of the RESP value at buf[pos:]."""
    t = buf[pos:pos + 1]
    nl = buf.index(b"\r\n", pos)
    line = buf[pos + 1:nl]
    pos = nl + 2
    if t == b"+":
        return line, pos
    if t == b"-":
        return RespError(line.decode()), pos
    if t == b":":
        return int(line), pos
    if t == b"$":
        n = int(line)
        if n < 0:
            return None, pos
        return buf[pos:pos + n], pos + n + 2
    if t == b"*":
        n = int(line)
        if n < 0:
            return None, pos
        out = []
        for _ in range(n):
            v, pos = parse_resp(buf, pos)
            out.append(v)
        return out, pos
    if t == b"_":
        return None, pos
    raise ValueError("unexpected RESP type %r" % t)


class NativeClient:
    def __init__(self, port, host="127.0.0.1", client_id=None, timeout=0.5, term=0, version=VERSION):
        self.addr = (host, port)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.id = client_id if client_id is not None else struct.unpack("<Q", os.urandom(8))[0] | 1
        self.next_req = 1
        self.acked = 1           # every id below this has its reply
        self.done = set()
        self.timeout = timeout
        self.term = term
        self.version = version
        self.inbox = {}          # req -> [(fields, payload)] received while waiting for another
        self.stats = {"datagrams": 0, "packed": 0}

    def close(self):
        self.sock.close()

    def send_raw(self, data):
        self.sock.sendto(data, self.addr)

    def send(self, req, *args, term=None, acked=None, frag=0):
        self.send_raw(encode_request(self.id, req, args, self.term if term is None else term,
                                     self.acked if acked is None else acked, frag=frag,
                                     version=self.version))

    def send_pack(self, entries, term=None, acked=None):
        self.send_raw(encode_pack(self.id, entries, self.term if term is None else term,
                                  self.acked if acked is None else acked))

    def recv_dgram(self, timeout):
        self.sock.settimeout(timeout)
        try:
            data, _ = self.sock.recvfrom(65536)
        except socket.timeout:
            return None
        self.stats["datagrams"] += 1
        if data[5:6] == bytes([PACKED_REPLIES]):
            self.stats["packed"] += 1
        return data

    def next_message(self, req, deadline):
        """The next message (fields, payload) of request id req, or None by the deadline;
        messages of other ids of this client are kept for later."""
        while True:
            box = self.inbox.get(req)
            if box:
                return box.pop(0)
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            dg = self.recv_dgram(left)
            if dg is None:
                return None
            for h, payload in messages(dg):
                assert h["magic"] == MAGIC and h["version"] in (VERSION, VERSION2), h
                assert h["version"] <= self.version, ("a packed/v2 reply to a v1 client", h)
                if h["client"] == self.id:
                    self.inbox.setdefault(h["req"], []).append((h, payload))

    def recv_for(self, req, timeout, partial=None):
        """The joined reply (RESP bytes) of request id req, or raises Refused,
        or None after timeout. Datagrams of other ids are skipped. partial
        (a dict) keeps the fragments received across calls, so a
        retransmission can ask for the first one missing."""
        deadline = time.monotonic() + timeout
        frags = partial if partial is not None else {}
        total = nfrag = None
        if frags:
            total, nfrag = frags["meta"]
        while True:
            m = self.next_message(req, deadline)
            if m is None:
                return None
            h, payload = m
            if h["type"] == REFUSE:
                raise Refused(h["frag"], h["term"], payload.decode(errors="replace"))
            assert h["type"] == REPLY, h
            assert h["off"] == h["frag"] * PAYLOAD_MAX, h
            assert h["frag"] < h["nfrag"], h
            if total is None:
                total, nfrag = h["total"], h["nfrag"]
                frags["meta"] = (total, nfrag)
            assert (h["total"], h["nfrag"]) == (total, nfrag), h
            frags[h["frag"]] = payload
            if len(frags) - 1 == nfrag:
                data = b"".join(frags[i] for i in range(nfrag))
                assert len(data) == total
                return data

    def new_req(self):
        r = self.next_req
        self.next_req += 1
        return r

    def finish(self, req):
        self.done.add(req)
        while self.acked in self.done:
            self.done.discard(self.acked)
            self.acked += 1

    def call_raw(self, *args, retries=20):
        """Send a new request, retransmitting until its reply: (RESP bytes, tries)."""
        req = self.new_req()
        partial = {}
        for attempt in range(retries):
            first = 0
            if partial:
                first = next(i for i in range(partial["meta"][1]) if i not in partial)
            self.send(req, *args, frag=first)
            data = self.recv_for(req, self.timeout, partial)
            if data is not None:
                self.finish(req)
                return data, attempt + 1
        raise TimeoutError("no reply to request %d (%r)" % (req, args[:2]))

    def call(self, *args, **kw):
        data, _ = self.call_raw(*args, **kw)
        v, end = parse_resp(data)
        assert end == len(data), (data, end)
        return v

    def pipeline(self, commands, retries=200):
        """Send every command (a list of argument lists) at once under new ids,
        packed into as few version 2 datagrams as fit, then retransmit the
        unanswered ones (packed again, same ids) after each timeout: the
        parsed replies, in order. Replies too large for one entry come in
        fragments, and are joined as call() joins them."""
        assert self.version == VERSION2
        reqs = [(self.new_req(), list(args)) for args in commands]
        replies, partial = {}, {}
        for _ in range(retries):
            todo = [(r, a) for r, a in reqs if r not in replies]
            if not todo:
                break
            batch = []
            for r, a in todo:
                p = partial.get(r)
                first = next(i for i in range(p["meta"][1]) if i not in p) if p else 0
                e = (r, a, 0xFFFF, first)
                if batch and pack_room(batch + [e]) > MTU:
                    self.send_pack(batch)
                    batch = []
                batch.append(e)
            self.send_pack(batch)
            deadline = time.monotonic() + self.timeout
            for r, _ in todo:
                if r in replies:
                    continue
                data = self.recv_for(r, max(0.0, deadline - time.monotonic()),
                                     partial.setdefault(r, {}))
                if data is not None:
                    replies[r] = data
        else:
            if any(r not in replies for r, _ in reqs):
                raise TimeoutError("no reply to some of %d pipelined requests" % len(reqs))
        out = []
        for r, _ in reqs:
            v, end = parse_resp(replies[r])
            assert end == len(replies[r])
            self.finish(r)
            out.append(v)
        return out
