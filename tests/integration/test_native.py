"""The native datagram edge (rdma/native.c, wire format rdma/dgram.h)
through a real rowan-server, spoken by tests/integration/native_client.py
(socket + struct, written from dgram.h, independent of the server's codec
and of librowan).

- Commands: SET/GET/INCR, errors, binary values, MULTI/EXEC, a blocking
  BLPOP answered when another client pushes, HELLO 3 replies.
- Exactly once: a duplicated INCR is applied once and the duplicate gets
  the original reply; a dropped reply is recovered by retransmitting; the
  duplicate may come from another socket (the per-client-id steering to one
  worker); a retransmission while the command still runs is dropped;
  `acked` frees the cache.
- Refusals: malformed datagrams are answered MALFORMED (header readable)
  or dropped (not), and the server stays up with bounded state; a full
  client table and a full reply cache answer BUSY; stale terms are refused
  with the server's term (managed cluster, where terms move).
- Large replies come back in fragments that join; a reply over 1 MB is an
  error telling the client to use TCP.
- Packed frames (version 2): several requests in one datagram run as
  requests of their own (own ids, cache records, refusals), their replies
  come back packed, large ones alone in fragments after what was packed
  before them; a duplicated pack is answered from the cache and applied
  once; version 1 clients never see a packed or version 2 datagram; and
  through the lossy relay, packs dropped, duplicated and reordered both
  ways apply every request exactly once and lose nothing acknowledged.
- Durability: native writes acknowledged before a kill -9 are present
  after the restart; in a k=2 cluster a native write is replicated, and its
  reply is held while the backup is stopped (the same gate as RESP)."""
import os
import random
import signal
import socket
import struct
import time

import pytest

from conftest import RespClient, free_port, key_slot, request_failover, stop_process, wait_for
from test_replication import owner_map
from native_client import (ENTRY, HDR, HDR_LEN, MAGIC, MTU, PACKED_REPLIES, PAYLOAD_MAX, R_BUSY,
                           R_MALFORMED, R_STALE, REFUSE, REPLY, REQUEST, VERSION, VERSION2,
                           NativeClient, Refused, RespError, decode, encode_pack,
                           encode_request, messages, parse_resp)

pytestmark = pytest.mark.rowan_only("the native datagram edge is Rowan's")


def native_info(srv):
    return srv.info("native")["native"]


@pytest.fixture
def nsrv(server_factory):
    port = free_port()
    srv = server_factory(extra={"native-port": port})
    srv.native_port = port
    return srv


def nclient(srv, **kw):
    return NativeClient(srv.native_port, **kw)


def test_basic_commands(nsrv):
    c = nclient(nsrv)
    assert c.call("SET", "k", "v") == b"OK"
    assert c.call("GET", "k") == b"v"
    assert c.call("INCR", "n") == 1
    assert c.call("INCR", "n") == 2
    assert c.call("GET", "missing") is None
    blob = bytes(range(256)) * 4
    assert c.call("SET", "bin", blob) == b"OK"
    assert c.call("GET", "bin") == blob
    assert c.call("SET", "empty", b"") == b"OK"
    assert c.call("STRLEN", "empty") == 0
    assert c.call("RPUSH", "l", "a", "b", "c") == 3
    assert c.call("LRANGE", "l", "0", "-1") == [b"a", b"b", b"c"]
    e = c.call("NOSUCHCMD", "x")
    assert isinstance(e, RespError) and str(e).startswith("ERR unknown command 'NOSUCHCMD'")
    e = c.call("GET")
    assert e == RespError("ERR wrong number of arguments for 'get' command")
    e = c.call("INCR", "k")
    assert e == RespError("ERR value is not an integer or out of range")
    # the same data as RESP clients see
    r = nsrv.client()
    assert r.get("k") == b"v" and r.get("n") == b"2" and r.get("bin") == blob
    info = native_info(nsrv)
    assert int(info["native_requests"]) >= 14
    assert info["native_transport"] == "udp"
    c.close()


def test_duplicate_incr_applied_once(nsrv):
    c = nclient(nsrv)
    req = c.new_req()
    c.send(req, "INCR", "ctr")
    first = c.recv_for(req, 2.0)
    assert first == b":1\r\n"
    for _ in range(3):                          # the same request id again
        c.send(req, "INCR", "ctr")
        assert c.recv_for(req, 2.0) == first    # the original reply, not ":2"
    c.finish(req)
    assert nsrv.client().get("ctr") == b"1"
    assert c.call("INCR", "ctr") == 2           # a new id runs
    assert int(native_info(nsrv)["native_duplicates_answered_from_cache"]) == 3
    c.close()


def test_dropped_reply_retransmitted(nsrv):
    c = nclient(nsrv)
    assert c.call("SET", "x", "10") == b"OK"
    req = c.new_req()
    c.send(req, "INCRBY", "x", "5")
    time.sleep(0.3)
    while c.recv_dgram(0.2) is not None:        # the reply is "lost"
        pass
    assert nsrv.client().get("x") == b"15"      # it ran once
    c.send(req, "INCRBY", "x", "5")             # the client's retransmission
    assert c.recv_for(req, 2.0) == b":15\r\n"
    c.finish(req)
    assert nsrv.client().get("x") == b"15"      # and did not run again
    c.close()


