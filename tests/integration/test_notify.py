"""Keyspace notifications (notify-keyspace-events), differential: the same
command sequence runs on rowan-server and on a real redis-server (7.0), each
with a psubscribe'd listener, and the event streams must be equal.

Each sequence ends with SET on a marker key: its event closes the stream.
Expired events, whose timing differs between servers (lazy or active
expiry), are compared as sets."""
import time

import pytest
import redis


MARK = b"__end__"


def connect(srv, **kw):
    return redis.Redis(host="127.0.0.1", port=srv.port, socket_timeout=10, **kw)


def events(srv, flags, commands, pattern="__key*__:*", marker="__keyspace@0__:__end__"):
    """Run commands (lists of args) on srv with notify-keyspace-events=flags;
    return (ordered events, set of expired events). The stream ends with a
    PUBLISH on a marker channel the pattern matches (messages on one
    connection keep their order)."""
    r = connect(srv)
    r.flushall()
    r.config_set("notify-keyspace-events", flags)
    ps = r.pubsub()
    ps.psubscribe(pattern)
    assert ps.get_message(timeout=5)["type"] == "psubscribe"
    w = connect(srv)
    for cmd in commands:
        try:
            w.execute_command(*cmd)
        except (redis.ResponseError, TypeError, KeyError):   # redis-py reply parsers (OBJECT, GEO*)
            pass
    w.publish(marker, "end")
    out, expired = [], set()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        m = ps.get_message(timeout=1)
        if m is None:
            continue
        if m["channel"] == marker.encode():
            break
        ev = (m["channel"], m["data"])
        if ev[0].endswith(b"expired") or ev[1] == b"expired":
            expired.add(ev)
        else:
            out.append(ev)
    else:
        raise AssertionError("no end marker from %s" % srv.target)
    ps.close()
    r.config_set("notify-keyspace-events", "")
    r.close()
    w.close()
    return out, expired


STRINGS = [
    ["SET", "s", "1"], ["SET", "s", "2", "EX", "100"], ["SET", "s", "3", "KEEPTTL"],
    ["SET", "s", "4", "NX"], ["SET", "s", "5", "XX", "GET"], ["SETNX", "s2", "x"],
    ["SETEX", "s3", "100", "v"], ["PSETEX", "s4", "100000", "v"], ["GETSET", "s", "6"],
    ["MSET", "m1", "a", "m2", "b"], ["MSETNX", "m1", "a", "m3", "b"], ["MSETNX", "m4", "a"],
    ["APPEND", "s", "x"], ["APPEND", "new", "x"], ["INCR", "n"], ["DECR", "n"],
    ["INCRBY", "n", "5"], ["DECRBY", "n", "2"], ["INCRBYFLOAT", "f", "1.5"],
    ["SETRANGE", "s", "1", "abc"], ["SETRANGE", "s", "0", ""], ["SETBIT", "b", "7", "1"],
    ["SETBIT", "b", "7", "1"], ["GETDEL", "m1"], ["GETDEL", "missing"],
    ["GETEX", "m2", "EX", "100"], ["GETEX", "m2", "PERSIST"], ["GETEX", "m2", "PERSIST"],
    ["GETEX", "m2", "PXAT", "1"], ["INCR", "s"], ["GET", "s"],
]

KEYS = [
    ["SET", "k1", "v"], ["SET", "k2", "v"], ["SET", "k3", "v"], ["DEL", "k1", "nope", "k2"],
    ["UNLINK", "k3"], ["SET", "e", "v"], ["EXPIRE", "e", "100"], ["PEXPIRE", "e", "100000"],
    ["EXPIREAT", "e", "99999999999"], ["EXPIRE", "e", "100", "NX"], ["PERSIST", "e"],
    ["PERSIST", "e"], ["EXPIRE", "missing", "10"], ["RENAME", "e", "f"], ["RENAME", "f", "f"],
    ["SET", "g", "1"], ["RENAMENX", "f", "g"], ["RENAMENX", "f", "h"], ["MOVE", "h", "3"],
    ["COPY", "g", "c1"], ["COPY", "g", "c1"], ["COPY", "g", "c1", "REPLACE"],
    ["COPY", "g", "c2", "DB", "2"], ["EXPIRE", "g", "-1"], ["PEXPIREAT", "c1", "1"],
    ["RPUSH", "srt", "3", "1", "2"], ["SORT", "srt", "STORE", "sorted"],
    ["SORT", "nothing", "STORE", "sorted"], ["SORT", "nothing", "STORE", "sorted"],
]

