"""Memory while a large value streams in (issue 13: "Memory stays bounded
while such a value streams in"; bigval.c, "DRAM"; networking.c, large
arguments).

Each case starts a fresh rowan-server and a fresh /usr/bin/redis-server,
sends the same request to both from a raw socket, slowly, in 1 MiB pieces
with a pause half-way, and samples the server's anonymous resident memory
(RssAnon in /proc/PID/status, every 2 ms) from before the request until
its reply. RssAnon, not VmHWM: Rowan's pool is a shared file mapping whose
pages (the value's log entries) are resident too but are the store, not a
copy; Redis has no such mapping. The bound asserted for Rowan, on the
growth over the idle server:

    SET 200 MB, MULTI/EXEC and MSET with a 100 MB value:  1.25 x value + 64 MiB
    (half-received: 1.25 x the half + 64 MiB)
    HSET of a 100 MB field, RPUSH of a 100 MB element:  2.25 x value + 64 MiB
    (the argument and the collection's copy, as Redis 7: the command's
    effects are built in front of the argument, not around a copy of it;
    db.h, db_obj_write_ops_tail)

and a client that disconnects half-way through a 200 MB bulk gives the
memory back (RssAnon within 64 MiB of the idle server's; not asserted on
a sanitizer build, whose allocator keeps freed memory). Redis's figures
are printed next to Rowan's (pytest -s shows them); they are not asserted.
The value written is then read back, and a 200 MB SET survives kill -9 and
restart. Also, differentially: client-query-buffer-limit counts the bulk
being received, not the large arguments already complete (Redis 7)."""
import os
import shutil
import socket
import threading
import time

import pytest

from conftest import Server

pytestmark = pytest.mark.rowan_only("memory of rowan-server measured against redis-server")

MB = 1 << 20
SLACK = 64 * MB


