#!/usr/bin/python3
"""resp_soak.py -- a long-running RESP soak against one rowan-server.

One server lives for the whole run. Several long-lived connections send
batches of random requests, each batch one byte stream cut at random
points and sent in pieces, sometimes with pauses in between (so a multibulk
sits half-received in the server's query buffer):

  * valid commands on the connection's own keys (SET GET APPEND INCR DEL
    MSET MGET RPUSH LRANGE HSET HGET ECHO PING), multibulk or inline;
  * unknown commands, with from 0 to 1,048,576 arguments (the most a
    multibulk may declare);
  * empty requests ("*0", "*-1", blank inline lines), which get no reply.

Every reply is checked against an exact model of the connection's keys (a
write refused with -OOM changed nothing), so the soak checks correctness
as well as liveness. "Abuser" connections do the same for a while and then
send one invalid request: an out-of-range multibulk length, a bad bulk
length, a missing '$', unbalanced quotes, a line too long. Each must get
Redis's exact protocol error after the replies to everything before it,
then the close; the abuser then reconnects. "Pipeliner" connections write
each batch whole before reading any reply, as redis-py's and hiredis's
pipelines do, and now and then add hundreds of 64 KB ECHOs (megabytes of
requests whose replies are as large): a server that stopped reading a
client while its replies waited would leave it blocked in write().

After every batch the connection must answer a PING, and a fresh
connection must answer one too, each within --deadline seconds: a liveness
bound, not a timing assertion. A failure prints what happened, saves the
batch's bytes to a file for replay, and exits 1.

  resp_soak.py [--seconds 20] [--conns 3] [--abusers 2] [--pipeliners 1] [--seed N]
               [--server PATH | --port P [--redis-limits]] [--deadline 10]
               [--workers 2] [--pool-size 256mb] [--keep] [--outdir DIR]

With --port the soak runs against a server that is already running (for
example redis-server, to check the expectations against Redis itself; add
--redis-limits there: Redis 7 allows INT_MAX arguments rather than
1,048,576, so the abusers then use only lengths beyond INT_MAX).
"""
import argparse
import os
import random
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MAX_MULTIBULK = 1024 * 1024
SAFE = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.:"


class SoakFailure(Exception):
    pass


class Closed(Exception):
    pass


# --------------------------------------------------------------------------
# RESP encoding and an incremental reply reader
# --------------------------------------------------------------------------
def multibulk(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, int):
            a = b"%d" % a
        elif isinstance(a, str):
            a = a.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class Err(str):
    """An error reply (its text without the '-')."""


class Simple(str):
    """A simple string reply."""


class ReplyReader:
    """Incremental: a reply is built (its bulks copied) only once all its
    bytes are in. Until then each feed costs a scan of the reply's headers
    from where the last scan stopped short, not a copy of what arrived: a
    30 MB MGET reply read in 64 KB pieces must not cost 30 MB per piece."""

    def __init__(self):
        self.buf = bytearray()
        self.pos = 0
        self.need = 0        # the buffer must reach this length first
        self.scan = None     # (offset, items left per open array) of an unfinished scan

    def feed(self, data):
        if self.pos > 1 << 20 and self.pos > len(self.buf) // 2:
            del self.buf[:self.pos]
            self.need -= self.pos
            if self.scan:
                self.scan = (self.scan[0] - self.pos, self.scan[1])
            self.pos = 0
        self.buf += data

    def _line(self, at):
        end = self.buf.find(b"\r\n", at)
        if end < 0:
            return None, at
        return bytes(self.buf[at:end]), end + 2

    def _complete(self):
        """True once the reply at self.pos is all in. Resumes the last scan:
        it stopped at a value's start (offset `at`) with `left` values still
        to skip in each open array."""
        at, left = self.scan or (self.pos, [1])
        while left:
            if left[-1] == 0:
                left.pop()
                continue
            if at >= len(self.buf):
                self.scan, self.need = (at, left), at + 1
                return False
            kind = self.buf[at:at + 1]
            line, nxt = self._line(at + 1)
            if line is None:
                self.scan, self.need = (at, left), len(self.buf) + 1
                return False
            left[-1] -= 1
            if kind == b"$" and int(line) >= 0:
                nxt += int(line) + 2
            elif kind == b"*" and int(line) > 0:
                left.append(int(line))
            if nxt > len(self.buf):
                left[-1] += 1
                if kind == b"*":
                    left.pop()
                self.scan, self.need = (at, left), nxt
                return False
            at = nxt
        self.scan = None
        return True

    def _value(self, at):
        """(value, next offset), or raise IndexError if incomplete."""
        if at >= len(self.buf):
            raise IndexError
        kind = self.buf[at:at + 1]
        line, nxt = self._line(at + 1)
        if line is None:
            raise IndexError
        if kind == b"+":
            return Simple(line.decode("latin-1")), nxt
        if kind == b"-":
            return Err(line.decode("latin-1")), nxt
        if kind == b":":
            return int(line), nxt
        if kind == b"$":
            n = int(line)
            if n < 0:
                return None, nxt
            if nxt + n + 2 > len(self.buf):
                raise IndexError
            return bytes(self.buf[nxt:nxt + n]), nxt + n + 2
        if kind == b"*":
            n = int(line)
            if n < 0:
                return None, nxt
            items = []
            for _ in range(n):
                v, nxt = self._value(nxt)
                items.append(v)
            return items, nxt
        raise SoakFailure("unparseable reply byte %r at %d: %r" %
                          (kind, at, bytes(self.buf[at:at + 80])))

    def pop(self):
        """The next whole reply, or raise IndexError."""
        if len(self.buf) < self.need or not self._complete():
            raise IndexError
        v, nxt = self._value(self.pos)
        self.pos = nxt
        return v