HASHES = [
    ["HSET", "h", "a", "1", "b", "2"], ["HSET", "h", "a", "1"], ["HMSET", "h", "c", "3"],
    ["HSETNX", "h", "a", "9"], ["HSETNX", "h", "d", "4"], ["HINCRBY", "h", "n", "2"],
    ["HINCRBYFLOAT", "h", "f", "0.5"], ["HDEL", "h", "zz"], ["HDEL", "h", "a", "b"],
    ["HDEL", "h", "c", "d", "n", "f"], ["HGET", "h", "a"],
]

LISTS = [
    ["LPUSH", "l", "a", "b"], ["RPUSH", "l", "c"], ["LPUSHX", "l", "z"], ["RPUSHX", "nol", "z"],
    ["LPOP", "l"], ["RPOP", "l", "1"], ["LSET", "l", "0", "x"], ["LINSERT", "l", "BEFORE", "x", "y"],
    ["LINSERT", "l", "BEFORE", "nope", "y"], ["LREM", "l", "0", "y"], ["LTRIM", "l", "0", "-1"],
    ["RPUSH", "l", "q", "r"], ["LMOVE", "l", "l2", "LEFT", "RIGHT"], ["RPOPLPUSH", "l", "l2"],
    ["LMOVE", "l", "l", "LEFT", "LEFT"], ["LMPOP", "2", "nol", "l", "LEFT", "COUNT", "5"],
    ["BLPOP", "l2", "0.1"], ["BRPOP", "l2", "0.1"], ["RPUSH", "t", "1", "2", "3"],
    ["LTRIM", "t", "5", "10"], ["RPUSH", "u", "1"], ["LREM", "u", "0", "1"], ["RPUSH", "v", "1"],
    ["RPOP", "v", "3"], ["RPUSH", "w", "1"], ["BLMOVE", "w", "w2", "RIGHT", "LEFT", "0.1"],
]

SETS = [
    ["SADD", "s", "a", "b", "c"], ["SADD", "s", "a"], ["SREM", "s", "zz"], ["SREM", "s", "a"],
    ["SMOVE", "s", "s2", "b"], ["SMOVE", "s", "s2", "nope"], ["SADD", "s2", "c"],
    ["SMOVE", "s", "s2", "c"], ["SADD", "x", "1", "2"], ["SADD", "y", "2", "3"],
    ["SINTERSTORE", "d", "x", "y"], ["SUNIONSTORE", "d", "x", "y"], ["SDIFFSTORE", "d", "x", "y"],
    ["SINTERSTORE", "d", "x", "nothing"], ["SINTERSTORE", "d", "x", "nothing"],
    ["SADD", "p", "1", "2", "3"], ["SPOP", "p"], ["SPOP", "p", "0"], ["SPOP", "p", "1"],
    ["SADD", "q", "1", "2"], ["SPOP", "q", "5"], ["SADD", "o", "1"], ["SPOP", "o"],
    ["SREM", "x", "1", "2"],
]

ZSETS = [
    ["ZADD", "z", "1", "a", "2", "b", "3", "c"], ["ZADD", "z", "1", "a"], ["ZADD", "z", "NX", "5", "a"],
    ["ZADD", "z", "CH", "5", "a"], ["ZINCRBY", "z", "1", "a"], ["ZADD", "z", "INCR", "1", "b"],
    ["ZREM", "z", "nope"], ["ZREM", "z", "a"], ["ZADD", "z", "4", "d", "5", "e", "6", "f"],
    ["ZREMRANGEBYRANK", "z", "0", "0"], ["ZREMRANGEBYSCORE", "z", "4", "4"],
    ["ZREMRANGEBYSCORE", "z", "100", "200"], ["ZREMRANGEBYLEX", "z", "[e", "[e"],
    ["ZPOPMIN", "z"], ["ZPOPMAX", "z", "1"], ["ZADD", "y", "1", "a", "2", "b"],
    ["ZADD", "w", "2", "b", "3", "c"], ["ZUNIONSTORE", "d", "2", "y", "w"],
    ["ZINTERSTORE", "d", "2", "y", "w"], ["ZDIFFSTORE", "d", "2", "y", "w"],
    ["ZINTERSTORE", "d", "2", "y", "nothing"], ["ZINTERSTORE", "d", "2", "y", "nothing"],
    ["ZRANGESTORE", "d", "y", "0", "-1"], ["ZMPOP", "1", "y", "MIN", "COUNT", "9"],
    ["BZPOPMIN", "w", "0.1"], ["BZPOPMAX", "w", "0.1"], ["ZADD", "v", "1", "a"],
    ["ZREMRANGEBYRANK", "v", "0", "-1"],
]

