"""String commands: results and error texts as Redis 7 documents them.

`c` gives exact replies: str = simple string (+OK), bytes = bulk string,
int, None = nil, RespError = error reply with its full text."""
import time

import pytest
import redis

from conftest import RespError

E_SYNTAX = RespError("ERR syntax error")
E_NOTINT = RespError("ERR value is not an integer or out of range")
E_NOTFLOAT = RespError("ERR value is not a valid float")
E_OVERFLOW = RespError("ERR increment or decrement would overflow")


def E_ARITY(cmd):
    return RespError("ERR wrong number of arguments for '%s' command" % cmd)


def E_EXPIRE(cmd):
    return RespError("ERR invalid expire time in '%s' command" % cmd)


# ---------------------------------------------------------------- GET / SET
def test_get_missing_and_set_get(c):
    assert c.call("GET", "nokey") is None
    assert c.call("SET", "k", "hello") == "OK"
    assert c.call("GET", "k") == b"hello"
    assert c.call("SET", "k", "world") == "OK"
    assert c.call("GET", "k") == b"world"


def test_set_get_binary_safe(c, r):
    every_byte = bytes(range(256)) * 3
    assert c.call("SET", b"bin\x00key\r\n", every_byte) == "OK"
    assert c.call("GET", b"bin\x00key\r\n") == every_byte
    assert c.call("GET", b"bin\x00key") is None
    # the same through redis-py
    r.set(b"\xff\xfe", b"\r\n$3\r\n*1\r\n")
    assert r.get(b"\xff\xfe") == b"\r\n$3\r\n*1\r\n"


def test_set_empty_value_and_empty_key(c):
    assert c.call("SET", "e", "") == "OK"
    assert c.call("GET", "e") == b""
    assert c.call("EXISTS", "e") == 1
    assert c.call("STRLEN", "e") == 0
    assert c.call("SET", "", "v") == "OK"
    assert c.call("GET", "") == b"v"


def test_set_large_value(r):
    big = bytes((i * 7 + 3) % 251 for i in range(1 << 20))  # 1 MiB
    assert r.set("big", big) is True
    assert r.get("big") == big
    assert r.strlen("big") == len(big)


def test_get_set_arity(c):
    assert c.call("GET") == E_ARITY("get")
    assert c.call("GET", "a", "b") == E_ARITY("get")
    assert c.call("SET", "a") == E_ARITY("set")


def test_set_ex_px(c):
    assert c.call("SET", "k", "v", "EX", 100) == "OK"
    ttl = c.call("TTL", "k")
    assert 0 < ttl <= 100
    assert c.call("SET", "k", "v", "PX", 100000) == "OK"
    pttl = c.call("PTTL", "k")
    assert 0 < pttl <= 100000
    # options are case-insensitive
    assert c.call("SET", "k2", "v", "ex", 50) == "OK"
    assert 0 < c.call("TTL", "k2") <= 50


def test_set_exat_pxat(c):
    at = int(time.time()) + 1000
    assert c.call("SET", "k", "v", "EXAT", at) == "OK"
    assert c.call("EXPIRETIME", "k") == at
    assert c.call("PEXPIRETIME", "k") == at * 1000
    base = int(time.time()) + 500
    # EXPIRETIME rounds the ms expiry to the nearest second, as Redis does
    assert c.call("SET", "k", "v", "PXAT", base * 1000 + 400) == "OK"
    assert c.call("PEXPIRETIME", "k") == base * 1000 + 400
    assert c.call("EXPIRETIME", "k") == base
    assert c.call("SET", "k", "v", "PXAT", base * 1000 + 600) == "OK"
    assert c.call("PEXPIRETIME", "k") == base * 1000 + 600
    assert c.call("EXPIRETIME", "k") == base + 1


