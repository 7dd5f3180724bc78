"""Pub/sub: SUBSCRIBE, UNSUBSCRIBE, PSUBSCRIBE, PUNSUBSCRIBE, PUBLISH, PUBSUB
(Redis 7.2 behaviour), with subscribers spread over every worker."""
import threading
import time

import pytest

from conftest import Push, RawConn, RespClient, RespError, encode_command, wait_for

CONTEXT_ERR = ("ERR Can't execute '%s': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / "
               "QUIT / RESET are allowed in this context")


@pytest.fixture(autouse=True)
def _leave_no_keys(server):
    """Tests here also write through bare connections: leave the shared
    server empty for whatever test comes next."""
    yield
    cl = RespClient(server.port)
    try:
        cl.call("FLUSHALL")
    finally:
        cl.close()


def numsub(c, ch):
    return c.call("PUBSUB", "NUMSUB", ch)[1]


def test_subscribe_publish_unsubscribe(c, server):
    sub = server.resp()
    assert sub.call("SUBSCRIBE", "ch1", "ch2") == [b"subscribe", b"ch1", 1]
    assert sub.read_reply() == [b"subscribe", b"ch2", 2]
    assert c.call("PUBLISH", "ch1", "hello") == 1
    assert sub.read_reply() == [b"message", b"ch1", b"hello"]
    assert c.call("PUBLISH", "nobody", "x") == 0
    assert c.call("PUBLISH", "ch2", "") == 1
    assert sub.read_reply() == [b"message", b"ch2", b""]
    # subscribing twice counts once
    assert sub.call("SUBSCRIBE", "ch1") == [b"subscribe", b"ch1", 2]
    assert sub.call("UNSUBSCRIBE", "ch1") == [b"unsubscribe", b"ch1", 1]
    assert sub.call("UNSUBSCRIBE", "notsubscribed") == [b"unsubscribe", b"notsubscribed", 1]
    assert sub.call("UNSUBSCRIBE") == [b"unsubscribe", b"ch2", 0]
    assert sub.call("UNSUBSCRIBE") == [b"unsubscribe", None, 0]
    assert c.call("PUBLISH", "ch1", "x") == 0
    # out of the subscribed context: ordinary commands work again
    assert sub.call("SET", "k", "v") == "OK"


def test_binary_message(c, server):
    sub = server.resp()
    ch, msg = b"bin\x00\xffch", bytes(range(256)) * 40
    assert sub.call("SUBSCRIBE", ch) == [b"subscribe", ch, 1]
    assert c.call("PUBLISH", ch, msg) == 1
    assert sub.read_reply() == [b"message", ch, msg]


def test_pattern_subscriptions(c, server):
    sub = server.resp()
    assert sub.call("PSUBSCRIBE", "news.*", "h?llo") == [b"psubscribe", b"news.*", 1]
    assert sub.read_reply() == [b"psubscribe", b"h?llo", 2]
    assert sub.call("SUBSCRIBE", "news.art") == [b"subscribe", b"news.art", 3]
    # the channel subscription and the pattern both deliver, and both count
    assert c.call("PUBLISH", "news.art", "m1") == 2
    got = [sub.read_reply(), sub.read_reply()]
    assert sorted(got, key=len) == [[b"message", b"news.art", b"m1"],
                                    [b"pmessage", b"news.*", b"news.art", b"m1"]]
    assert c.call("PUBLISH", "hello", "m2") == 1
    assert sub.read_reply() == [b"pmessage", b"h?llo", b"hello", b"m2"]
    assert c.call("PUBLISH", "news", "m3") == 0
    assert c.call("PUBSUB", "NUMPAT") == 2
    assert sub.call("PUNSUBSCRIBE", "news.*") == [b"punsubscribe", b"news.*", 2]
    assert c.call("PUBLISH", "news.art", "m4") == 1
    assert sub.read_reply() == [b"message", b"news.art", b"m4"]
    assert sub.call("PUNSUBSCRIBE") == [b"punsubscribe", b"h?llo", 1]
    assert sub.call("PUNSUBSCRIBE") == [b"punsubscribe", None, 1]
    assert c.call("PUBSUB", "NUMPAT") == 0