READS = [
    ["SET", "s", "v"], ["HSET", "h", "f", "v"], ["GET", "nope"], ["GET", "s"], ["MGET", "s", "n1", "n2"],
    ["STRLEN", "nope"], ["GETRANGE", "nope", "0", "1"], ["GETBIT", "nope", "1"], ["BITCOUNT", "nope"],
    ["GETEX", "nope"], ["GETDEL", "nope"], ["SET", "nope", "v", "GET"], ["DEL", "nope"],
    ["EXISTS", "nope"], ["TYPE", "nope"], ["TTL", "nope"], ["PTTL", "nope"], ["EXPIRETIME", "nope"],
    ["HGET", "nope", "f"], ["HGET", "h", "g"], ["HGETALL", "nope"], ["HLEN", "nope"],
    ["HEXISTS", "nope", "f"], ["HMGET", "nope", "a"], ["HSTRLEN", "nope", "f"], ["HKEYS", "nope"],
    ["HRANDFIELD", "nope"], ["LRANGE", "nope", "0", "-1"], ["LLEN", "nope"], ["LINDEX", "nope", "0"],
    ["LPOS", "nope", "x"], ["SMEMBERS", "nope"], ["SISMEMBER", "nope", "x"], ["SCARD", "nope"],
    ["SRANDMEMBER", "nope"], ["SINTER", "nope", "nope2"], ["SUNION", "nope"],
    ["ZSCORE", "nope", "m"], ["ZRANGE", "nope", "0", "-1"], ["ZCARD", "nope"], ["ZRANK", "nope", "m"],
    ["ZCOUNT", "nope", "0", "1"], ["ZRANDMEMBER", "nope"], ["ZUNION", "1", "nope"],
    ["COPY", "nope", "dst"], ["RENAME", "nope", "x"], ["INCR", "newcounter"], ["APPEND", "nope2", "x"],
    ["SORT", "nope"], ["OBJECT", "ENCODING", "nope"], ["DUMP", "nope"], ["TOUCH", "nope"],
]


def test_keymiss_events_as_redis(pair):
    rowan, ref = pair
    for flags in ("Km", "Em", "KEAm"):
        got = events(rowan, flags, READS)
        want = events(ref, flags, READS)
        assert got == want, flags


NEWER = [
    ["PFADD", "hl", "a", "b"], ["PFADD", "hl", "a"], ["PFADD", "hl2", "z"], ["PFMERGE", "hl3", "hl", "hl2"],
    ["PFCOUNT", "hl"], ["SET", "b1", "ab"], ["SET", "b2", "cd"], ["BITOP", "AND", "b3", "b1", "b2"],
    ["BITOP", "OR", "b3", "nope1", "nope2"], ["BITOP", "OR", "b3", "nope1", "nope2"],
    ["BITFIELD", "bf", "SET", "u8", "0", "200"], ["BITFIELD", "bf", "INCRBY", "u8", "0", "1"],
    ["BITFIELD", "bf", "GET", "u8", "0"],
    ["GEOADD", "g", "13.36", "38.11", "Palermo", "15.08", "37.50", "Catania"],
    ["GEOADD", "g", "13.36", "38.11", "Palermo"],
    ["GEOSEARCHSTORE", "gs", "g", "FROMLONLAT", "15", "37", "BYRADIUS", "200", "km"],
    ["GEORADIUS", "g", "15", "37", "200", "km", "STORE", "gr"],
    ["GEOSEARCHSTORE", "gs", "g", "FROMLONLAT", "0", "0", "BYRADIUS", "1", "km"],
]


