"""Bitmaps: BITPOS, BITOP, BITFIELD and BITFIELD_RO (with SETBIT, GETBIT and
BITCOUNT), compared reply for reply with a real redis-server (see
differential.py): BYTE|BIT ranges, every overflow policy, signed and
unsigned widths up to i64/u63, "#n" offsets, bad arguments, WRONGTYPE, and
the proto-max-bulk-len limit on offsets. Then (Rowan only) bitmaps written
by these commands survive kill -9 and a restart byte for byte."""
import random

import pytest

from conftest import RespError
from differential import both, fresh_ref


@pytest.fixture
def ref(ref_srv):
    return fresh_ref(ref_srv)


def test_bitpos(c, ref):
    both(c, ref, "SET", "k", b"\x00\xff\xf0\x00")
    both(c, ref, "SET", "ones", b"\xff\xff")
    both(c, ref, "SET", "empty", "")
    for key in ("k", "ones", "empty", "nokey"):
        for bit in (0, 1):
            both(c, ref, "BITPOS", key, bit)
            for start in (0, 1, 2, -1, -3, -100, 7, 100):
                both(c, ref, "BITPOS", key, bit, start)
                for end in (0, 2, -1, -2, 3, 15, 31, 100, -100):
                    both(c, ref, "BITPOS", key, bit, start, end)
                    both(c, ref, "BITPOS", key, bit, start, end, "BIT")
                    both(c, ref, "BITPOS", key, bit, start, end, "byte")
    for bad in (("BITPOS", "k", 2), ("BITPOS", "k", "x"), ("BITPOS", "k", 1, "x"),
                ("BITPOS", "k", 1, 0, "y"), ("BITPOS", "k", 1, 0, 1, "bits"),
                ("BITPOS", "k", 1, 0, 1, "bit", "extra"), ("BITPOS", "k")):
        assert isinstance(both(c, ref, *bad), RespError)


def test_bitop(c, ref):
    both(c, ref, "SET", "a", b"foobar")
    both(c, ref, "SET", "b", b"\xff\x0f")
    both(c, ref, "SET", "c", b"abcdefghij")
    for op in ("AND", "or", "XOR"):
        assert both(c, ref, "BITOP", op, "d", "a", "b", "c", "missing") == 10
        both(c, ref, "GET", "d")
        both(c, ref, "BITOP", op, "d", "a")
        both(c, ref, "GET", "d")
    both(c, ref, "BITOP", "NOT", "d", "c")
    both(c, ref, "GET", "d")
    # an empty result deletes the destination (and its TTL goes with a write)
    both(c, ref, "SET", "d", "x", "EX", 100)
    assert both(c, ref, "BITOP", "AND", "d", "nokey1", "nokey2") == 0
    both(c, ref, "EXISTS", "d")
    both(c, ref, "SET", "d", "x", "EX", 100)
    both(c, ref, "BITOP", "OR", "d", "a")
    both(c, ref, "TTL", "d")
    both(c, ref, "RPUSH", "list", "x")
    for bad in (("BITOP", "NOT", "d", "a", "b"), ("BITOP", "NAND", "d", "a"),
                ("BITOP", "AND", "d", "a", "list"), ("BITOP", "AND", "d")):
        assert isinstance(both(c, ref, *bad), RespError)


def test_bitfield_ops_and_overflow(c, ref):
    both(c, ref, "BITFIELD", "bf", "SET", "i8", 0, 100, "GET", "i8", 0,
         "INCRBY", "i8", 0, 100, "OVERFLOW", "SAT", "INCRBY", "i8", 0, 100,
         "OVERFLOW", "FAIL", "INCRBY", "i8", 0, 100, "INCRBY", "i8", 0, -1)
    both(c, ref, "GET", "bf")
    both(c, ref, "BITFIELD", "w", "SET", "u4", 3, 15, "INCRBY", "u4", 3, 1,
         "OVERFLOW", "SAT", "INCRBY", "u4", 3, 100, "INCRBY", "u4", 3, -100,
         "OVERFLOW", "WRAP", "INCRBY", "i4", 3, 7, "INCRBY", "i4", 3, -30,
         "SET", "u2", 200, -1, "OVERFLOW", "sat", "SET", "u2", 210, -1,
         "SET", "i3", 220, 9, "SET", "i3", 230, -9)
    both(c, ref, "GET", "w")
    # the widest fields, "#n" offsets
    both(c, ref, "BITFIELD", "big", "SET", "u63", "#3", -1, "GET", "u63", "#3",
         "SET", "i64", 0, -9223372036854775808, "INCRBY", "i64", 0, -1,
         "OVERFLOW", "SAT", "INCRBY", "i64", 0, -1, "INCRBY", "i64", 0, 9223372036854775807,
         "OVERFLOW", "FAIL", "INCRBY", "i64", 0, 9223372036854775807, "GET", "i64", 0,
         "GET", "u1", "#1000", "GET", "i1", 0, "GET", "u63", 1)
    both(c, ref, "GET", "big")
    # writes that all FAIL still create / pad the string, as in Redis
    both(c, ref, "BITFIELD", "pad", "OVERFLOW", "FAIL", "SET", "u8", 100, 300)
    both(c, ref, "STRLEN", "pad")
    both(c, ref, "BITFIELD", "nokey")
    both(c, ref, "BITFIELD", "nokey", "GET", "u8", 0)
    both(c, ref, "EXISTS", "nokey")
    both(c, ref, "BITFIELD_RO", "w", "GET", "u8", 0, "GET", "i4", "#1")
    both(c, ref, "SET", "ttl", "abc", "EX", 100)
    both(c, ref, "BITFIELD", "ttl", "SET", "u8", 0, 65)
    both(c, ref, "TTL", "ttl")
    both(c, ref, "GET", "ttl")


