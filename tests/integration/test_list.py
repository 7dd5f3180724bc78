"""Lists and the blocking list commands.

Command semantics are checked against real Redis first (--target=redis),
then Rowan. Blocking tests open several connections, so with Rowan's two
workers the waiter and the pusher are usually on different workers.
Rowan-only: OBJECT ENCODING thresholds (the local reference Redis may be
older than 7.2) and kill -9 + restart comparing list contents exactly."""
import random
import socket
import threading
import time

import pytest

from conftest import RawConn, RespClient, RespError, encode_command, wait_for

WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"


@pytest.fixture(autouse=True)
def _leave_shared_server_empty(_shared_server):
    """Tests in other files use the shared server without flushing it
    first (raw connections): leave no list behind."""
    yield
    srv = _shared_server.srv
    if srv is not None and srv.alive():
        cl = RespClient(srv.port)
        try:
            cl.call("FLUSHALL")
        finally:
            cl.close()


def conns(server, n):
    out = [server.resp() for _ in range(n)]
    return out


# --------------------------------------------------------------------------
# push / pop
# --------------------------------------------------------------------------
def test_push_pop_basics(c):
    assert c.call("RPUSH", "l", "a", "b", "c") == 3
    assert c.call("LPUSH", "l", "x", "y") == 5
    assert c.call("LRANGE", "l", 0, -1) == [b"y", b"x", b"a", b"b", b"c"]
    assert c.call("LPOP", "l") == b"y"
    assert c.call("RPOP", "l") == b"c"
    assert c.call("LLEN", "l") == 3
    assert c.call("LPOP", "l", 2) == [b"x", b"a"]
    assert c.call("RPOP", "l", 5) == [b"b"]
    assert c.call("EXISTS", "l") == 0
    assert c.call("LPOP", "l") is None
    assert c.call("LPOP", "l", 3) is None          # null array
    assert c.call("LLEN", "l") == 0


def test_pop_count_edge_cases(c):
    c.call("RPUSH", "l", "a", "b")
    assert c.call("LPOP", "l", 0) == []
    assert c.call("LPOP", "l", -1) == RespError("ERR value is out of range, must be positive")
    assert c.call("LPOP", "l", "x") == RespError("ERR value is out of range, must be positive")
    assert c.call("LPOP", "l", 1, 2) == RespError("ERR wrong number of arguments for 'lpop' command")
    assert c.call("RPOP", "l", 1) == [b"b"]
    # missing key with count 0 is still a null array
    assert c.call("LPOP", "nokey", 0) is None


def test_pop_null_array_wire(raw, server):
    r = raw()
    r.send_command("FLUSHALL")
    assert r.read_reply() == "OK"
    r.send(encode_command("LPOP", "nokey", 2))
    assert r.read_line() == b"*-1"
    r.send(encode_command("LPOP", "nokey"))
    assert r.read_line() == b"$-1"


def test_pushx(c):
    assert c.call("LPUSHX", "l", "a") == 0
    assert c.call("RPUSHX", "l", "a", "b") == 0
    assert c.call("EXISTS", "l") == 0
    c.call("RPUSH", "l", "m")
    assert c.call("LPUSHX", "l", "a", "b") == 3
    assert c.call("RPUSHX", "l", "y", "z") == 5
    assert c.call("LRANGE", "l", 0, -1) == [b"b", b"a", b"m", b"y", b"z"]


def test_binary_and_empty_elements(c):
    vals = [b"", b"\x00\r\n\xff", b"x" * 10000]
    assert c.call("RPUSH", "l", *vals) == 3
    assert c.call("LRANGE", "l", 0, -1) == vals
    assert c.call("LINDEX", "l", 0) == b""


# --------------------------------------------------------------------------
# reads
# --------------------------------------------------------------------------
def test_lrange_ranges(c):
    c.call("RPUSH", "l", *"abcdef")
    assert c.call("LRANGE", "l", 0, 2) == [b"a", b"b", b"c"]
    assert c.call("LRANGE", "l", -2, -1) == [b"e", b"f"]
    assert c.call("LRANGE", "l", -100, 1) == [b"a", b"b"]
    assert c.call("LRANGE", "l", 4, 100) == [b"e", b"f"]
    assert c.call("LRANGE", "l", 3, 2) == []
    assert c.call("LRANGE", "l", 6, 10) == []
    assert c.call("LRANGE", "l", -1, -3) == []
    assert c.call("LRANGE", "nokey", 0, -1) == []
    assert c.call("LRANGE", "l", "a", 1) == RespError("ERR value is not an integer or out of range")
    assert c.call("LRANGE", "nokey", 0, "x") == RespError(
        "ERR value is not an integer or out of range")


