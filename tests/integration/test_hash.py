"""Hashes: HSET HSETNX HGET HMSET HMGET HGETALL HDEL HLEN HSTRLEN HEXISTS HKEYS
HVALS HINCRBY HINCRBYFLOAT HRANDFIELD HSCAN, against Redis 7's replies and
error texts (run with --target=redis to check the expectations), RESP3
shapes, WRONGTYPE, empty-hash cleanup, OBJECT ENCODING, the command table
rows, and (Rowan-only) exact contents after kill -9 and restart."""
import pytest

from conftest import RawConn, RespError, encode_command

WRONGTYPE = RespError("WRONGTYPE Operation against a key holding the wrong kind of value")


def E_ARITY(name):
    return RespError("ERR wrong number of arguments for '%s' command" % name)


def pairs(flat):
    return dict(zip(flat[0::2], flat[1::2]))


# ---------------------------------------------------------------- HSET HGET HMSET
def test_hset_hget(c):
    assert c.call("HSET", "h", "a", "1", "b", "2") == 2
    assert c.call("HSET", "h", "a", "10", "c", "3") == 1
    # A field repeated in one command is new once; the last value wins.
    assert c.call("HSET", "h", "d", "x", "d", "y") == 1
    assert c.call("HGET", "h", "a") == b"10"
    assert c.call("HGET", "h", "d") == b"y"
    assert c.call("HGET", "h", "nope") is None
    assert c.call("HGET", "nokey", "a") is None
    assert c.call("HLEN", "h") == 4
    assert c.call("HSET", "h", "e") == E_ARITY("hset")
    assert c.call("HSET", "h", "e", "1", "f") == E_ARITY("hset")
    assert c.call("HMSET", "h", "e", "1", "f") == E_ARITY("hmset")
    assert c.call("HMSET", "h", "e", "5", "f", "6") == "OK"
    assert c.call("HMGET", "h", "e", "f", "zz") == [b"5", b"6", None]
    assert c.call("HMGET", "nokey", "a", "b") == [None, None]
    assert c.call("TYPE", "h") == "hash"


def test_binary_and_empty(c):
    assert c.call("HSET", "h", b"\x00f\r\n", b"\xff\x00v", "", "") == 2
    assert c.call("HGET", "h", b"\x00f\r\n") == b"\xff\x00v"
    assert c.call("HGET", "h", "") == b""
    assert c.call("HSTRLEN", "h", "") == 0
    assert c.call("HEXISTS", "h", "") == 1
    big = b"v" * 100000
    assert c.call("HSET", "h", "big", big) == 1
    assert c.call("HGET", "h", "big") == big
    assert c.call("HSTRLEN", "h", "big") == 100000


def test_hsetnx(c):
    assert c.call("HSETNX", "h", "a", "1") == 1
    assert c.call("HSETNX", "h", "a", "2") == 0
    assert c.call("HGET", "h", "a") == b"1"
    assert c.call("HSETNX", "h", "b", "2") == 1
    assert c.call("HLEN", "h") == 2


def test_hgetall_hkeys_hvals(c):
    assert c.call("HGETALL", "nokey") == []
    assert c.call("HKEYS", "nokey") == []
    assert c.call("HVALS", "nokey") == []
    c.call("HSET", "h", "a", "1", "b", "2", "c", "3")
    assert pairs(c.call("HGETALL", "h")) == {b"a": b"1", b"b": b"2", b"c": b"3"}
    assert sorted(c.call("HKEYS", "h")) == [b"a", b"b", b"c"]
    assert sorted(c.call("HVALS", "h")) == [b"1", b"2", b"3"]
    # Keys and values come in the same order.
    assert list(zip(c.call("HKEYS", "h"), c.call("HVALS", "h"))) == \
        list(pairs(c.call("HGETALL", "h")).items())


def test_hdel_and_empty_cleanup(c):
    c.call("HSET", "h", "a", "1", "b", "2", "c", "3")
    assert c.call("HDEL", "h", "a", "a", "zz") == 1
    assert c.call("HDEL", "h", "zz") == 0
    assert c.call("HDEL", "nokey", "a") == 0
    assert c.call("HLEN", "h") == 2
    assert c.call("HDEL", "h", "b", "c") == 2
    assert c.call("EXISTS", "h") == 0
    assert c.call("HLEN", "h") == 0
    assert c.call("TYPE", "h") == "none"
    # The key can then hold another type.
    assert c.call("SET", "h", "x") == "OK"


