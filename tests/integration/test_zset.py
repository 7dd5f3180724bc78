"""Sorted sets: every Z* command's replies and Redis 7.2's exact errors,
WRONGTYPE, a set that becomes empty disappears, RESP3 reply shapes, a random
workload against a Python model, and (Rowan-only) the contents surviving a
kill -9 and a clean restart exactly (replay through the type's apply, and
snapshot/load after history compaction).

Scores in expectations are exactly representable and short (1.5, 2.25...),
because Redis 7.0 (the local reference) prints other doubles with %.17g
while 7.2 prints the shortest form."""
import random
import time

import pytest

from conftest import RespError, RespClient

E_SYNTAX = RespError("ERR syntax error")
E_NOTINT = RespError("ERR value is not an integer or out of range")
E_NOTFLOAT = RespError("ERR value is not a valid float")
E_WRONGTYPE = RespError("WRONGTYPE Operation against a key holding the wrong kind of value")
E_MINMAX = RespError("ERR min or max is not a float")
E_LEX = RespError("ERR min or max not valid string range item")


def E_ARITY(cmd):
    return RespError("ERR wrong number of arguments for '%s' command" % cmd)


def flat(pairs):
    out = []
    for m, s in pairs:
        out += [m.encode() if isinstance(m, str) else m, s.encode() if isinstance(s, str) else s]
    return out


def B(*xs):
    return [x.encode() for x in xs]


def zset_of(c, key):
    """[(member bytes, score bytes)] in order."""
    rep = c.call("ZRANGE", key, 0, -1, "WITHSCORES")
    return list(zip(rep[0::2], rep[1::2]))


# ---------------------------------------------------------------- ZADD
def test_zadd_basic_and_options(c):
    assert c.call("ZADD", "z", 1, "a", 2, "b", 3, "c") == 3
    assert c.call("ZADD", "z", 1, "a", 5, "b") == 0               # b updated, not added
    assert c.call("ZADD", "z", "CH", 1, "a", 6, "b", 7, "d") == 2  # b changed + d added
    assert zset_of(c, "z") == [(b"a", b"1"), (b"c", b"3"), (b"b", b"6"), (b"d", b"7")]
    # NX: only new members
    assert c.call("ZADD", "z", "NX", 100, "a", 4, "e") == 1
    assert c.call("ZSCORE", "z", "a") == b"1"
    # XX: only existing members
    assert c.call("ZADD", "z", "XX", "CH", 2, "a", 9, "zz") == 1
    assert c.call("ZSCORE", "z", "zz") is None
    assert c.call("ZSCORE", "z", "a") == b"2"
    # GT / LT only move a score up / down; new members are still added
    assert c.call("ZADD", "z", "GT", "CH", 1, "a", 10, "c", 0, "new") == 2
    assert c.call("ZSCORE", "z", "a") == b"2"
    assert c.call("ZSCORE", "z", "c") == b"10"
    assert c.call("ZADD", "z", "LT", "CH", 1, "a", 20, "c") == 1
    assert c.call("ZSCORE", "z", "a") == b"1"
    assert c.call("ZSCORE", "z", "c") == b"10"
    assert c.call("ZADD", "z", "xx", "gt", "ch", 30, "c") == 1
    # same member twice in one command: the last one wins, counted once
    assert c.call("ZADD", "y", 1, "m", 2, "m", 3, "n") == 2
    assert zset_of(c, "y") == [(b"m", b"2"), (b"n", b"3")]
    assert c.call("ZADD", "y", "CH", 5, "m", 2, "m") == 2
    assert c.call("ZADD", "y", "NX", 1, "q", 2, "q") == 1
    assert c.call("ZSCORE", "y", "q") == b"1"
    # XX on a missing key creates nothing
    assert c.call("ZADD", "nokey", "XX", 1, "a") == 0
    assert c.call("EXISTS", "nokey") == 0
    # scores: inf, exponents, negative zero, binary members
    assert c.call("ZADD", "s", "+inf", "hi", "-inf", "lo", "1e3", "k", "-0", "zero") == 4
    assert zset_of(c, "s") == [(b"lo", b"-inf"), (b"zero", b"0"), (b"k", b"1000"), (b"hi", b"inf")]
    assert c.call("ZADD", "bin", 1.5, b"\x00\xff\r\n") == 1
    assert c.call("ZSCORE", "bin", b"\x00\xff\r\n") == b"1.5"


def test_zadd_errors(c):
    assert c.call("ZADD", "z", 1) == E_ARITY("zadd")
    assert c.call("ZADD", "z", 1, "a", 2) == E_SYNTAX
    assert c.call("ZADD", "z", "NX", 1) == E_SYNTAX
    assert c.call("ZADD", "z", "NX", "XX", 1, "a") == \
        RespError("ERR XX and NX options at the same time are not compatible")
    gtlt = RespError("ERR GT, LT, and/or NX options at the same time are not compatible")
    assert c.call("ZADD", "z", "GT", "LT", 1, "a") == gtlt
    assert c.call("ZADD", "z", "GT", "NX", 1, "a") == gtlt
    assert c.call("ZADD", "z", "LT", "NX", 1, "a") == gtlt
    assert c.call("ZADD", "z", "INCR", 1, "a", 2, "b") == \
        RespError("ERR INCR option supports a single increment-element pair")
    for bad in ("abc", "nan", "", " 1", "1 ", "1x"):
        assert c.call("ZADD", "z", bad, "a") == E_NOTFLOAT, bad
    assert c.call("ZADD", "z", 1, "a", "x", "b") == E_NOTFLOAT
    assert c.call("EXISTS", "z") == 0          # nothing half-done