def test_lindex(c):
    c.call("RPUSH", "l", "a", "b", "c")
    assert c.call("LINDEX", "l", 0) == b"a"
    assert c.call("LINDEX", "l", -1) == b"c"
    assert c.call("LINDEX", "l", 3) is None
    assert c.call("LINDEX", "l", -4) is None
    assert c.call("LINDEX", "nokey", 0) is None
    assert c.call("LINDEX", "nokey", "x") is None
    assert c.call("LINDEX", "l", "x") == RespError("ERR value is not an integer or out of range")


def test_lpos(c):
    c.call("RPUSH", "l", "a", "b", "c", "1", "2", "3", "c", "c")
    assert c.call("LPOS", "l", "c") == 2
    assert c.call("LPOS", "l", "c", "RANK", 2) == 6
    assert c.call("LPOS", "l", "c", "RANK", -1) == 7
    assert c.call("LPOS", "l", "c", "RANK", -3) == 2
    assert c.call("LPOS", "l", "c", "RANK", 4) is None
    assert c.call("LPOS", "l", "c", "COUNT", 0) == [2, 6, 7]
    assert c.call("LPOS", "l", "c", "COUNT", 2) == [2, 6]
    assert c.call("LPOS", "l", "c", "COUNT", 2, "RANK", -1) == [7, 6]
    assert c.call("LPOS", "l", "c", "COUNT", 0, "MAXLEN", 7) == [2, 6]
    assert c.call("LPOS", "l", "c", "MAXLEN", 2) is None
    assert c.call("LPOS", "l", "zz", "COUNT", 3) == []
    assert c.call("LPOS", "nokey", "a") is None
    assert c.call("LPOS", "nokey", "a", "COUNT", 1) == []
    assert c.call("LPOS", "l", "c", "RANK", 0) == RespError(
        "ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... "
        "or use negative to start from the end of the list")
    assert c.call("LPOS", "l", "c", "COUNT", -1) == RespError("ERR COUNT can't be negative")
    assert c.call("LPOS", "l", "c", "MAXLEN", -1) == RespError("ERR MAXLEN can't be negative")
    assert c.call("LPOS", "l", "c", "COUNT", "x") == RespError("ERR COUNT can't be negative")
    assert c.call("LPOS", "l", "c", "RANK", "x") == RespError(
        "ERR value is not an integer or out of range")
    assert c.call("LPOS", "l", "c", "FOO", 1) == RespError("ERR syntax error")
    assert c.call("LPOS", "l", "c", "RANK") == RespError("ERR syntax error")


@pytest.mark.redis_min("7.2.0")
def test_lpos_rank_min(c):
    # Redis 7.2 refuses a rank whose negation overflows (7.0 accepted it)
    c.call("RPUSH", "l", "c")
    assert c.call("LPOS", "l", "c", "RANK", "-9223372036854775808") == RespError(
        "ERR value is out of range, value must between -9223372036854775807 and "
        "9223372036854775807")


# --------------------------------------------------------------------------
# in-place writes
# --------------------------------------------------------------------------
def test_lset(c):
    c.call("RPUSH", "l", "a", "b", "c")
    assert c.call("LSET", "l", 1, "B") == "OK"
    assert c.call("LSET", "l", -1, "C") == "OK"
    assert c.call("LRANGE", "l", 0, -1) == [b"a", b"B", b"C"]
    assert c.call("LSET", "l", 3, "x") == RespError("ERR index out of range")
    assert c.call("LSET", "l", -4, "x") == RespError("ERR index out of range")
    assert c.call("LSET", "nokey", 0, "x") == RespError("ERR no such key")
    assert c.call("LSET", "nokey", "x", "x") == RespError("ERR no such key")
    assert c.call("LSET", "l", "x", "x") == RespError("ERR value is not an integer or out of range")


def test_linsert(c):
    c.call("RPUSH", "l", "a", "b", "c")
    assert c.call("LINSERT", "l", "BEFORE", "a", "0") == 4
    assert c.call("LINSERT", "l", "after", "c", "d") == 5
    assert c.call("LINSERT", "l", "AFTER", "a", "a2") == 6
    assert c.call("LRANGE", "l", 0, -1) == [b"0", b"a", b"a2", b"b", b"c", b"d"]
    assert c.call("LINSERT", "l", "BEFORE", "zz", "x") == -1
    assert c.call("LINSERT", "nokey", "BEFORE", "a", "x") == 0
    assert c.call("EXISTS", "nokey") == 0
    assert c.call("LINSERT", "l", "MIDDLE", "a", "x") == RespError("ERR syntax error")
    assert c.call("LINSERT", "nokey", "MIDDLE", "a", "x") == RespError("ERR syntax error")