def test_bitfield_random(c, ref):
    rnd = random.Random(7)
    for _ in range(300):
        args = ["BITFIELD", "rk"]
        for _ in range(rnd.randint(1, 5)):
            sign = rnd.choice("iu")
            bits = rnd.randint(1, 64 if sign == "i" else 63)
            off = rnd.choice([str(rnd.randint(0, 200)), "#%d" % rnd.randint(0, 10)])
            op = rnd.choice(["GET", "SET", "INCRBY", "OVERFLOW"])
            if op == "OVERFLOW":
                args += [op, rnd.choice(["WRAP", "SAT", "FAIL"])]
            elif op == "GET":
                args += [op, sign + str(bits), off]
            else:
                v = rnd.choice([rnd.randint(-2 ** 63, 2 ** 63 - 1), rnd.randint(-300, 300),
                                2 ** (bits - 1), -2 ** (bits - 1)])
                args += [op, sign + str(bits), off, v]
        both(c, ref, *args)
    both(c, ref, "GET", "rk")


def test_bitfield_errors(c, ref):
    both(c, ref, "SET", "s", "x")
    both(c, ref, "RPUSH", "list", "x")
    for bad in (("SET", "u64", 0, 1), ("SET", "i65", 0, 1), ("SET", "u0", 0, 1),
                ("SET", "x8", 0, 1), ("SET", "u8", -1, 1), ("SET", "u8", "#-1", 1),
                ("SET", "u8", "#x", 1), ("SET", "u8", 4294967296, 1),
                ("SET", "i8", "#536870912", 1), ("OVERFLOW", "what"), ("GET", "u8"),
                ("foo",), ("SET", "u8", 0, "abc"), ("INCRBY", "u8", 0, "1.5"),
                ("SET", "u8", 0)):
        assert isinstance(both(c, ref, "BITFIELD", "s", *bad), RespError)
    both(c, ref, "BITFIELD_RO", "s", "SET", "u8", 0, 1)
    both(c, ref, "BITFIELD_RO", "s", "INCRBY", "u8", 0, 1, "GET", "u8", 0)
    both(c, ref, "BITFIELD_RO", "list", "GET", "u8", 0)
    both(c, ref, "BITFIELD", "list", "GET", "u8", 0)
    both(c, ref, "BITFIELD", "list", "SET", "u8", 0, 1)
    both(c, ref, "GET", "s")
    both(c, ref, "SETBIT", "s", 4294967296, 1)
    both(c, ref, "GETBIT", "s", -1)
    both(c, ref, "BITCOUNT", "s", 0, -1, "BIT")


@pytest.mark.rowan_only("Rowan's value limit: the room in the pool")
def test_offset_limits_without_huge_allocation(c):
    # Redis accepts any offset under proto-max-bulk-len (512 MB) and builds
    # the string; a 512 MB value does not fit the test server's 64 MB pool,
    # so such a write is refused cleanly, never allocated.
    too_big = RespError("OOM command not allowed when the storage pool is full: the value "
                        "needs more log space than the pool has free")
    assert c.call("BITFIELD", "k", "SET", "u8", 4294967295, 1) == too_big
    assert c.call("SETBIT", "k", 4294967295, 1) == too_big
    assert c.call("BITFIELD", "k", "SET", "u8", 4294967296, 1) == \
        RespError("ERR bit offset is not an integer or out of range")
    assert c.call("BITFIELD", "k", "GET", "u8", 4294967295) == [0]
    assert c.call("EXISTS", "k") == 0


@pytest.mark.rowan_only("durability across kill -9")
def test_bitmaps_survive_kill9(server_factory):
    srv = server_factory()
    c = srv.resp()
    rnd = random.Random(3)
    c.call("SET", "src", bytes(rnd.getrandbits(8) for _ in range(300)))
    for i in range(200):
        c.call("BITFIELD", "bf", "OVERFLOW", "SAT", "INCRBY", "u7", "#%d" % (i % 50),
               rnd.randint(-100, 100), "SET", "i13", rnd.randint(0, 3000), rnd.randint(-5000, 5000))
    c.call("BITOP", "XOR", "x", "src", "bf")
    c.call("BITOP", "NOT", "n", "x")
    want = {k: c.call("GET", k) for k in ("src", "bf", "x", "n")}
    srv.kill9()
    srv.start()
    c = srv.resp()
    assert {k: c.call("GET", k) for k in want} == want