def test_hlen_hstrlen_hexists(c):
    assert c.call("HLEN", "nokey") == 0
    assert c.call("HSTRLEN", "nokey", "f") == 0
    assert c.call("HEXISTS", "nokey", "f") == 0
    c.call("HSET", "h", "f", "hello", "n", "-123")
    assert c.call("HSTRLEN", "h", "f") == 5
    assert c.call("HSTRLEN", "h", "n") == 4
    assert c.call("HSTRLEN", "h", "zz") == 0
    assert c.call("HEXISTS", "h", "f") == 1
    assert c.call("HEXISTS", "h", "zz") == 0


# ---------------------------------------------------------------- counters
def test_hincrby(c):
    assert c.call("HINCRBY", "h", "n", "5") == 5
    assert c.call("HINCRBY", "h", "n", "-7") == -2
    assert c.call("HGET", "h", "n") == b"-2"
    assert c.call("HINCRBY", "h", "n", "x") == RespError("ERR value is not an integer or out of range")
    assert c.call("HINCRBY", "h", "n", "1.5") == RespError("ERR value is not an integer or out of range")
    c.call("HSET", "h", "s", "abc", "big", "9223372036854775807", "sp", " 1")
    assert c.call("HINCRBY", "h", "s", "1") == RespError("ERR hash value is not an integer")
    assert c.call("HINCRBY", "h", "sp", "1") == RespError("ERR hash value is not an integer")
    assert c.call("HINCRBY", "h", "big", "1") == RespError("ERR increment or decrement would overflow")
    assert c.call("HINCRBY", "h", "big", "-1") == 9223372036854775806
    c.call("SET", "str", "1")
    # The increment is checked before the key's type.
    assert c.call("HINCRBY", "str", "f", "x") == RespError("ERR value is not an integer or out of range")
    assert c.call("HINCRBY", "str", "f", "1") == WRONGTYPE


def test_hincrbyfloat(c):
    assert c.call("HINCRBYFLOAT", "h", "f", "10.5") == b"10.5"
    assert c.call("HINCRBYFLOAT", "h", "f", "0.1") == b"10.6"
    assert c.call("HINCRBYFLOAT", "h", "f", "-10.6") == b"0"
    c.call("HSET", "h", "e", "5.0e3", "i", "7", "s", "abc")
    assert c.call("HINCRBYFLOAT", "h", "e", "2.0e2") == b"5200"
    assert c.call("HINCRBYFLOAT", "h", "i", "1") == b"8"
    assert c.call("HINCRBYFLOAT", "h", "s", "1") == RespError("ERR hash value is not a float")
    assert c.call("HINCRBYFLOAT", "h", "i", "x") == RespError("ERR value is not a valid float")
    assert c.call("HINCRBYFLOAT", "h", "i", "inf") == RespError("ERR value is NaN or Infinity")
    c.call("HSET", "h", "m", "1e4932")
    assert c.call("HINCRBYFLOAT", "h", "m", "1e4932") == \
        RespError("ERR increment would produce NaN or Infinity")
    c.call("SET", "str", "1")
    assert c.call("HINCRBYFLOAT", "str", "f", "1") == WRONGTYPE