def test_duplicate_from_another_socket_same_client(nsrv):
    """Datagrams of one client id reach one worker whatever socket they come
    from (the reuseport steering): the duplicate finds the cached reply."""
    a = nclient(nsrv)
    ids = [a.id]
    for i in range(6):
        req = a.new_req()
        a.send(req, "INCR", "s%d" % i)
        assert a.recv_for(req, 2.0) == b":1\r\n"
        b = NativeClient(nsrv.native_port, client_id=a.id)   # a new socket, same client
        b.send(req, "INCR", "s%d" % i, acked=a.acked)
        assert b.recv_for(req, 2.0) == b":1\r\n"
        b.close()
        a.finish(req)
    r = nsrv.client()
    assert [r.get("s%d" % i) for i in range(6)] == [b"1"] * 6
    # more clients spread over both workers, each staying on its own
    others = [nclient(nsrv) for _ in range(8)]
    for o in others:
        assert o.call("PING") == b"PONG"
        ids.append(o.id)
    info = native_info(nsrv)
    assert int(info["native_clients"]) == 9
    per_worker = [int(x) for x in info["native_worker_clients"].split(",")]
    assert sum(per_worker) == 9
    want = [0, 0]
    for cid in ids:                  # the steering's rule: low 32 bits (big-endian) mod workers
        low = struct.unpack(">I", struct.pack("<Q", cid)[:4])[0]
        want[low % 2] += 1
    assert per_worker == want
    for o in others + [a]:
        o.close()


def test_running_duplicate_dropped_blpop_answered_later(nsrv):
    c = nclient(nsrv)
    req = c.new_req()
    c.send(req, "BLPOP", "q", "10")
    assert c.recv_for(req, 0.5) is None        # blocked
    c.send(req, "BLPOP", "q", "10")            # retransmitted while it runs: dropped
    assert c.recv_for(req, 0.3) is None
    assert nsrv.client().rpush("q", "item") == 1
    data = c.recv_for(req, 5.0)
    assert data is not None
    assert parse_resp(data)[0] == [b"q", b"item"]
    c.finish(req)
    assert int(native_info(nsrv)["native_duplicates_dropped_running"]) >= 1
    assert nsrv.client().llen("q") == 0        # popped once
    # and a BLPOP that times out answers nil
    assert c.call("BLPOP", "q2", "0.2") is None
    c.close()


def test_multi_exec_and_session_state(nsrv):
    c = nclient(nsrv)
    assert c.call("MULTI") == b"OK"
    assert c.call("SET", "m1", "a") == b"QUEUED"
    assert c.call("INCR", "m2") == b"QUEUED"
    assert c.call("EXEC") == [b"OK", 1]
    assert c.call("SELECT", "3") == b"OK"          # the session keeps its db
    assert c.call("SET", "db3", "x") == b"OK"
    assert c.call("GET", "m1") is None
    assert nsrv.client(db=3).get("db3") == b"x"
    assert c.call("WATCH", "w") == b"OK"
    nsrv.client(db=3).set("w", "changed")
    assert c.call("MULTI") == b"OK"
    assert c.call("SET", "w", "mine") == b"QUEUED"
    assert c.call("EXEC") is None                  # WATCH aborted it
    e = c.call("CLIENT", "REPLY", "OFF")
    assert isinstance(e, RespError) and "native" in str(e)
    c.close()


def test_large_reply_fragments(nsrv):
    r = nsrv.client()
    big = os.urandom(100000)
    r.set("big", big)
    c = nclient(nsrv)
    data, _ = c.call_raw("GET", "big")
    assert data == b"$100000\r\n" + big + b"\r\n"      # 25 fragments joined
    r.rpush("biglist", *[("e%05d" % i) * 10 for i in range(5000)])
    assert c.call("LRANGE", "biglist", "0", "-1") == [("e%05d" % i).encode() * 10
                                                     for i in range(5000)]
    # 900 KB: 223 fragments, more than a default socket buffer holds at
    # once: the client asks again from the first fragment it misses
    val = os.urandom(900000)
    r.set("v900", val)
    c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    data, tries = c.call_raw("GET", "v900", retries=200)
    assert data == b"$900000\r\n" + val + b"\r\n"
    assert tries > 1
    assert nsrv.client().get("v900") == val
    r.set("huge", b"h" * (2 << 20))
    e = c.call("GET", "huge")
    assert isinstance(e, RespError) and "too large" in str(e) and "TCP" in str(e)
    assert int(native_info(nsrv)["native_replies_too_large"]) == 1
    # a request that does not fit one datagram cannot be sent at all over
    # UDP past 64 KB; below that, the server refuses it: use TCP
    with pytest.raises(OSError):
        c.send_raw(encode_request(c.id, 99, ["SET", "k", b"x" * 70000]))
    c.send_raw(encode_request(c.id, 99, ["SET", "k", b"x" * 5000]))
    h, payload = decode(c.recv_dgram(2.0))
    assert h["type"] == REFUSE and h["frag"] == R_MALFORMED and h["req"] == 99, h
    assert b"use TCP" in payload
    assert nsrv.client().get("k") is None
    c.close()


