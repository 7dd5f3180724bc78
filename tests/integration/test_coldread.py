"""Cold reads (issue 14): a command whose keys' pool pages are not in memory
waits, unrun, while reader threads fault them in, then runs on its worker
(src/store/coldread.h, redis-compat/coldhold.c). The replies must be exactly what
they would have been, in order per connection.

Two ways through the path:
- DEBUG COLDREAD FORCE 1 sends every key's pool entry through the readers,
  resident or not, so every command of the tests below took the path;
- DEBUG COLDREAD DROP evicts the pool's clean pages (madvise + fadvise), so
  the next reads are really cold and mincore has to see it.
Both are checked against a real redis-server given the same commands, and
DEBUG COLDREAD STATS proves the readers ran."""
import random
import shutil
import socket
import threading
import time

import pytest

from conftest import RespClient, RespError, encode_command

pytestmark = [
    pytest.mark.skipif(shutil.which("redis-server") is None,
                       reason="needs redis-server as the reference"),
    pytest.mark.rowan_only("DEBUG COLDREAD and the reader threads are Rowan's"),
]


def stats(cl):
    r = cl.call("DEBUG", "COLDREAD", "STATS")
    d = dict(zip(r[0::2], r[1::2]))
    return d[b"requests"], d[b"pages"]


def pipeline(cl, cmds):
    """Send every command at once, then read every reply: in order."""
    cl.send(b"".join(encode_command(*c) for c in cmds))
    out = []
    for _ in cmds:
        try:
            out.append(cl.read_reply())
        except RespError as e:
            out.append(e)
    return out


def cold_burst(c, n, send):
    """n keys of about a page each, set through c, their pages dropped, then
    read back in one burst by send(cmds) (which returns the replies, in
    order), retried until DROP really evicted them (up to 5 times): the
    readers' requests and pages of that burst."""
    vals = {"p:%d" % i: (("%d:" % i) + "y" * 3000).encode() for i in range(n)}
    for k, v in vals.items():
        c.call("SET", k, v)
    keys = list(vals)
    random.Random(5).shuffle(keys)
    for attempt in range(5):
        time.sleep(0.5)   # pages written back are clean: DROP evicts them
        c.call("DEBUG", "COLDREAD", "DROP")
        r0, p0 = stats(c)
        got = send([("GET", k) for k in keys])
        assert got == [vals[k] for k in keys]
        r1, p1 = stats(c)
        if p1 - p0 >= 120:
            break
    assert p1 - p0 >= 120, "DROP left the pages resident: %d read" % (p1 - p0)
    return r1 - r0, p1 - p0


def load(cl, rnd):
    """The same data on both servers: strings of one to several pages (some
    written by MSET as one group entry), collections, an expiring key."""
    cmds = []
    for i in range(300):
        size = rnd.choice([1, 100, 1000, 4000, 5000, 12000, 70000])
        cmds.append(("SET", "s:%d" % i, ("%d:" % i) + "x" * size))
    cmds.append(("MSET",) + tuple(a for i in range(50) for a in ("m:%d" % i, "mv%d" % i * 30)))
    cmds.append(("SET", "n", "10"))
    cmds.append(("SET", "ttl", "v", "EX", "1000"))
    cmds.append(("HSET", "h") + tuple(a for i in range(20) for a in ("f%d" % i, "v%d" % i)))
    cmds.append(("RPUSH", "l") + tuple("e%d" % i for i in range(20)))
    cmds.append(("SADD", "set") + tuple("e%d" % i for i in range(20)))
    cmds.append(("ZADD", "z") + tuple(a for i in range(20) for a in (str(i), "m%d" % i)))
    for c in cmds:
        cl.call(*c)


