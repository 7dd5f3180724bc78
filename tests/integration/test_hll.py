"""HyperLogLog: PFADD, PFCOUNT, PFMERGE compared byte for byte with a real
redis-server (differential.py): the same adds must leave the same string
(GET: header, cache, sparse runs or dense registers) and give the same
counts, through the sparse encoding, its hll-sparse-max-bytes limit, the
move to dense, merges and the union count. HLL values copied between the
two servers with GET/SET keep working. Corrupt and foreign strings get
Redis's WRONGTYPE / INVALIDOBJ errors. Then (Rowan only) HLLs survive
kill -9 and a restart byte for byte."""
import random
import struct

import pytest

from conftest import RespError
from differential import both, call, fresh_ref

E_NOT_HLL = RespError("WRONGTYPE Key is not a valid HyperLogLog string value.")
E_CORRUPT = RespError("INVALIDOBJ Corrupted HLL object detected")


@pytest.fixture
def ref(ref_srv):
    cl = fresh_ref(ref_srv)
    cl.call("CONFIG", "SET", "hll-sparse-max-bytes", "3000")
    return cl


def same_bytes(c, ref, key):
    return both(c, ref, "GET", key)


def test_small_adds_and_cache(c, ref):
    assert both(c, ref, "PFADD", "h") == 1          # created: cache marked stale
    same_bytes(c, ref, "h")
    assert both(c, ref, "PFADD", "h") == 0
    assert both(c, ref, "PFCOUNT", "h") == 0
    same_bytes(c, ref, "h")                          # the count is cached in the header
    for batch in (["a"], ["a"], ["b", "c", "d"], ["x%d" % i for i in range(30)]):
        both(c, ref, "PFADD", "h", *batch)
        same_bytes(c, ref, "h")
        both(c, ref, "PFCOUNT", "h")
        same_bytes(c, ref, "h")
    both(c, ref, "PFCOUNT", "h", "nokey", "h")
    both(c, ref, "PFCOUNT", "nokey")
    both(c, ref, "PFCOUNT", "nokey", "nokey2")


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_sequences_sparse_to_dense(c, ref, seed):
    rnd = random.Random(seed)
    n = 0
    while n < 3000:
        k = rnd.choice([1, 1, 2, 5, 20])
        els = [("e%d" % rnd.randint(0, 5000)).encode() if rnd.random() < 0.9
               else bytes(rnd.getrandbits(8) for _ in range(rnd.randint(0, 20)))
               for _ in range(k)]
        n += k
        both(c, ref, "PFADD", "h", *els)
        if rnd.random() < 0.2:
            both(c, ref, "PFCOUNT", "h")
        if rnd.random() < 0.3:
            same_bytes(c, ref, "h")
    raw = same_bytes(c, ref, "h")
    assert raw[4] == 0, "3000 adds should have gone dense"
    both(c, ref, "PFCOUNT", "h")
    same_bytes(c, ref, "h")


def test_sparse_max_bytes_and_large_counts(c, ref):
    for size in (0, 100, 20000):
        c.call("CONFIG", "SET", "hll-sparse-max-bytes", size)
        ref.call("CONFIG", "SET", "hll-sparse-max-bytes", size)
        both(c, ref, "DEL", "h")
        for i in range(0, 600, 7):
            both(c, ref, "PFADD", "h", *["v%d-%d" % (size, j) for j in range(i, i + 7)])
            same_bytes(c, ref, "h")
        both(c, ref, "PFCOUNT", "h")
    both(c, ref, "CONFIG", "GET", "hll-sparse-max-bytes")
    both(c, ref, "CONFIG", "SET", "hll-sparse-max-bytes", "-1")
    # big cardinalities: counts stay equal far past the linear range
    c.call("CONFIG", "SET", "hll-sparse-max-bytes", 3000)
    ref.call("CONFIG", "SET", "hll-sparse-max-bytes", 3000)
    for start in range(0, 100000, 5000):
        both(c, ref, "PFADD", "big", *range(start, start + 5000))
        both(c, ref, "PFCOUNT", "big")
    same_bytes(c, ref, "big")


