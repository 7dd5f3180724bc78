"""librowan's SUBSCRIBE / PSUBSCRIBE / MONITOR (rdma/client/rowan_push.c)
through a real rowan-server: librowan-test (tests/integration/
librowan_test.c) subscribes with the blocking API (rowanGetReply returns
confirmations, then messages) or the async one (the SUBSCRIBE callback gets
each message of its channels), prints what it receives, and this side
publishes with redis-py.

Covered: a SUBSCRIBE of two channels (two confirmations: the reply, then
rowanGetReply), channel and pattern messages with binary-safe payloads in
order, UNSUBSCRIBE / PUNSUBSCRIBE stopping delivery (the server counts no
receiver, the library prints nothing more for it), the keepalive that keeps
a subscribed client known to a server that forgets idle native clients
(and, without it, the subscription being forgotten: delivery is best
effort), MONITOR lines for commands of other clients, and messages larger
than one datagram (rdma/dgram.h, "Pushed replies"): a 100 KB message and a
MONITOR line of a 10 KB value arrive whole, in order with small ones; one
over the 1 MB reply limit is replaced by a pushed error that says to use
TCP."""
import os
import queue
import re
import subprocess
import threading
import time

import pytest

from conftest import free_port
from test_librowan import LIBROWAN_TEST

pytestmark = pytest.mark.rowan_only("the native datagram path (issue 15)")