# --------------------------------------------------------------------------
# a connection with a deadline on everything
# --------------------------------------------------------------------------
class Conn:
    def __init__(self, port, deadline, bufsize=None):
        """bufsize: small kernel buffers on our side (set before connecting,
        so no autotuning makes them large)."""
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if bufsize:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, bufsize)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, bufsize)
        self.sock.settimeout(deadline)
        self.sock.connect(("127.0.0.1", port))
        self.sock.setblocking(False)
        self.reader = ReplyReader()
        self.unstalled = False     # exchange: a kernel stall was broken by reading
        self.deadline = deadline
        self.closed = False

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def _read_some(self, timeout):
        r, _, _ = select.select([self.sock], [], [], timeout)
        if not r:
            return False
        try:
            data = self.sock.recv(1 << 20)
        except (BlockingIOError, InterruptedError):
            return False
        except ConnectionResetError:
            data = b""
        if not data:
            self.closed = True
            raise Closed()
        self.reader.feed(data)
        return True

    def exchange(self, pieces, nreplies, on_reply, limit, read_while_sending=True):
        """Send pieces (bytes, pause in seconds after it) while reading
        replies (or, read_while_sending False, only once all are sent);
        return once all are sent and nreplies replies went to on_reply.
        Raises Closed if the server closes first, SoakFailure if no byte
        moves either way for `limit` seconds (a liveness bound: a 30 MB
        reply read under a loaded CPU may take longer than that in all,
        and a server that sends it is not stuck)."""
        end = time.monotonic() + limit
        got = 0
        i, off = 0, 0
        pause_until = 0.0
        while True:
            while got < nreplies:
                try:
                    v = self.reader.pop()
                except IndexError:
                    break
                on_reply(v)
                got += 1
            if got == nreplies and i == len(pieces):
                return
            if self.closed:
                raise Closed()
            now = time.monotonic()
            if now > end and not read_while_sending and i < len(pieces) and not self.unstalled:
                # A pipeliner that reads nothing until it has sent all, on
                # 64 KB buffers, can stall in the kernel, not the server:
                # its full receive buffer drops the server's segments and
                # the ACKs they carry, so its own unacked data waits in
                # exponential retransmission backoff (ss: both sockets at
                # backoff 4+, the server's receive queue empty, its window
                # open). redis-server stalls on the same seed. Reading
                # ends it; a server that stopped reading would still fail
                # below (test_limits' pipelining test checks reading
                # without this).
                self.unstalled = True
                read_while_sending = True
                end = now + limit
                continue
            if now > end:
                raise SoakFailure("no progress within %.0f s: %d of %d replies, %d of %d "
                                  "pieces sent%s" % (limit, got, nreplies, i, len(pieces),
                                  "" if read_while_sending or i == len(pieces) else
                                  " (no reply is read before the last piece is sent: the "
                                  "server stopped reading)"))
            want_write = i < len(pieces) and now >= pause_until
            want_read = read_while_sending or i == len(pieces)
            wait = min(0.05, max(0.0, pause_until - now)) if i < len(pieces) else 0.2
            r, w, _ = select.select([self.sock] if want_read else [],
                                    [self.sock] if want_write else [], [], wait)
            if r:
                try:
                    if self._read_some(0):
                        end = time.monotonic() + limit
                except Closed:
                    pass        # what is buffered still counts; raised above next round
            if w and i < len(pieces) and not self.closed:
                data, pause = pieces[i]
                try:
                    n = self.sock.send(data[off:off + (1 << 18)])
                except (BlockingIOError, InterruptedError):
                    n = 0
                except (BrokenPipeError, ConnectionResetError):
                    self.closed = True
                    continue
                off += n
                if n:
                    end = time.monotonic() + limit
                if off == len(data):
                    i, off = i + 1, 0
                    if pause:
                        pause_until = time.monotonic() + pause
                        end = pause_until + limit

    def wait_closed(self, limit):
        end = time.monotonic() + limit
        while not self.closed and time.monotonic() < end:
            try:
                self._read_some(0.2)
            except Closed:
                return
        if self.closed:
            return
        raise SoakFailure("the connection was not closed within %.0f s after a protocol "
                          "error" % limit)