# ---------------------------------------------------------------- HRANDFIELD
def test_hrandfield(c):
    assert c.call("HRANDFIELD", "nokey") is None
    assert c.call("HRANDFIELD", "nokey", "3") == []
    assert c.call("HRANDFIELD", "nokey", "3", "WITHVALUES") == []
    fields = {b"f%d" % i: b"v%d" % i for i in range(20)}
    c.call("HSET", "h", *[x for kv in fields.items() for x in kv])
    for _ in range(20):
        assert c.call("HRANDFIELD", "h") in fields
    assert c.call("HRANDFIELD", "h", "0") == []
    for n in (1, 5, 15, 19):
        got = c.call("HRANDFIELD", "h", str(n))
        assert len(got) == n and len(set(got)) == n and set(got) <= set(fields)
    assert sorted(c.call("HRANDFIELD", "h", "20")) == sorted(fields)
    assert sorted(c.call("HRANDFIELD", "h", "100")) == sorted(fields)
    # Negative: exactly |n| draws, repeats allowed.
    got = c.call("HRANDFIELD", "h", "-100")
    assert len(got) == 100 and set(got) <= set(fields)
    got = c.call("HRANDFIELD", "h", "7", "WITHVALUES")
    assert len(got) == 14
    got = pairs(got)
    assert len(got) == 7 and all(fields[k] == v for k, v in got.items())
    got = c.call("HRANDFIELD", "h", "-30", "withvalues")
    assert len(got) == 60
    assert all(fields[k] == v for k, v in zip(got[0::2], got[1::2]))
    assert pairs(c.call("HRANDFIELD", "h", "50", "WITHVALUES")) == fields
    # With few fields, negative counts still repeat.
    c.call("HSET", "one", "only", "x")
    assert c.call("HRANDFIELD", "one", "-3") == [b"only"] * 3
    assert c.call("HRANDFIELD", "h", "1", "x") == RespError("ERR syntax error")
    assert c.call("HRANDFIELD", "h", "1", "WITHVALUES", "x") == RespError("ERR syntax error")
    assert c.call("HRANDFIELD", "h", "x") == RespError("ERR value is not an integer or out of range")
    assert c.call("HRANDFIELD", "h", "-9223372036854775808") == RespError(
        "ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807")
    assert c.call("HRANDFIELD", "h", "9223372036854775807", "WITHVALUES") == \
        RespError("ERR value is out of range")


def test_hrandfield_uniform(c):
    c.call("HSET", "h", *[x for i in range(10) for x in ("f%d" % i, "v")])
    got = c.call("HRANDFIELD", "h", "-20000")
    counts = {}
    for f in got:
        counts[f] = counts.get(f, 0) + 1
    assert len(counts) == 10
    # Expected 2000 each; 5 sigma is about 212.
    assert all(1700 < n < 2300 for n in counts.values()), counts


# ---------------------------------------------------------------- HSCAN
def scan_all(c, key, *opts, cmd="HSCAN"):
    cur, out, calls = b"0", [], 0
    while True:
        cur, items = c.call(cmd, key, cur, *opts)
        out += items
        calls += 1
        if cur == b"0":
            return out, calls


def test_hscan(c):
    assert c.call("HSCAN", "nokey", "0") == [b"0", []]
    c.call("HSET", "small", "a", "1", "b", "2")
    cur, items = c.call("HSCAN", "small", "0")
    assert cur == b"0" and pairs(items) == {b"a": b"1", b"b": b"2"}
    fields = {b"field:%d" % i: b"%d" % i for i in range(1000)}
    args = [x for kv in fields.items() for x in kv]
    for i in range(0, len(args), 200):
        c.call("HSET", "big", *args[i:i + 200])
    items, calls = scan_all(c, "big", "COUNT", "50")
    assert calls > 1
    assert pairs(items) == fields
    items, _ = scan_all(c, "big", "MATCH", "field:1*", "COUNT", "100")
    assert pairs(items) == {k: v for k, v in fields.items() if k.startswith(b"field:1")}
    assert c.call("HSCAN", "big", "x") == RespError("ERR invalid cursor")
    assert c.call("HSCAN", "big", " 1") == RespError("ERR invalid cursor")
    assert c.call("HSCAN", "big", "99999999999999999999999") == RespError("ERR invalid cursor")
    assert c.call("HSCAN", "big", "0", "COUNT", "0") == RespError("ERR syntax error")
    assert c.call("HSCAN", "big", "0", "COUNT", "x") == RespError(
        "ERR value is not an integer or out of range")
    assert c.call("HSCAN", "big", "0", "FOO") == RespError("ERR syntax error")
    assert c.call("HSCAN", "big", "0", "MATCH") == RespError("ERR syntax error")


@pytest.mark.redis_min("7.4")
def test_hscan_novalues(c):
    c.call("HSET", "small", "a", "1", "b", "2")
    cur, items = c.call("HSCAN", "small", "0", "NOVALUES")
    assert cur == b"0" and sorted(items) == [b"a", b"b"]
    c.call("HSET", "big", *[x for i in range(300) for x in ("f%d" % i, "v")])
    items, _ = scan_all(c, "big", "NOVALUES", "COUNT", "20")
    assert sorted(set(items)) == sorted(b"f%d" % i for i in range(300))