def test_zadd_incr_and_zincrby(c):
    assert c.call("ZADD", "z", "INCR", 1.5, "a") == b"1.5"
    assert c.call("ZADD", "z", "INCR", 1, "a") == b"2.5"
    assert c.call("ZINCRBY", "z", 2, "a") == b"4.5"
    assert c.call("ZINCRBY", "z", -10, "b") == b"-10"
    assert c.call("ZADD", "z", "NX", "INCR", 1, "a") is None
    assert c.call("ZADD", "z", "XX", "INCR", 1, "nope") is None
    assert c.call("ZADD", "z", "GT", "INCR", -1, "a") is None
    assert c.call("ZADD", "z", "LT", "INCR", -1, "a") == b"3.5"
    assert c.call("ZADD", "missing", "XX", "INCR", 1, "a") is None
    assert c.call("EXISTS", "missing") == 0
    assert c.call("ZINCRBY", "z", "inf", "a") == b"inf"
    nan = RespError("ERR resulting score is not a number (NaN)")
    assert c.call("ZINCRBY", "z", "-inf", "a") == nan
    assert c.call("ZADD", "z", "INCR", "-inf", "a") == nan
    assert c.call("ZSCORE", "z", "a") == b"inf"
    assert c.call("ZINCRBY", "z", "x", "a") == E_NOTFLOAT
    assert c.call("ZINCRBY", "z", 1) == E_ARITY("zincrby")


# ---------------------------------------------------------------- ZREM, reads
def test_zrem_and_empty_cleanup(c):
    c.call("ZADD", "z", 1, "a", 2, "b", 3, "c")
    assert c.call("ZREM", "z", "a", "a", "x") == 1
    assert c.call("ZREM", "nokey", "a") == 0
    assert c.call("ZCARD", "z") == 2
    assert c.call("ZREM", "z", "b", "c") == 2
    assert c.call("EXISTS", "z") == 0
    assert c.call("TYPE", "z") == "none"
    c.call("ZADD", "z", 1, "a")
    c.call("EXPIRE", "z", 100)
    c.call("ZADD", "z", 2, "b")
    assert c.call("TTL", "z") > 0              # writes keep the TTL
    assert c.call("ZREM", "z") == E_ARITY("zrem")


def test_zcard_zscore_zmscore(c):
    c.call("ZADD", "z", 1, "a", 2.25, "b")
    assert c.call("ZCARD", "z") == 2
    assert c.call("ZCARD", "nokey") == 0
    assert c.call("ZSCORE", "z", "b") == b"2.25"
    assert c.call("ZSCORE", "z", "x") is None
    assert c.call("ZSCORE", "nokey", "x") is None
    assert c.call("ZMSCORE", "z", "a", "x", "b") == [b"1", None, b"2.25"]
    assert c.call("ZMSCORE", "nokey", "a", "b") == [None, None]
    assert c.call("ZMSCORE", "z") == E_ARITY("zmscore")
    assert c.call("TYPE", "z") == "zset"


def test_zrank(c):
    c.call("ZADD", "z", 1, "a", 2, "b", 3, "c", 3, "d")
    assert [c.call("ZRANK", "z", m) for m in "abcd"] == [0, 1, 2, 3]
    assert [c.call("ZREVRANK", "z", m) for m in "abcd"] == [3, 2, 1, 0]
    assert c.call("ZRANK", "z", "x") is None
    assert c.call("ZRANK", "nokey", "x") is None


@pytest.mark.redis_min("7.2")
def test_zrank_withscore(c):
    c.call("ZADD", "z", 1, "a", 2.5, "b")
    assert c.call("ZRANK", "z", "b", "WITHSCORE") == [1, b"2.5"]
    assert c.call("ZREVRANK", "z", "b", "withscore") == [0, b"2.5"]
    assert c.call("ZRANK", "z", "x", "WITHSCORE") is None
    assert c.call("ZRANK", "nokey", "x", "WITHSCORE") is None
    assert c.call("ZRANK", "z", "b", "foo") == E_SYNTAX
    assert c.call("ZRANK", "z", "b", "WITHSCORE", "x") == E_ARITY("zrank")


# ---------------------------------------------------------------- ranges
@pytest.fixture
def z6(c):
    c.call("ZADD", "z", 1, "a", 2, "b", 3, "c", 4, "d", 5, "e", 6, "f")
    return c


def test_zrange_by_rank(z6):
    c = z6
    assert c.call("ZRANGE", "z", 0, -1) == B(*"abcdef")
    assert c.call("ZRANGE", "z", 1, 2) == B("b", "c")
    assert c.call("ZRANGE", "z", -2, -1, "WITHSCORES") == flat([("e", "5"), ("f", "6")])
    assert c.call("ZRANGE", "z", -100, 1) == B("a", "b")
    assert c.call("ZRANGE", "z", 4, 100) == B("e", "f")
    assert c.call("ZRANGE", "z", 3, 2) == []
    assert c.call("ZRANGE", "z", 6, 10) == []
    assert c.call("ZRANGE", "z", -1, -2) == []
    assert c.call("ZRANGE", "z", 0, 1, "REV") == B("f", "e")
    assert c.call("ZREVRANGE", "z", 0, 1, "WITHSCORES") == flat([("f", "6"), ("e", "5")])
    assert c.call("ZREVRANGE", "z", -2, -1) == B("b", "a")
    assert c.call("ZRANGE", "nokey", 0, -1) == []
    assert c.call("ZRANGE", "z", "x", 1) == E_NOTINT
    assert c.call("ZRANGE", "z", 0, 1, "LIMIT", 0, 1) == RespError(
        "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX")
    assert c.call("ZRANGE", "z", 0, 1, "foo") == E_SYNTAX
    assert c.call("ZREVRANGE", "z", 0, 1, "REV") == E_SYNTAX
    assert c.call("ZRANGE", "z", 0) == E_ARITY("zrange")