@pytest.mark.parametrize("name,commands", [
    ("strings", STRINGS), ("keys", KEYS), ("hashes", HASHES), ("lists", LISTS),
    ("sets", SETS), ("zsets", ZSETS), ("hll_bitops_geo", NEWER)])
@pytest.mark.parametrize("flags", ["KEA", "Kg$lshz", "E$", "Kh"])
def test_event_stream_as_redis(pair, name, commands, flags):
    rowan, ref = pair
    got = events(rowan, flags, commands)
    want = events(ref, flags, commands)
    assert got == want


def test_events_in_other_db_and_keyevent_channel(pair):
    rowan, ref = pair
    seq = [["SET", "a", "1"], ["MOVE", "a", "5"], ["COPY", "b", "z", "DB", "7"]]
    for srv in pair:
        connect(srv).set("b", "x")
    kw = dict(pattern="__keyevent@*", marker="__keyevent@0__:__end__")
    got = events(rowan, "KEA", seq, **kw)
    want = events(ref, "KEA", seq, **kw)
    assert got == want
    assert (b"__keyevent@5__:move_to", b"a") in got[0]


def test_expired_events(pair):
    """Keys that expire are reported once each, lazily (a read finds them
    gone) or actively (the server's expiry cycle)."""
    rowan, ref = pair
    seq = [["SET", "x%d" % i, "v", "PX", "100"] for i in range(5)] + [
        ["HSET", "h", "f", "v"], ["PEXPIRE", "h", "100"]]
    results = []
    for srv in (rowan, ref):
        r = connect(srv)
        r.flushall()
        r.config_set("notify-keyspace-events", "Ex")
        ps = r.pubsub()
        ps.psubscribe("__keyevent@0__:expired")
        ps.get_message(timeout=5)
        w = connect(srv)
        for cmd in seq:
            w.execute_command(*cmd)
        time.sleep(0.3)
        w.get("x0")   # lazily, if the cycle has not yet
        got = set()
        deadline = time.monotonic() + 10
        while len(got) < 6 and time.monotonic() < deadline:
            m = ps.get_message(timeout=1)
            if m:
                got.add((m["channel"], m["data"]))
        results.append(got)
        ps.close()
        r.config_set("notify-keyspace-events", "")
    assert results[0] == results[1]
    assert len(results[0]) == 6


@pytest.mark.parametrize("value", ["KEA", "AKEn", "gK$lnm", "", "Ex", "A", "tdm"])
def test_config_flags_render_as_redis(pair, value):
    got = []
    for srv in pair:
        r = connect(srv, decode_responses=True)
        r.config_set("notify-keyspace-events", value)
        got.append(r.config_get("notify-keyspace-events"))
        r.config_set("notify-keyspace-events", "")
    assert got[0] == got[1]


def test_config_rejects_bad_flags(pair):
    errs = []
    for srv in pair:
        r = connect(srv)
        with pytest.raises(redis.ResponseError) as e:
            r.config_set("notify-keyspace-events", "KEQ")
        errs.append(str(e.value))
    assert errs[0] == errs[1]


def test_no_events_when_off(pair):
    rowan, _ = pair
    got, _ = events(rowan, "", [["SET", "a", "1"]])
    assert got == []


def test_events_inside_multi(pair):
    rowan, ref = pair
    seq = [["MULTI"], ["SET", "a", "1"], ["LPUSH", "l", "x"], ["DEL", "a"], ["EXEC"]]

    def run(srv):
        r = connect(srv)
        r.flushall()
        r.config_set("notify-keyspace-events", "KEA")
        ps = r.pubsub()
        ps.psubscribe("__key*__:*")
        ps.get_message(timeout=5)
        p = connect(srv).pipeline(transaction=True)
        p.set("a", "1").lpush("l", "x").delete("a").set(MARK, "1")
        p.execute()
        out = []
        while True:
            m = ps.get_message(timeout=2)
            if m is None:
                break
            out.append((m["channel"], m["data"]))
        ps.close()
        r.config_set("notify-keyspace-events", "")
        return out
    assert run(rowan) == run(ref)