def test_set_exat_in_the_past_deletes(c):
    assert c.call("SET", "k", "v", "EXAT", 1) == "OK"
    assert c.call("EXISTS", "k") == 0
    assert c.call("GET", "k") is None
    assert c.call("SET", "k", "v", "PXAT", 1) == "OK"
    assert c.call("GET", "k") is None


@pytest.mark.parametrize("opt,val", [("EX", 0), ("EX", -1), ("PX", 0), ("PX", -5),
                                     ("EXAT", 0), ("PXAT", -1),
                                     ("EX", 9999999999999999)])
def test_set_invalid_expire(c, opt, val):
    assert c.call("SET", "k", "v", opt, val) == E_EXPIRE("set")
    assert c.call("EXISTS", "k") == 0


def test_set_expire_not_integer(c):
    assert c.call("SET", "k", "v", "EX", "abc") == E_NOTINT
    assert c.call("SET", "k", "v", "PX", "1.5") == E_NOTINT
    assert c.call("EXISTS", "k") == 0


@pytest.mark.parametrize("opts", [("NX", "XX"), ("EX", 10, "PX", 10000), ("KEEPTTL", "EX", 1),
                                  ("EX", 10, "EXAT", 2000000000), ("FOO",), ("EX",),
                                  ("GET", "GET", "FOO")])
def test_set_syntax_errors(c, opts):
    assert c.call("SET", "k", "v", *opts) == E_SYNTAX
    assert c.call("EXISTS", "k") == 0


def test_set_nx_xx(c):
    assert c.call("SET", "k", "v1", "XX") is None
    assert c.call("EXISTS", "k") == 0
    assert c.call("SET", "k", "v1", "NX") == "OK"
    assert c.call("SET", "k", "v2", "NX") is None
    assert c.call("GET", "k") == b"v1"
    assert c.call("SET", "k", "v3", "XX") == "OK"
    assert c.call("GET", "k") == b"v3"


def test_set_clears_ttl_unless_keepttl(c):
    c.ok("SET", "k", "v", "EX", 100)
    assert c.call("SET", "k", "v2", "KEEPTTL") == "OK"
    assert 0 < c.call("TTL", "k") <= 100
    assert c.call("GET", "k") == b"v2"
    assert c.call("SET", "k", "v3") == "OK"
    assert c.call("TTL", "k") == -1
    # KEEPTTL on a key without TTL keeps "no TTL"
    assert c.call("SET", "k", "v4", "KEEPTTL") == "OK"
    assert c.call("TTL", "k") == -1


def test_set_get_option(c):
    assert c.call("SET", "k", "v1", "GET") is None
    assert c.call("GET", "k") == b"v1"
    assert c.call("SET", "k", "v2", "GET") == b"v1"
    assert c.call("GET", "k") == b"v2"
    # NX + GET: returns old value, does not set
    assert c.call("SET", "k", "v3", "NX", "GET") == b"v2"
    assert c.call("GET", "k") == b"v2"
    # XX + GET on a missing key: nil, nothing set
    assert c.call("SET", "nk", "x", "XX", "GET") is None
    assert c.call("EXISTS", "nk") == 0
    # GET with EX sets the TTL too
    assert c.call("SET", "k", "v4", "GET", "EX", 100) == b"v2"
    assert 0 < c.call("TTL", "k") <= 100


def test_set_redis_py_options(r):
    assert r.set("k", "v", ex=100) is True
    assert 0 < r.ttl("k") <= 100
    assert r.set("k", "w", nx=True) is None
    assert r.set("k", "w", xx=True, keepttl=True) is True
    assert 0 < r.ttl("k") <= 100
    assert r.get("k") == b"w"


# ---------------------------------------------------------------- SETNX SETEX PSETEX
def test_setnx(c):
    assert c.call("SETNX", "k", "a") == 1
    assert c.call("SETNX", "k", "b") == 0
    assert c.call("GET", "k") == b"a"
    assert c.call("SETNX", "k") == E_ARITY("setnx")