class Proc:
    """librowan-test running in the background; its stdout lines in a queue."""

    def __init__(self, *args):
        assert os.access(LIBROWAN_TEST, os.X_OK), "no %s: build it with `make`" % LIBROWAN_TEST
        self.p = subprocess.Popen([LIBROWAN_TEST] + [str(a) for a in args], text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.lines = queue.Queue()
        self.seen = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.p.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def expect(self, prefix, timeout=10.0):
        """The next line starting with prefix (earlier lines are kept in seen)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            assert left > 0, "no %r line; saw %r" % (prefix, self.seen[-10:])
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            assert line is not None, "exited (rc %s) before %r; saw %r; stderr %s" % (
                self.p.wait(), prefix, self.seen[-10:], self.p.stderr.read()[-2000:])
            self.seen.append(line)
            if line.startswith(prefix):
                return line[len(prefix):]

    def finish(self, timeout=15.0):
        rc = self.p.wait(timeout)
        while True:
            line = self.lines.get(timeout=5)
            if line is None:
                break
            self.seen.append(line)
        return rc, self.seen, self.p.stderr.read()

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()


@pytest.fixture
def nsrv(server_factory):
    port = free_port()
    return server_factory(extra={"native-port": port}, port=port)


@pytest.fixture
def procs():
    made = []
    yield lambda *a: made.append(Proc(*a)) or made[-1]
    for p in made:
        p.kill()


def publish_until_heard(r, proc, channel, payload, line, timeout=10.0):
    """Publish (again, as delivery is best effort) until proc prints line."""
    deadline = time.monotonic() + timeout
    while True:
        assert r.publish(channel, payload) == 1
        try:
            return proc.expect(line, timeout=1.0)
        except AssertionError:
            if time.monotonic() > deadline:
                raise


@pytest.mark.parametrize("mode", ["sub", "asub"])
def test_subscribe_messages_and_unsubscribe(nsrv, procs, mode):
    p = procs("127.0.0.1", nsrv.port, mode)
    p.expect("ready=")
    r = nsrv.client()
    assert r.pubsub_numsub("lr:ch1", "lr:ch2") == [(b"lr:ch1", 1), (b"lr:ch2", 1)]
    assert r.pubsub_numpat() == 1
    # channel messages, in order, over both channels
    sent = []
    for i in range(20):
        ch = "lr:ch%d" % (1 + i % 2)
        assert r.publish(ch, "m%d" % i) == 1
        sent.append("msg=message||%s|m%d" % (ch, i))
    got = [p.expect("msg=") for _ in sent]
    assert ["msg=" + g for g in got] == sent       # loopback: nothing lost here
    # a pipelined burst: the server packs several messages into one
    # datagram's payload; they come out one by one, in order
    pipe = r.pipeline(transaction=False)
    sent = []
    for i in range(100):
        pipe.publish("lr:ch1", "b%d" % i)
        sent.append("message||lr:ch1|b%d" % i)
    assert pipe.execute() == [1] * 100
    assert [p.expect("msg=") for _ in sent] == sent
    # a pattern message
    assert r.publish("lr:p:x", "pat-payload") == 1
    assert p.expect("msg=") == "pmessage|lr:p:*|lr:p:x|pat-payload"
    # UNSUBSCRIBE lr:ch1: the server has no receiver for it any more
    assert r.publish("lr:ch2", "unsub") == 1
    p.expect("msg=")
    if mode == "sub":
        assert p.expect("unsubscribed=") == "2"    # lr:ch2 and the pattern are left
    else:
        assert p.expect("unsubscribe=") == "lr:ch1|2"   # the channel's own callback, last call
    assert r.publish("lr:ch1", "after") == 0
    assert r.pubsub_numsub("lr:ch1") == [(b"lr:ch1", 0)]
    # PUNSUBSCRIBE: pattern messages stop
    assert r.publish("lr:p:y", "punsub") == 1
    p.expect("msg=")
    if mode == "sub":
        assert p.expect("punsubscribed=") == "1"
    else:
        assert p.expect("punsubscribe=") == "lr:p:*|1"
    assert r.publish("lr:p:z", "after") == 0
    assert r.publish("lr:ch2", "quit") == 1
    rc, seen, err = p.finish()
    assert rc == 0, err
    assert "done=1" in seen
    assert not any("after" in line for line in seen), seen
    if mode == "asub":
        # the callbacks ran with the privdata given with their SUBSCRIBE
        assert "priv=chan" in seen and "priv=pat" in seen


@pytest.mark.parametrize("mode", ["sub", "asub"])
def test_keepalive_keeps_subscription(server_factory, procs, mode):
    """The server forgets native clients idle for native-client-timeout (1 s
    here). A subscribed librowan context sends keepalives (300 ms here), so
    its subscription outlives the timeout several times over; with the
    keepalive longer than the timeout, the server forgets it and the
    message never comes (best effort: nothing tells the client)."""
    port = free_port()
    srv = server_factory(extra={"native-port": port, "native-client-timeout": 1}, port=port)
    r = srv.client()
    kept = procs("127.0.0.1", port, mode, 300)
    kept.expect("ready=")
    lost = procs("127.0.0.1", port, "sub", 30000)
    lost.expect("ready=")
    time.sleep(4.0)
    assert r.publish("lr:ch1", "still-here") == 1    # only the kept one is subscribed
    assert kept.expect("msg=") == "message||lr:ch1|still-here"
    with pytest.raises(AssertionError):
        lost.expect("msg=", timeout=1.5)
    assert r.publish("lr:ch2", "quit") == 1
    rc, seen, err = kept.finish()
    assert rc == 0, err


def big_payload(n, seed):
    """n bytes that differ from one offset to the next (a misplaced
    fragment shows), printable for librowan-test's lines."""
    base = "".join(chr(ord("a") + (i * 7 + seed) % 26) for i in range(997))
    return (base * (n // len(base) + 1))[:n]


@pytest.mark.parametrize("mode", ["sub", "asub"])
def test_large_messages(nsrv, procs, mode):
    p = procs("127.0.0.1", nsrv.port, mode)
    p.expect("ready=")
    r = nsrv.client()
    big = big_payload(100 * 1024, 1)
    assert r.publish("lr:ch1", big) == 1
    assert p.expect("msg=") == "message||lr:ch1|" + big
    # large ones between small ones, pipelined: the server sends each large
    # one alone in numbered fragments, the small ones grouped, in order
    pipe = r.pipeline(transaction=False)
    want = []
    for i in range(6):
        payload = big_payload(30000 + 20000 * i, i) if i % 2 else "small%d" % i
        pipe.publish("lr:ch2", payload)
        want.append("message||lr:ch2|" + payload)
    assert pipe.execute() == [1] * 6
    assert [p.expect("msg=") for _ in want] == want
    # a pattern message larger than a datagram
    assert r.publish("lr:p:big", big) == 1
    assert p.expect("msg=") == "pmessage|lr:p:*|lr:p:big|" + big
    assert r.publish("lr:ch2", "quit") == 1
    rc, seen, err = p.finish()
    assert rc == 0, err
    info = r.info("native")
    assert info["native_send_errors"] == 0


def test_message_over_reply_limit(nsrv, procs):
    """Over DGRAM_REPLY_MAX no fragments carry it: the subscriber gets a
    pushed error in its place, and later messages as before."""
    p = procs("127.0.0.1", nsrv.port, "sub")
    p.expect("ready=")
    r = nsrv.client()
    before = r.info("native")["native_replies_too_large"]
    assert r.publish("lr:ch1", "x" * (1100 * 1024)) == 1
    err = p.expect("pusherror=")
    m = re.match(r"ERR pushed message of (\d+) bytes dropped: .* at most 1048576 bytes; use TCP$",
                 err)
    assert m and int(m.group(1)) > 1100 * 1024, err   # the message as sent: RESP framing too
    assert r.info("native")["native_replies_too_large"] == before + 1
    assert r.publish("lr:ch1", "after-big") == 1
    assert p.expect("msg=") == "message||lr:ch1|after-big"
    assert r.publish("lr:ch2", "quit") == 1
    rc, seen, err = p.finish()
    assert rc == 0, err


@pytest.mark.parametrize("mode", ["monitor", "amonitor"])
def test_monitor_lines(nsrv, procs, mode):
    p = procs("127.0.0.1", nsrv.port, mode)
    p.expect("ready=")
    r = nsrv.client()
    r.set("lr:mon:a", "v1")
    r.get("lr:mon:a")
    line = p.expect("line=")
    assert '"set" "lr:mon:a" "v1"' in line.lower(), line
    line = p.expect("line=")
    assert '"get" "lr:mon:a"' in line.lower(), line
    # a line larger than one datagram comes whole
    value = big_payload(10000, 3)
    r.set("lr:mon:big", value)
    line = p.expect("line=")
    assert line.lower().endswith('"set" "lr:mon:big" "%s"' % value), line[:200]
    r.set("lr:mon:quit", "1")
    rc, seen, err = p.finish()
    assert rc == 0, err
    assert "done=1" in seen


@pytest.mark.parametrize("mode,managed", [("sub", False), ("asub", False), ("sub", True)])
def test_publish_reaches_other_nodes(cluster_factory, procs, mode, managed):
    """In a cluster, a PUBLISH on one node reaches the subscribers of every
    node, as Redis Cluster broadcasts it (redis-compat/pubsub_bus.c): a
    librowan subscriber and a RESP one on node 1 get what node 0
    publishes, in order, patterns and large messages included, in a
    static cluster and in a managed one. PUBLISH counts the receivers of
    its own node only, as in Redis Cluster."""
    from test_native import native_cluster
    cl = native_cluster(cluster_factory, 3 if managed else 2, 2, zookeeper=managed)
    far = cl.nodes[1]
    p = procs("127.0.0.1", far.native_port, mode)
    p.expect("ready=")
    resp_sub = far.client().pubsub()
    resp_sub.subscribe("lr:ch1")
    assert resp_sub.get_message(timeout=5)["type"] == "subscribe"
    r0 = cl.client(0)
    assert r0.publish("lr:ch1", "from-node0") == 0     # nobody on node 0
    assert p.expect("msg=") == "message||lr:ch1|from-node0"
    m = resp_sub.get_message(timeout=10)
    assert m and m["type"] == "message" and m["data"] == b"from-node0", m
    sent = []
    for i in range(30):
        assert r0.publish("lr:ch2", "n%d" % i) == 0
        sent.append("message||lr:ch2|n%d" % i)
    assert [p.expect("msg=") for _ in sent] == sent
    assert r0.publish("lr:p:far", "pat") == 0
    assert p.expect("msg=") == "pmessage|lr:p:*|lr:p:far|pat"
    big = big_payload(100 * 1024, 5)
    assert r0.publish("lr:ch1", big) == 0
    assert p.expect("msg=") == "message||lr:ch1|" + big
    # and the other way: node 1's PUBLISH reaches a subscriber on node 0
    near = cl.nodes[0].client().pubsub()
    near.subscribe("lr:back")
    assert near.get_message(timeout=5)["type"] == "subscribe"
    assert far.client().publish("lr:back", "to-node0") == 0
    m = near.get_message(timeout=10)
    assert m and m["data"] == b"to-node0", m
    assert r0.publish("lr:ch2", "quit") == 0
    rc, seen, err = p.finish()
    assert rc == 0, err
    resp_sub.close()
    near.close()