def test_lrem(c):
    c.call("RPUSH", "l", "a", "b", "a", "c", "a", "b", "a")
    assert c.call("LREM", "l", 2, "a") == 2
    assert c.call("LRANGE", "l", 0, -1) == [b"b", b"c", b"a", b"b", b"a"]
    assert c.call("LREM", "l", -1, "b") == 1
    assert c.call("LRANGE", "l", 0, -1) == [b"b", b"c", b"a", b"a"]
    assert c.call("LREM", "l", 0, "a") == 2
    assert c.call("LRANGE", "l", 0, -1) == [b"b", b"c"]
    assert c.call("LREM", "l", 0, "zz") == 0
    assert c.call("LREM", "nokey", 0, "a") == 0
    assert c.call("LREM", "l", "x", "a") == RespError("ERR value is not an integer or out of range")
    assert c.call("LREM", "l", 0, "b") == 1
    assert c.call("LREM", "l", -5, "c") == 1
    assert c.call("EXISTS", "l") == 0


def test_lrem_many_from_tail(c):
    items = [random.choice("xy") for _ in range(300)]
    c.call("RPUSH", "l", *items)
    assert c.call("LREM", "l", -50, "x") == min(50, items.count("x"))
    exp = list(items)
    removed = 0
    for i in range(len(exp) - 1, -1, -1):
        if exp[i] == "x" and removed < 50:
            del exp[i]
            removed += 1
    assert c.call("LRANGE", "l", 0, -1) == [e.encode() for e in exp]


def test_ltrim(c):
    c.call("RPUSH", "l", *"abcdef")
    assert c.call("LTRIM", "l", 1, -2) == "OK"
    assert c.call("LRANGE", "l", 0, -1) == [b"b", b"c", b"d", b"e"]
    assert c.call("LTRIM", "l", -100, 100) == "OK"
    assert c.call("LLEN", "l") == 4
    assert c.call("LTRIM", "l", 0, 0) == "OK"
    assert c.call("LRANGE", "l", 0, -1) == [b"b"]
    assert c.call("LTRIM", "l", 5, 10) == "OK"
    assert c.call("EXISTS", "l") == 0
    assert c.call("LTRIM", "nokey", 0, 1) == "OK"
    assert c.call("LTRIM", "nokey", "x", 1) == RespError(
        "ERR value is not an integer or out of range")
    c.call("RPUSH", "l", "a", "b")
    assert c.call("LTRIM", "l", 1, 0) == "OK"
    assert c.call("EXISTS", "l") == 0


# --------------------------------------------------------------------------
# moving
# --------------------------------------------------------------------------
def test_lmove_directions(c):
    c.call("RPUSH", "s", "1", "2", "3", "4")
    assert c.call("LMOVE", "s", "d", "LEFT", "RIGHT") == b"1"
    assert c.call("LMOVE", "s", "d", "RIGHT", "LEFT") == b"4"
    assert c.call("LMOVE", "s", "d", "left", "left") == b"2"
    assert c.call("LMOVE", "s", "d", "right", "right") == b"3"
    assert c.call("LRANGE", "d", 0, -1) == [b"2", b"4", b"1", b"3"]
    assert c.call("EXISTS", "s") == 0
    assert c.call("LMOVE", "s", "d", "LEFT", "LEFT") is None
    assert c.call("LMOVE", "d", "d", "LEFT", "RIGHT") == b"2"   # rotation
    assert c.call("LRANGE", "d", 0, -1) == [b"4", b"1", b"3", b"2"]
    assert c.call("LMOVE", "d", "d", "LEFT", "UP") == RespError("ERR syntax error")
    assert c.call("RPOPLPUSH", "d", "e") == b"2"
    assert c.call("RPOPLPUSH", "e", "e") == b"2"
    assert c.call("LRANGE", "e", 0, -1) == [b"2"]
    assert c.call("RPOPLPUSH", "nokey", "e") is None


def test_lmove_wrongtype(c):
    c.call("SET", "str", "v")
    c.call("RPUSH", "s", "a")
    assert c.call("LMOVE", "s", "str", "LEFT", "LEFT") == RespError(WRONGTYPE)
    assert c.call("LRANGE", "s", 0, -1) == [b"a"]          # nothing half done
    assert c.call("LMOVE", "str", "s", "LEFT", "LEFT") == RespError(WRONGTYPE)
    assert c.call("RPOPLPUSH", "s", "str") == RespError(WRONGTYPE)
    # an empty source does not look at the destination
    assert c.call("LMOVE", "nokey", "str", "LEFT", "LEFT") is None


