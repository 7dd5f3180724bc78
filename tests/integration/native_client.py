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

call() sends a request and waits for its whole reply, retransmitting the
same request id after a timeout (as the protocol says a client does);
lower-level send()/recv_for() let tests duplicate, drop and reorder.
Replies come back as raw RESP bytes; parse_resp() turns them into Python
values (bytes, int, list, None, RespError)."""
import os
import socket
import struct
import time

MAGIC = 0x314E5752
VERSION = 1
REQUEST, REPLY, REFUSE = 1, 2, 3
R_STALE, R_MALFORMED, R_BUSY, R_LOADING = 1, 2, 3, 4
HDR = struct.Struct("<IBBHQQQQHHII")
HDR_LEN = HDR.size
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


def encode_request(client, req, args, term=0, acked=0, shard=0xFFFF, frag=0):
    args = [a if isinstance(a, bytes) else str(a).encode() for a in args]
    body = struct.pack("<H", len(args))
    for a in args:
        body += struct.pack("<I", len(a)) + a
    return HDR.pack(MAGIC, VERSION, REQUEST, shard, client, req, term, acked, frag, 0, 0, 0) + body


def decode(dg):
    """(fields dict, payload) of a datagram from the server."""
    f = HDR.unpack_from(dg)
    names = ("magic", "version", "type", "shard", "client", "req", "term", "acked",
             "frag", "nfrag", "total", "off")
    return dict(zip(names, f)), dg[HDR_LEN:]


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
    def __init__(self, port, host="127.0.0.1", client_id=None, timeout=0.5, term=0):
        self.addr = (host, port)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.id = client_id if client_id is not None else struct.unpack("<Q", os.urandom(8))[0] | 1
        self.next_req = 1
        self.acked = 1           # every id below this has its reply
        self.done = set()
        self.timeout = timeout
        self.term = term

    def close(self):
        self.sock.close()

    def send_raw(self, data):
        self.sock.sendto(data, self.addr)

    def send(self, req, *args, term=None, acked=None, frag=0):
        self.send_raw(encode_request(self.id, req, args, self.term if term is None else term,
                                     self.acked if acked is None else acked, frag=frag))

    def recv_dgram(self, timeout):
        self.sock.settimeout(timeout)
        try:
            data, _ = self.sock.recvfrom(65536)
        except socket.timeout:
            return None
        return data

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
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            dg = self.recv_dgram(left)
            if dg is None:
                return None
            h, payload = decode(dg)
            assert h["magic"] == MAGIC and h["version"] == VERSION, h
            if h["client"] != self.id or h["req"] != req:
                continue
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