def test_setex_psetex(c):
    assert c.call("SETEX", "k", 100, "v") == "OK"
    assert c.call("GET", "k") == b"v"
    assert 0 < c.call("TTL", "k") <= 100
    assert c.call("PSETEX", "p", 100000, "w") == "OK"
    assert c.call("GET", "p") == b"w"
    assert 0 < c.call("PTTL", "p") <= 100000


def test_setex_errors(c):
    assert c.call("SETEX", "k", 0, "v") == E_EXPIRE("setex")
    assert c.call("SETEX", "k", -3, "v") == E_EXPIRE("setex")
    assert c.call("PSETEX", "k", 0, "v") == E_EXPIRE("psetex")
    assert c.call("SETEX", "k", "x", "v") == E_NOTINT
    assert c.call("SETEX", "k", 10) == E_ARITY("setex")
    assert c.call("EXISTS", "k") == 0


# ---------------------------------------------------------------- GETSET GETDEL GETEX
def test_getset(c):
    assert c.call("GETSET", "k", "a") is None
    assert c.call("GETSET", "k", "b") == b"a"
    assert c.call("GET", "k") == b"b"
    c.ok("EXPIRE", "k", 100)
    assert c.call("GETSET", "k", "c") == b"b"
    assert c.call("TTL", "k") == -1


def test_getdel(c):
    c.ok("SET", "k", "v")
    assert c.call("GETDEL", "k") == b"v"
    assert c.call("EXISTS", "k") == 0
    assert c.call("GETDEL", "k") is None
    assert c.call("GETDEL") == E_ARITY("getdel")


def test_getex(c):
    assert c.call("GETEX", "nokey") is None
    assert c.call("GETEX", "nokey", "EX", 10) is None
    assert c.call("EXISTS", "nokey") == 0
    c.ok("SET", "k", "v")
    assert c.call("GETEX", "k") == b"v"
    assert c.call("TTL", "k") == -1
    assert c.call("GETEX", "k", "EX", 100) == b"v"
    assert 0 < c.call("TTL", "k") <= 100
    assert c.call("GETEX", "k", "PX", 200000) == b"v"
    assert 100000 < c.call("PTTL", "k") <= 200000
    at = int(time.time()) + 5000
    assert c.call("GETEX", "k", "EXAT", at) == b"v"
    assert c.call("EXPIRETIME", "k") == at
    pat = at * 1000 + 123
    assert c.call("GETEX", "k", "PXAT", pat) == b"v"
    assert c.call("PEXPIRETIME", "k") == pat
    assert c.call("GETEX", "k", "PERSIST") == b"v"
    assert c.call("TTL", "k") == -1
    # EXAT in the past deletes the key (value still returned)
    assert c.call("GETEX", "k", "EXAT", 1) == b"v"
    assert c.call("EXISTS", "k") == 0


def test_getex_errors(c):
    c.ok("SET", "k", "v")
    assert c.call("GETEX", "k", "EX", 0) == E_EXPIRE("getex")
    assert c.call("GETEX", "k", "PX", -1) == E_EXPIRE("getex")
    assert c.call("GETEX", "k", "EX", "abc") == E_NOTINT
    assert c.call("GETEX", "k", "FOO") == E_SYNTAX
    assert c.call("GETEX", "k", "EX", 10, "PERSIST") == E_SYNTAX
    assert c.call("GETEX", "k", "EX") == E_SYNTAX
    assert c.call("TTL", "k") == -1


# ---------------------------------------------------------------- MGET MSET MSETNX
def test_mget_mset(c, r):
    assert c.call("MSET", "a", "1", "b", "2", "c", "3") == "OK"
    assert c.call("MGET", "a", "nokey", "c", "b") == [b"1", None, b"3", b"2"]
    assert r.mget(["a", "b"]) == [b"1", b"2"]
    # the last occurrence wins
    assert c.call("MSET", "m", "1", "m", "2", "m", "3") == "OK"
    assert c.call("GET", "m") == b"3"
    # MSET clears TTLs like SET
    c.ok("EXPIRE", "a", 100)
    c.ok("MSET", "a", "x")
    assert c.call("TTL", "a") == -1