def test_replies_of_a_round_share_one_send_call(nsrv):
    """A worker queues the datagrams one round produces and sends them
    with sendmmsg before it sleeps (64 per call): a 100 KB reply (25
    fragments) leaves in one call, a 300 KB one (75) in two, all fragments
    arriving; a burst of requests from one client is answered in order
    with every reply."""
    r = nsrv.client()
    v100, v300 = os.urandom(100000), os.urandom(300000)
    r.set("b100", v100)
    r.set("b300", v300)
    c = nclient(nsrv)
    c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    for key, val, frags, calls in (("b100", v100, 25, 1), ("b300", v300, 75, 2)):
        before = native_info(nsrv)
        data, tries = c.call_raw("GET", key)
        after = native_info(nsrv)
        assert tries == 1 and data == b"$%d\r\n" % len(val) + val + b"\r\n"
        out = int(after["native_datagrams_out"]) - int(before["native_datagrams_out"])
        sent = int(after["native_send_calls"]) - int(before["native_send_calls"])
        assert out == frags and sent == calls, (key, out, sent)
    assert native_info(nsrv)["native_send_errors"] == "0"
    # a burst: every request sent before any reply is read
    reqs = [c.new_req() for _ in range(40)]
    for q in reqs:
        c.send(q, "INCR", "burst")
    got = []
    while len(got) < len(reqs):
        dg = c.recv_dgram(5.0)
        assert dg is not None, got
        h, payload = decode(dg)
        if h["client"] == c.id and h["type"] == REPLY:
            got.append((h["req"], parse_resp(payload)[0]))
    assert got == [(q, i + 1) for i, q in enumerate(reqs)]
    c.close()


def malformed_datagrams(cid):
    good = encode_request(cid, 1, ["PING"])
    hdr_only = good[:HDR_LEN]

    def with_hdr(**kw):
        f = list(HDR.unpack_from(good))
        names = ["magic", "version", "type", "shard", "client", "req", "term", "acked",
                 "frag", "nfrag", "total", "off"]
        for k, v in kw.items():
            f[names.index(k)] = v
        return HDR.pack(*f) + good[HDR_LEN:]
    dropped = [b"", b"x", good[:HDR_LEN - 1], with_hdr(magic=0x12345678), with_hdr(version=3),
               with_hdr(type=2), with_hdr(type=4), with_hdr(type=5), with_hdr(type=9),
               with_hdr(req=0), with_hdr(nfrag=1),
               with_hdr(off=7), os.urandom(MTU), os.urandom(100)]
    answered = [
        hdr_only,                                              # no argc
        hdr_only + struct.pack("<H", 0),                       # argc 0
        hdr_only + struct.pack("<H", 1025),                    # above the limit
        hdr_only + struct.pack("<HI", 1, 10) + b"PING",        # length past the end
        hdr_only + struct.pack("<HI", 1, 0xFFFFFFFF) + b"PING",
        good + b"\x00",                                        # trailing byte
        hdr_only + struct.pack("<HI", 2, 4) + b"PING",         # second argument missing
    ]
    return dropped, answered


def test_malformed_datagrams(nsrv):
    c = nclient(nsrv)
    dropped, answered = malformed_datagrams(c.id)
    for dg in dropped:
        c.send_raw(dg)
    assert c.recv_dgram(0.5) is None, "a malformed header was answered"
    for dg in answered:
        c.send_raw(dg)
        reply = c.recv_dgram(2.0)
        assert reply is not None
        h, payload = decode(reply)
        assert h["type"] == REFUSE and h["frag"] == R_MALFORMED and h["client"] == c.id, h
        assert payload                                         # the reason
    info = native_info(nsrv)
    assert int(info["native_dropped_malformed"]) == len(dropped)
    assert int(info["native_refused_malformed"]) == len(answered)
    # random mutations of good requests: whatever happens, the server lives
    rnd = random.Random(7)
    base = [encode_request(c.id + i, 1, ["SET", "fz%d" % i, "v" * rnd.randrange(50)])
            for i in range(20)]
    for i in range(3000):
        dg = bytearray(rnd.choice(base))
        for _ in range(rnd.randrange(1, 4)):
            k = rnd.randrange(3)
            if k == 0 and dg:
                dg[rnd.randrange(len(dg))] = rnd.randrange(256)
            elif k == 1:
                del dg[rnd.randrange(len(dg) + 1):]
            else:
                dg += os.urandom(rnd.randrange(8))
        c.send_raw(bytes(dg))
        if i % 200 == 0:
            while c.recv_dgram(0.001) is not None:
                pass
    assert nsrv.client().ping()
    d = nclient(nsrv)
    assert d.call("PING") == b"PONG"
    assert int(native_info(nsrv)["native_clients"]) <= 1024
    c.close()
    d.close()


def test_client_table_and_cache_bounded(server_factory):
    port = free_port()
    srv = server_factory(extra={"native-port": port, "native-max-clients": 20,
                                "native-reply-cache": "64kb"})
    busy = 0
    clients = []
    for i in range(60):                         # three times the table
        c = NativeClient(port)
        clients.append(c)
        req = c.new_req()
        c.send(req, "PING")
        try:
            if c.recv_for(req, 2.0) is None:
                raise AssertionError("no answer")
        except Refused as e:
            assert e.code == R_BUSY
            busy += 1
    assert busy == 40
    info = srv.info("native")["native"]
    assert int(info["native_clients"]) == 20
    assert int(info["native_refused_busy"]) == 40
    # a client that never acks fills the reply cache (64 KB over 2 workers),
    # then its new requests are refused BUSY and nothing runs
    srv.client().set("v", b"z" * 3000)
    c = clients[0]
    ran = 0
    refused = None
    for i in range(40):
        req = c.new_req()
        c.send(req, "APPEND", "grow", "x", acked=1)
        try:
            data = c.recv_for(req, 2.0)
            assert data is not None
            ran += 1
            c.send(c.new_req(), "GET", "v", acked=1)
        except Refused as e:
            refused = e
            break
    assert refused is not None and refused.code == R_BUSY
    assert srv.client().strlen("grow") == ran
    assert int(srv.info("native")["native"]["native_reply_cache_bytes"]) <= 64 * 1024 + 4096
    # acknowledging frees the cache: the same client runs again
    c.acked = c.next_req
    assert c.call("APPEND", "grow", "y") == ran + 1
    for cl in clients:
        cl.close()


