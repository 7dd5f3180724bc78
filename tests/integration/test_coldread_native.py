"""Cold reads on the native edge (issue 14 x issue 15): a native request
whose keys' pool pages are not in memory waits unrun in its session's
command queue while the reader threads fault them in, exactly as a RESP
command waits in its query buffer (redis-compat/coldhold.c,
session_cold_holds). The worker never takes the fault itself.

DEBUG COLDREAD STATS counts the readers' requests: a native GET of a cold
key must add to it (before this path existed, the native edge ran the
command at once and faulted in the worker, and the count stayed put), and
the value returned must be the one written. Covered: forced (every key
through the readers), really cold (pages evicted by DEBUG COLDREAD DROP),
a burst of pipelined native GETs (replies by request id, each right; the
queued requests' keys are read along, so far fewer reader requests than
GETs), MULTI/EXEC, and a client forgotten while its read is in flight."""
import random
import time

import pytest

from conftest import RespClient, free_port
from native_client import NativeClient, parse_resp, decode, REPLY, PAYLOAD_MAX
from test_coldread import cold_burst, stats

pytestmark = pytest.mark.rowan_only("cold reads and the native edge are Rowan's")


@pytest.fixture
def srv(server_factory):
    port = free_port()
    s = server_factory(extra={"pool-size": "256mb", "native-port": port})
    s.native_port = port
    return s


def load(cl, n=200, prefix="c:"):
    rnd = random.Random(15)
    vals = {}
    for i in range(n):
        v = ("%d:" % i) + "x" * rnd.choice([10, 500, 3000, 5000, 20000])
        vals["%s%d" % (prefix, i)] = v.encode()
    for k, v in vals.items():
        assert cl.call("SET", k, v) == "OK"
    return vals


def burst(nc, cmds, timeout=10.0):
    """Send every request at once, then collect the replies by request id
    (fragments joined); retransmit what is missing, as a client would."""
    reqs = [nc.new_req() for _ in cmds]
    for req, cmd in zip(reqs, cmds):
        nc.send(req, *cmd)
    frags = {req: {} for req in reqs}
    got = {}
    deadline = time.monotonic() + timeout
    last_send = time.monotonic()
    while len(got) < len(reqs) and time.monotonic() < deadline:
        dg = nc.recv_dgram(0.2)
        if dg is None:
            if time.monotonic() - last_send > 0.5:   # lost: the same ids again
                for req, cmd in zip(reqs, cmds):
                    if req not in got:
                        nc.send(req, *cmd)
                last_send = time.monotonic()
            continue
        h, payload = decode(dg)
        if h["type"] != REPLY or h["req"] not in frags or h["req"] in got:
            continue
        f = frags[h["req"]]
        f[h["frag"]] = payload
        if len(f) == h["nfrag"]:
            data = b"".join(f[i] for i in range(h["nfrag"]))
            assert len(data) == h["total"]
            v, end = parse_resp(data)
            assert end == len(data)
            got[h["req"]] = v
    assert len(got) == len(reqs), "%d of %d replies" % (len(got), len(reqs))
    for req in reqs:
        nc.finish(req)
    return [got[req] for req in reqs]


def test_forced_native_gets_take_the_hold(srv):
    c = RespClient(srv.port)
    vals = load(c)
    nc = NativeClient(srv.native_port)
    assert c.call("DEBUG", "COLDREAD", "FORCE", "1") == "OK"
    r0, p0 = stats(c)
    for k, v in vals.items():
        assert nc.call("GET", k) == v, k
    r1, p1 = stats(c)
    # one reader request per GET (each waited alone), each page read
    assert r1 - r0 >= len(vals), (r0, r1)
    assert p1 - p0 >= r1 - r0, (p0, p1)
    # missing keys and writes behind a hold: right replies too
    assert nc.call("GET", "c:none") is None
    assert nc.call("APPEND", "c:1", "!") == len(vals["c:1"]) + 1
    assert nc.call("GET", "c:1") == vals["c:1"] + b"!"
    nc.close()