def test_zrange_by_score(z6):
    c = z6
    assert c.call("ZRANGE", "z", 2, 4, "BYSCORE") == B("b", "c", "d")
    assert c.call("ZRANGE", "z", "(2", "(4", "BYSCORE") == B("c")
    assert c.call("ZRANGE", "z", "-inf", "+inf", "BYSCORE", "LIMIT", 1, 2) == B("b", "c")
    assert c.call("ZRANGE", "z", "-inf", "+inf", "BYSCORE", "LIMIT", 4, -1) == B("e", "f")
    assert c.call("ZRANGE", "z", "-inf", "+inf", "BYSCORE", "LIMIT", 6, 1) == []
    assert c.call("ZRANGE", "z", "-inf", "+inf", "BYSCORE", "LIMIT", -1, 2) == []
    assert c.call("ZRANGE", "z", "-inf", "+inf", "BYSCORE", "LIMIT", 0, 0) == []
    assert c.call("ZRANGE", "z", 5, 2, "BYSCORE", "REV", "WITHSCORES") == \
        flat([("e", "5"), ("d", "4"), ("c", "3"), ("b", "2")])
    assert c.call("ZRANGE", "z", "+inf", "(4", "BYSCORE", "REV", "LIMIT", 1, 5) == B("e")
    assert c.call("ZRANGEBYSCORE", "z", "(1", 3, "WITHSCORES") == flat([("b", "2"), ("c", "3")])
    assert c.call("ZRANGEBYSCORE", "z", 3, 1) == []
    assert c.call("ZRANGEBYSCORE", "z", "(3", 3) == []
    assert c.call("ZRANGEBYSCORE", "z", 2, "inf", "LIMIT", 1, 1) == B("c")
    assert c.call("ZREVRANGEBYSCORE", "z", 4, "-inf") == B("d", "c", "b", "a")
    assert c.call("ZREVRANGEBYSCORE", "z", "(4", "(1", "WITHSCORES", "LIMIT", 0, 1) == \
        flat([("c", "3")])
    assert c.call("ZRANGEBYSCORE", "nokey", 0, 1) == []
    for bad in (("x", 1), (1, "(x"), ("nan", 1), (1, "[1")):
        assert c.call("ZRANGEBYSCORE", "z", *bad) == E_MINMAX, bad
    assert c.call("ZRANGE", "z", "a", 1, "BYSCORE") == E_MINMAX
    assert c.call("ZRANGEBYSCORE", "z", 0, 1, "LIMIT", 1) == E_SYNTAX
    assert c.call("ZRANGEBYSCORE", "z", 0, 1, "LIMIT", "x", 1) == E_NOTINT
    assert c.call("ZRANGEBYSCORE", "z", 0, 1, "REV") == E_SYNTAX
    assert c.call("ZRANGE", "z", 0, 1, "BYSCORE", "BYLEX") == E_SYNTAX


def test_zrange_by_lex(c):
    c.call("ZADD", "z", 0, "a", 0, "b", 0, "c", 0, "d", 0, "e", 0, "ee")
    assert c.call("ZRANGE", "z", "-", "+", "BYLEX") == B("a", "b", "c", "d", "e", "ee")
    assert c.call("ZRANGE", "z", "[b", "(d", "BYLEX") == B("b", "c")
    assert c.call("ZRANGE", "z", "(b", "[e", "BYLEX") == B("c", "d", "e")
    assert c.call("ZRANGE", "z", "+", "[c", "BYLEX", "REV") == B("ee", "e", "d", "c")
    assert c.call("ZRANGE", "z", "-", "+", "BYLEX", "LIMIT", 2, 2) == B("c", "d")
    assert c.call("ZRANGEBYLEX", "z", "[c", "+") == B("c", "d", "e", "ee")
    assert c.call("ZRANGEBYLEX", "z", "+", "-") == []
    assert c.call("ZRANGEBYLEX", "z", "[d", "[c") == []
    assert c.call("ZREVRANGEBYLEX", "z", "(e", "-", "LIMIT", 1, 2) == B("c", "b")
    assert c.call("ZRANGEBYLEX", "nokey", "-", "+") == []
    for bad in (("a", "+"), ("-", "c"), ("--", "+"), ("", "+"), ("-", "++")):
        assert c.call("ZRANGEBYLEX", "z", *bad) == E_LEX, bad
    assert c.call("ZRANGE", "z", "-", "+", "BYLEX", "WITHSCORES") == RespError(
        "ERR syntax error, WITHSCORES not supported in combination with BYLEX")
    assert c.call("ZRANGEBYLEX", "z", "-", "+", "WITHSCORES") == RespError(
        "ERR syntax error, WITHSCORES not supported in combination with BYLEX")


def test_zcount_zlexcount(z6):
    c = z6
    assert c.call("ZCOUNT", "z", "-inf", "+inf") == 6
    assert c.call("ZCOUNT", "z", "(1", 3) == 2
    assert c.call("ZCOUNT", "z", 10, 20) == 0
    assert c.call("ZCOUNT", "z", 4, 2) == 0
    assert c.call("ZCOUNT", "nokey", 0, 1) == 0
    assert c.call("ZCOUNT", "z", "x", 1) == E_MINMAX
    c.call("ZADD", "l", 0, "a", 0, "b", 0, "c")
    assert c.call("ZLEXCOUNT", "l", "-", "+") == 3
    assert c.call("ZLEXCOUNT", "l", "(a", "[c") == 2
    assert c.call("ZLEXCOUNT", "l", "[x", "+") == 0
    assert c.call("ZLEXCOUNT", "nokey", "-", "+") == 0
    assert c.call("ZLEXCOUNT", "l", "a", "+") == E_LEX


def test_zrangestore(z6):
    c = z6
    assert c.call("ZRANGESTORE", "dst", "z", 1, 3) == 3
    assert zset_of(c, "dst") == [(b"b", b"2"), (b"c", b"3"), (b"d", b"4")]
    assert c.call("ZRANGESTORE", "dst", "z", 5, 2, "BYSCORE", "REV", "LIMIT", 0, 2) == 2
    assert zset_of(c, "dst") == [(b"d", b"4"), (b"e", b"5")]
    assert c.call("ZRANGESTORE", "dst", "z", "[a", "[b", "BYLEX") == 2
    # replaces another type, clears the TTL
    c.call("SET", "str", "x", "EX", 100)
    assert c.call("ZRANGESTORE", "str", "z", 0, 0) == 1
    assert c.call("TYPE", "str") == "zset"
    assert c.call("TTL", "str") == -1
    # empty result deletes the destination
    assert c.call("ZRANGESTORE", "dst", "z", 10, 20) == 0
    assert c.call("EXISTS", "dst") == 0
    c.call("SET", "dst", "x")
    assert c.call("ZRANGESTORE", "dst", "nokey", 0, -1) == 0
    assert c.call("EXISTS", "dst") == 0
    # store into itself
    assert c.call("ZRANGESTORE", "z", "z", 0, 1) == 2
    assert zset_of(c, "z") == [(b"a", b"1"), (b"b", b"2")]
    assert c.call("ZRANGESTORE", "dst", "z", 0, 1, "WITHSCORES") == E_SYNTAX
    c.call("SET", "s", "x")
    assert c.call("ZRANGESTORE", "dst", "s", 0, 1) == E_WRONGTYPE
    assert c.call("ZRANGESTORE", "dst", "z", 0) == E_ARITY("zrangestore")