def test_acked_frees_cache(nsrv):
    c = nclient(nsrv)
    for i in range(50):
        c.call("SET", "a%d" % i, "v" * 100)
    info = native_info(nsrv)
    # with acked following the replies, at most the last reply stays cached
    assert int(info["native_reply_cache_bytes"]) <= 10
    # a late duplicate of an acknowledged id is dropped, not re-run
    c.send(3, "SET", "a2", "changed")
    assert c.recv_for(3, 0.5) is None
    assert nsrv.client().get("a2") == b"v" * 100
    c.close()


def test_hello3_replies(nsrv):
    c = nclient(nsrv)
    data, _ = c.call_raw("HELLO", "3")
    assert data.startswith(b"%")
    data, _ = c.call_raw("HGETALL", "nohash")
    assert data == b"%0\r\n"
    c.close()


def test_kill9_after_acked_native_writes(nsrv):
    c = nclient(nsrv)
    acked = {}
    for i in range(200):
        assert c.call("SET", "dur%d" % i, "val%d" % i) == b"OK"
        acked["dur%d" % i] = "val%d" % i
    assert c.call("INCRBY", "durctr", "7") == 7
    nsrv.kill9()
    nsrv.start()
    r = nsrv.client()
    for k, v in acked.items():
        assert r.get(k) == v.encode(), k
    assert r.get("durctr") == b"7"
    d = nclient(nsrv)                       # the native port is back after restart
    assert d.call("GET", "dur7") == b"val7"
    c.close()
    d.close()


def test_native_port_busy_fails(nsrv, server_factory):
    """A second server on the same native port fails to start instead of
    sharing the port (the probe before SO_REUSEPORT)."""
    from conftest import ServerStartError
    with pytest.raises(ServerStartError):
        server_factory(extra={"native-port": nsrv.native_port})
    c = nclient(nsrv)
    assert c.call("PING") == b"PONG"
    c.close()


# ---------------------------------------------------------------- clusters

def native_cluster(cluster_factory, n, k, zookeeper=False, options=None):
    """A cluster whose nodes also listen on native ports: started, stopped,
    given `native-port` in their rowan.conf, started again."""
    cl = cluster_factory(n, k, options=options, zookeeper=zookeeper)
    for nd in cl.nodes:
        nd.stop()                    # the nodes only: a managed cluster's ZooKeeper stays
    for nd in cl.nodes:
        nd.native_port = free_port()
        with open(nd.conf, "a") as f:
            f.write("native-port %d\n" % nd.native_port)
    for nd in cl.nodes:
        nd.start(wait=False)
    for nd in cl.nodes:
        nd.wait_ready()
    return cl


def key_on(owner, node, prefix):
    return next("%s%d" % (prefix, j) for j in range(1000000)
                if owner[key_slot("%s%d" % (prefix, j))] == node)


def digests(node):
    c = RespClient(node.port)
    try:
        return {sid: (d, n) for sid, d, n in c.call("ROWAN", "DIGEST")}
    finally:
        c.close()


def test_cluster_k2_native_writes_replicated(cluster_factory):
    cl = native_cluster(cluster_factory, 2, 2, options={"replication-timeout": 60000})
    assert wait_for(lambda: all(nd.info("rowan")["rowan"].get("shards_reconciling") == "0"
                                for nd in cl.nodes), timeout=30)
    owner = owner_map(cl)
    clients = [NativeClient(nd.native_port) for nd in cl.nodes]
    written = {}
    for i in range(40):
        key = "nk%d" % i
        node = owner[key_slot(key)]
        assert clients[node].call("SET", key, "v%d" % i) == b"OK"
        written[key] = "v%d" % i
    # a key on the other node: -MOVED, as over RESP
    key = key_on(owner, 1, "mv")
    e = clients[0].call("SET", key, "x")
    assert isinstance(e, RespError) and str(e).startswith("MOVED")
    # both nodes hold the same data (every shard has both nodes)
    assert wait_for(lambda: digests(cl.nodes[0]) == digests(cl.nodes[1]), timeout=30)
    # the reply is held while the backup is stopped: the same gate as RESP
    key = key_on(owner, 0, "held")
    stopped = cl.nodes[1]
    stop_process(stopped.pid)
    c = clients[0]
    try:
        req = c.new_req()
        c.send(req, "SET", key, "held")
        assert c.recv_for(req, 1.5) is None, "native reply left before the backup had the write"
        c.send(req, "SET", key, "held")            # retransmission while held: dropped
        assert c.recv_for(req, 0.5) is None
    finally:
        os.kill(stopped.pid, signal.SIGCONT)
    assert c.recv_for(req, 30.0) == b"+OK\r\n"
    c.finish(req)
    assert wait_for(lambda: digests(cl.nodes[0]) == digests(cl.nodes[1]), timeout=30)
    r1 = RespClient(cl.nodes[0].port)
    for key, v in written.items():
        if owner[key_slot(key)] == 0:
            assert r1.call("GET", key) == v.encode()
    r1.close()
    for c in clients:
        c.close()