def ping_fresh(port, deadline):
    """A fresh connection must answer PING within deadline seconds."""
    c = Conn(port, deadline)
    try:
        seen = []
        c.exchange([(b"*1\r\n$4\r\nPING\r\n", 0)], 1, seen.append, deadline)
        if seen != ["PONG"]:
            raise SoakFailure("fresh connection: PING answered %r" % seen)
    finally:
        c.close()


# --------------------------------------------------------------------------
# request generation, with an exact model of each connection's keys
# --------------------------------------------------------------------------
def unknown_error(name, args):
    """Redis's text: "unknown command '<name>', with args beginning with:
    '<a1>' '<a2>' ... " (arguments until 128 bytes of them)."""
    shown = ""
    for a in args:
        if len(shown) >= 128:
            break
        shown += "'%s' " % a[:128 - len(shown)].decode()
    return "ERR unknown command '%s', with args beginning with: %s" % (name.decode()[:128], shown)


def is_oom(v):
    return isinstance(v, Err) and v.startswith("OOM ")


class Model:
    """What the connection's keys hold; each check runs when its reply
    arrives, in order, so it sees the effects of everything before it."""

    def __init__(self, prefix):
        self.prefix = prefix
        self.strings = {}
        self.counter = 0
        self.lst = []
        self.hash = {}

    def key(self, rng):
        return b"%s:k%d" % (self.prefix, rng.randrange(16))


def expect_eq(want):
    def check(v):
        if v != want:
            raise SoakFailure("expected %s, got %s" % (short(want), short(v)))
    return check


def short(v):
    r = repr(v)
    return r if len(r) < 300 else r[:300] + "...(%d chars)" % len(r)


def random_value(rng):
    r = rng.random()
    if r < 0.6:
        n = rng.randrange(0, 64)
    elif r < 0.9:
        n = rng.randrange(64, 8192)
    else:
        n = rng.randrange(8192, 300 * 1024)
    # binary: CR, LF, NUL and '$' included, so payloads look like protocol
    head = bytes(rng.choice(b"\r\n\x00$*:+-ab") for _ in range(min(n, 32)))
    return head + os.urandom(n - len(head)) if n > 32 else head[:n]


def safe_token(rng, lo=1, hi=10):
    return bytes(rng.choice(SAFE) for _ in range(rng.randrange(lo, hi + 1)))


