"""BITPOS, BITOP, BITFIELD and BITFIELD_RO against a real redis-server:
fixed edge cases and random sequences, replies and resulting values
compared exactly."""
import random
import shutil

import pytest

from conftest import Server

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None,
                                reason="needs redis-server as the reference")


@pytest.fixture(scope="module")
def ref_srv():
    srv = Server("redis")
    srv.start()
    yield srv
    srv.stop()
    srv.cleanup()


def run(srv, cmds):
    cl = srv.resp()
    out = [repr(cl.call(*a)) for a in cmds]
    cl.close()
    return out


SETUP = [("flushall",), ("set", "a", b"\xff\xf0\x00"), ("set", "b", b"\x00\x00\x01\x80"),
         ("set", "z", b"\x00\x00"), ("set", "ones", b"\xff\xff"), ("set", "e", ""),
         ("rpush", "lst", "x"), ("set", "s", "foobar")]

FIXED = [
    ("bitpos", "a", 0), ("bitpos", "a", 1), ("bitpos", "ones", 0), ("bitpos", "ones", 1),
    ("bitpos", "ones", 0, 0, -1), ("bitpos", "z", 1), ("bitpos", "z", 0), ("bitpos", "e", 0),
    ("bitpos", "e", 1), ("bitpos", "missing", 0), ("bitpos", "missing", 1),
    ("bitpos", "missing", 1, "x"), ("bitpos", "a", 2), ("bitpos", "a", "x"),
    ("bitpos", "a", 1, "x"), ("bitpos", "a", 1, 0, "y"), ("bitpos", "a", 1, 0, 1, "bogus"),
    ("bitpos", "a", 1, 0, 1, "bit", "extra"), ("bitpos", "b", 1, 2), ("bitpos", "b", 1, -1),
    ("bitpos", "b", 1, 7, 15, "bit"), ("bitpos", "b", 1, 17, 23, "BIT"),
    ("bitpos", "b", 0, 3, 2), ("bitpos", "a", 0, 1, 1, "byte"), ("bitpos", "lst", 1),
    ("bitpos", "s", 1, 2, -1, "bit"), ("bitpos", "s", 0, -5, -2, "bit"),
    ("bitop", "and", "d", "a", "b"), ("get", "d"), ("bitop", "or", "d", "a", "b", "missing"),
    ("get", "d"), ("bitop", "xor", "d", "a", "b", "s"), ("get", "d"), ("bitop", "not", "d", "a"),
    ("get", "d"), ("bitop", "not", "d", "a", "b"), ("bitop", "nand", "d", "a"),
    ("bitop", "and", "d", "missing", "missing2"), ("exists", "d"), ("bitop", "and", "d", "lst"),
    ("set", "d", "x", "ex", 100), ("bitop", "or", "d", "a"), ("ttl", "d"),
    ("bitop", "and", "d"), ("bitop", "and", "d", "e"), ("exists", "d"),
    ("bitfield", "bf", "set", "i8", 0, 100, "get", "u4", 0, "incrby", "i8", 0, 100),
    ("bitfield", "bf", "overflow", "sat", "incrby", "i8", 0, 100, "incrby", "u2", 100, -5),
    ("bitfield", "bf", "overflow", "fail", "incrby", "i8", 0, 1, "set", "u3", "#2", 9,
     "get", "u3", "#2"),
    ("bitfield", "bf", "overflow", "wrap", "set", "u3", "#2", 9, "get", "u3", "#2"),
    ("bitfield", "bf", "set", "i64", 0, -1, "get", "i64", 0, "incrby", "i64", 0, -9223372036854775807),
    ("bitfield", "bf", "overflow", "sat", "incrby", "i64", 0, -10, "incrby", "i64", 64, 9223372036854775807,
     "incrby", "i64", 64, 1),
    ("bitfield", "bf", "overflow", "sat", "set", "u8", 8, -5, "set", "i4", 3, 100, "set", "i4", 3, -100),
    ("bitfield", "bf", "get", "u63", 1, "get", "i1", 0, "get", "u1", 3),
    ("get", "bf"),
    ("bitfield", "bf"), ("bitfield", "bf", "get", "u64", 0), ("bitfield", "bf", "get", "i65", 0),
    ("bitfield", "bf", "get", "u0", 0), ("bitfield", "bf", "get", "x8", 0),
    ("bitfield", "bf", "get", "i8", -1), ("bitfield", "bf", "get", "i8", "#-1"),
    ("bitfield", "bf", "get", "i8", 4294967296), ("bitfield", "bf", "get", "i8", "x"),
    ("bitfield", "bf", "set", "i8", 0, "x"), ("bitfield", "bf", "set", "i8", 0),
    ("bitfield", "bf", "overflow", "maybe", "get", "i8", 0), ("bitfield", "bf", "overflow"),
    ("bitfield", "bf", "bogus", "i8", 0), ("bitfield", "lst", "get", "i8", 0),
    ("bitfield", "lst", "set", "i8", 0, 1), ("bitfield", "missing", "get", "u8", 0),
    ("exists", "missing"), ("bitfield", "nf", "overflow", "fail", "set", "u2", 100, 9),
    ("get", "nf"),
    ("bitfield_ro", "bf", "get", "i8", 0, "get", "u16", "#1"), ("bitfield_ro", "bf", "set", "i8", 0, 1),
    ("bitfield_ro", "lst", "get", "i8", 0), ("bitfield_ro", "missing", "get", "i8", 0),
    ("bitfield_ro", "bf"),
    ("set", "t", "abc", "ex", 100), ("bitfield", "t", "set", "u8", 0, 65), ("get", "t"), ("ttl", "t"),
]