def test_mset_arity(c):
    assert c.call("MSET", "a") == E_ARITY("mset")
    assert c.call("MSET", "a", "1", "b") == E_ARITY("mset")
    assert c.call("MSET") == E_ARITY("mset")
    assert c.call("MGET") == E_ARITY("mget")
    assert c.call("EXISTS", "a", "b") == 0


def test_msetnx_all_or_nothing(c):
    assert c.call("MSETNX", "x1", "a", "x2", "b") == 1
    assert c.call("MGET", "x1", "x2") == [b"a", b"b"]
    assert c.call("MSETNX", "x2", "c", "x3", "d") == 0
    assert c.call("GET", "x2") == b"b"
    assert c.call("EXISTS", "x3") == 0
    assert c.call("MSETNX", "x1") == E_ARITY("msetnx")
    assert c.call("MSETNX", "y1", "1", "y2") == E_ARITY("msetnx")
    assert c.call("EXISTS", "y1") == 0


# ---------------------------------------------------------------- APPEND STRLEN
def test_append_strlen(c):
    assert c.call("STRLEN", "k") == 0
    assert c.call("APPEND", "k", "hello") == 5
    assert c.call("APPEND", "k", " world") == 11
    assert c.call("GET", "k") == b"hello world"
    assert c.call("STRLEN", "k") == 11
    assert c.call("APPEND", "k", "") == 11
    assert c.call("APPEND", "k", b"\x00\r\n") == 14
    assert c.call("GET", "k") == b"hello world\x00\r\n"
    assert c.call("APPEND", "k") == E_ARITY("append")
    assert c.call("STRLEN") == E_ARITY("strlen")


def test_append_keeps_ttl(c):
    c.ok("SET", "k", "a", "EX", 100)
    assert c.call("APPEND", "k", "b") == 2
    assert 0 < c.call("TTL", "k") <= 100


# ---------------------------------------------------------------- INCR family
def test_incr_decr(c):
    assert c.call("INCR", "n") == 1
    assert c.call("INCR", "n") == 2
    assert c.call("DECR", "n") == 1
    assert c.call("DECR", "m") == -1
    assert c.call("INCRBY", "n", 10) == 11
    assert c.call("INCRBY", "n", -20) == -9
    assert c.call("DECRBY", "n", 3) == -12
    assert c.call("DECRBY", "n", -12) == 0
    assert c.call("GET", "n") == b"0"
    c.ok("SET", "s", "-42")
    assert c.call("INCR", "s") == -41
    assert c.call("GET", "s") == b"-41"


def test_incr_keeps_ttl(c):
    c.ok("SET", "n", "5", "EX", 100)
    assert c.call("INCR", "n") == 6
    assert 0 < c.call("TTL", "n") <= 100


@pytest.mark.parametrize("val", ["abc", " 1", "1 ", "1.5", "", "12345678901234567890", "0x10",
                                 "+1", "01"])
def test_incr_not_an_integer(c, val):
    c.ok("SET", "k", val)
    assert c.call("INCR", "k") == E_NOTINT
    assert c.call("GET", "k") == val.encode()


def test_incr_overflow(c):
    c.ok("SET", "n", "9223372036854775807")
    assert c.call("INCR", "n") == E_OVERFLOW
    assert c.call("INCRBY", "n", 1) == E_OVERFLOW
    c.ok("SET", "n", "-9223372036854775808")
    assert c.call("DECR", "n") == E_OVERFLOW
    assert c.call("GET", "n") == b"-9223372036854775808"
    assert c.call("DECRBY", "x", 9223372036854775807) == -9223372036854775807
    assert c.call("DECRBY", "x", 2) == E_OVERFLOW
    assert c.call("DECRBY", "y", "-9223372036854775808") == RespError("ERR decrement would overflow")