def test_lmpop(c):
    c.call("RPUSH", "b", "1", "2", "3")
    assert c.call("LMPOP", 2, "a", "b", "LEFT") == [b"b", [b"1"]]
    assert c.call("LMPOP", 2, "a", "b", "RIGHT", "COUNT", 5) == [b"b", [b"3", b"2"]]
    assert c.call("EXISTS", "b") == 0
    assert c.call("LMPOP", 2, "a", "b", "LEFT") is None
    c.call("RPUSH", "a", "x")
    c.call("SET", "s", "v")
    assert c.call("LMPOP", 2, "a", "s", "LEFT") == [b"a", [b"x"]]
    assert c.call("LMPOP", 2, "a", "s", "LEFT") == RespError(WRONGTYPE)
    assert c.call("LMPOP", 0, "a", "LEFT") == RespError("ERR numkeys should be greater than 0")
    assert c.call("LMPOP", "x", "a", "LEFT") == RespError("ERR numkeys should be greater than 0")
    assert c.call("LMPOP", 3, "a", "LEFT") == RespError("ERR syntax error")
    assert c.call("LMPOP", 1, "a", "UP") == RespError("ERR syntax error")
    assert c.call("LMPOP", 1, "a", "LEFT", "COUNT", 0) == RespError(
        "ERR count should be greater than 0")
    assert c.call("LMPOP", 1, "a", "LEFT", "COUNT", 1, "COUNT", 1) == RespError("ERR syntax error")
    assert c.call("LMPOP", 1, "a", "LEFT", "COUNT") == RespError("ERR syntax error")
    assert c.call("LMPOP", 1, "a") == RespError(
        "ERR wrong number of arguments for 'lmpop' command")


# --------------------------------------------------------------------------
# types and cleanup
# --------------------------------------------------------------------------
def test_wrongtype_everywhere(c):
    c.call("SET", "s", "v")
    for cmd in (["LPUSH", "s", "a"], ["RPUSH", "s", "a"], ["LPUSHX", "s", "a"],
                ["RPUSHX", "s", "a"], ["LPOP", "s"], ["RPOP", "s", 2], ["LLEN", "s"],
                ["LRANGE", "s", 0, -1], ["LINDEX", "s", 0], ["LSET", "s", 0, "a"],
                ["LINSERT", "s", "BEFORE", "a", "b"], ["LREM", "s", 0, "a"],
                ["LTRIM", "s", 0, 1], ["LPOS", "s", "a"], ["BLPOP", "s", 0.01],
                ["BRPOP", "s", 0.01], ["BLMOVE", "s", "d", "LEFT", "LEFT", 0.01],
                ["BRPOPLPUSH", "s", "d", 0.01], ["BLMPOP", 0.01, 1, "s", "LEFT"]):
        assert c.call(*cmd) == RespError(WRONGTYPE), cmd
    c.call("RPUSH", "l", "a")
    assert c.call("GET", "l") == RespError(WRONGTYPE)
    assert c.call("TYPE", "l") == "list"
    assert c.call("GET", "s") == b"v"


def test_empty_list_cleanup(c):
    c.call("RPUSH", "l", "a")
    c.call("LPOP", "l")
    assert c.call("EXISTS", "l") == 0
    c.call("RPUSH", "l", "a", "b")
    c.call("RPOP", "l", 2)
    assert c.call("EXISTS", "l") == 0
    c.call("RPUSH", "l", "a", "a")
    c.call("LREM", "l", 0, "a")
    assert c.call("EXISTS", "l") == 0
    c.call("RPUSH", "l", "a")
    c.call("LMOVE", "l", "m", "LEFT", "LEFT")
    assert c.call("EXISTS", "l") == 0
    c.call("LMPOP", 1, "m", "LEFT", "COUNT", 9)
    assert c.call("DBSIZE") == 0
    # a list can be set again as another type after it emptied
    assert c.call("SET", "l", "x") == "OK"


def test_expire_kept_by_list_writes(c):
    c.call("RPUSH", "l", "a", "b")
    c.call("EXPIRE", "l", 100)
    c.call("RPUSH", "l", "c")
    c.call("LPOP", "l")
    c.call("LSET", "l", 0, "z")
    assert 0 < c.call("TTL", "l") <= 100