def test_hscan_while_growing(c):
    c.call("HSET", "h", *[x for i in range(500) for x in ("old%d" % i, "v")])
    cur, seen, n = b"0", set(), 0
    while True:
        cur, items = c.call("HSCAN", "h", cur, "COUNT", "20")
        seen.update(items[0::2])
        c.call("HSET", "h", *[x for i in range(n, n + 100) for x in ("new%d" % i, "v")])
        n += 100
        if cur == b"0":
            break
    assert {b"old%d" % i for i in range(500)} <= seen


# ---------------------------------------------------------------- types, RESP3, encoding
def test_wrongtype(c):
    c.call("SET", "s", "x")
    for args in (("HSET", "s", "f", "v"), ("HSETNX", "s", "f", "v"), ("HGET", "s", "f"),
                 ("HMSET", "s", "f", "v"), ("HMGET", "s", "f"), ("HGETALL", "s"),
                 ("HDEL", "s", "f"), ("HLEN", "s"), ("HSTRLEN", "s", "f"),
                 ("HEXISTS", "s", "f"), ("HKEYS", "s"), ("HVALS", "s"),
                 ("HINCRBY", "s", "f", "1"), ("HINCRBYFLOAT", "s", "f", "1"),
                 ("HRANDFIELD", "s"), ("HRANDFIELD", "s", "2"), ("HSCAN", "s", "0")):
        assert c.call(*args) == WRONGTYPE, args
    c.call("HSET", "h", "f", "v")
    assert c.call("GET", "h") == WRONGTYPE
    assert c.call("SADD", "h", "m") == WRONGTYPE


def test_resp3(server, c):
    cn = RawConn(server.port)
    try:
        cn.send_command("HELLO", "3")
        assert isinstance(cn.read_reply(), dict)
        cn.call("HSET", "h", "a", "1", "b", "2")
        assert cn.call("HGETALL", "h") == {b"a": b"1", b"b": b"2"}
        assert cn.call("HGETALL", "nokey") == {}
        got = cn.call("HRANDFIELD", "h", "2", "WITHVALUES")
        assert sorted(got) == [[b"a", b"1"], [b"b", b"2"]]
        got = cn.call("HRANDFIELD", "h", "-3", "WITHVALUES")
        assert len(got) == 3 and all(p in ([b"a", b"1"], [b"b", b"2"]) for p in got)
        got = cn.call("HRANDFIELD", "h", "1", "WITHVALUES")
        assert len(got) == 1 and got[0] in ([b"a", b"1"], [b"b", b"2"])
        assert cn.call("HGET", "h", "zz") is None
    finally:
        cn.close()


def object_encoding(c, key):
    rep = c.call("OBJECT", "ENCODING", key)
    if isinstance(rep, RespError) and "unknown command" in rep.msg:
        pytest.skip("OBJECT is not implemented in this build")
    return rep


def test_encoding(c):
    c.call("HSET", "h", "a", "1")
    assert object_encoding(c, "h") == b"listpack"
    c.call("HSET", "h", *[x for i in range(511) for x in ("f%d" % i, "v")])
    assert c.call("HLEN", "h") == 512
    assert object_encoding(c, "h") == b"listpack"
    c.call("HSET", "h", "one-more", "v")
    assert object_encoding(c, "h") == b"hashtable"
    # No conversion back.
    c.call("HDEL", "h", "one-more", "f1", "f2")
    assert object_encoding(c, "h") == b"hashtable"
    c.call("HSET", "v", "f", "x" * 64)
    assert object_encoding(c, "v") == b"listpack"
    c.call("HSET", "v", "g", "x" * 65)
    assert object_encoding(c, "v") == b"hashtable"
    c.call("HSET", "k", "x" * 65, "1")
    assert object_encoding(c, "k") == b"hashtable"