def rss_anon(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no RssAnon for %d" % pid)


class Peak:
    """The highest RssAnon of pid while it runs (sampled every 2 ms)."""

    def __init__(self, pid):
        self.pid = pid
        self.max = rss_anon(pid)
        self.on = True
        self.t = threading.Thread(target=self._loop, daemon=True)
        self.t.start()

    def _loop(self):
        while self.on:
            self.max = max(self.max, rss_anon(self.pid))
            time.sleep(0.002)

    def stop(self):
        self.on = False
        self.t.join()
        self.max = max(self.max, rss_anon(self.pid))
        return self.max


def bulk(b):
    return b"$%d\r\n%s\r\n" % (len(b), b)


def command(*args):
    return b"*%d\r\n" % len(args) + b"".join(bulk(a) for a in args)


def value(n):
    block = os.urandom(MB)
    return (block * (n // MB + 1))[:n]


def send_slowly(s, data, on_half=None):
    """data in 1 MiB pieces; on_half() at the middle, after a pause."""
    half = len(data) // 2
    for i in range(0, len(data), MB):
        if on_half and i <= half < i + MB:
            s.sendall(data[i:half])
            time.sleep(0.5)
            on_half()
            s.sendall(data[half:i + MB])
        else:
            s.sendall(data[i:i + MB])
        time.sleep(0.001)


def read_reply(s, want=b"+OK\r\n"):
    """Read as many bytes as the expected reply has (or until closed)."""
    buf = b""
    s.settimeout(120)
    while len(buf) < len(want):
        got = s.recv(65536)
        if not got:
            break
        buf += got
    return buf


def start(target, extra=None):
    if target == "redis" and not shutil.which("redis-server"):
        pytest.skip("redis-server not installed")
    srv = Server(target, extra=extra)
    srv.start()
    return srv


def growth(target, before, request, want, extra=None):
    """Run before (setup commands) and then send request slowly to a fresh
    server; returns (peak growth, growth at the half, reply, server)."""
    srv = start(target, dict({"pool-size": "1gb"}, **(extra or {})))
    pid = srv.proc.pid
    s = socket.create_connection(("127.0.0.1", srv.port))
    for cmd in before:
        s.sendall(cmd)
        read_reply(s)
    time.sleep(0.2)
    base = rss_anon(pid)
    peak = Peak(pid)
    at_half = []
    send_slowly(s, request, lambda: at_half.append(rss_anon(pid) - base))
    rep = read_reply(s, want)
    top = peak.stop() - base
    s.close()
    return top, at_half[0], rep, srv


CASES = {
    # name: (setup, request, its reply, factor of the bound)
    "set200": lambda v: ([], command(b"SET", b"k", v), b"+OK\r\n", 1.25),
    "multi100": lambda v: ([command(b"MULTI")], command(b"SET", b"k", v) + command(b"EXEC"),
                           b"+QUEUED\r\n*1\r\n+OK\r\n", 1.25),
    "mset100": lambda v: ([], command(b"MSET", b"k", v, b"k2", b"small"), b"+OK\r\n", 1.25),
    "hset100": lambda v: ([], command(b"HSET", b"h", b"f", v), b":1\r\n", 2.25),
    "rpush100": lambda v: ([], command(b"RPUSH", b"l", b"a", v), b":2\r\n", 2.25),
}
SIZES = {"set200": 200 * MB, "multi100": 100 * MB, "mset100": 100 * MB, "hset100": 100 * MB,
         "rpush100": 100 * MB}
READ = {"set200": (b"GET", b"k"), "multi100": (b"GET", b"k"), "mset100": (b"GET", b"k"),
        "hset100": (b"HGET", b"h", b"f"), "rpush100": (b"LINDEX", b"l", b"1")}


@pytest.mark.parametrize("case", sorted(CASES))
def test_peak_memory_of_a_large_write(case):
    n = SIZES[case]
    v = value(n)
    setup, request, want, factor = CASES[case](v)
    bound = factor * n + SLACK
    figures = {}
    for target in ("rowan", "redis"):
        top, half, rep, srv = growth(target, setup, request, want)
        try:
            assert rep == want, rep
            r = srv.client(socket_timeout=120)
            assert r.execute_command(*READ[case]) == v
        finally:
            srv.cleanup()
        figures[target] = (top, half)
    (top, half), (rtop, rhalf) = figures["rowan"], figures["redis"]
    print("\n%s (%d MB): peak growth rowan %.0f MB, redis %.0f MB; half-received rowan "
          "%.0f MB, redis %.0f MB; bound %.0f MB" % (case, n // MB, top / MB, rtop / MB,
                                                     half / MB, rhalf / MB, bound / MB))
    assert top <= bound, "rowan grew %.0f MB writing %d MB (bound %.0f MB)" % (
        top / MB, n // MB, bound / MB)
    assert half <= factor * n / 2 + SLACK, "rowan held %.0f MB half-way" % (half / MB)


def sanitized(binary):
    """A sanitizer build: its allocator keeps freed blocks in quarantine and
    their shadow resident, so RSS says nothing about what the server frees."""
    with open(binary, "rb") as f:
        return b"__asan_init" in f.read()


def test_disconnect_mid_bulk_gives_memory_back():
    n = 200 * MB
    srv = start("rowan", {"pool-size": "1gb"})
    try:
        pid = srv.proc.pid
        base = rss_anon(pid)
        s = socket.create_connection(("127.0.0.1", srv.port))
        s.sendall(b"*3\r\n" + bulk(b"SET") + bulk(b"k") + b"$%d\r\n" % n)
        chunk = os.urandom(MB)
        for _ in range(n // MB // 2):
            s.sendall(chunk)
        deadline = time.monotonic() + 30
        while rss_anon(pid) - base < n // 2 - SLACK and time.monotonic() < deadline:
            time.sleep(0.05)
        held = rss_anon(pid) - base
        assert held >= n // 2 - SLACK, "the half-received bulk is not resident (%d)" % held
        s.close()
        deadline = time.monotonic() + 10
        while rss_anon(pid) - base > SLACK and time.monotonic() < deadline:
            time.sleep(0.05)
        left = rss_anon(pid) - base
        print("\nhalf of a 200 MB bulk: %.0f MB held, %.0f MB after the client left" %
              (held / MB, left / MB))
        if not sanitized(srv.binary):
            assert left <= SLACK, "%.0f MB still held after the client left" % (left / MB)
        r = srv.client()
        assert r.exists("k") == 0
    finally:
        srv.cleanup()


def test_stored_as_its_argument_survives_kill9():
    n = 200 * MB
    v = value(n)
    srv = start("rowan", {"pool-size": "1gb"})
    try:
        s = socket.create_connection(("127.0.0.1", srv.port))
        send_slowly(s, command(b"SET", b"k", v))
        assert read_reply(s) == b"+OK\r\n"
        s.sendall(command(b"MSET", b"m", v[::-1], b"x", b"1"))
        assert read_reply(s) == b"+OK\r\n"
        s.close()
        srv.kill9()
        srv.restart()
        r = srv.client(socket_timeout=120)
        assert r.get("k") == v
        assert r.get("m") == v[::-1]
        assert r.get("x") == b"1"
    finally:
        srv.cleanup()


def test_elements_written_in_place_survive_kill9():
    """Collection elements logged and applied in place from their argument
    buffer (db_obj_write_ops_tail): large (chunked) and medium (one entry),
    the fallback (a field name too long for the room in front of the
    argument), several pairs, and inside MULTI; all read back the same
    after kill -9 and recovery."""
    big, mid = value(9 * MB), value(200 * 1024)
    longf = b"f" * 300
    srv = start("rowan", {"pool-size": "1gb"})
    try:
        s = socket.create_connection(("127.0.0.1", srv.port))
        reqs = [
            (command(b"HSET", b"h", b"f", big), b":1\r\n"),
            (command(b"HSET", b"h", b"g", b"small", b"m", mid), b":2\r\n"),
            (command(b"HSET", b"h", longf, mid[::-1]), b":1\r\n"),
            (command(b"HSETNX", b"h", b"n", big[::-1]), b":1\r\n"),
            (command(b"RPUSH", b"l", b"a", big), b":2\r\n"),
            (command(b"LPUSH", b"l", mid), b":3\r\n"),
            (command(b"MULTI"), b"+OK\r\n"),
            (command(b"RPUSH", b"l", mid[::-1]), b"+QUEUED\r\n"),
            (command(b"HSET", b"h2", b"f", big), b"+QUEUED\r\n"),
            (command(b"EXEC"), b"*2\r\n:4\r\n:1\r\n"),
        ]
        for req, want in reqs:
            send_slowly(s, req)
            assert read_reply(s, want) == want
        s.close()

        def check(r):
            assert r.hgetall("h") == {b"f": big, b"g": b"small", b"m": mid, longf: mid[::-1],
                                      b"n": big[::-1]}
            assert r.lrange("l", 0, -1) == [mid, b"a", big, mid[::-1]]
            assert r.hget("h2", "f") == big

        check(srv.client(socket_timeout=120))
        srv.kill9()
        srv.restart()
        check(srv.client(socket_timeout=120))
    finally:
        srv.cleanup()


def test_query_buffer_limit_counts_the_bulk_being_received():
    """client-query-buffer-limit 1mb: a 2 MB bulk closes the connection; an
    MSET of three 700 KB values does not (each is an argument of its own
    once complete), as in Redis 7."""
    out = {}
    for target in ("rowan", "redis"):
        srv = start(target, {"pool-size": "256mb"})
        try:
            srv.client().config_set("client-query-buffer-limit", "1mb")
            got = []
            for req in (command(b"SET", b"k", b"x" * (2 * MB)),
                        command(b"MSET", *[x for i in range(3)
                                           for x in (b"k%d" % i, b"y" * (700 << 10))]),
                        command(b"SET", b"k", b"z" * (900 << 10))):
                s = socket.create_connection(("127.0.0.1", srv.port))
                try:
                    for i in range(0, len(req), 64 * 1024):
                        s.sendall(req[i:i + 64 * 1024])
                        time.sleep(0.002)
                    got.append(read_reply(s))
                except OSError:
                    got.append(b"closed")
                finally:
                    s.close()
            out[target] = [g if g != b"" else b"closed" for g in got]
        finally:
            srv.cleanup()
    assert out["rowan"] == out["redis"] == [b"closed", b"+OK\r\n", b"+OK\r\n"], out


def test_held_command_keeps_its_large_argument(server_factory):
    """A command CLIENT PAUSE holds is run later from the query buffer;
    an argument received into a buffer of its own is not in it, and must
    come back with the command (resp.c, resp_parser_rewind)."""
    srv = server_factory()
    r = srv.client()
    v = value(3 * MB + 17)
    s = socket.create_connection(("127.0.0.1", srv.port))
    try:
        assert r.execute_command("CLIENT", "PAUSE", 30000, "WRITE") == b"OK"
        req = command(b"SET", b"held", v) + command(b"GET", b"held")
        s.sendall(req[:100])
        time.sleep(0.1)
        send_slowly(s, req[100:])
        s.settimeout(0.3)
        with pytest.raises(socket.timeout):
            s.recv(1)
        assert r.execute_command("CLIENT", "UNPAUSE") == b"OK"
        want = b"+OK\r\n$%d\r\n%s\r\n" % (len(v), v)
        assert read_reply(s, want) == want
        assert r.get("held") == v
    finally:
        s.close()


def test_transaction_reads_its_large_values(server_factory):
    """A batch holds a large value outside its buffer (db.c, LOG_F_HELD):
    every read inside the transaction sees the value itself, and a value
    moved from key to key inside it (RENAME, COPY) is stored whole."""
    srv = server_factory({"pool-size": "256mb"})
    r = srv.client(socket_timeout=120)
    v = value(5 * MB + 3)
    p = r.pipeline(transaction=True)
    p.set("k", v)
    p.get("k")
    p.strlen("k")
    p.getrange("k", 5 * MB - 2, -1)
    p.scan(0, count=100)
    p.randomkey()
    p.rename("k", "k2")
    p.copy("k2", "k3")
    p.append("k3", b"+")
    p.get("k2")
    got = p.execute()
    assert got[0] is True and got[1] == v and got[2] == len(v)
    assert got[3] == v[5 * MB - 2:]
    assert got[4][1] == [b"k"] and got[5] == b"k"
    assert got[6] is True and got[7] is True and got[8] == len(v) + 1 and got[9] == v
    assert r.get("k2") == v and r.get("k3") == v + b"+" and r.exists("k") == 0
    srv.kill9()
    srv.restart()
    r = srv.client(socket_timeout=120)
    assert r.get("k2") == v and r.get("k3") == v + b"+"