def test_long_list_model(c):
    """Random operations against a Python model, across the 128-element
    listpack limit and through history compaction."""
    rnd = random.Random(7)
    model = []
    for step in range(1500):
        op = rnd.randrange(9)
        v = ("v%d" % rnd.randrange(40)).encode()
        if op < 3:
            n = rnd.randrange(1, 4)
            vals = [("p%d_%d" % (step, i)).encode() for i in range(n)]
            if op == 0:
                assert c.call("LPUSH", "l", *vals) == len(model) + n
                model[:0] = vals[::-1]
            else:
                assert c.call("RPUSH", "l", *vals) == len(model) + n
                model.extend(vals)
        elif op == 3 and model:
            k = rnd.randrange(1, 3)
            assert c.call("LPOP", "l", k) == model[:k]
            del model[:k]
        elif op == 4 and model:
            i = rnd.randrange(-len(model), len(model))
            assert c.call("LSET", "l", i, v) == "OK"
            model[i] = v
        elif op == 5 and model:
            piv = rnd.choice(model)
            i = model.index(piv)
            assert c.call("LINSERT", "l", "AFTER", piv, v) == len(model) + 1
            model.insert(i + 1, v)
        elif op == 6 and model:
            target = rnd.choice(model)
            cnt = rnd.choice([0, 1, -1, 2])
            got = c.call("LREM", "l", cnt, target)
            idxs = [i for i, x in enumerate(model) if x == target]
            if cnt < 0:
                idxs = idxs[::-1][:-cnt]
            elif cnt > 0:
                idxs = idxs[:cnt]
            assert got == len(idxs)
            for i in sorted(idxs, reverse=True):
                del model[i]
        elif op == 7 and len(model) > 150:
            assert c.call("LTRIM", "l", 3, -4) == "OK"
            model = model[3:-3]
        elif op == 8 and model:
            assert c.call("RPOPLPUSH", "l", "l") == model[-1]
            model.insert(0, model.pop())
        if step % 100 == 0:
            assert c.call("LRANGE", "l", 0, -1) == model
    assert c.call("LRANGE", "l", 0, -1) == model
    assert c.call("LLEN", "l") == len(model)


@pytest.mark.rowan_only("OBJECT ENCODING for lists follows Redis 7.2 (local reference may be 7.0)")
def test_object_encoding(c):
    c.call("RPUSH", "l", *["x"] * 128)
    assert c.call("OBJECT", "ENCODING", "l") == b"listpack"
    c.call("RPUSH", "l", "x")
    assert c.call("OBJECT", "ENCODING", "l") == b"quicklist"
    c.call("RPUSH", "big", "y" * 65)
    assert c.call("OBJECT", "ENCODING", "big") == b"quicklist"
    c.call("RPOP", "l", 10)
    assert c.call("OBJECT", "ENCODING", "l") == b"listpack"


# --------------------------------------------------------------------------
# blocking
# --------------------------------------------------------------------------
def test_blocking_pop_immediate(c):
    c.call("RPUSH", "b", "1", "2")
    assert c.call("BLPOP", "a", "b", 0) == [b"b", b"1"]
    assert c.call("BRPOP", "a", "b", 0) == [b"b", b"2"]
    assert c.call("EXISTS", "b") == 0
    c.call("RPUSH", "s", "x", "y")
    assert c.call("BLMOVE", "s", "d", "RIGHT", "LEFT", 0) == b"y"
    assert c.call("BRPOPLPUSH", "s", "d", 0) == b"x"
    assert c.call("LRANGE", "d", 0, -1) == [b"x", b"y"]
    assert c.call("BLMPOP", 0, 2, "z", "d", "LEFT", "COUNT", 5) == [b"d", [b"x", b"y"]]


def test_blocking_timeout_errors(c):
    for cmd in (["BLPOP", "k"], ["BRPOP", "k"], ["BRPOPLPUSH", "k", "d"],
                ["BLMOVE", "k", "d", "LEFT", "LEFT"]):
        assert c.call(*(cmd + [-1])) == RespError("ERR timeout is negative"), cmd
        assert c.call(*(cmd + ["abc"])) == RespError(
            "ERR timeout is not a float or out of range"), cmd
    assert c.call("BLMPOP", -1, 1, "k", "LEFT") == RespError("ERR timeout is negative")
    assert c.call("BLMPOP", "x", 1, "k", "LEFT") == RespError(
        "ERR timeout is not a float or out of range")
    assert c.call("BLMPOP", 0, 0, "k", "LEFT") == RespError("ERR numkeys should be greater than 0")
    assert c.call("BLMOVE", "k", "d", "UP", "LEFT", 0) == RespError("ERR syntax error")
    assert c.call("BLPOP", "k") == RespError("ERR wrong number of arguments for 'blpop' command")


@pytest.mark.redis_min("7.2.0")
def test_blocking_timeout_out_of_range(c):
    # 7.0 wrapped the overflowing value around and called it negative
    for cmd in (["BLPOP", "k"], ["BRPOP", "k"], ["BRPOPLPUSH", "k", "d"],
                ["BLMOVE", "k", "d", "LEFT", "LEFT"]):
        assert c.call(*(cmd + ["1e300"])) == RespError("ERR timeout is out of range"), cmd