# ---------------------------------------------------------------- removing ranges
def test_zremrange(c):
    def fill():
        c.call("DEL", "z")
        c.call("ZADD", "z", 1, "a", 2, "b", 3, "c", 4, "d", 5, "e")
    fill()
    assert c.call("ZREMRANGEBYRANK", "z", 1, 2) == 2
    assert c.call("ZRANGE", "z", 0, -1) == B("a", "d", "e")
    assert c.call("ZREMRANGEBYRANK", "z", -1, -1) == 1
    assert c.call("ZREMRANGEBYRANK", "z", 5, 10) == 0
    assert c.call("ZREMRANGEBYRANK", "z", 0, -1) == 2
    assert c.call("EXISTS", "z") == 0
    fill()
    assert c.call("ZREMRANGEBYSCORE", "z", "(1", 3) == 2
    assert c.call("ZREMRANGEBYSCORE", "z", 10, 20) == 0
    assert c.call("ZREMRANGEBYSCORE", "z", "-inf", "+inf") == 3
    assert c.call("EXISTS", "z") == 0
    c.call("ZADD", "l", 0, "a", 0, "b", 0, "c")
    assert c.call("ZREMRANGEBYLEX", "l", "[b", "+") == 2
    assert c.call("ZREMRANGEBYLEX", "l", "-", "+") == 1
    assert c.call("EXISTS", "l") == 0
    assert c.call("ZREMRANGEBYRANK", "nokey", 0, -1) == 0
    assert c.call("ZREMRANGEBYSCORE", "nokey", 0, 1) == 0
    assert c.call("ZREMRANGEBYLEX", "nokey", "-", "+") == 0
    assert c.call("ZREMRANGEBYRANK", "z", "a", 1) == E_NOTINT
    assert c.call("ZREMRANGEBYSCORE", "z", "a", 1) == E_MINMAX
    assert c.call("ZREMRANGEBYLEX", "z", "a", "+") == E_LEX


# ---------------------------------------------------------------- popping
def test_zpopmin_zpopmax(c):
    c.call("ZADD", "z", 1, "a", 2, "b", 3, "c", 4, "d")
    assert c.call("ZPOPMIN", "z") == [b"a", b"1"]
    assert c.call("ZPOPMAX", "z") == [b"d", b"4"]
    assert c.call("ZPOPMIN", "z", 0) == []
    assert c.call("ZPOPMIN", "z", 1) == [b"b", b"2"]
    assert c.call("ZPOPMAX", "z", 10) == [b"c", b"3"]
    assert c.call("EXISTS", "z") == 0
    assert c.call("ZPOPMIN", "z") == []
    assert c.call("ZPOPMAX", "z", 3) == []
    c.call("ZADD", "z", 1, "a", 2, "b", 3, "c")
    assert c.call("ZPOPMAX", "z", 2) == flat([("c", "3"), ("b", "2")])
    assert c.call("ZPOPMIN", "z", -1) == RespError("ERR value is out of range, must be positive")
    assert c.call("ZPOPMIN", "z", "x") == RespError("ERR value is out of range, must be positive")
    assert c.call("ZPOPMIN", "z", 1, 2) == E_SYNTAX
    assert c.call("ZCARD", "z") == 1


def test_zmpop(c):
    c.call("ZADD", "z2", 1, "a", 2, "b", 3, "c")
    assert c.call("ZMPOP", 2, "z1", "z2", "MIN") == [b"z2", [[b"a", b"1"]]]
    assert c.call("ZMPOP", 2, "z1", "z2", "max", "COUNT", 5) == \
        [b"z2", [[b"c", b"3"], [b"b", b"2"]]]
    assert c.call("EXISTS", "z2") == 0
    assert c.call("ZMPOP", 2, "z1", "z2", "MIN") is None
    c.call("ZADD", "z1", 5, "x")
    assert c.call("ZMPOP", 1, "z1", "MIN", "COUNT", 1) == [b"z1", [[b"x", b"5"]]]
    gt0 = RespError("ERR numkeys should be greater than 0")
    assert c.call("ZMPOP", 0, "z1", "MIN") == gt0
    assert c.call("ZMPOP", "x", "z1", "MIN") == gt0
    assert c.call("ZMPOP", 1, "z1", "foo") == E_SYNTAX
    assert c.call("ZMPOP", 3, "z1", "MIN") == E_SYNTAX
    cnt = RespError("ERR count should be greater than 0")
    assert c.call("ZMPOP", 1, "z1", "MIN", "COUNT", 0) == cnt
    assert c.call("ZMPOP", 1, "z1", "MIN", "COUNT", "x") == cnt
    assert c.call("ZMPOP", 1, "z1", "MIN", "COUNT", 1, "COUNT", 1) == E_SYNTAX
    assert c.call("ZMPOP", 1, "z1", "MIN", "COUNT") == E_SYNTAX
    c.call("SET", "s", "x")
    c.call("ZADD", "z3", 1, "a")
    assert c.call("ZMPOP", 2, "s", "z3", "MIN") == E_WRONGTYPE
    assert c.call("ZMPOP", 2, "nokey", "s", "MIN") == E_WRONGTYPE
    assert c.call("ZMPOP", 1, "z3") == E_ARITY("zmpop")