def test_merge_and_union(c, ref):
    rnd = random.Random(9)
    for name, n in (("s1", 10), ("s2", 200), ("d1", 5000), ("d2", 3000)):
        both(c, ref, "PFADD", name, *["%s-%d" % (name[0], rnd.randint(0, 8000)) for _ in range(n)])
    for srcs in (["s1"], ["s1", "s2"], ["s2", "d1"], ["d1", "d2", "s1", "nokey"], ["nokey"]):
        both(c, ref, "PFCOUNT", *srcs)
        both(c, ref, "DEL", "dst")
        assert both(c, ref, "PFMERGE", "dst", *srcs) == "OK"
        same_bytes(c, ref, "dst")
        both(c, ref, "PFCOUNT", "dst")
    # merging into an existing key includes it; its TTL stays
    both(c, ref, "PFADD", "dst2", "own1", "own2")
    both(c, ref, "EXPIRE", "dst2", 100)
    both(c, ref, "PFMERGE", "dst2", "s1", "s2")
    same_bytes(c, ref, "dst2")
    both(c, ref, "TTL", "dst2")
    both(c, ref, "PFMERGE", "dst3")
    same_bytes(c, ref, "dst3")


def test_values_interchangeable_with_redis(c, ref):
    rnd = random.Random(5)
    for n in (3, 300, 4000):
        ref.call("DEL", "h")
        ref.call("PFADD", "h", *["z%d" % rnd.randint(0, 10 ** 6) for _ in range(n)])
        blob = ref.call("GET", "h")
        c.call("SET", "h", blob)                       # Redis's bytes into Rowan
        extra = ["y%d" % i for i in range(50)]
        both(c, ref, "PFADD", "h", *extra)
        same_bytes(c, ref, "h")
        both(c, ref, "PFCOUNT", "h")
        mine = c.call("GET", "h")
        ref.call("SET", "h2", mine)                    # and Rowan's back into Redis
        assert ref.call("PFCOUNT", "h2") == c.call("PFCOUNT", "h")


def test_errors(c, ref):
    both(c, ref, "SET", "str", "hello world, not an hll")
    both(c, ref, "SET", "num", "12345")
    both(c, ref, "RPUSH", "list", "a")
    for key in ("str", "num"):
        assert both(c, ref, "PFADD", key, "a") == E_NOT_HLL
        assert both(c, ref, "PFCOUNT", key) == E_NOT_HLL
        assert both(c, ref, "PFCOUNT", "nokey", key) == E_NOT_HLL
        assert both(c, ref, "PFMERGE", "d", key) == E_NOT_HLL
    assert both(c, ref, "PFADD", "list", "a") == RespError(
        "WRONGTYPE Operation against a key holding the wrong kind of value")
    both(c, ref, "PFCOUNT", "list")
    both(c, ref, "PFMERGE", "list", "nokey")
    hdr = b"HYLL"
    bad = {
        "badenc": hdr + b"\x02" + b"\x00" * 11 + b"\x7f\xff",
        "shortdense": hdr + b"\x00" + b"\x00" * 11 + b"\x00" * 100,
        "short": b"HYLL\x01",
        # sparse runs covering too few / too many registers
        "few": hdr + b"\x01" + b"\x00" * 7 + b"\x00" * 3 + b"\x80" + b"\x7f\xfe",
        "many": hdr + b"\x01" + b"\x00" * 7 + b"\x00" * 3 + b"\x80" + b"\x7f\xff\x00",
        "cut": hdr + b"\x01" + b"\x00" * 7 + b"\x00" * 3 + b"\x80" + b"\x7f",
    }
    for k, v in bad.items():
        both(c, ref, "SET", k, v)
        both(c, ref, "PFCOUNT", k)
        both(c, ref, "PFCOUNT", k, "nokey")
        both(c, ref, "PFMERGE", "dst", k)
        if k == "cut":
            # Redis reads the string's hidden terminating NUL as the cut
            # XZERO's second byte and goes on writing; Rowan refuses it.
            assert c.call("PFADD", k, "a", "b") == E_CORRUPT
            continue
        both(c, ref, "PFADD", k, "a", "b")
        both(c, ref, "PFADD", k, *["m%d" % i for i in range(100)])
    # a dense HLL with a stale cache and registers no add could produce
    dense = bytearray(hdr + b"\x00" + b"\x00" * 10 + b"\x80" + b"\xff" * 12288)
    both(c, ref, "SET", "dense63", bytes(dense))
    both(c, ref, "PFCOUNT", "dense63")
    both(c, ref, "PFADD", "dense63", "q")