def test_blocking_timeouts_reply_null_array(server, raw):
    r = raw()
    assert r.call("FLUSHALL") == "OK"
    for cmd in (["BLPOP", "a", "b", "0.1"], ["BRPOP", "a", "0.05"],
                ["BLMOVE", "a", "b", "LEFT", "LEFT", "0.05"], ["BRPOPLPUSH", "a", "b", "0.05"],
                ["BLMPOP", "0.05", "2", "a", "b", "LEFT"]):
        t0 = time.monotonic()
        r.send_command(*cmd)
        assert r.read_line() == b"*-1", cmd
        assert time.monotonic() - t0 >= 0.04
    # RESP3: a null
    assert isinstance(r.call("HELLO", "3"), dict)
    r.send_command("BLPOP", "a", "0.05")
    assert r.read_line() == b"_"


def _blocked(server, cl, *cmd):
    """Send a blocking command on cl; return once the server has it blocked."""
    cl.send_command(*cmd)
    time.sleep(0.05)
    cl.sock.settimeout(0.05)
    try:
        data = cl.sock.recv(1, socket.MSG_PEEK)
        raise AssertionError("%r answered at once: %r" % (cmd, data))
    except socket.timeout:
        pass
    finally:
        cl.sock.settimeout(15)


def test_blpop_woken_by_push_from_other_connections(server):
    cs = conns(server, 6)
    cs[0].call("FLUSHALL")
    # waiters on several connections (spread over the workers)
    for i, w in enumerate(cs[:4]):
        _blocked(server, w, "BLPOP", "k%d" % i, "other", 0)
    for i in range(4):
        assert cs[4 + i % 2].call("RPUSH", "k%d" % i, "v%d" % i) == 1
    for i, w in enumerate(cs[:4]):
        assert w.read_reply() == [b"k%d" % i, b"v%d" % i]
    assert cs[4].call("DBSIZE") == 0


def test_brpop_second_key_and_blmpop(server):
    a, b, p = conns(server, 3)
    p.call("FLUSHALL")
    _blocked(server, a, "BRPOP", "x", "y", 0)
    _blocked(server, b, "BLMPOP", 0, 2, "m1", "m2", "RIGHT", "COUNT", 2)
    p.call("RPUSH", "y", "1", "2")
    assert a.read_reply() == [b"y", b"2"]
    p.call("RPUSH", "m2", "a", "b", "c")
    assert b.read_reply() == [b"m2", [b"c", b"b"]]
    assert p.call("LRANGE", "y", 0, -1) == [b"1"]
    assert p.call("LRANGE", "m2", 0, -1) == [b"a"]


def test_blmove_and_brpoplpush_woken(server):
    a, b, p = conns(server, 3)
    p.call("FLUSHALL")
    _blocked(server, a, "BLMOVE", "src", "dst", "LEFT", "RIGHT", 0)
    _blocked(server, b, "BRPOPLPUSH", "dst", "final", 0)
    p.call("RPUSH", "src", "hello")
    assert a.read_reply() == b"hello"
    # the push into dst woke the second waiter
    assert b.read_reply() == b"hello"
    assert p.call("LRANGE", "final", 0, -1) == [b"hello"]
    assert p.call("EXISTS", "src", "dst") == 0


def test_fifo_order_of_waiters(server):
    ws = conns(server, 4)
    p = server.resp()
    p.call("FLUSHALL")
    for w in ws:
        _blocked(server, w, "BLPOP", "q", 0)
    p.call("RPUSH", "q", "a", "b", "c", "d")
    got = [w.read_reply() for w in ws]
    assert got == [[b"q", b"a"], [b"q", b"b"], [b"q", b"c"], [b"q", b"d"]]
    assert p.call("EXISTS", "q") == 0


def test_fifo_one_element_at_a_time(server):
    ws = conns(server, 3)
    p = server.resp()
    p.call("FLUSHALL")
    for w in ws:
        _blocked(server, w, "BRPOP", "q", 0)
    for i, w in enumerate(ws):
        p.call("LPUSH", "q", "e%d" % i)
        assert w.read_reply() == [b"q", b"e%d" % i]


def test_pipelined_commands_wait_behind_blocked(server):
    w, p = conns(server, 2)
    p.call("FLUSHALL")
    w.send(encode_command("BLPOP", "q", 0) + encode_command("RPUSH", "after", "x") +
           encode_command("PING"))
    time.sleep(0.2)
    assert p.call("EXISTS", "after") == 0
    p.call("RPUSH", "q", "v")
    assert w.read_reply() == [b"q", b"v"]
    assert w.read_reply() == 1
    assert w.read_reply() == "PONG"