def test_incrby_errors(c):
    assert c.call("INCRBY", "n", "abc") == E_NOTINT
    assert c.call("INCRBY", "n", "1.5") == E_NOTINT
    assert c.call("INCRBY", "n", "99999999999999999999") == E_NOTINT
    assert c.call("DECRBY", "n", "x") == E_NOTINT
    assert c.call("INCRBY", "n") == E_ARITY("incrby")
    assert c.call("INCR") == E_ARITY("incr")
    assert c.call("EXISTS", "n") == 0


def test_incrbyfloat(c):
    assert c.call("INCRBYFLOAT", "f", "0.1") == b"0.1"
    assert c.call("INCRBYFLOAT", "f", "0.2") == b"0.3"
    assert c.call("GET", "f") == b"0.3"
    c.ok("SET", "f", "10.50")
    assert c.call("INCRBYFLOAT", "f", "0.1") == b"10.6"
    assert c.call("INCRBYFLOAT", "g", "5.0e3") == b"5000"
    assert c.call("INCRBYFLOAT", "g", "-6500.5") == b"-1500.5"
    c.ok("SET", "h", "3")
    assert c.call("INCRBYFLOAT", "h", "1") == b"4"
    c.ok("SET", "h", "1.23e2")
    assert c.call("INCRBYFLOAT", "h", "0") == b"123"


def test_incrbyfloat_errors(c):
    c.ok("SET", "f", "1")
    assert c.call("INCRBYFLOAT", "f", "abc") == E_NOTFLOAT
    assert c.call("INCRBYFLOAT", "f", "inf") == RespError("ERR increment would produce NaN or Infinity")
    c.ok("SET", "s", "notafloat")
    assert c.call("INCRBYFLOAT", "s", "1") == E_NOTFLOAT
    assert c.call("INCRBYFLOAT", "f") == E_ARITY("incrbyfloat")
    assert c.call("GET", "f") == b"1"


# ---------------------------------------------------------------- GETRANGE SETRANGE
@pytest.mark.parametrize("start,end,want", [
    (0, 3, b"This"), (-3, -1, b"ing"), (0, -1, b"This is a string"), (10, 100, b"string"),
    (5, 3, b""), (-100, -50, b"T"), (-1, -5, b""), (15, 15, b"g"), (16, 20, b""),
])
def test_getrange(c, start, end, want):
    c.ok("SET", "s", "This is a string")
    assert c.call("GETRANGE", "s", start, end) == want


def test_getrange_missing_and_errors(c):
    assert c.call("GETRANGE", "nokey", 0, -1) == b""
    c.ok("SET", "s", "abc")
    assert c.call("GETRANGE", "s", "a", 1) == E_NOTINT
    assert c.call("GETRANGE", "s", 0) == E_ARITY("getrange")


def test_setrange(c):
    c.ok("SET", "k", "Hello World")
    assert c.call("SETRANGE", "k", 6, "Redis") == 11
    assert c.call("GET", "k") == b"Hello Redis"
    assert c.call("SETRANGE", "k", 11, "!") == 12
    assert c.call("GET", "k") == b"Hello Redis!"
    # padding with zero bytes on a missing key
    assert c.call("SETRANGE", "new", 5, "ab") == 7
    assert c.call("GET", "new") == b"\x00\x00\x00\x00\x00ab"
    # empty value: no key is created, existing length is returned
    assert c.call("SETRANGE", "none", 3, "") == 0
    assert c.call("EXISTS", "none") == 0
    assert c.call("SETRANGE", "k", 0, "") == 12


def test_setrange_errors(c):
    assert c.call("SETRANGE", "k", -1, "x") == RespError("ERR offset is out of range")
    assert c.call("SETRANGE", "k", 536870912, "x") == RespError(
        "ERR string exceeds maximum allowed size (proto-max-bulk-len)")
    assert c.call("SETRANGE", "k", "a", "x") == E_NOTINT
    assert c.call("SETRANGE", "k", 1) == E_ARITY("setrange")
    assert c.call("EXISTS", "k") == 0