def test_stale_term_refused(cluster_factory):
    """In a managed cluster (terms move with every configuration), a new
    request routed by an older term is refused STALE with the server's
    term; nothing runs. The current term runs; term 0 means unknown."""
    cl = native_cluster(cluster_factory, 3, 2, zookeeper=True)

    def term_of(nd):
        try:
            t = nd.info("rowan")["rowan"].get("cluster_term")
            return int(t) if t else 0
        except Exception:
            return 0
    # A planned handover moves the term (a restart alone need not).
    assert wait_for(lambda: all(term_of(nd) >= 1 for nd in cl.nodes), timeout=60)
    # Any node that is some shard's first backup can ask; after the restarts
    # (a 150 ms lease) the placement may have moved, so each one is tried,
    # and again while none is a backup yet (on a loaded machine a node can
    # still be rejoining as a learner: every node answered "send CLUSTER
    # FAILOVER to a replica").
    reps = []

    def failover_somewhere():
        for nd in cl.nodes:
            reps.append(request_failover(nd.port))
            if reps[-1] == "OK":
                return True
        return False
    assert wait_for(failover_somewhere, timeout=60, interval=0.5), reps[-6:]
    assert wait_for(lambda: all(term_of(nd) >= 2 for nd in cl.nodes), timeout=60), \
        [nd.info("rowan")["rowan"] for nd in cl.nodes]
    nd = cl.nodes[0]
    term = term_of(nd)
    c = NativeClient(nd.native_port, term=term - 1)
    req = c.new_req()
    c.send(req, "SET", "stale", "x")
    with pytest.raises(Refused) as ei:
        c.recv_for(req, 3.0)
    assert ei.value.code == R_STALE and ei.value.term >= term
    c.term = ei.value.term                          # the client refreshes its configuration
    c.send(req, "PING")
    assert c.recv_for(req, 3.0) == b"+PONG\r\n"
    assert int(native_info(nd)["native_refused_stale"]) == 1
    c.close()


def test_pubsub_messages_come_with_request_id_0(nsrv):
    c = nclient(nsrv)
    assert c.call("SUBSCRIBE", "news") == [b"subscribe", b"news", 1]
    assert nsrv.client().publish("news", "hello") == 1
    data = c.recv_for(0, 3.0)                 # unsolicited output: request id 0
    assert data is not None
    assert parse_resp(data)[0] == [b"message", b"news", b"hello"]
    assert c.call("UNSUBSCRIBE", "news") == [b"unsubscribe", b"news", 0]
    c.close()


def test_pubsub_version2_unsolicited_stays_single(nsrv):
    """For a client that reads packs, unsolicited output (request id 0) is
    never packed: it leaves as a plain version 2 reply, after the replies
    packed before it."""
    c = nclient(nsrv, version=VERSION2)
    q1, q2 = c.new_req(), c.new_req()
    c.send_pack([(q1, ["SUBSCRIBE", "news2"]), (q2, ["PING"])])
    assert parse_resp(c.recv_for(q1, 2.0))[0] == [b"subscribe", b"news2", 1]
    assert parse_resp(c.recv_for(q2, 2.0))[0] == [b"pong", b""]
    c.finish(q1)
    c.finish(q2)
    assert nsrv.client().publish("news2", "hi") == 1
    dg = c.recv_dgram(3.0)
    assert dg is not None
    h, payload = decode(dg)
    assert (h["version"], h["type"], h["req"]) == (VERSION2, REPLY, 0), h
    assert parse_resp(payload)[0] == [b"message", b"news2", b"hi"]
    c.close()


def test_idle_clients_forgotten(server_factory):
    port = free_port()
    srv = server_factory(extra={"native-port": port, "native-client-timeout": 1})
    cs = [NativeClient(port) for _ in range(5)]
    for c in cs:
        assert c.call("PING") == b"PONG"
    assert int(srv.info("native")["native"]["native_clients"]) == 5
    lst = srv.client().client_list()
    assert len([x for x in lst if x.get("laddr", "").startswith("udp:")]) == 5, lst
    assert wait_for(lambda: int(srv.info("native")["native"]["native_clients"]) == 0,
                    timeout=10)
    assert int(srv.info("native")["native"]["native_clients_evicted"]) == 5
    # their sessions went too (CLIENT LIST shows the RESP client only)
    lst = srv.client().client_list()
    assert not [x for x in lst if x.get("laddr", "").startswith("udp:")], lst
    # a forgotten client that comes back starts afresh
    assert cs[0].call("INCR", "after") == 1
    for c in cs:
        c.close()


def test_session_killed_and_quit(nsrv):
    c = nclient(nsrv)
    assert c.call("SELECT", "2") == b"OK"
    req = c.new_req()
    c.send(req, "BLPOP", "never", "0")
    assert c.recv_for(req, 0.3) is None            # blocked, running
    r = nsrv.client()
    mine = [x for x in r.client_list() if x.get("laddr", "").startswith("udp:")]
    assert len(mine) == 1 and mine[0]["db"] == "2"
    assert r.client_kill_filter(_id=mine[0]["id"]) == 1
    data = c.recv_for(req, 3.0)                    # the running request's outcome is unknown
    assert data is not None and b"outcome is unknown" in data
    c.finish(req)
    assert int(native_info(nsrv)["native_sessions_closed"]) == 1
    # the client goes on with a new session (db 0 again, like a reconnect)
    assert c.call("SET", "after-kill", "1") == b"OK"
    assert r.get("after-kill") == b"1"
    assert c.call("QUIT") == b"OK"
    assert c.call("PING") == b"PONG"               # and after QUIT, too
    c.close()