def test_blocked_timeout_then_more_input(server):
    w, p = conns(server, 2)
    p.call("FLUSHALL")
    w.send(encode_command("BLPOP", "q", "0.2") + encode_command("PING"))
    assert w.read_reply() is None
    assert w.read_reply() == "PONG"
    p.call("RPUSH", "q", "v")
    assert p.call("LRANGE", "q", 0, -1) == [b"v"]


def test_disconnect_and_kill_unblock(server):
    a, b, p = conns(server, 3)
    p.call("FLUSHALL")
    _blocked(server, a, "BLPOP", "q", 0)
    a.close()
    bid = b.call("CLIENT", "ID")
    _blocked(server, b, "BLPOP", "q", 0)
    time.sleep(0.1)
    assert p.call("CLIENT", "KILL", "ID", bid) == 1
    assert b.wait_closed(5)
    time.sleep(0.1)
    # nobody is left waiting: the element stays
    p.call("RPUSH", "q", "v")
    time.sleep(0.1)
    assert p.call("LRANGE", "q", 0, -1) == [b"v"]


def test_blocked_key_becomes_wrongtype(server):
    """As Redis 7.0: a woken blocked command skips a key that now holds
    another type and serves the next one (7.2 answers WRONGTYPE)."""
    w, p = conns(server, 2)
    p.call("FLUSHALL")
    _blocked(server, w, "BLPOP", "a", "b", 0)
    p.call("SET", "a", "str")
    p.call("RPUSH", "b", "v")
    assert w.read_reply() == [b"b", b"v"]


def test_blocking_stress_many_waiters(server):
    """Many waiters on a few keys, pushes from several connections: every
    element is delivered exactly once."""
    n = 24
    ws = conns(server, n)
    ps = conns(server, 3)
    ps[0].call("FLUSHALL")
    for i, w in enumerate(ws):
        w.send_command("BLPOP", "s%d" % (i % 3), 10)
    time.sleep(0.3)
    pushed = []
    for i in range(n):
        v = "v%d" % i
        ps[i % 3].call("RPUSH", "s%d" % (i % 3), v)
        pushed.append(v.encode())
    got = [w.read_reply() for w in ws]
    assert all(g is not None for g in got), got
    assert sorted(g[1] for g in got) == sorted(pushed)
    assert ps[0].call("DBSIZE") == 0


# --------------------------------------------------------------------------
# durability (Rowan only)
# --------------------------------------------------------------------------
@pytest.mark.rowan_only("kill -9 and restart on the same pool")
def test_lists_survive_kill9(server_factory):
    srv = server_factory()
    cs = [srv.resp() for _ in range(3)]
    rnd = random.Random(11)
    model = {}
    for step in range(2500):
        c = cs[step % 3]
        k = "list%d" % rnd.randrange(6)
        m = model.setdefault(k, [])
        op = rnd.randrange(8)
        if op <= 2 or not m:
            vals = [("%d:%d" % (step, i)).encode() * rnd.randrange(1, 4) for i in range(rnd.randrange(1, 5))]
            if op == 0:
                c.ok("LPUSH", k, *vals)
                m[:0] = vals[::-1]
            else:
                c.ok("RPUSH", k, *vals)
                m.extend(vals)
        elif op == 3:
            assert c.ok("RPOP", k) == m.pop()
        elif op == 4:
            i = rnd.randrange(len(m))
            c.ok("LSET", k, i, "set%d" % step)
            m[i] = ("set%d" % step).encode()
        elif op == 5:
            i = rnd.randrange(len(m))
            assert c.ok("LINSERT", k, "BEFORE", m[i], "ins%d" % step) == len(m) + 1
            m.insert(i, ("ins%d" % step).encode())
        elif op == 6 and len(m) > 20:
            c.ok("LTRIM", k, 2, -3)
            m[:] = m[2:-2]
        else:
            d = "list%d" % rnd.randrange(6)
            v = c.ok("LMOVE", k, d, "LEFT", "RIGHT")
            assert v == m[0]
            m.pop(0)
            model.setdefault(d, []).append(v)
        for kk in list(model):
            if not model[kk]:
                del model[kk]
    # a blocked waiter served just before the crash: its pop is durable too
    w = srv.resp()
    _blocked(srv, w, "BLPOP", "waitq", 0)
    cs[0].ok("RPUSH", "waitq", "one", "two")
    assert w.read_reply() == [b"waitq", b"one"]
    model["waitq"] = [b"two"]
    srv.kill9()
    srv.start()
    c = srv.resp()
    for k, m in model.items():
        assert c.call("LRANGE", k, 0, -1) == m, k
    assert c.call("DBSIZE") == len(model)