# ---------------------------------------------------------------- blocking pops
def test_bzpop_immediate_and_timeout(server, c):
    c.call("ZADD", "z", 1, "a", 2, "b", 3, "c")
    assert c.call("BZPOPMIN", "nokey", "z", 0) == [b"z", b"a", b"1"]
    assert c.call("BZPOPMAX", "z", 0) == [b"z", b"c", b"3"]
    assert c.call("BZMPOP", 0, 2, "nokey", "z", "MIN", "COUNT", 5) == [b"z", [[b"b", b"2"]]]
    assert c.call("EXISTS", "z") == 0
    t = time.monotonic()
    assert c.call("BZPOPMIN", "z", "0.1") is None
    assert c.call("BZMPOP", "0.1", 1, "z", "MAX") is None
    assert time.monotonic() - t >= 0.15
    assert c.call("BZPOPMIN", "z", "x") == RespError("ERR timeout is not a float or out of range")
    assert c.call("BZPOPMIN", "z", -1) == RespError("ERR timeout is negative")
    assert c.call("BZMPOP", 0, 0, "z", "MIN") == RespError("ERR numkeys should be greater than 0")
    assert c.call("BZMPOP", 0, 1, "z", "FOO") == E_SYNTAX
    assert c.call("BZMPOP", "x", 1, "z", "MIN") == RespError("ERR timeout is not a float or out of range")
    c.call("SET", "s", "x")
    assert c.call("BZPOPMIN", "s", 0) == E_WRONGTYPE
    assert c.call("BZMPOP", 0, 2, "nokey", "s", "MIN") == E_WRONGTYPE
    assert c.call("BZPOPMIN", "z") == E_ARITY("bzpopmin")


def test_bzpop_wakes_on_write(server, c):
    waiter = server.resp()
    waiter.send_command("BZPOPMIN", "q1", "q2", 10)
    time.sleep(0.2)
    assert c.call("ZADD", "q2", 5, "m", 7, "n") == 2
    assert waiter.read_reply() == [b"q2", b"m", b"5"]
    assert c.call("ZRANGE", "q2", 0, -1) == [b"n"]
    waiter.send_command("BZMPOP", 10, 1, "dst", "MAX", "COUNT", 2)
    time.sleep(0.2)
    assert c.call("ZUNIONSTORE", "dst", 1, "q2", "WEIGHTS", 2) == 1
    assert waiter.read_reply() == [b"dst", [[b"n", b"14"]]]
    assert c.call("EXISTS", "dst") == 0
    waiter.send_command("BZPOPMAX", "q3", 10)
    time.sleep(0.2)
    assert c.call("ZINCRBY", "q3", 2.5, "x") == b"2.5"
    assert waiter.read_reply() == [b"q3", b"x", b"2.5"]
    assert waiter.call("PING") == "PONG"


def test_bzpop_in_multi_does_not_block(c):
    assert c.call("MULTI") == "OK"
    assert c.call("BZPOPMIN", "nokey", 0) == "QUEUED"
    assert c.call("BZMPOP", 0, 1, "nokey", "MIN") == "QUEUED"
    assert c.call("EXEC") == [None, None]


# ---------------------------------------------------------------- set operations
@pytest.fixture
def sets(c):
    c.call("ZADD", "a", 1, "x", 2, "y", 3, "z")
    c.call("ZADD", "b", 10, "y", 20, "z", 30, "w")
    return c


def test_zunion_zinter_zdiff(sets):
    c = sets
    assert c.call("ZUNION", 2, "a", "b", "WITHSCORES") == \
        flat([("x", "1"), ("y", "12"), ("z", "23"), ("w", "30")])
    assert c.call("ZUNION", 2, "a", "b") == B("x", "y", "z", "w")
    assert c.call("ZUNION", 3, "a", "b", "nokey", "WEIGHTS", 2, 1, 5, "WITHSCORES") == \
        flat([("x", "2"), ("y", "14"), ("z", "26"), ("w", "30")])
    assert c.call("ZUNION", 2, "a", "b", "AGGREGATE", "MIN", "WITHSCORES") == \
        flat([("x", "1"), ("y", "2"), ("z", "3"), ("w", "30")])
    assert c.call("ZUNION", 2, "a", "b", "AGGREGATE", "max", "WITHSCORES") == \
        flat([("x", "1"), ("y", "10"), ("z", "20"), ("w", "30")])
    assert c.call("ZINTER", 2, "a", "b", "WITHSCORES") == flat([("y", "12"), ("z", "23")])
    assert c.call("ZINTER", 2, "a", "b", "WEIGHTS", 1, 0.5, "AGGREGATE", "MAX", "WITHSCORES") == \
        flat([("y", "5"), ("z", "10")])
    assert c.call("ZINTER", 2, "a", "nokey") == []
    assert c.call("ZINTER", 1, "a") == B("x", "y", "z")
    assert c.call("ZDIFF", 2, "a", "b", "WITHSCORES") == flat([("x", "1")])
    assert c.call("ZDIFF", 2, "b", "a") == B("w")
    assert c.call("ZDIFF", 2, "nokey", "a") == []
    assert c.call("ZDIFF", 1, "a") == B("x", "y", "z")
    assert c.call("ZUNION", 1, "nokey") == []


def test_zsetop_special_scores(c):
    c.call("ZADD", "p", "inf", "m", 1, "n")
    c.call("ZADD", "q", "-inf", "m", 2, "n")
    assert c.call("ZUNION", 2, "p", "q", "WITHSCORES") == flat([("m", "0"), ("n", "3")])
    assert c.call("ZINTER", 2, "p", "q", "WEIGHTS", 0, 1, "WITHSCORES") == \
        flat([("m", "-inf"), ("n", "2")])
    assert c.call("ZUNION", 1, "p", "WEIGHTS", 0, "WITHSCORES") == flat([("m", "0"), ("n", "0")])


def test_zsetop_store(sets):
    c = sets
    assert c.call("ZUNIONSTORE", "dst", 2, "a", "b") == 4
    assert zset_of(c, "dst") == [(b"x", b"1"), (b"y", b"12"), (b"z", b"23"), (b"w", b"30")]
    assert c.call("ZINTERSTORE", "dst", 2, "a", "b", "WEIGHTS", 2, 1) == 2
    assert zset_of(c, "dst") == [(b"y", b"14"), (b"z", b"26")]
    assert c.call("ZDIFFSTORE", "dst", 2, "a", "b") == 1
    assert zset_of(c, "dst") == [(b"x", b"1")]
    # destination is also a source
    assert c.call("ZUNIONSTORE", "a", 2, "a", "b", "AGGREGATE", "MAX") == 4
    assert zset_of(c, "a") == [(b"x", b"1"), (b"y", b"10"), (b"z", b"20"), (b"w", b"30")]
    # empty result deletes the destination (of any type); TTL is cleared
    c.call("SET", "dst", "v")
    assert c.call("ZINTERSTORE", "dst", 2, "a", "nokey") == 0
    assert c.call("EXISTS", "dst") == 0
    c.call("ZADD", "dst", 1, "old")
    c.call("EXPIRE", "dst", 100)
    assert c.call("ZDIFFSTORE", "dst", 1, "b") == 3
    assert c.call("TTL", "dst") == -1
    assert c.call("ZSCORE", "dst", "old") is None
    assert c.call("ZUNIONSTORE", "dst", 2, "a", "b", "WITHSCORES") == E_SYNTAX