def gen_op(rng, m):
    """One request: (bytes, number of replies, [checks])."""
    r = rng.random()
    if r < 0.12:                                    # SET
        k, v = m.key(rng), random_value(rng)

        def check(rep, k=k, v=v):
            if is_oom(rep):
                return
            expect_eq("OK")(rep)
            m.strings[k] = v
        return multibulk(b"SET", k, v), [check]
    if r < 0.22:                                    # GET
        k = m.key(rng)
        return multibulk(b"GET", k), [lambda rep, k=k: expect_eq(m.strings.get(k))(rep)]
    if r < 0.27:                                    # APPEND
        k, v = m.key(rng), random_value(rng)[:2000]

        def check(rep, k=k, v=v):
            if is_oom(rep):
                return
            m.strings[k] = m.strings.get(k, b"") + v
            expect_eq(len(m.strings[k]))(rep)
        return multibulk(b"APPEND", k, v), [check]
    if r < 0.32:                                    # INCR
        def check(rep):
            if is_oom(rep):
                return
            m.counter += 1
            expect_eq(m.counter)(rep)
        return multibulk(b"INCR", m.prefix + b":ctr"), [check]
    if r < 0.36:                                    # DEL
        ks = list({m.key(rng) for _ in range(rng.randrange(1, 5))})

        def check(rep, ks=ks):
            if is_oom(rep):
                return
            expect_eq(sum(1 for k in ks if k in m.strings))(rep)
            for k in ks:
                m.strings.pop(k, None)
        return multibulk(b"DEL", *ks), [check]
    if r < 0.40:                                    # MSET, a large multibulk
        n = rng.choice([1, 2, 10, 200, 3000])
        pairs = [(m.key(rng), random_value(rng)[:200]) for _ in range(n)]

        def check(rep, pairs=pairs):
            if is_oom(rep):
                return
            expect_eq("OK")(rep)
            for k, v in pairs:
                m.strings[k] = v
        return multibulk(b"MSET", *[x for p in pairs for x in p]), [check]
    if r < 0.44:                                    # MGET
        ks = [m.key(rng) for _ in range(rng.choice([1, 5, 100, 2000]))]
        return multibulk(b"MGET", *ks), [lambda rep, ks=ks: expect_eq(
            [m.strings.get(k) for k in ks])(rep)]
    if r < 0.48:                                    # RPUSH, LRANGE
        vals = [safe_token(rng, 0, 20) for _ in range(rng.choice([1, 3, 500]))]
        lk = m.prefix + b":list"

        def push(rep, vals=vals):
            if is_oom(rep):
                return
            m.lst.extend(vals)
            expect_eq(len(m.lst))(rep)
        reqs = multibulk(b"RPUSH", lk, *vals) + multibulk(b"LRANGE", lk, 0, -1)
        checks = [push, lambda rep: expect_eq(m.lst)(rep)]
        if len(m.lst) > 3000:
            def dropped(rep):
                if is_oom(rep):
                    return
                expect_eq(1)(rep)
                m.lst = []
            reqs += multibulk(b"DEL", lk)
            checks.append(dropped)
        return reqs, checks
    if r < 0.52:                                    # HSET, HGET
        f, v = safe_token(rng), random_value(rng)[:500]
        hk = m.prefix + b":hash"

        def hset(rep, f=f, v=v):
            if is_oom(rep):
                return
            expect_eq(0 if f in m.hash else 1)(rep)
            m.hash[f] = v
        return (multibulk(b"HSET", hk, f, v) + multibulk(b"HGET", hk, f),
                [hset, lambda rep, f=f: expect_eq(m.hash.get(f))(rep)])
    if r < 0.56:                                    # ECHO of binary bytes
        v = random_value(rng)
        return multibulk(b"ECHO", v), [expect_eq(v)]
    if r < 0.60:                                    # PING
        return multibulk(b"PING"), [expect_eq("PONG")]
    if r < 0.80:                                    # unknown command
        name = b"zz" + safe_token(rng, 3, 8)
        x = rng.random()
        if x < 0.6:
            n = rng.randrange(0, 6)
        elif x < 0.9:
            n = rng.randrange(6, 5000)
        elif x < 0.99:
            n = rng.randrange(5000, 200000)
        else:
            n = rng.choice([MAX_MULTIBULK - 1, 500000])
        arg = safe_token(rng, 0, 3)
        first = [safe_token(rng, 0, 12) for _ in range(min(n, 50))]
        rest = max(0, n - 50)
        if rng.random() < 0.3 and n < 3000:          # the inline form
            args = [a for a in first + [arg] * rest if a] or [b"x"]
            req = name + b" " + b" ".join(args) + rng.choice([b"\r\n", b"\n"])
            return req, [expect_eq(unknown_error(name, args))]
        req = (b"*%d\r\n" % (1 + n) + multibulk(name, *first)[len(b"*%d\r\n" % (1 + len(first))):]
               + b"$%d\r\n%s\r\n" % (len(arg), arg) * rest)
        return req, [expect_eq(unknown_error(name, first + [arg] * min(rest, 64)))]
    if r < 0.88:                                    # inline valid commands
        k, v = m.key(rng), safe_token(rng, 1, 30)
        kind = rng.randrange(4)
        if kind == 0:
            return b"PING\r\n", [expect_eq("PONG")]
        if kind == 1:
            return b"ECHO %s\n" % v, [expect_eq(v)]
        if kind == 2:
            def check(rep, k=k, v=v):
                if is_oom(rep):
                    return
                expect_eq("OK")(rep)
                m.strings[k] = v + b" x"
            return b'SET %s "%s\\x20x"\r\n' % (k, v), [check]
        return b"GET %s\r\n" % k, [lambda rep, k=k: expect_eq(m.strings.get(k))(rep)]
    # empty requests: no reply at all
    return rng.choice([b"*0\r\n", b"*-1\r\n", b"*-7\r\n", b"\r\n", b"\n", b"   \r\n"]), []


