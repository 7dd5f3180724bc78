"""Small hashes list their fields in insertion order, as Redis's listpack
encoding does: random HSET/HSETNX/HMSET/HINCRBY/HDEL sequences run on Rowan
and on a real redis-server, then HGETALL, HKEYS, HVALS, HSCAN and HRANDFIELD
(count >= size) compared exactly. The order survives kill -9, COPY, RENAME
and DUMP/RESTORE."""
import random
import shutil

import pytest


pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None,
                                reason="needs redis-server as the reference")


def random_ops(rnd, n=400, fields=20):
    ops = []
    for _ in range(n):
        f = "f%d" % rnd.randrange(fields)
        k = "h%d" % rnd.randrange(3)
        op = rnd.randrange(6)
        if op == 0:
            ops.append(("hset", k, f, "v%d" % rnd.randrange(100)))
        elif op == 1:
            ops.append(("hsetnx", k, f, "n"))
        elif op == 2:
            ops.append(("hset", k, f, "a", "f%d" % rnd.randrange(fields), "b"))
        elif op == 3:
            ops.append(("hincrby", k, "cnt%d" % rnd.randrange(3), 1))
        elif op == 4:
            ops.append(("hdel", k, f, "f%d" % rnd.randrange(fields)))
        else:
            ops.append(("hset", k, f, "x" * rnd.choice([1, 10, 64])))
    return ops


READS = [("hgetall", "h0"), ("hkeys", "h1"), ("hvals", "h2"), ("hscan", "h0", 0),
         ("hscan", "h1", 0, "match", "f1*"), ("hrandfield", "h2", 100, "withvalues"),
         ("hrandfield", "h0", 1000)]


def run(cl, cmds):
    return [repr(cl.call(*a)) for a in cmds]


def test_order_like_redis(server, ref_srv):
    rnd = random.Random(11)
    for round_ in range(5):
        ops = random_ops(rnd)
        cmds = [("flushall",)]
        for i, op in enumerate(ops):
            cmds.append(op)
            if i % 25 == 0:
                cmds.extend(READS)
        cmds.extend(READS)
        got = run(server.resp(), cmds)
        want = run(ref_srv.resp(), cmds)
        assert got == want, round_


def test_order_kept_by_copy_rename_restore_and_kill9(server_factory, ref_srv):
    srv = server_factory()
    c = srv.resp()
    fields = ["z", "a", "m", "b", "1", "-5", "y"]
    for f in fields:
        c.call("hset", "h", f, f + "v")
    c.call("hdel", "h", "a")
    c.call("hset", "h", "a", "again", "m", "changed")
    want = c.call("hkeys", "h")
    assert want == [b"z", b"m", b"b", b"1", b"-5", b"y", b"a"]
    c.call("copy", "h", "hc")
    c.call("rename", "hc", "hr")
    c.call("restore", "hd", 0, c.call("dump", "h"))
    # Redis restores Rowan's payload in the same order
    ref = ref_srv.resp()
    ref.call("del", "hd")
    ref.call("restore", "hd", 0, c.call("dump", "h"))
    assert ref.call("hkeys", "hd") == want
    srv.kill9()
    srv.start()
    c = srv.resp()
    for k in ("h", "hr", "hd"):
        assert c.call("hkeys", k) == want, k
    assert c.call("hgetall", "h")[1::2] == [b"zv", b"changed", b"bv", b"1v", b"-5v", b"yv", b"again"]