def test_really_cold_native_gets(srv):
    """Pages evicted (no forcing): mincore finds them cold, the readers
    bring them in, the native GETs return the values written."""
    c = RespClient(srv.port)
    vals = load(c, n=300, prefix="rc:")
    nc = NativeClient(srv.native_port)
    r0, _ = stats(c)
    for attempt in range(4):
        time.sleep(0.5)        # written-back pages are clean: DROP can evict them
        assert c.call("DEBUG", "COLDREAD", "DROP") == "OK"
        for k, v in vals.items():
            assert nc.call("GET", k) == v, k
        if stats(c)[0] > r0:
            break
    assert stats(c)[0] > r0, "no native GET found a cold page after DROP"
    nc.close()


def test_native_burst_in_order(srv):
    """Pipelined native GETs, each held (forced): every reply is its own
    key's value; writes and reads of the same keys keep their order."""
    c = RespClient(srv.port)
    vals = load(c, n=120, prefix="b:")
    keys = list(vals)
    random.Random(3).shuffle(keys)
    c.call("DEBUG", "COLDREAD", "FORCE", "1")
    nc = NativeClient(srv.native_port)
    r0, _ = stats(c)
    got = burst(nc, [("GET", k) for k in keys])
    assert got == [vals[k] for k in keys]
    assert stats(c)[0] - r0 >= len(keys)
    # writes and reads of the same keys in one burst keep their order
    cmds = []
    for i, k in enumerate(keys[:30]):
        cmds += [("SET", k, "new%d" % i), ("GET", k), ("STRLEN", k)]
    got = burst(nc, cmds)
    want = []
    for i in range(30):
        want += [b"OK", b"new%d" % i, len(b"new%d" % i)]
    assert got == want
    nc.close()


def test_native_burst_reads_queued_keys_along(srv):
    """Really cold pages, a burst of native GETs: the requests queued behind
    the one that waits have their keys read with the next wait (up to 32),
    so the readers get far fewer requests than there are GETs."""
    c = RespClient(srv.port)

    def send(cmds):
        nc = NativeClient(srv.native_port)
        try:
            return burst(nc, cmds)
        finally:
            nc.close()
    reqs, pages = cold_burst(c, 240, send)     # 240 keys: under the 256-id window
    assert reqs <= 80, "%d requests for %d pages" % (reqs, pages)


def test_native_multi_exec_waits_for_queued_keys(srv):
    c = RespClient(srv.port)
    vals = load(c, n=20, prefix="m:")
    c.call("DEBUG", "COLDREAD", "FORCE", "1")
    nc = NativeClient(srv.native_port)
    r0, _ = stats(c)
    assert nc.call("MULTI") == b"OK"
    assert nc.call("GET", "m:1") == b"QUEUED"
    assert nc.call("SET", "m:2", "two") == b"QUEUED"
    assert nc.call("MGET", "m:2", "m:3") == b"QUEUED"
    assert nc.call("EXEC") == [vals["m:1"], b"OK", [b"two", vals["m:3"]]]
    assert stats(c)[0] > r0
    nc.close()


def test_native_client_forgotten_while_reading(server_factory):
    """A native client whose session ends (idle timeout) with requests held
    for cold reads: the server forgets it, the readers' completion finds no
    owner, and the server goes on serving."""
    port = free_port()
    srv = server_factory(extra={"pool-size": "128mb", "native-port": port,
                                "native-client-timeout": 1})
    c = RespClient(srv.port)
    vals = load(c, n=50, prefix="g:")
    c.call("DEBUG", "COLDREAD", "FORCE", "1")
    for i in range(20):
        nc = NativeClient(port)
        for j in range(10):
            nc.send(nc.new_req(), "GET", "g:%d" % ((i + j) % 50))
        nc.close()
    time.sleep(2.5)
    nc = NativeClient(port)
    assert nc.call("GET", "g:7") == vals["g:7"]
    assert c.call("PING") == "PONG"
    assert srv.alive()
    nc.close()