HASH_COMMANDS = [  # name, arity, first, last, step, flag
    ("hset", -4, 1, 1, 1, "write"), ("hsetnx", 4, 1, 1, 1, "write"),
    ("hget", 3, 1, 1, 1, "readonly"), ("hmset", -4, 1, 1, 1, "write"),
    ("hmget", -3, 1, 1, 1, "readonly"), ("hgetall", 2, 1, 1, 1, "readonly"),
    ("hdel", -3, 1, 1, 1, "write"), ("hlen", 2, 1, 1, 1, "readonly"),
    ("hstrlen", 3, 1, 1, 1, "readonly"), ("hexists", 3, 1, 1, 1, "readonly"),
    ("hkeys", 2, 1, 1, 1, "readonly"), ("hvals", 2, 1, 1, 1, "readonly"),
    ("hincrby", 4, 1, 1, 1, "write"), ("hincrbyfloat", 4, 1, 1, 1, "write"),
    ("hrandfield", -2, 1, 1, 1, "readonly"), ("hscan", -3, 1, 1, 1, "readonly"),
]


def test_command_info(c):
    rep = c.call("COMMAND", "INFO", *[t[0] for t in HASH_COMMANDS])
    for want, got in zip(HASH_COMMANDS, rep):
        name, arity, first, last, step, flag = want
        assert got[0] == name.encode()
        assert (got[1], got[3], got[4], got[5]) == (arity, first, last, step), name
        assert flag in [f.decode() if isinstance(f, bytes) else f for f in got[2]], name
    assert c.call("HGET", "h") == E_ARITY("hget")
    assert c.call("HLEN", "h", "x") == E_ARITY("hlen")


def test_ttl_kept_by_writes(c):
    c.call("HSET", "h", "a", "1", "n", "1")
    assert c.call("EXPIRE", "h", "1000") == 1
    c.call("HSET", "h", "b", "2")
    c.call("HINCRBY", "h", "n", "1")
    c.call("HDEL", "h", "a")
    assert 900 < c.call("TTL", "h") <= 1000


# ---------------------------------------------------------------- durability
def hash_state(cl):
    out = {}
    for k in sorted(cl.keys("*")):
        out[k] = (cl.type(k), cl.hgetall(k), cl.ttl(k) > 0)
    return out


@pytest.mark.rowan_only("hash contents survive kill -9 (recovery replays effects and snapshots)")
def test_restart_exact(server_factory):
    srv = server_factory()
    cl = srv.client()
    cl.hset("plain", mapping={"a": "1", "b": b"\x00\xff", "": ""})
    cl.hset("big", mapping={"f%d" % i: "v%d" % i * 3 for i in range(2000)})
    cl.hdel("big", *["f%d" % i for i in range(0, 2000, 3)])
    for i in range(1500):          # a long history: compacted into snapshots
        cl.hincrby("counter", "n", 1)
        cl.hset("counter", "last", i)
    for i in range(200):
        cl.hincrbyfloat("counter", "fl", "0.5")
    cl.hset("gone", "x", "1")
    cl.hdel("gone", "x")
    cl.hset("ttl", "x", "1")
    cl.expire("ttl", 10000)
    cl.hset("large", "v", b"z" * 300000)
    cl.hsetnx("plain", "a", "ignored")
    cl.hsetnx("plain", "c", "3")
    before = hash_state(cl)
    assert before[b"counter"][1][b"n"] == b"1500"
    assert before[b"counter"][1][b"fl"] == b"100"
    assert b"gone" not in before
    enc_before = {k: cl.object("encoding", k) for k in before} if _has_object(cl) else None
    srv.kill9()
    srv.restart()
    cl = srv.client()
    assert hash_state(cl) == before
    if enc_before is not None:
        assert {k: cl.object("encoding", k) for k in before} == enc_before
    # Writes after recovery go on from the recovered state.
    assert cl.hincrby("counter", "n", 1) == 1501
    srv.kill9()
    srv.restart()
    cl = srv.client()
    assert cl.hget("counter", "n") == b"1501"
    assert cl.hgetall("big") == before[b"big"][1]
    # Collections still alive at exit show up as leaks under LeakSanitizer
    # (make asan): the index holds tagged pointers. Leave none behind.
    cl.flushall()


def _has_object(cl):
    try:
        cl.object("encoding", "nokey")
        return True
    except Exception as e:
        return "unknown command" not in str(e)