def test_blocking_commands_inside_multi_do_not_block(c):
    assert c.call("MULTI") == "OK"
    for cmd in (["BLPOP", "none", 0], ["RPUSH", "q", "a"], ["BLMOVE", "none", "x", "LEFT", "LEFT", 0],
                ["LPUSH", "q", "b"], ["BRPOP", "q", 0], ["BLMPOP", 0, 1, "none", "LEFT"]):
        assert c.call(*cmd) == "QUEUED"
    assert c.call("EXEC") == [None, 1, None, 2, [b"q", b"a"], None]
    assert c.call("LRANGE", "q", 0, -1) == [b"b"]


def test_exec_push_wakes_waiter(server):
    w, p = conns(server, 2)
    p.call("FLUSHALL")
    _blocked(server, w, "BLPOP", "q", 0)
    assert p.call("MULTI") == "OK"
    assert p.call("RPUSH", "q", "x", "y") == "QUEUED"
    assert p.call("EXEC") == [2]
    assert w.read_reply() == [b"q", b"x"]
    assert p.call("LRANGE", "q", 0, -1) == [b"y"]


def test_blocking_same_key_twice_and_db_isolation(server):
    w, p = conns(server, 2)
    p.call("FLUSHALL")
    assert w.call("SELECT", 1) == "OK"
    _blocked(server, w, "BLPOP", "k", "k", 0)
    p.call("RPUSH", "k", "db0")                   # another database: no wake-up
    time.sleep(0.2)
    assert p.call("LRANGE", "k", 0, -1) == [b"db0"]
    assert p.call("SELECT", 1) == "OK"
    p.call("RPUSH", "k", "db1")
    assert w.read_reply() == [b"k", b"db1"]
    assert p.call("EXISTS", "k") == 0


def test_producers_consumers_exactly_once(server):
    """Threads push unique values while others consume with BLPOP, BRPOP,
    BLMPOP and BLMOVE (into a 'done' list) on many connections: every
    value comes out exactly once."""
    p0 = server.resp()
    p0.call("FLUSHALL")
    keys = ["pc0", "pc1", "pc2"]
    total = 600
    got = []
    lock = threading.Lock()
    stop = threading.Event()
    errors = []

    def consumer(i):
        cl = RespClient(server.port)
        try:
            while not stop.is_set():
                kind = i % 4
                if kind == 0:
                    rep = cl.call("BLPOP", *keys, "0.2")
                    vals = [rep[1]] if rep else []
                elif kind == 1:
                    rep = cl.call("BRPOP", *keys, "0.2")
                    vals = [rep[1]] if rep else []
                elif kind == 2:
                    rep = cl.call("BLMPOP", "0.2", len(keys), *keys, "LEFT", "COUNT", 3)
                    vals = rep[1] if rep else []
                else:
                    rep = cl.call("BLMOVE", keys[i % 3], "done", "LEFT", "RIGHT", "0.2")
                    vals = []   # collected from 'done' at the end
                if isinstance(rep, RespError):
                    errors.append(rep)
                    return
                with lock:
                    got.extend(vals)
        except Exception as e:  # surfaced below
            errors.append(e)
        finally:
            cl.close()

    def producer(j):
        cl = RespClient(server.port)
        try:
            for n in range(j, total, 3):
                cl.call("RPUSH" if n % 2 else "LPUSH", keys[n % 3], "val%d" % n)
        finally:
            cl.close()

    cons = [threading.Thread(target=consumer, args=(i,)) for i in range(8)]
    prods = [threading.Thread(target=producer, args=(j,)) for j in range(3)]
    for t in cons + prods:
        t.start()
    for t in prods:
        t.join()

    def drained():
        return p0.call("EXISTS", *keys) == 0
    assert wait_for(drained, 20)
    stop.set()
    for t in cons:
        t.join()
    assert not errors, errors
    done = p0.call("LRANGE", "done", 0, -1)
    allv = sorted(got + done)
    assert allv == sorted(b"val%d" % n for n in range(total))


def test_waiter_first_when_list_filled_by_rename(server):
    """A list that appears by RENAME: the client already waiting gets the
    element before a later BLPOP (Rowan: RENAME does not wake waiters, but
    the later BLPOP hands the first waiter its turn)."""
    w, x, p = conns(server, 3)
    p.call("FLUSHALL")
    _blocked(server, w, "BLPOP", "q", 0)
    p.call("RPUSH", "tmp", "v")
    assert p.call("RENAME", "tmp", "q") == "OK"
    assert x.call("BLPOP", "q", "0.3") is None
    assert w.read_reply() == [b"q", b"v"]