class LossyProxy:
    """A UDP relay between native clients and the server that drops,
    duplicates and reorders datagrams both ways (a netem-free shim).
    Replies go back to the client whose id the header names."""

    def __init__(self, server_port, drop=0.25, dup=0.2, hold=0.2, seed=11):
        import threading
        self.server = ("127.0.0.1", server_port)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.rnd = random.Random(seed)
        self.drop, self.dup, self.hold = drop, dup, hold
        self.clients = {}
        self.held = []
        self.stats = {"dropped": 0, "duplicated": 0, "reordered": 0, "passed": 0}
        self.stop = False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def forward(self, data, dest):
        r = self.rnd.random()
        if r < self.drop:
            self.stats["dropped"] += 1
            return
        if r < self.drop + self.hold:          # held back, sent after a later one
            self.stats["reordered"] += 1
            self.held.append((data, dest))
            return
        self.sock.sendto(data, dest)
        self.stats["passed"] += 1
        if self.rnd.random() < self.dup:
            self.sock.sendto(data, dest)
            self.stats["duplicated"] += 1
        while self.held and self.rnd.random() < 0.7:
            self.sock.sendto(*self.held.pop(0))

    def run(self):
        self.sock.settimeout(0.05)
        while not self.stop:
            try:
                data, addr = self.sock.recvfrom(65536)
            except socket.timeout:
                while self.held:
                    self.sock.sendto(*self.held.pop(0))
                continue
            except OSError:
                return
            if len(data) < HDR_LEN:
                continue
            cid = struct.unpack_from("<Q", data, 8)[0]
            if addr == self.server:
                if cid in self.clients:
                    self.forward(data, self.clients[cid])
            else:
                self.clients[cid] = addr
                self.forward(data, self.server)

    def close(self):
        self.stop = True
        self.thread.join(2)
        self.sock.close()


def test_loss_duplicates_reordering_exactly_once(nsrv):
    """Through the lossy relay: every INCR is retransmitted until its reply,
    and each is applied exactly once (the replies are exactly 1..N, the
    counter ends at N); every acknowledged SET is there; a reply of many
    fragments survives losing some of them."""
    proxy = LossyProxy(nsrv.native_port)
    clients = [NativeClient(proxy.port, timeout=0.05) for _ in range(3)]
    seen = []
    n_each = 30
    for i in range(n_each):
        for j, c in enumerate(clients):
            seen.append(c.call("INCR", "lossy", retries=400))
            assert c.call("SET", "ack:%d:%d" % (j, i), str(i), retries=400) == b"OK"
    assert sorted(seen) == list(range(1, 3 * n_each + 1))
    r = nsrv.client()
    assert r.get("lossy") == str(3 * n_each).encode()
    for j in range(3):
        for i in range(n_each):
            assert r.get("ack:%d:%d" % (j, i)) == str(i).encode()
    val = os.urandom(60000)                    # 15 fragments
    r.set("lossyval", val)
    for _ in range(2):
        assert clients[0].call("GET", "lossyval", retries=1000) == val
    info = native_info(nsrv)
    assert int(info["native_duplicates_answered_from_cache"]) > 0
    assert proxy.stats["dropped"] > 30 and proxy.stats["duplicated"] > 10, proxy.stats
    for c in clients:
        c.close()
    proxy.close()


def test_packed_requests_and_replies(nsrv):
    """One datagram of 30 requests: each runs once under its own id, and
    the replies come back packed (far fewer datagrams than replies); a
    reply too large for one entry leaves alone, in fragments, after the
    replies packed before it; a malformed entry is refused on its own."""
    r = nsrv.client()
    big = os.urandom(20000)
    r.set("pbig", big)
    c = nclient(nsrv, version=VERSION2)
    before = native_info(nsrv)
    cmds = [["INCR", "pk"] for _ in range(10)] + [["SET", "ps%d" % i, "v%d" % i] for i in range(10)]
    cmds += [["GET", "ps%d" % i] for i in range(5)] + [["GET", "pbig"]] + [["INCR", "pk"]] * 4
    got = c.pipeline(cmds)
    assert got[:10] == list(range(1, 11))
    assert got[10:20] == [b"OK"] * 10
    assert got[20:25] == [b"v%d" % i for i in range(5)]
    assert got[25] == big
    assert got[26:] == [11, 12, 13, 14]
    after = native_info(nsrv)
    assert int(after["native_requests"]) - int(before["native_requests"]) == len(cmds)
    assert int(after["native_packed_datagrams_in"]) - int(before["native_packed_datagrams_in"]) == 1
    packs = int(after["native_packed_datagrams_out"]) - int(before["native_packed_datagrams_out"])
    out = int(after["native_datagrams_out"]) - int(before["native_datagrams_out"])
    assert packs >= 1 and c.stats["packed"] == packs, (packs, c.stats)
    assert out < len(cmds), out          # 5 fragments of pbig + a few packs, not 30 + 4
    assert r.get("pk") == b"14"

    # the order on the wire: what was packed before the large reply arrives before it
    reqs = [c.new_req() for _ in range(4)]
    c.send_pack([(reqs[0], ["INCR", "ord"]), (reqs[1], ["INCR", "ord"]), (reqs[2], ["GET", "pbig"]),
                 (reqs[3], ["INCR", "ord"])])
    seen = []
    while len(seen) < 4:
        dg = c.recv_dgram(5.0)
        assert dg is not None, seen
        for h, payload in messages(dg):
            if h["req"] not in seen and (h["nfrag"] == 1 or h["frag"] == h["nfrag"] - 1):
                seen.append(h["req"])
    assert seen == reqs, seen
    for q in reqs:
        c.finish(q)

    # a malformed entry (argc 0) is refused alone; its neighbours run
    q1, q2, q3 = c.new_req(), c.new_req(), c.new_req()
    c.send_pack([(q1, ["INCR", "mal"]), (q2, struct.pack("<H", 0)), (q3, ["INCR", "mal"])])
    assert c.recv_for(q1, 2.0) == b":1\r\n"
    with pytest.raises(Refused) as e:
        c.recv_for(q2, 2.0)
    assert e.value.code == R_MALFORMED
    assert c.recv_for(q3, 2.0) == b":2\r\n"
    for q in (q1, q2, q3):
        c.finish(q)
    c.close()