def test_resp2_subscribed_context(server):
    sub = server.resp()
    assert sub.call("SUBSCRIBE", "ctx") == [b"subscribe", b"ctx", 1]
    assert sub.call("GET", "k") == RespError(CONTEXT_ERR % "get")
    assert sub.call("MULTI") == RespError(CONTEXT_ERR % "multi")
    assert sub.call("PING") == [b"pong", b""]
    assert sub.call("PING", "hi") == [b"pong", b"hi"]
    assert sub.call("PSUBSCRIBE", "x*") == [b"psubscribe", b"x*", 2]
    assert sub.call("UNSUBSCRIBE") == [b"unsubscribe", b"ctx", 1]
    assert sub.call("GET", "k") == RespError(CONTEXT_ERR % "get")
    assert sub.call("PUNSUBSCRIBE") == [b"punsubscribe", b"x*", 0]
    assert sub.call("GET", "k") is None
    assert sub.call("PING") == "PONG"


def test_reset_unsubscribes(c, server):
    sub = server.resp()
    assert sub.call("SUBSCRIBE", "rs") == [b"subscribe", b"rs", 1]
    assert sub.call("RESET") == "RESET"
    assert numsub(c, "rs") == 0
    assert sub.call("GET", "k") is None


def test_resp3_push_messages(c, server):
    sub = server.resp()
    hello = sub.call("HELLO", "3")
    assert not isinstance(hello, RespError)
    rep = sub.call("SUBSCRIBE", "r3")
    assert isinstance(rep, Push) and rep == [b"subscribe", b"r3", 1]
    # RESP3 clients may run any command while subscribed
    assert sub.call("SET", "k3", "v") == "OK"
    assert c.call("PUBLISH", "r3", "hi") == 1
    msg = sub.read_reply()
    assert isinstance(msg, Push) and msg == [b"message", b"r3", b"hi"]
    assert sub.call("GET", "k3") == b"v"


def test_pubsub_introspection(c, server):
    subs = [server.resp() for _ in range(3)]
    subs[0].call("SUBSCRIBE", "i.a", "i.b")
    subs[0].read_reply()
    subs[1].call("SUBSCRIBE", "i.a")
    subs[2].call("PSUBSCRIBE", "i.*")
    assert sorted(c.call("PUBSUB", "CHANNELS")) == [b"i.a", b"i.b"]
    assert c.call("PUBSUB", "CHANNELS", "*b") == [b"i.b"]
    assert c.call("PUBSUB", "NUMSUB", "i.a", "i.b", "i.c") == [b"i.a", 2, b"i.b", 1, b"i.c", 0]
    assert c.call("PUBSUB", "NUMSUB") == []
    assert c.call("PUBSUB", "NUMPAT") == 1
    assert c.call("PUBSUB", "SHARDCHANNELS") == []
    assert c.call("PUBSUB", "SHARDNUMSUB", "i.a") == [b"i.a", 0]
    assert c.call("PUBSUB", "FOO") == RespError("ERR unknown subcommand 'FOO'. Try PUBSUB HELP.")
    assert isinstance(c.call("PUBSUB", "HELP"), list)
    assert c.call("PUBLISH", "i.a", "x") == 3
    # a subscriber that goes away stops counting
    subs[1].close()
    assert wait_for(lambda: numsub(c, "i.a") == 1)
    assert c.call("PUBLISH", "i.a", "y") == 2


def test_redis_py_pubsub(r):
    p = r.pubsub()
    p.subscribe("rp")
    assert p.get_message(timeout=5)["type"] == "subscribe"
    assert r.publish("rp", "payload") == 1
    m = p.get_message(timeout=5)
    assert m["type"] == "message" and m["channel"] == b"rp" and m["data"] == b"payload"
    p.psubscribe("rp*")
    assert p.get_message(timeout=5)["type"] == "psubscribe"
    assert r.publish("rpx", "p2") == 1
    m = p.get_message(timeout=5)
    assert m["type"] == "pmessage" and m["pattern"] == b"rp*" and m["data"] == b"p2"
    p.close()