def reads(rnd, n):
    """A pipeline of reads and writes over the loaded keys (and missing ones)."""
    keys = ["s:%d" % i for i in range(300)] + ["m:%d" % i for i in range(50)] + ["nokey"]
    out = []
    for _ in range(n):
        k = rnd.choice(keys)
        op = rnd.randrange(12)
        if op < 4:
            out.append(("GET", k))
        elif op == 4:
            out.append(("MGET",) + tuple(rnd.choice(keys) for _ in range(rnd.randint(2, 12))))
        elif op == 5:
            out.append(("STRLEN", k))
        elif op == 6:
            out.append(("GETRANGE", k, str(rnd.randint(0, 5000)), str(rnd.randint(5000, 80000))))
        elif op == 7:
            out.append(("EXISTS", k, rnd.choice(keys)))
        elif op == 8:
            out.append(rnd.choice([("HGETALL", "h"), ("LRANGE", "l", "0", "-1"),
                                   ("SMEMBERS", "set"), ("ZRANGE", "z", "0", "-1", "WITHSCORES"),
                                   ("TYPE", k), ("GET", "ttl"), ("INCR", "n")]))
        elif op == 9:   # a write then a read of the same key, in one pipeline
            v = "w%d" % rnd.randrange(10 ** 6)
            out.append(("SET", k, v))
            out.append(("GET", k))
        elif op == 10:
            out.append(("APPEND", k, "+"))
        else:
            out.append(("GETSET", k, "g%d" % rnd.randrange(100)))
    return out


def norm(replies, cmds):
    """SMEMBERS' order is the server's own: compare it as a set."""
    return [sorted(r) if c[0] == "SMEMBERS" and isinstance(r, list) else r
            for r, c in zip(replies, cmds)]


@pytest.fixture
def pair(server_factory, ref_srv):
    rowan = server_factory(extra={"pool-size": "256mb"})
    c = RespClient(rowan.port)
    ref = RespClient(ref_srv.port)
    assert ref.call("FLUSHALL") == "OK"
    return rowan, c, ref


def check_same(c, ref, rnd, rounds, n):
    for _ in range(rounds):
        cmds = reads(rnd, n)
        got, want = pipeline(c, cmds), pipeline(ref, cmds)
        for cmd, g, w in zip(cmds, norm(got, cmds), norm(want, cmds)):
            assert g == w, "%r: rowan %r, redis %r" % (cmd[:3], g, w)


def test_forced_path_matches_redis(pair):
    """Every command's keys read by the readers first: same replies as
    redis-server, in order, over pipelines mixing reads and writes."""
    rowan, c, ref = pair
    rnd = random.Random(14)
    load(c, rnd)
    load(ref, random.Random(14))
    r0, p0 = stats(c)
    assert c.call("DEBUG", "COLDREAD", "FORCE", "1") == "OK"
    check_same(c, ref, rnd, rounds=20, n=100)
    r1, p1 = stats(c)
    assert r1 - r0 > 1000 and p1 - p0 > r1 - r0, (r0, r1, p0, p1)


def test_forced_exec_and_multi(pair):
    """EXEC waits for its queued commands' keys; commands inside MULTI are
    queued as usual."""
    rowan, c, ref = pair
    load(c, random.Random(1))
    load(ref, random.Random(1))
    c.call("DEBUG", "COLDREAD", "FORCE", "1")
    cmds = [("MULTI",), ("GET", "s:1"), ("SET", "s:2", "new"), ("MGET", "s:2", "s:3", "m:4"),
            ("INCR", "n"), ("EXEC",), ("GET", "s:2"), ("MULTI",), ("GET", "s:9"), ("DISCARD",),
            ("GET", "s:9")]
    r0, _ = stats(c)
    assert pipeline(c, cmds) == pipeline(ref, cmds)
    assert stats(c)[0] > r0


