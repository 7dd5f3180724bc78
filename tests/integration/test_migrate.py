"""MIGRATE between Rowan and a real redis-server, both ways: the same
scenario run Redis->Rowan and Rowan->Redis must give the same replies and
leave the same data (single key, KEYS, COPY, REPLACE, BUSYKEY, NOKEY, AUTH,
AUTH2, bad arguments, an unreachable target)."""
import shutil

import pytest
import redis

from conftest import Server, free_port

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None,
                                reason="needs redis-server as the reference")


def run(cl, *args):
    try:
        return cl.execute_command(*args)
    except redis.ResponseError as e:
        return "ERR:" + str(e)


def scenario(src, dst, dport):
    src.flushall()
    dst.flushall()
    dead = free_port()
    out = []
    src.set("k", "v")
    src.rpush("l", 1, 2, 3)
    src.hset("h", "f", "v")
    src.zadd("z", {"a": 1.5})
    src.sadd("s", "x", "y")
    src.set("t", "x", px=100000)
    m = ("migrate", "127.0.0.1", dport)
    out.append(run(src, *m, "k", 0, 5000))
    out.append((src.exists("k"), dst.get("k")))
    out.append(run(src, *m, "", 0, 5000, "copy", "keys", "l", "h", "nokey", "t", "z", "s"))
    out.append((src.exists("l", "h", "t", "z", "s"), dst.lrange("l", 0, -1), dst.hgetall("h"),
                dst.zrange("z", 0, -1, withscores=True), sorted(dst.smembers("s")),
                90000 < dst.pttl("t") <= 100000))
    out.append(run(src, *m, "", 0, 5000, "keys", "l", "h"))       # BUSYKEY
    src.set("k2", "z")
    out.append(run(src, *m, "", 0, 5000, "keys", "k2", "l"))      # k2 moves, l is busy
    out.append(src.exists("k2", "l"))
    src.set("k2", "again")
    out.append(run(src, *m, "", 0, 5000, "replace", "keys", "k2", "h"))
    out.append((src.exists("k2", "h"), dst.get("k2")))
    out.append(run(src, *m, "nokey", 0, 5000))
    out.append(run(src, "migrate", "127.0.0.1", dead, "t", 0, 1000))
    out.append(run(src, *m, "t", 0, 5000, "auth", "pw"))
    out.append(run(src, *m, "t", 0, 5000, "auth2", "u", "pw"))
    out.append(run(src, *m, "t", 0, 5000, "auth"))
    out.append(run(src, *m, "t", 0, 5000, "auth2", "u"))
    out.append(run(src, *m, "t", 0, 5000, "bogus"))
    out.append(run(src, *m, "t", 0, 5000, "keys", "t"))
    out.append(run(src, *m, "t", 99, 5000))
    out.append(run(src, *m, "t", "x", 5000))
    out.append(run(src, *m, "t", 0, "y"))
    out.append(run(src, *m, "t", 1, 0))                            # timeout 0 = 1000 ms
    out.append(src.exists("t"))
    dst.execute_command("select", 1)
    out.append(dst.exists("t"))
    return out


def test_migrate_both_ways(server, r, ref_srv):
    ref = ref_srv.client()
    to_rowan = scenario(ref, r, server.port)
    to_redis = scenario(r, ref, ref_srv.port)
    assert to_rowan == to_redis
    assert to_rowan[0] == b"OK" and to_rowan[1] == (0, b"v")
    assert to_rowan[5].startswith("ERR:Target instance replied with error: BUSYKEY")
    assert to_rowan[6] == 1   # k2 left, l stayed


def test_migrate_auth(server_factory, r):
    for target in ("redis", "rowan"):
        dst = Server(target, extra={"requirepass": "pw"})
        dst.start()
        try:
            r.flushall()
            r.set("a", "1")
            r.set("b", "2")
            assert run(r, "migrate", "127.0.0.1", dst.port, "a", 0, 5000, "auth", "bad") \
                .startswith("ERR:Target instance replied with error: WRONGPASS")
            assert r.exists("a") == 1
            assert run(r, "migrate", "127.0.0.1", dst.port, "a", 0, 5000, "auth", "pw") == b"OK"
            assert run(r, "migrate", "127.0.0.1", dst.port, "b", 0, 5000,
                       "auth2", "default", "pw") == b"OK"
            assert r.exists("a", "b") == 0
            d = dst.client(password="pw")
            assert d.mget("a", "b") == [b"1", b"2"]
            d.close()
        finally:
            dst.stop()
            dst.cleanup()


def test_migrate_timeout_like_redis(server, r, ref_srv):
    """A target that accepts but never answers: IOERR after the timeout, and
    the key stays."""
    import socket
    import time
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    port = silent.getsockname()[1]
    try:
        answers = []
        for cl in (r, ref_srv.client()):
            cl.set("k", "v")
            t0 = time.monotonic()
            answers.append(run(cl, "migrate", "127.0.0.1", port, "k", 0, 300))
            assert time.monotonic() - t0 < 5
            assert cl.exists("k") == 1
        assert answers[0] == answers[1]
        assert answers[0].startswith("ERR:IOERR")
    finally:
        silent.close()


def test_migrate_streams_both_ways(server, r, ref_srv):
    """A stream with groups, consumers and pending entries, an HLL and a
    geo set move by MIGRATE Redis->Rowan->Redis and read the same."""
    from test_dump import fill_stream, stream_state
    ref = ref_srv.client()
    ref.flushall()
    fill_stream(ref, "st", 9)
    ref.pfadd("hll", *["e%d" % i for i in range(300)])
    ref.geoadd("geo", (13.361389, 38.115556, "Palermo"))
    want = stream_state(ref, "st"), ref.pfcount("hll"), ref.geopos("geo", "Palermo")
    assert ref.migrate("127.0.0.1", server.port, ["st", "hll", "geo"], 0, 5000)
    assert (stream_state(r, "st"), r.pfcount("hll"), r.geopos("geo", "Palermo")) == want
    assert r.migrate("127.0.0.1", ref_srv.port, ["st", "hll", "geo"], 0, 5000)
    assert r.exists("st", "hll", "geo") == 0
    assert (stream_state(ref, "st"), ref.pfcount("hll"), ref.geopos("geo", "Palermo")) == want