def test_packed_duplicates_applied_once(nsrv):
    """A pack sent twice, and a pack overlapping an earlier one: the repeated
    ids are answered from the reply cache (the original replies) and run
    once; a pack mixing a repeated and a new id runs only the new one."""
    c = nclient(nsrv, version=VERSION2)
    ids = [c.new_req() for _ in range(8)]
    pack = [(q, ["INCR", "dupk"]) for q in ids]
    first = []
    for attempt in range(2):
        c.send_pack(pack)
        first.append([c.recv_for(q, 2.0) for q in ids])
    assert first[0] == first[1] == [b":%d\r\n" % i for i in range(1, 9)]
    more = [c.new_req() for _ in range(4)]
    c.send_pack([(q, ["INCR", "dupk"]) for q in ids[5:] + more])   # 3 old ids, 4 new
    assert [c.recv_for(q, 2.0) for q in ids[5:]] == first[0][5:]
    assert [c.recv_for(q, 2.0) for q in more] == [b":%d\r\n" % i for i in range(9, 13)]
    for q in ids + more:
        c.finish(q)
    assert nsrv.client().get("dupk") == b"12"
    assert int(native_info(nsrv)["native_duplicates_answered_from_cache"]) == 8 + 3
    # acked in a pack frees the records below it: an old id sent after it is dropped
    q = c.new_req()
    c.send_pack([(q, ["INCR", "dupk"])])
    assert c.recv_for(q, 2.0) == b":13\r\n"
    c.send_pack([(ids[0], ["INCR", "dupk"])])
    assert c.recv_for(ids[0], 0.3) is None
    c.finish(q)
    assert int(native_info(nsrv)["native_duplicates_dropped_acked"]) >= 1
    c.close()


def test_version1_clients_never_get_packs(nsrv):
    """A version 1 client's burst is answered by version 1 single
    datagrams; the same burst from a version 2 client comes back packed."""
    for version in (VERSION, VERSION2):
        c = nclient(nsrv, version=version)
        reqs = [c.new_req() for _ in range(30)]
        for q in reqs:
            c.send(q, "INCR", "v%d" % version)
        got = {}
        datagrams = []
        while len(got) < len(reqs):
            dg = c.recv_dgram(5.0)
            assert dg is not None, got
            h, _ = decode(dg)
            datagrams.append((h["version"], h["type"]))
            for m, payload in messages(dg):
                got[m["req"]] = parse_resp(payload)[0]
        assert [got[q] for q in reqs] == list(range(1, 31))
        if version == VERSION:
            assert set(datagrams) == {(VERSION, REPLY)}, datagrams
        else:
            assert all(v == VERSION2 for v, _ in datagrams), datagrams
        c.close()


def test_packed_through_loss_exactly_once(nsrv):
    """Through the lossy relay, which drops, duplicates and reorders whole
    datagrams -- here packs of requests and packs of replies -- both ways:
    pipelines of INCRs and SETs, retransmitted (packed again) until every
    reply is in. Every INCR is applied exactly once (the replies are
    exactly 1..N, the counter ends at N) and every acknowledged SET is
    there."""
    proxy = LossyProxy(nsrv.native_port, seed=23)
    clients = [NativeClient(proxy.port, timeout=0.05, version=VERSION2) for _ in range(3)]
    seen = []
    rounds, width = 20, 8
    for i in range(rounds):
        for j, c in enumerate(clients):
            cmds = []
            for k in range(width):
                cmds.append(["INCR", "plossy"])
                cmds.append(["SET", "pack:%d:%d:%d" % (j, i, k), "%d" % k])
            got = c.pipeline(cmds, retries=2000)
            seen += got[0::2]
            assert got[1::2] == [b"OK"] * width
    n = rounds * len(clients) * width
    assert sorted(seen) == list(range(1, n + 1))
    r = nsrv.client()
    assert r.get("plossy") == str(n).encode()
    for j in range(len(clients)):
        for i in range(rounds):
            for k in range(width):
                assert r.get("pack:%d:%d:%d" % (j, i, k)) == str(k).encode()
    info = native_info(nsrv)
    assert int(info["native_duplicates_answered_from_cache"]) > 0
    assert int(info["native_packed_datagrams_in"]) > 0 and int(info["native_packed_datagrams_out"]) > 0
    assert sum(c.stats["packed"] for c in clients) > 0
    # ~2 datagrams per pipeline each way plus retransmissions: the relay's
    # 25% loss and 20% duplication must have hit packs many times
    assert proxy.stats["dropped"] >= 15 and proxy.stats["duplicated"] >= 8, proxy.stats
    for c in clients:
        c.close()
    proxy.close()