# The invalid requests an abuser ends with, and Redis's exact answers.
def gen_abuse(rng, redis_limits):
    lengths = [b"3000000000", b"9223372036854775807", b"99999999999999999999", b"1x"]
    if not redis_limits:
        lengths += [b"%d" % (MAX_MULTIBULK + 1), b"20000000"]
    kind = rng.randrange(7)
    if kind <= 1:
        return b"*%s\r\n" % rng.choice(lengths), "ERR Protocol error: invalid multibulk length"
    if kind == 2:
        bad = rng.choice([b"-1", b"-5", b"536870913", b"abc", b"99999999999999999999"])
        return (b"*2\r\n$4\r\nECHO\r\n$%s\r\n" % bad, "ERR Protocol error: invalid bulk length")
    if kind == 3:
        c = rng.choice(b":+x#")
        return (b"*2\r\n$4\r\nECHO\r\n%cfoo\r\n" % c,
                "ERR Protocol error: expected '$', got '%c'" % c)
    if kind == 4:
        return b'ECHO "abc\r\n', "ERR Protocol error: unbalanced quotes in request"
    if kind == 5:
        return b"x" * (64 * 1024 + 10), "ERR Protocol error: too big inline request"
    return b"*" + b"1" * (64 * 1024 + 10), "ERR Protocol error: too big mbulk count string"


def cut(data, rng, pauses):
    """Split data into pieces at random points, some followed by a pause."""
    pieces = []
    at = 0
    while at < len(data):
        r = rng.random()
        n = rng.randrange(1, 8) if r < 0.2 else rng.randrange(1, 70000)
        pause = rng.choice([0.001, 0.005, 0.02]) if pauses and rng.random() < 0.1 else 0
        pieces.append((data[at:at + n], pause))
        at += n
    return pieces