def test_zsetop_plain_sets(c):
    c.call("SADD", "s1", "a", "b", "c")
    c.call("SADD", "s2", "1", "2")              # an intset in Redis
    c.call("ZADD", "z", 2, "a", 5, "x")
    assert c.call("ZUNION", 2, "s1", "z", "WITHSCORES") == \
        flat([("b", "1"), ("c", "1"), ("a", "3"), ("x", "5")])
    assert c.call("ZINTER", 2, "s1", "z", "WEIGHTS", 10, 1, "WITHSCORES") == flat([("a", "12")])
    assert c.call("ZDIFF", 2, "s1", "z") == B("b", "c")
    assert c.call("ZINTERCARD", 2, "z", "s1") == 1
    assert c.call("ZUNION", 1, "s2", "WITHSCORES") == flat([("1", "1"), ("2", "1")])
    assert c.call("ZINTERSTORE", "s1", 2, "s1", "z") == 1   # a set replaced by a zset
    assert c.call("TYPE", "s1") == "zset"
    assert zset_of(c, "s1") == [(b"a", b"3")]
    assert c.call("ZRANGE", "s2", 0, -1) == E_WRONGTYPE     # only the set operations take sets


def test_zsetop_errors(sets):
    c = sets
    assert c.call("ZUNION", 0, "a") == RespError("ERR at least 1 input key is needed for 'zunion' command")
    assert c.call("ZINTERSTORE", "d", 0, "a") == \
        RespError("ERR at least 1 input key is needed for 'zinterstore' command")
    assert c.call("ZUNION", 3, "a", "b") == E_SYNTAX
    assert c.call("ZUNION", "x", "a") == E_NOTINT
    assert c.call("ZUNION", 2, "a", "b", "WEIGHTS", 1) == E_SYNTAX
    assert c.call("ZUNION", 2, "a", "b", "WEIGHTS", 1, "x") == \
        RespError("ERR weight value is not a float")
    assert c.call("ZUNION", 2, "a", "b", "AGGREGATE", "avg") == E_SYNTAX
    assert c.call("ZUNION", 2, "a", "b", "AGGREGATE") == E_SYNTAX
    assert c.call("ZDIFF", 2, "a", "b", "WEIGHTS", 1, 2) == E_SYNTAX
    assert c.call("ZDIFF", 2, "a", "b", "AGGREGATE", "MIN") == E_SYNTAX
    c.call("SET", "s", "x")
    assert c.call("ZUNION", 2, "a", "s") == E_WRONGTYPE
    assert c.call("ZINTERSTORE", "d", 2, "s", "a") == E_WRONGTYPE
    assert c.call("ZUNIONSTORE", "d", 1) == E_ARITY("zunionstore")


def test_zintercard(sets):
    c = sets
    assert c.call("ZINTERCARD", 2, "a", "b") == 2
    assert c.call("ZINTERCARD", 2, "a", "b", "LIMIT", 1) == 1
    assert c.call("ZINTERCARD", 2, "a", "b", "LIMIT", 0) == 2
    assert c.call("ZINTERCARD", 1, "a") == 3
    assert c.call("ZINTERCARD", 2, "a", "nokey") == 0
    neg = RespError("ERR LIMIT can't be negative")
    assert c.call("ZINTERCARD", 2, "a", "b", "LIMIT", -1) == neg
    assert c.call("ZINTERCARD", 2, "a", "b", "LIMIT", "x") == neg
    assert c.call("ZINTERCARD", 0, "a") == \
        RespError("ERR at least 1 input key is needed for 'zintercard' command")
    assert c.call("ZINTERCARD", 2, "a", "b", "WITHSCORES") == E_SYNTAX
    assert c.call("ZINTERCARD", 3, "a", "b") == E_SYNTAX