def test_fixed_cases_like_redis(server, ref_srv):
    cmds = SETUP + FIXED
    assert run(server, cmds) == run(ref_srv, cmds)


def random_cmds(rnd):
    cmds = list(SETUP)
    keys = ["a", "b", "z", "s", "k1", "k2", "e"]
    for _ in range(400):
        k = rnd.choice(keys)
        t = rnd.randrange(5)
        if t == 0:
            args = ["bitpos", k, rnd.randrange(2)]
            if rnd.random() < 0.7:
                args.append(rnd.randrange(-20, 20))
                if rnd.random() < 0.7:
                    args.append(rnd.randrange(-20, 40))
                    if rnd.random() < 0.5:
                        args.append(rnd.choice(["bit", "byte"]))
            cmds.append(tuple(args))
        elif t == 1:
            cmds.append(("bitop", rnd.choice(["and", "or", "xor"]), rnd.choice(keys),
                         *rnd.sample(keys, rnd.randrange(1, 4))))
        elif t == 2:
            cmds.append(("bitop", "not", rnd.choice(keys), rnd.choice(keys)))
        else:
            args = ["bitfield" if t == 3 else "bitfield_ro", k]
            for _ in range(rnd.randrange(1, 5)):
                sign = rnd.choice("iu")
                bits = rnd.randrange(1, 65 if sign == "i" else 64)
                off = rnd.choice([str(rnd.randrange(0, 80)), "#%d" % rnd.randrange(0, 5)])
                kind = "get" if t == 4 else rnd.choice(["get", "set", "incrby", "overflow"])
                if kind == "overflow":
                    args += ["overflow", rnd.choice(["wrap", "sat", "fail"])]
                elif kind == "get":
                    args += ["get", sign + str(bits), off]
                else:
                    v = rnd.choice([rnd.randrange(-300, 300), rnd.randrange(-2 ** 63, 2 ** 63)])
                    args += [kind, sign + str(bits), off, v]
            cmds.append(tuple(args))
        if rnd.random() < 0.2:
            cmds.append(("get", k))
    cmds += [("get", k) for k in keys]
    return cmds


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_like_redis(server, ref_srv, seed):
    cmds = random_cmds(random.Random(seed))
    got, want = run(server, cmds), run(ref_srv, cmds)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g == w, (i, cmds[i])


def test_bitfield_survives_kill9(server_factory):
    srv = server_factory()
    c = srv.resp()
    c.call("bitfield", "k", "set", "u8", 0, 200, "incrby", "i16", "#3", -5)
    c.call("bitop", "not", "n", "k")
    want = (c.call("get", "k"), c.call("get", "n"))
    srv.kill9()
    srv.start()
    c = srv.resp()
    assert (c.call("get", "k"), c.call("get", "n")) == want


def test_huge_field_offset_refused_without_allocating(r):
    import redis
    with pytest.raises(redis.ResponseError, match="too large|not an integer"):
        r.execute_command("bitfield", "k", "set", "u8", 4000000000, 1)
    assert r.exists("k") == 0