def test_really_cold_reads_match_redis(pair):
    """With the pool's pages evicted, reads find them cold by mincore
    (no forcing): the readers fetch them, the replies are redis-server's,
    several connections at once."""
    rowan, c, ref = pair
    rnd = random.Random(7)
    load(c, rnd)
    load(ref, random.Random(7))
    keys = ["s:%d" % i for i in range(300)] + ["m:%d" % i for i in range(50)]
    want = {k: ref.call("GET", k) for k in keys}
    r0, _ = stats(c)
    for attempt in range(3):
        time.sleep(0.3)   # written-back pages are clean: DROP can evict them
        assert c.call("DEBUG", "COLDREAD", "DROP") == "OK"
        errors = []

        def reader(seed):
            cl = RespClient(rowan.port)
            rs = random.Random(seed)
            ks = keys[:]
            rs.shuffle(ks)
            cmds = [("GET", k) for k in ks] + [("MGET",) + tuple(ks[:40])]
            got = pipeline(cl, cmds)
            for k, g in zip(ks, got):
                if g != want[k]:
                    errors.append((k, g[:20] if g else g))
            if got[-1] != [want[k] for k in ks[:40]]:
                errors.append("MGET")
            cl.close()

        ts = [threading.Thread(target=reader, args=(s,)) for s in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert not errors, errors[:5]
        if stats(c)[0] > r0:
            break
    assert stats(c)[0] > r0, "no read found a cold page after DROP"


def test_client_gone_while_reading(pair):
    """A connection that closes with reads in flight: the server forgets it
    and goes on (the readers' completion finds no owner)."""
    rowan, c, ref = pair
    load(c, random.Random(3))
    c.call("DEBUG", "COLDREAD", "FORCE", "1")
    for i in range(50):
        s = socket.create_connection(("127.0.0.1", rowan.port))
        s.sendall(b"".join(encode_command("GET", "s:%d" % j) for j in range(i, i + 30)))
        s.close()
    assert c.call("PING") == "PONG"
    assert c.call("GET", "s:5").startswith(b"5:")
    assert rowan.alive()


def test_cold_hold_survives_restart_and_sees_durable_data(server_factory):
    """The path reads what is durable: after kill -9 and restart, cold reads
    (forced) of every acknowledged write return it."""
    srv = server_factory(extra={"pool-size": "128mb"})
    c = RespClient(srv.port)
    vals = {"k%d" % i: "v%d" % i * (i % 50 + 1) for i in range(500)}
    for k, v in vals.items():
        assert c.call("SET", k, v) == "OK"
    srv.kill9()
    srv.restart()
    c = RespClient(srv.port)
    c.call("DEBUG", "COLDREAD", "DROP")
    c.call("DEBUG", "COLDREAD", "FORCE", "1")
    got = pipeline(c, [("GET", k) for k in vals])
    assert got == [v.encode() for v in vals.values()]
    assert stats(c)[0] > 0


def test_pipelined_cold_gets_share_one_wait(pair):
    """A pipeline of cold GETs: the keys of the commands behind the one that
    waits are read along (up to 32), so the readers get few requests of
    many pages, not one request per GET; replies stay in order."""
    rowan, c, ref = pair

    def send(cmds):
        cl = RespClient(rowan.port)
        try:
            return pipeline(cl, cmds)
        finally:
            cl.close()
    reqs, pages = cold_burst(c, 320, send)
    assert reqs <= 40, "%d requests for %d pages" % (reqs, pages)


def test_cold_read_threads_zero_turns_it_off(server_factory):
    """cold-read-threads 0: no readers, cold keys fault in the worker."""
    srv = server_factory(extra={"cold-read-threads": "0"})
    c = RespClient(srv.port)
    assert c.call("CONFIG", "GET", "cold-read-threads") == [b"cold-read-threads", b"0"]
    c.call("SET", "k", "v")
    c.call("DEBUG", "COLDREAD", "FORCE", "1")
    assert pipeline(c, [("GET", "k"), ("MGET", "k", "x")]) == [b"v", [b"v", None]]
    assert stats(c) == (0, 0)


def test_resident_scan_forgotten_on_drop(pair):
    """A calm worker stops checking commands while a scan found the whole
    pool resident (coldread.c, known_resident). DROP must forget that scan:
    reads right after it (within the scan's 100 ms) still find the evicted
    pages cold and go through the readers."""
    rowan, c, ref = pair
    vals = {"p:%d" % i: (("%d:" % i) + "y" * 3000).encode() for i in range(200)}
    for k, v in vals.items():
        c.call("SET", k, v)
    keys = list(vals)
    pipeline(c, [("GET", "p:0")] * 3000)   # calm: > 1024 checks found nothing cold
    for attempt in range(5):
        time.sleep(0.5)   # written back, so DROP can evict; the last scan is stale
        pipeline(c, [("GET", "p:0")] * 50)   # a scan runs: everything resident
        assert c.call("DEBUG", "COLDREAD", "DROP") == "OK"
        r0, p0 = stats(c)
        got = pipeline(c, [("GET", k) for k in keys])
        assert got == [vals[k] for k in keys]
        r1, p1 = stats(c)
        if p1 - p0 >= 100:
            break
    assert p1 - p0 >= 100, "reads after DROP skipped the check: %d pages read" % (p1 - p0)
