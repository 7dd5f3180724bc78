"""Sharded pub/sub (SSUBSCRIBE, SUNSUBSCRIBE, SPUBLISH, PUBSUB SHARDCHANNELS /
SHARDNUMSUB) against a real redis-server: the same script of commands on
two connections, transcripts compared (RESP2 and RESP3)."""
import shutil

import pytest


pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None,
                                reason="needs redis-server as the reference")


def transcript(srv, proto):
    sub, pub = srv.resp(), srv.resp()
    out = []

    def call(cl, *a):
        out.append(repr(cl.call(*a)))

    def read(cl, n=1):
        for _ in range(n):
            out.append(repr(cl.read_reply()))

    if proto == 3:
        sub.call("hello", 3)
        pub.call("hello", 3)
    sub.send_command("ssubscribe", "a", "b", "a")
    read(sub, 3)
    sub.send_command("subscribe", "x")
    read(sub)
    sub.send_command("psubscribe", "*")
    read(sub)
    call(pub, "spublish", "a", "hello")
    read(sub)                                  # smessage only: patterns ignore shard channels
    call(pub, "publish", "a", "plain")         # no plain subscriber of a; the pattern gets it
    read(sub)
    call(pub, "spublish", "x", "nobody")      # x is a plain channel
    out.append(sorted(pub.call("pubsub", "shardchannels")))   # table order is Redis's own
    call(pub, "pubsub", "shardchannels", "a*")
    call(pub, "pubsub", "shardnumsub", "a", "b", "zz")
    call(pub, "pubsub", "channels")
    call(pub, "pubsub", "numsub", "a", "x")
    if proto == 2:
        call(sub, "get", "k")                  # the RESP2 context rule
        call(sub, "ping")
    sub.send_command("sunsubscribe", "a", "nope")
    read(sub, 2)
    sub.send_command("unsubscribe")
    read(sub)
    sub.send_command("punsubscribe")
    read(sub)
    if proto == 2:
        call(sub, "get", "k")                  # still subscribed to b
    sub.send_command("sunsubscribe")
    read(sub)
    sub.send_command("sunsubscribe")
    read(sub)
    call(sub, "get", "k")                      # out of the context now
    call(pub, "pubsub", "shardchannels")
    call(pub, "spublish", "b", "gone")
    call(pub, "spublish")
    call(pub, "ssubscribe")
    sub.close()
    pub.close()
    return out


@pytest.mark.parametrize("proto", [2, 3])
def test_sharded_pubsub_like_redis(server, ref_srv, proto):
    assert transcript(server, proto) == transcript(ref_srv, proto)


def test_sharded_pubsub_follows_cluster_slots(cluster_factory):
    """In a cluster the shard channels route like keys: -MOVED to the slot's
    primary, -CROSSSLOT for channels of different slots; the primary
    delivers."""
    from conftest import key_slot
    from test_cluster import key_for_slot, owner_map
    cl = cluster_factory(2, 2)
    owner = owner_map(cl)
    here = next(s for s in range(16384) if owner[s] == 0)
    other = next(s for s in range(16384) if owner[s] == 1)
    ch_here, ch_other = key_for_slot(here), key_for_slot(other)
    assert key_slot(ch_here) == here
    c0 = cl.nodes[0].resp()
    assert c0.err("SPUBLISH", ch_other, "m") == "MOVED %d 127.0.0.1:%d" % (other, cl.nodes[1].port)
    assert c0.err("SSUBSCRIBE", ch_other) == "MOVED %d 127.0.0.1:%d" % (other, cl.nodes[1].port)
    assert c0.err("SSUBSCRIBE", ch_here, ch_other) == \
        "CROSSSLOT Keys in request don't hash to the same slot"
    sub = cl.nodes[0].resp()
    sub.send_command("SSUBSCRIBE", ch_here)
    assert sub.read_reply() == [b"ssubscribe", ch_here.encode(), 1]
    assert c0.call("SPUBLISH", ch_here, "hi") == 1
    assert sub.read_reply() == [b"smessage", ch_here.encode(), b"hi"]