# --------------------------------------------------------------------------
# the workers
# --------------------------------------------------------------------------
class Soak:
    def __init__(self, args, port, server_pid=None):
        self.args = args
        self.port = port
        self.server_pid = server_pid
        self.stop_at = time.monotonic() + args.seconds
        self.failure = None
        self.lock = threading.Lock()
        self.stats = {"batches": 0, "requests": 0, "bytes": 0, "abuses": 0, "fresh_pings": 0}

    def add(self, k, n=1):
        with self.lock:
            self.stats[k] += n

    def fail(self, what, batch=None):
        with self.lock:
            if self.failure:
                return
            self.failure = what
        if batch is not None:
            path = os.path.join(self.args.outdir, "resp-soak-failed-batch.bin")
            with open(path, "wb") as f:
                f.write(batch)
            what += "\n  the batch's bytes: %s" % path
        what += "\n" + self.diagnose()
        sys.stderr.write("resp_soak: FAILED: %s\n" % what)

    def diagnose(self):
        """What the server looks like now: CLIENT LIST and INFO over a
        fresh connection, and every thread's stack (gdb) if we started it."""
        out = []
        try:
            c = Conn(self.port, 5)
            got = []
            c.exchange([(multibulk(b"CLIENT", b"LIST") + multibulk(b"INFO", b"all"), 0)], 2,
                       got.append, 5)
            c.close()
            out.append("  CLIENT LIST:\n    " + got[0].decode("latin-1").strip().replace("\n", "\n    "))
            info = got[1].decode("latin-1")
            keep = ("connected_clients", "pool_segments_free", "clean_state", "oom_refused",
                    "held_replies", "durable_version_lag", "used_memory:", "total_commands")
            out.append("  INFO: " + ", ".join(l for l in info.split("\r\n") if l.startswith(keep)))
        except Exception as e:
            out.append("  no CLIENT LIST / INFO: %r" % e)
        if self.server_pid and shutil.which("gdb"):
            path = os.path.join(self.args.outdir, "resp-soak-stacks.txt")
            try:
                r = subprocess.run(["gdb", "-p", str(self.server_pid), "-batch", "-ex",
                                    "thread apply all bt"], capture_output=True, text=True,
                                   timeout=60)
                with open(path, "w") as f:
                    f.write(r.stdout + r.stderr)
                out.append("  server thread stacks: %s" % path)
            except (OSError, subprocess.SubprocessError) as e:
                out.append("  no stacks: %r" % e)
        return "\n".join(out)

    def running(self):
        return self.failure is None and time.monotonic() < self.stop_at

    def batch(self, conn, rng, m, abuse, pipeliner, big):
        """One batch; on failure the SoakFailure carries the batch's bytes
        and which request the first missing reply belongs to."""
        n = rng.randrange(5, 60)
        reqs, checks, owner = [], [], []
        for _ in range(n):
            req, cks = gen_op(rng, m)
            reqs.append(req)
            checks.extend(cks)
            owner.extend([len(reqs) - 1] * len(cks))
        if big:                                       # megabytes each way
            v = os.urandom(64 * 1024)
            for _ in range(rng.randrange(100, 400)):
                reqs.append(multibulk(b"ECHO", v))
                checks.append(expect_eq(v))
                owner.append(len(reqs) - 1)
        reqs.append(multibulk(b"PING"))               # the liveness probe
        checks.append(expect_eq("PONG"))
        owner.append(len(reqs) - 1)
        err = None
        if abuse:
            bad, err = gen_abuse(rng, self.args.redis_limits)
            reqs.append(bad)
        data = b"".join(reqs)
        done = [0]

        def on_reply(v):
            checks[done[0]](v)
            done[0] += 1
        limit = self.args.deadline + len(data) / 5e6   # transfer time on top of the bound
        try:
            try:
                conn.exchange(cut(data, rng, True), len(checks), on_reply, limit,
                              read_while_sending=not pipeliner)
            except Closed:
                raise SoakFailure("the server closed the connection with %d replies missing"
                                  % (len(checks) - done[0]))
            if err is not None:
                seen = []
                try:
                    conn.exchange([], 1, seen.append, self.args.deadline)
                except Closed:
                    pass
                if seen != [err]:
                    raise SoakFailure("invalid request answered %r, expected %r" %
                                      (seen, err))
                conn.wait_closed(self.args.deadline)
                self.add("abuses")
        except SoakFailure as e:
            e.batch = data
            if done[0] < len(owner):
                i = owner[done[0]]
                e.detail = "request %d of %d (reply %d of %d): %s" % (
                    i + 1, len(reqs), done[0] + 1, len(checks), short(reqs[i]))
            else:       # every checked reply came: the invalid request's error did not
                e.detail = "the invalid request ending the batch (after all %d replies): %s" % (
                    len(checks), short(reqs[-1]))
            raise
        self.add("batches")
        self.add("requests", len(reqs))
        self.add("bytes", len(data))

    def conn_loop(self, cid, kind):
        abuser, pipeliner = kind == "abuser", kind == "pipeliner"
        rng = random.Random(self.args.seed * 1000 + cid)
        m = Model(b"soak%d" % cid)
        gen = nbatch = 0
        conn = None
        try:
            while self.running():
                if conn is None:
                    conn = Conn(self.port, self.args.deadline)
                    gen += 1
                abuse = abuser and rng.random() < 0.15
                big = pipeliner and rng.random() < 0.15
                if big:
                    # A fresh connection with small buffers, so the big
                    # pipeline cannot fit in what the kernels buffer (a
                    # connection's buffers grow with use).
                    conn.close()
                    conn = Conn(self.port, self.args.deadline, bufsize=64 * 1024)
                    gen += 1
                nbatch += 1
                try:
                    self.batch(conn, rng, m, abuse, pipeliner, big)
                except SoakFailure as e:
                    self.fail("connection %d (generation %d, batch %d, seed %d): %s\n  at %s" %
                              (cid, gen, nbatch, self.args.seed, e, getattr(e, "detail", "?")),
                              getattr(e, "batch", None))
                    return
                if abuse:
                    conn.close()
                    conn = None
        except Exception as e:  # a driver bug or a refused connect: report it
            self.fail("connection %d: %r" % (cid, e))
        finally:
            if conn is not None:
                conn.close()

    def pinger(self, server):
        while self.running():
            try:
                ping_fresh(self.port, self.args.deadline)
                self.add("fresh_pings")
            except (SoakFailure, OSError) as e:
                self.fail("a fresh connection got no PONG within %.0f s: %s"
                          % (self.args.deadline, e))
                return
            if server is not None and server.poll() is not None:
                self.fail("rowan-server exited (status %s)" % server.returncode)
                return
            time.sleep(0.5)