# ---------------------------------------------------------------- random, scan
def test_zrandmember(c):
    members = {("m%d" % i).encode(): str(i).encode() for i in range(10)}
    for m, s in members.items():
        c.call("ZADD", "z", s, m)
    assert c.call("ZRANDMEMBER", "z") in members
    assert c.call("ZRANDMEMBER", "nokey") is None
    assert c.call("ZRANDMEMBER", "nokey", 5) == []
    assert c.call("ZRANDMEMBER", "z", 0) == []
    got = c.call("ZRANDMEMBER", "z", 5)
    assert len(got) == 5 and len(set(got)) == 5 and set(got) <= set(members)
    assert sorted(c.call("ZRANDMEMBER", "z", 100)) == sorted(members)
    got = c.call("ZRANDMEMBER", "z", -30)
    assert len(got) == 30 and set(got) <= set(members)
    got = c.call("ZRANDMEMBER", "z", 3, "WITHSCORES")
    assert len(got) == 6 and all(members[m] == s for m, s in zip(got[0::2], got[1::2]))
    got = c.call("ZRANDMEMBER", "z", -20, "WITHSCORES")
    assert len(got) == 40 and all(members[m] == s for m, s in zip(got[0::2], got[1::2]))
    assert c.call("ZRANDMEMBER", "z", 1, "foo") == E_SYNTAX
    assert c.call("ZRANDMEMBER", "z", 1, "WITHSCORES", "x") == E_SYNTAX
    assert c.call("ZRANDMEMBER", "z", "x") == E_NOTINT
    assert c.call("ZRANDMEMBER", "z", -9223372036854775807 // 2 - 10, "WITHSCORES") == \
        RespError("ERR value is out of range")


def test_zscan(c):
    assert c.call("ZSCAN", "nokey", 0) == [b"0", []]
    c.call("ZADD", "small", 1, "a", 2.5, "b", 3, "c")
    assert c.call("ZSCAN", "small", 0) == [b"0", flat([("a", "1"), ("b", "2.5"), ("c", "3")])]
    assert c.call("ZSCAN", "small", 0, "MATCH", "b*") == [b"0", flat([("b", "2.5")])]
    big = {("member:%d" % i).encode(): str(i).encode() for i in range(300)}
    args = []
    for m, s in big.items():
        args += [s, m]
    c.call("ZADD", "big", *args)
    seen = {}
    cursor = b"0"
    rounds = 0
    while True:
        cursor, items = c.call("ZSCAN", "big", cursor, "COUNT", 20)
        for m, s in zip(items[0::2], items[1::2]):
            seen[m] = s
        rounds += 1
        if cursor == b"0":
            break
    assert seen == big and rounds > 1
    got = {}
    cursor = b"0"
    while True:
        cursor, items = c.call("ZSCAN", "big", cursor, "MATCH", "member:1?", "COUNT", 1000)
        got.update(zip(items[0::2], items[1::2]))
        if cursor == b"0":
            break
    assert sorted(got) == sorted(("member:1%d" % i).encode() for i in range(10))
    assert c.call("ZSCAN", "small", "x") == RespError("ERR invalid cursor")
    assert c.call("ZSCAN", "small", 0, "COUNT", 0) == E_SYNTAX
    assert c.call("ZSCAN", "small", 0, "COUNT", "x") == E_NOTINT
    assert c.call("ZSCAN", "small", 0, "TYPE", "zset") == E_SYNTAX
    assert c.call("ZSCAN", "small", 0, "MATCH") == E_SYNTAX


# ---------------------------------------------------------------- types, RESP3
def test_wrongtype(c):
    c.call("SET", "s", "x")
    cmds = [
        ("ZADD", "s", 1, "a"), ("ZINCRBY", "s", 1, "a"), ("ZREM", "s", "a"), ("ZCARD", "s"),
        ("ZSCORE", "s", "a"), ("ZMSCORE", "s", "a"), ("ZRANK", "s", "a"), ("ZREVRANK", "s", "a"),
        ("ZRANGE", "s", 0, 1), ("ZRANGEBYSCORE", "s", 0, 1), ("ZREVRANGEBYSCORE", "s", 1, 0),
        ("ZRANGEBYLEX", "s", "-", "+"), ("ZREVRANGEBYLEX", "s", "+", "-"), ("ZREVRANGE", "s", 0, 1),
        ("ZCOUNT", "s", 0, 1), ("ZLEXCOUNT", "s", "-", "+"), ("ZPOPMIN", "s"), ("ZPOPMAX", "s", 2),
        ("ZMPOP", 1, "s", "MIN"), ("ZREMRANGEBYRANK", "s", 0, 1), ("ZREMRANGEBYSCORE", "s", 0, 1),
        ("ZREMRANGEBYLEX", "s", "-", "+"), ("ZUNION", 1, "s"), ("ZINTER", 1, "s"), ("ZDIFF", 1, "s"),
        ("ZUNIONSTORE", "d", 1, "s"), ("ZINTERSTORE", "d", 1, "s"), ("ZDIFFSTORE", "d", 1, "s"),
        ("ZINTERCARD", 1, "s"), ("ZRANDMEMBER", "s"), ("ZRANDMEMBER", "s", 2),
        ("ZSCAN", "s", 0), ("ZRANGESTORE", "d", "s", 0, 1),
    ]
    for cmd in cmds:
        assert c.call(*cmd) == E_WRONGTYPE, cmd
    assert c.call("GET", "s") == b"x"
    c.call("ZADD", "z", 1, "a")
    assert c.call("GET", "z") == E_WRONGTYPE
    assert c.call("TYPE", "z") == "zset"
    c.call("SET", "z", "now a string")          # SET overwrites any type
    assert c.call("GET", "z") == b"now a string"


def test_resp3_shapes(server):
    c = RespClient(server.port)
    try:
        c.call("FLUSHALL")
        assert isinstance(c.call("HELLO", "3"), dict)
        c.call("ZADD", "z", 1, "a", 2.5, "b", 3, "c")
        assert c.call("ZSCORE", "z", "b") == 2.5
        assert c.call("ZSCORE", "z", "x") is None
        assert c.call("ZMSCORE", "z", "a", "x") == [1.0, None]
        assert c.call("ZINCRBY", "z", 1, "a") == 2.0
        assert c.call("ZRANGE", "z", 0, -1, "WITHSCORES") == [[b"a", 2.0], [b"b", 2.5], [b"c", 3.0]]
        assert c.call("ZRANGE", "z", 0, 0) == [b"a"]
        assert c.call("ZUNION", 1, "z", "WITHSCORES") == [[b"a", 2.0], [b"b", 2.5], [b"c", 3.0]]
        assert c.call("ZRANDMEMBER", "z", 1, "WITHSCORES")[0][0] in (b"a", b"b", b"c")
        assert c.call("ZPOPMIN", "z") == [b"a", 2.0]
        assert c.call("ZPOPMAX", "z", 1) == [[b"c", 3.0]]
        assert c.call("ZMPOP", 1, "z", "MIN") == [b"z", [[b"b", 2.5]]]
        assert c.call("ZMPOP", 1, "z", "MIN") is None
        assert c.call("ZSCAN", "nokey", 0) == [b"0", []]
    finally:
        c.close()


def test_encoding(c):
    c.call("ZADD", "z", *sum(([i, "m%d" % i] for i in range(128)), []))
    assert c.call("OBJECT", "ENCODING", "z") == b"listpack"
    c.call("ZADD", "z", 200, "one-more")
    assert c.call("OBJECT", "ENCODING", "z") == b"skiplist"
    c.call("ZREMRANGEBYRANK", "z", 0, 100)
    assert c.call("OBJECT", "ENCODING", "z") == b"skiplist"     # never converted back
    c.call("ZADD", "w", 1, "x" * 64)
    assert c.call("OBJECT", "ENCODING", "w") == b"listpack"
    c.call("ZADD", "w", 1, "x" * 65)
    assert c.call("OBJECT", "ENCODING", "w") == b"skiplist"
    # a computed result takes the encoding its size calls for
    assert c.call("ZRANGESTORE", "small", "z", 0, 9) == 10
    assert c.call("OBJECT", "ENCODING", "small") == b"listpack"
    assert c.call("ZUNIONSTORE", "u", 1, "z") == 28
    assert c.call("OBJECT", "ENCODING", "u") == b"listpack"
    assert c.call("ZUNIONSTORE", "u", 2, "z", "w") == 30
    assert c.call("OBJECT", "ENCODING", "u") == b"skiplist"


# ---------------------------------------------------------------- model check
def test_random_against_model(c):
    rnd = random.Random(7)
    model = {}
    for step in range(1500):
        m = "m%d" % rnd.randrange(60)
        op = rnd.randrange(10)
        if op < 5:
            s = rnd.randrange(-20, 20) / 4
            added = m not in model
            assert c.call("ZADD", "k", s, m) == (1 if added else 0)
            model[m] = s
        elif op < 7:
            inc = rnd.randrange(-8, 8) / 2
            got = c.call("ZINCRBY", "k", inc, m)
            model[m] = model.get(m, 0) + inc
            assert float(got) == model[m]
        elif op < 9:
            assert c.call("ZREM", "k", m) == (1 if m in model else 0)
            model.pop(m, None)
        else:
            lo, hi = sorted([rnd.randrange(-6, 6), rnd.randrange(-6, 6)])
            want = sorted((s, k) for k, s in model.items() if lo <= s <= hi)
            assert c.call("ZRANGEBYSCORE", "k", lo, hi) == [k.encode() for s, k in want]
            assert c.call("ZCOUNT", "k", lo, hi) == len(want)
        if step % 100 == 0 or step == 1499:
            want = sorted((s, k) for k, s in model.items())
            rep = c.call("ZRANGE", "k", 0, -1, "WITHSCORES")
            assert [x.decode() for x in rep[0::2]] == [k for s, k in want]
            assert [float(x) for x in rep[1::2]] == [s for s, k in want]
            assert c.call("ZCARD", "k") == len(model)
            for s, k in want[:5]:
                assert c.call("ZRANK", "k", k) == want.index((s, k))
            assert c.call("EXISTS", "k") == (1 if model else 0)


def test_large_zset(c):
    n = 2000
    args = []
    for i in range(n):
        args += [i % 100, "mem%05d" % i]
    assert c.call("ZADD", "big", *args) == n
    assert c.call("ZCARD", "big") == n
    want = sorted(((i % 100, "mem%05d" % i) for i in range(n)))
    assert c.call("ZRANGE", "big", 1000, 1004) == [k.encode() for s, k in want[1000:1005]]
    assert c.call("ZRANK", "big", want[1234][1]) == 1234
    assert c.call("ZREVRANK", "big", want[1234][1]) == n - 1 - 1234
    assert c.call("ZCOUNT", "big", 10, "(20") == 200
    assert c.call("ZREMRANGEBYRANK", "big", 0, 999) == 1000
    assert c.call("ZRANGE", "big", 0, 0) == [want[1000][1].encode()]
    assert len(c.call("ZPOPMAX", "big", 500)) == 1000
    assert c.call("ZCARD", "big") == 500


# ---------------------------------------------------------------- durability (Rowan)
def _contents(cl, keys):
    out = {}
    for k in keys:
        t = cl.call("TYPE", k)
        if t == "none":
            out[k] = None
            continue
        out[k] = (t, cl.call("ZRANGE", k, 0, -1, "WITHSCORES"), cl.call("TTL", k) > 0,
                  cl.call("OBJECT", "ENCODING", k))
    return out


@pytest.mark.rowan_only("restart replays zset effects and snapshots")
def test_zset_survives_kill9_and_restart(server_factory):
    srv = server_factory()
    c = srv.resp()
    rnd = random.Random(11)
    keys = ["z%d" % i for i in range(8)] + ["emptied", "stored", "ttl", "popped", "huge"]
    # long histories (>64 effect entries) get compacted into snapshots
    for i in range(3000):
        k = "z%d" % rnd.randrange(8)
        m = "m%d" % rnd.randrange(200)
        op = rnd.randrange(6)
        if op < 3:
            c.ok("ZADD", k, rnd.randrange(-100, 100) / 8, m)
        elif op == 3:
            c.ok("ZINCRBY", k, 1.5, m)
        elif op == 4:
            c.ok("ZREM", k, m)
        else:
            c.ok("ZREMRANGEBYSCORE", k, rnd.randrange(-100, 100) / 8, rnd.randrange(-100, 100) / 8)
    c.ok("ZADD", "emptied", 1, "a", 2, "b")
    c.ok("ZREM", "emptied", "a", "b")
    c.ok("ZUNIONSTORE", "stored", 3, "z0", "z1", "z2", "WEIGHTS", 1, 2, 3)
    c.ok("ZADD", "ttl", 1, "a")
    c.ok("EXPIRE", "ttl", 1000)
    c.ok("ZADD", "ttl", 2, "b")
    c.ok("ZADD", "popped", 1, "a", 2, "b", 3, "c", 4, "d")
    c.ok("ZPOPMIN", "popped", 2)
    c.ok("ZMPOP", 1, "popped", "MAX")
    c.ok("ZADD", "huge", *sum(([i, "h%d" % i] for i in range(500)), []))
    c.ok("ZREMRANGEBYRANK", "huge", 100, 199)
    before = _contents(c, keys)
    assert before["emptied"] is None and before["stored"] is not None
    assert before["popped"][1] == [b"c", b"3"]
    c.close()
    srv.kill9()
    srv.start()
    c = srv.resp()
    assert _contents(c, keys) == before
    # and the restored sets keep working
    c.ok("ZADD", "z0", 1000, "last")
    assert c.call("ZRANGE", "z0", -1, -1) == [b"last"]
    before = _contents(c, keys)
    c.close()
    srv.stop()
    srv.start()
    c = srv.resp()
    assert _contents(c, keys) == before
    # deleting restored sets works (and leaves no collection alive at exit)
    assert c.call("DEL", *keys) == len([k for k in keys if before[k] is not None])
    assert c.call("DBSIZE") == 0
    c.close()