# ---------------------------------------------------------------- SETBIT GETBIT BITCOUNT
def test_setbit_getbit(c):
    assert c.call("GETBIT", "b", 0) == 0
    assert c.call("SETBIT", "b", 7, 1) == 0
    assert c.call("GET", "b") == b"\x01"
    assert c.call("SETBIT", "b", 0, 1) == 0
    assert c.call("GET", "b") == b"\x81"
    assert c.call("GETBIT", "b", 0) == 1
    assert c.call("GETBIT", "b", 1) == 0
    assert c.call("GETBIT", "b", 100) == 0
    assert c.call("SETBIT", "b", 7, 0) == 1
    assert c.call("GET", "b") == b"\x80"
    # growing the string pads with zero bytes
    assert c.call("SETBIT", "b", 23, 1) == 0
    assert c.call("GET", "b") == b"\x80\x00\x01"
    assert c.call("STRLEN", "b") == 3


def test_setbit_errors(c):
    assert c.call("SETBIT", "b", 0, 2) == RespError("ERR bit is not an integer or out of range")
    assert c.call("SETBIT", "b", -1, 1) == RespError("ERR bit offset is not an integer or out of range")
    assert c.call("SETBIT", "b", 4294967296, 1) == RespError(
        "ERR bit offset is not an integer or out of range")
    assert c.call("GETBIT", "b", -1) == RespError("ERR bit offset is not an integer or out of range")
    assert c.call("GETBIT", "b", "x") == RespError("ERR bit offset is not an integer or out of range")
    assert c.call("SETBIT", "b", 1) == E_ARITY("setbit")
    assert c.call("EXISTS", "b") == 0


def test_bitcount(c):
    c.ok("SET", "foo", "foobar")
    assert c.call("BITCOUNT", "foo") == 26
    assert c.call("BITCOUNT", "foo", 0, 0) == 4
    assert c.call("BITCOUNT", "foo", 1, 1) == 6
    assert c.call("BITCOUNT", "foo", -2, -1) == 7
    assert c.call("BITCOUNT", "foo", 1, 1, "BYTE") == 6
    assert c.call("BITCOUNT", "foo", 5, 30, "BIT") == 17
    assert c.call("BITCOUNT", "foo", 3, 1) == 0
    assert c.call("BITCOUNT", "nokey") == 0
    assert c.call("BITCOUNT", "nokey", 0, 1) == 0


def test_bitcount_errors(c):
    c.ok("SET", "foo", "foobar")
    assert c.call("BITCOUNT", "foo", 0) == E_SYNTAX
    assert c.call("BITCOUNT", "foo", 0, 1, "WORD") == E_SYNTAX
    assert c.call("BITCOUNT", "foo", "a", 1) == E_NOTINT
    assert c.call("BITCOUNT") == E_ARITY("bitcount")


# ---------------------------------------------------------------- with redis-py pipelines
def test_redis_py_pipeline_of_string_commands(r):
    p = r.pipeline(transaction=False)
    for i in range(200):
        p.set("k%d" % i, "v%d" % i)
        p.incr("n")
        p.append("a", "x")
    res = p.execute()
    assert res[0::3] == [True] * 200
    assert res[1::3] == list(range(1, 201))
    assert res[2::3] == list(range(1, 201))
    assert r.mget(["k%d" % i for i in range(200)]) == [b"v%d" % i for i in range(200)]


def test_redis_py_raises_on_errors(r):
    r.set("s", "abc")
    with pytest.raises(redis.ResponseError, match="^value is not an integer or out of range$"):
        r.incr("s")
    with pytest.raises(redis.ResponseError, match="^wrong number of arguments for 'get' command$"):
        r.execute_command("GET")