def start_server(args, workdir):
    port = args.port
    binary = args.server or os.environ.get("ROWAN_SERVER") or os.path.join(REPO, "src", "rowan-server")
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    log = open(os.path.join(workdir, "stdout.log"), "wb")
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", workdir,
                             "--pool-size", args.pool_size, "--workers", str(args.workers),
                             "--logfile", os.path.join(workdir, "server.log")],
                            stdout=log, stderr=subprocess.STDOUT)
    end = time.monotonic() + 15
    while time.monotonic() < end:
        try:
            ping_fresh(port, 2)
            return proc, port
        except (OSError, SoakFailure):
            if proc.poll() is not None:
                break
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("resp_soak: rowan-server did not start (see %s)" % workdir)


def anon_kb(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return -1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--conns", type=int, default=3, help="long-lived connections")
    ap.add_argument("--pipeliners", type=int, default=1,
                    help="connections that write each batch before reading its replies")
    ap.add_argument("--abusers", type=int, default=2,
                    help="connections that end now and then with an invalid request")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--server", default=None, help="rowan-server binary (default $ROWAN_SERVER)")
    ap.add_argument("--port", type=int, default=None, help="use a running server instead")
    ap.add_argument("--deadline", type=float, default=10.0,
                    help="liveness bound in seconds for every answer")
    ap.add_argument("--redis-limits", action="store_true",
                    help="the server allows INT_MAX arguments (redis-server 7), not 1024*1024")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--pool-size", default="256mb")
    ap.add_argument("--keep", action="store_true", help="keep the server's directory")
    ap.add_argument("--outdir", default=".", help="where a failing batch is saved")
    args = ap.parse_args()
    if args.seed is None:
        args.seed = int(os.environ.get("SOAK_SEED", random.randrange(1 << 30)))
    print("resp_soak: seed %d, %d s, %d connections + %d abusers + %d pipeliners" %
          (args.seed, args.seconds, args.conns, args.abusers, args.pipeliners), flush=True)

    workdir = None
    server = None
    if args.port is not None:
        port = args.port
    else:
        workdir = tempfile.mkdtemp(prefix="rowan-soak-",
                                   dir=os.environ.get("ROWAN_TEST_TMPDIR"))
        server, port = start_server(args, workdir)
    soak = Soak(args, port, server.pid if server else None)
    kinds = (["normal"] * args.conns + ["abuser"] * args.abusers +
             ["pipeliner"] * args.pipeliners)
    threads = [threading.Thread(target=soak.conn_loop, args=(i, kind), daemon=True)
               for i, kind in enumerate(kinds)]
    threads.append(threading.Thread(target=soak.pinger, args=(server,), daemon=True))
    for t in threads:
        t.start()
    last = time.monotonic()
    while any(t.is_alive() for t in threads):
        time.sleep(0.2)
        if soak.failure:
            break
        if time.monotonic() - last >= 30:
            last = time.monotonic()
            print("resp_soak: %s, anon rss %d MB" % (soak.stats, anon_kb(server.pid) // 1024
                                                if server else -1), flush=True)
    # a driver thread stuck past the end would be a hang the deadline missed
    for t in threads:
        t.join(args.deadline * 3)
        if t.is_alive() and not soak.failure:
            soak.fail("a connection thread did not finish")
    rc = 0
    if soak.failure:
        rc = 1
        if workdir:
            sys.stderr.write("resp_soak: server dir %s (kept)\n" % workdir)
            args.keep = True
    print("resp_soak: %s %s, anon rss %d MB" % ("FAILED" if rc else "ok", soak.stats,
                                           anon_kb(server.pid) // 1024 if server else -1),
          flush=True)
    if server is not None:
        server.terminate()
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        if server.returncode not in (0, None) and rc == 0:
            sys.stderr.write("resp_soak: rowan-server exited with %s\n" % server.returncode)
            rc = 1
    if workdir and not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