def test_publish_to_self_resp3(server):
    cn = server.resp()
    cn.call("HELLO", "3")
    assert cn.call("SUBSCRIBE", "self") == [b"subscribe", b"self", 1]
    cn.send_command("PUBLISH", "self", "me")
    got = [cn.read_reply(), cn.read_reply()]
    assert 1 in got and [b"message", b"self", b"me"] in got


def test_publish_inside_transaction(c, server):
    sub = server.resp()
    sub.call("SUBSCRIBE", "tx")
    assert c.call("MULTI") == "OK"
    assert c.call("SET", "a", "1") == "QUEUED"
    assert c.call("PUBLISH", "tx", "m") == "QUEUED"
    assert c.call("EXEC") == ["OK", 1]
    assert sub.read_reply() == [b"message", b"tx", b"m"]


def test_many_subscribers_across_workers(server):
    """Every subscriber, whatever worker serves it, receives every message,
    in publication order."""
    nsubs, nmsgs = 24, 200
    subs = []
    for i in range(nsubs):
        s = RawConn(server.port)
        assert s.call("SUBSCRIBE", "fan") == [b"subscribe", b"fan", 1]
        subs.append(s)
    if len(subs) > 1:
        s = subs[0]
        assert s.call("PSUBSCRIBE", "f*") == [b"psubscribe", b"f*", 2]
    pub = RawConn(server.port)
    pub.send(b"".join(encode_command("PUBLISH", "fan", "m%d" % i) for i in range(nmsgs)))
    counts = [pub.read_reply() for _ in range(nmsgs)]
    assert counts == [nsubs + 1] * nmsgs
    for idx, s in enumerate(subs):
        got = [s.read_reply() for _ in range(nmsgs * (2 if idx == 0 else 1))]
        plain = [m[2] for m in got if m[0] == b"message"]
        assert plain == [b"m%d" % i for i in range(nmsgs)], "subscriber %d" % idx
        if idx == 0:
            pat = [m[3] for m in got if m[0] == b"pmessage"]
            assert pat == [b"m%d" % i for i in range(nmsgs)]
    for s in subs + [pub]:
        s.close()


def test_concurrent_publishers_and_churning_subscribers(server):
    """Publishers on several connections while subscribers come and go: no
    crash, and steady subscribers get every message of each publisher in
    order."""
    npub, per = 4, 300
    steady = [RawConn(server.port) for _ in range(4)]
    for s in steady:
        assert s.call("PSUBSCRIBE", "churn.*") == [b"psubscribe", b"churn.*", 1]
    stop = threading.Event()
    errors = []

    def churner():
        try:
            while not stop.is_set():
                s = RawConn(server.port)
                s.call("SUBSCRIBE", "churn.0", "churn.1")
                s.read_reply()
                s.close()         # goes away with messages possibly queued
        except Exception as e:  # surfaced below
            errors.append(e)

    def publisher(p):
        try:
            cn = RawConn(server.port)
            for i in range(per):
                rep = cn.call("PUBLISH", "churn.%d" % p, "%d:%d" % (p, i))
                assert isinstance(rep, int) and rep >= 4, rep
            cn.close()
        except Exception as e:  # surfaced below
            errors.append(e)

    ch = [threading.Thread(target=churner) for _ in range(3)]
    ps = [threading.Thread(target=publisher, args=(p,)) for p in range(npub)]
    for t in ch + ps:
        t.start()
    for t in ps:
        t.join(60)
    stop.set()
    for t in ch:
        t.join(30)
    assert not errors, errors[0]
    for s in steady:
        seen = {p: [] for p in range(npub)}
        for _ in range(npub * per):
            m = s.read_reply()
            assert m[0] == b"pmessage"
            p, i = m[3].decode().split(":")
            seen[int(p)].append(int(i))
        for p in range(npub):
            assert seen[p] == list(range(per))
        s.close()
    assert server.alive()


def test_unsubscribed_publish_reply_order(c):
    """A PUBLISH reply keeps its place among the connection's other replies."""
    c.send(encode_command("SET", "o", "1") + encode_command("PUBLISH", "none", "x") +
           encode_command("GET", "o"))
    assert [c.read_reply() for _ in range(3)] == ["OK", 0, b"1"]