@pytest.mark.rowan_only("durability across kill -9")
def test_hll_survives_kill9(server_factory):
    srv = server_factory()
    c = srv.resp()
    c.call("PFADD", "sparse", *["a%d" % i for i in range(50)])
    c.call("PFADD", "dense", *["b%d" % i for i in range(5000)])
    c.call("PFCOUNT", "dense")                      # caches the count in the header
    c.call("PFMERGE", "both", "sparse", "dense")
    c.call("PFADD", "ttl", "x")
    c.call("EXPIRE", "ttl", 1000)
    counts = {k: c.call("PFCOUNT", k) for k in ("sparse", "dense")}
    want = {k: c.call("GET", k) for k in ("sparse", "dense", "both", "ttl")}
    srv.kill9()
    srv.start()
    c = srv.resp()
    assert {k: c.call("GET", k) for k in want} == want
    assert {k: c.call("PFCOUNT", k) for k in counts} == counts
    assert c.call("GET", "both") == want["both"]     # PFMERGE left its cache stale
    assert c.call("PFCOUNT", "both") >= counts["dense"]
    assert 0 < c.call("TTL", "ttl") <= 1000


def test_pfdebug_and_selftest(c, ref):
    both(c, ref, "PFADD", "h", *["p%d" % i for i in range(40)])
    both(c, ref, "PFDEBUG", "DECODE", "h")
    both(c, ref, "PFDEBUG", "ENCODING", "h")
    both(c, ref, "PFDEBUG", "GETREG", "h")           # converts it to dense, as Redis does
    same_bytes(c, ref, "h")
    both(c, ref, "PFDEBUG", "ENCODING", "h")
    both(c, ref, "PFDEBUG", "DECODE", "h")
    both(c, ref, "PFDEBUG", "TODENSE", "h")
    both(c, ref, "PFADD", "h2", "x")
    both(c, ref, "PFDEBUG", "TODENSE", "h2")
    same_bytes(c, ref, "h2")
    both(c, ref, "PFDEBUG", "NOPE", "h")
    both(c, ref, "PFDEBUG", "ENCODING", "nokey")
    both(c, ref, "SET", "s", "not an hll")
    both(c, ref, "PFDEBUG", "ENCODING", "s")
    both(c, ref, "PFSELFTEST")


@pytest.mark.rowan_only("the storage pool")
def test_pfcount_answers_when_the_pool_is_full(server_factory):
    """PFCOUNT stores the count it computes into the key's header; when the
    pool is full that write is skipped, but the count is still answered (a
    read must not fail), while PFADD is refused with -OOM."""
    from test_pool_full import fill_until_full, is_oom, value
    srv = server_factory(extra={"pool-size": "32mb"})
    c = srv.resp()
    c.call("PFADD", "h", *["x%d" % i for i in range(200)])
    stale = c.call("GET", "h")
    fill_until_full(srv, c, lambda i: c.call("SET", "fill:%d" % i, value("f", i)), "SET")
    n = c.call("PFCOUNT", "h")
    assert isinstance(n, int) and 190 <= n <= 210
    assert c.call("GET", "h") == stale                  # nothing stored
    assert is_oom(c.call("PFADD", "h", *["y%d" % i for i in range(50)]))