def non_loopback_ipv4():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect(("192.0.2.1", 9))          # no packet is sent: picks the outgoing address
        ip = s.getsockname()[0]
    except OSError:
        return None
    finally:
        s.close()
    return None if ip.startswith("127.") else ip


def test_protected_mode(server_factory):
    """No password and protected mode: a peer that is not on loopback gets
    -DENIED (nothing runs); with a password it is served after AUTH."""
    ip = non_loopback_ipv4()
    if ip is None:
        pytest.skip("no non-loopback IPv4 address to send from")
    port = free_port()
    srv = server_factory(extra={"native-port": port, "native-bind": "0.0.0.0"})
    c = NativeClient(port, host=ip)
    c.sock.close()
    c.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    c.sock.bind((ip, 0))
    e = c.call("SET", "denied", "1")
    assert isinstance(e, RespError) and str(e).startswith("DENIED"), e
    assert srv.client().get("denied") is None
    assert int(native_info(srv)["native_denied"]) == 1
    srv.client().config_set("requirepass", "pw")
    e = c.call("SET", "denied", "1")
    assert isinstance(e, RespError) and str(e).startswith("NOAUTH"), e
    assert c.call("AUTH", "pw") == b"OK"
    assert c.call("SET", "denied", "1") == b"OK"
    # loopback peers were always served
    lo = NativeClient(port)
    assert lo.call("AUTH", "pw") == b"OK"
    c.close()
    lo.close()


def test_reply_cache_arena_acks_and_compaction(nsrv):
    """Cached replies live in one arena per client, freed by acks and
    compacted: every reply still unacknowledged must come back byte for
    byte from the cache (not re-run) after any prefix is acknowledged,
    including replies over one entry (cached apart) among them."""
    rng = random.Random(15)
    r = nsrv.client()
    n = 120
    old = {}
    for i in range(1, n + 1):
        size = 5000 if i % 40 == 7 else rng.randint(20, 1500)
        old[i] = bytes(rng.randrange(256) for _ in range(size))
        r.set("ar%d" % i, old[i])
    c = nclient(nsrv)
    got = {}
    for i in range(1, n + 1):
        # SET ... GET answers the old value; a re-run would answer "new"
        c.send(i, "SET", "ar%d" % i, "new", "GET", acked=1)
        got[i] = c.recv_for(i, 2.0)
        assert got[i] is not None
        assert parse_resp(got[i])[0] == old[i]
    for step in (2, 30, 31, 70, 100, n):
        for i in range(step, n + 1):
            c.send(i, "SET", "ar%d" % i, "new", "GET", acked=step)
            assert c.recv_for(i, 2.0) == got[i], (step, i)
    info = native_info(nsrv)
    assert int(info["native_requests"]) == n
    assert int(info["native_duplicates_answered_from_cache"]) > 0
    assert int(info["native_reply_cache_bytes"]) == len(got[n])
    c.close()


def test_pack_of_one_reply_is_a_plain_datagram(nsrv):
    """A round with one reply for a version 2 client sends it as a plain
    reply datagram, built from the reply cache (no pack); a retransmission
    of it is answered the same way, from the cache; two replies in a round
    share one pack; and a pack whose first entry was noted from the cache
    still carries it, in order, when a second reply joins it."""
    c = nclient(nsrv, version=VERSION2)
    before = native_info(nsrv)
    q = c.new_req()
    c.send(q, "SET", "one", "x" * 300)
    dg = c.recv_dgram(5.0)
    h, _ = decode(dg)
    assert (h["version"], h["type"], h["req"]) == (VERSION2, REPLY, q), h
    assert [parse_resp(p)[0] for _, p in messages(dg)] == [b"OK"]
    q = c.new_req()
    c.send(q, "GET", "one")
    assert c.recv_for(q, 5.0) == b"$300\r\n" + b"x" * 300 + b"\r\n"
    c.send(q, "GET", "one")        # lost reply: the duplicate comes from the cache
    dg = c.recv_dgram(5.0)
    h, _ = decode(dg)
    assert (h["type"], h["req"]) == (REPLY, q), h
    assert [parse_resp(p)[0] for _, p in messages(dg)] == [b"x" * 300]
    after = native_info(nsrv)
    assert int(after["native_packed_datagrams_out"]) == int(before["native_packed_datagrams_out"])
    assert int(after["native_duplicates_answered_from_cache"]) - \
        int(before["native_duplicates_answered_from_cache"]) == 1
    c.finish(q - 1)
    c.finish(q)
    for rnd in range(5):
        reqs = [c.new_req() for _ in range(3)]
        c.send_pack([(reqs[0], ["INCR", "p1"]), (reqs[1], ["GET", "one"]), (reqs[2], ["INCR", "p1"])])
        got = {}
        while len(got) < 3:
            dg = c.recv_dgram(5.0)
            assert dg is not None, got
            for m, payload in messages(dg):
                got[m["req"]] = parse_resp(payload)[0]
        assert [got[r] for r in reqs] == [2 * rnd + 1, b"x" * 300, 2 * rnd + 2]
        for r in reqs:
            c.finish(r)
    c.close()
