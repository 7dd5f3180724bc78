"""Generic key commands on every value type, and the introspection family:
TYPE, EXISTS, DEL, UNLINK, EXPIRE..., RENAME, RENAMENX, MOVE, COPY, SCAN
TYPE, KEYS, RANDOMKEY, DBSIZE on hashes, lists, sets and sorted sets; SORT
and SORT_RO; OBJECT; MEMORY; SLOWLOG.

Written against Redis 7 (run with --target=redis to check the expectations
themselves). A collection type that the server does not implement yet (its
commands answer "unknown command") makes the tests that need it skip, with
the reason, instead of failing."""
import threading
import time

import pytest

from conftest import RespClient, RespError

E_SYNTAX = RespError("ERR syntax error")
E_NOTINT = RespError("ERR value is not an integer or out of range")
E_WRONGTYPE = RespError("WRONGTYPE Operation against a key holding the wrong kind of value")
E_NOKEY = RespError("ERR no such key")
E_SAME = RespError("ERR source and destination objects are the same")
E_DBINDEX = RespError("ERR DB index is out of range")
E_SCORES = RespError("ERR One or more scores can't be converted into double")

TYPES = ("hash", "list", "set", "zset")


@pytest.fixture(autouse=True)
def _leave_shared_server_empty(request):
    """Tests on the raw fixture expect an empty shared server: flush it
    after every test here that used it."""
    yield
    srv = request.node.funcargs.get("server")
    if srv is not None and srv.alive():
        cl = RespClient(srv.port)
        try:
            cl.call("FLUSHALL")
        finally:
            cl.close()


def skip_if_unknown(rep, what):
    """Skip the test when the server does not know a command yet."""
    if isinstance(rep, RespError) and rep.msg.startswith("ERR unknown command"):
        pytest.skip("%s not implemented on this server yet (%s)" % (what, rep.msg))
    return rep


def call(c, what, *args):
    """c.call that skips on "unknown command" and fails on any other error."""
    rep = skip_if_unknown(c.call(*args), what)
    if isinstance(rep, RespError):
        raise AssertionError("%r -> error %r" % (args, rep.msg))
    return rep


def make(c, typ, key):
    """A small collection of type typ under key."""
    if typ == "hash":
        assert call(c, "hashes", "HSET", key, "f1", "v1", "f2", "v2") == 2
    elif typ == "list":
        assert call(c, "lists", "RPUSH", key, "a", "b", "c") == 3
    elif typ == "set":
        assert call(c, "sets", "SADD", key, "a", "b", "c") == 3
    elif typ == "zset":
        assert call(c, "sorted sets", "ZADD", key, 1, "a", 2, "b", 3, "c") == 3
    else:
        raise ValueError(typ)


def dump(c, typ, key):
    """The contents of a collection in a comparable form."""
    if typ == "hash":
        flat = call(c, "hashes", "HGETALL", key)
        return sorted(zip(flat[::2], flat[1::2]))
    if typ == "list":
        return call(c, "lists", "LRANGE", key, 0, -1)
    if typ == "set":
        return sorted(call(c, "sets", "SMEMBERS", key))
    if typ == "zset":
        return call(c, "sorted sets", "ZRANGE", key, 0, -1, "WITHSCORES")
    raise ValueError(typ)


EXPECTED = {
    "hash": [(b"f1", b"v1"), (b"f2", b"v2")],
    "list": [b"a", b"b", b"c"],
    "set": [b"a", b"b", b"c"],
    "zset": [b"a", b"1", b"b", b"2", b"c", b"3"],
}


def modify(c, typ, key):
    """Change a collection (to check that copies are independent)."""
    if typ == "hash":
        call(c, "hashes", "HSET", key, "f1", "changed")
    elif typ == "list":
        call(c, "lists", "RPUSH", key, "z")
    elif typ == "set":
        call(c, "sets", "SADD", key, "z")
    else:
        call(c, "sorted sets", "ZADD", key, 9, "z")


def need(c, what, *args):
    """Probe a command; skip when the server does not know it."""
    skip_if_unknown(c.call(*args), what)


# ---------------------------------------------------------------- TYPE EXISTS DEL UNLINK
@pytest.mark.parametrize("typ", TYPES)
def test_type_exists_del(c, typ):
    make(c, typ, "k")
    assert c.call("TYPE", "k") == typ
    assert c.call("EXISTS", "k", "k", "nosuch") == 2
    assert c.call("DEL", "k", "nosuch") == 1
    assert c.call("TYPE", "k") == "none"
    assert c.call("EXISTS", "k") == 0
    make(c, typ, "k")
    assert c.call("UNLINK", "k") == 1
    assert c.call("EXISTS", "k") == 0


def test_del_mixed_types(c):
    made = []
    for typ in TYPES:
        rep = c.call({"hash": "HSET", "list": "RPUSH", "set": "SADD", "zset": "ZADD"}[typ],
                     typ + "key", *(("1", "x") if typ in ("hash", "zset") else ("x",)))
        if not isinstance(rep, RespError):
            made.append(typ + "key")
    if not made:
        pytest.skip("no collection type implemented on this server yet")
    c.ok("SET", "str", "v")
    assert c.call("DEL", "str", "nosuch", *made) == len(made) + 1
    assert c.call("EXISTS", "str", *made) == 0


# ---------------------------------------------------------------- expiry
@pytest.mark.parametrize("typ", TYPES)
def test_expire_ttl_persist(c, typ):
    make(c, typ, "k")
    assert c.call("TTL", "k") == -1
    assert c.call("EXPIRE", "k", 100) == 1
    assert 99 <= c.call("TTL", "k") <= 100
    assert 99000 <= c.call("PTTL", "k") <= 100000
    assert c.call("EXPIRE", "k", 50, "GT") == 0
    assert c.call("EXPIRE", "k", 50, "LT") == 1
    assert 49 <= c.call("TTL", "k") <= 50
    assert c.call("EXPIRETIME", "k") > int(time.time())
    assert c.call("PERSIST", "k") == 1
    assert c.call("TTL", "k") == -1
    assert c.call("PERSIST", "k") == 0
    # the value is untouched by all of this
    assert dump(c, typ, "k") == EXPECTED[typ]
    assert c.call("TYPE", "k") == typ


@pytest.mark.parametrize("typ", TYPES)
def test_expire_in_past_deletes(c, typ):
    make(c, typ, "k")
    assert c.call("EXPIRE", "k", -1) == 1
    assert c.call("EXISTS", "k") == 0
    make(c, typ, "k")
    assert c.call("PEXPIREAT", "k", 1000) == 1
    assert c.call("TYPE", "k") == "none"


@pytest.mark.parametrize("typ", TYPES)
def test_collection_expires(c, typ):
    make(c, typ, "k")
    assert c.call("PEXPIRE", "k", 50) == 1
    deadline = time.time() + 5
    while c.call("EXISTS", "k") and time.time() < deadline:
        time.sleep(0.02)
    assert c.call("EXISTS", "k") == 0
    assert c.call("TTL", "k") == -2
    # a new collection under the name starts without expiry
    make(c, typ, "k")
    assert c.call("TTL", "k") == -1


# ---------------------------------------------------------------- RENAME RENAMENX MOVE
@pytest.mark.parametrize("typ", TYPES)
def test_rename_collection_keeps_value_and_ttl(c, typ):
    make(c, typ, "src")
    assert c.call("EXPIRE", "src", 100) == 1
    c.ok("SET", "dst", "a string that is replaced")
    assert c.call("RENAME", "src", "dst") == "OK"
    assert c.call("EXISTS", "src") == 0
    assert c.call("TYPE", "dst") == typ
    assert dump(c, typ, "dst") == EXPECTED[typ]
    assert 99 <= c.call("TTL", "dst") <= 100
    # renaming without a TTL clears the destination's
    make(c, typ, "other")
    assert c.call("RENAME", "other", "dst") == "OK"
    assert c.call("TTL", "dst") == -1
    # the renamed collection is still writable
    modify(c, typ, "dst")
    assert dump(c, typ, "dst") != EXPECTED[typ]


@pytest.mark.parametrize("typ", TYPES)
def test_rename_onto_same_type(c, typ):
    make(c, typ, "a")
    make(c, typ, "b")
    modify(c, typ, "b")
    assert c.call("RENAME", "a", "b") == "OK"
    assert dump(c, typ, "b") == EXPECTED[typ]
    assert c.call("RENAME", "b", "b") == "OK"
    assert dump(c, typ, "b") == EXPECTED[typ]
    assert c.call("RENAME", "nosuch", "b") == E_NOKEY


@pytest.mark.parametrize("typ", TYPES)
def test_renamenx_collection(c, typ):
    make(c, typ, "src")
    c.ok("SET", "taken", "x")
    assert c.call("RENAMENX", "src", "taken") == 0
    assert c.call("GET", "taken") == b"x"
    assert c.call("RENAMENX", "src", "free") == 1
    assert c.call("EXISTS", "src") == 0
    assert dump(c, typ, "free") == EXPECTED[typ]


@pytest.mark.parametrize("typ", TYPES)
def test_move_collection(c, typ):
    make(c, typ, "k")
    assert c.call("EXPIRE", "k", 100) == 1
    assert c.call("MOVE", "k", 1) == 1
    assert c.call("EXISTS", "k") == 0
    c.ok("SELECT", 1)
    assert c.call("TYPE", "k") == typ
    assert dump(c, typ, "k") == EXPECTED[typ]
    assert 99 <= c.call("TTL", "k") <= 100
    # the target db already has the key: nothing moves
    c.ok("SELECT", 0)
    make(c, typ, "k")
    assert c.call("MOVE", "k", 1) == 0
    assert c.call("TYPE", "k") == typ


# ---------------------------------------------------------------- COPY
def test_copy_string(c):
    c.ok("SET", "a", "hello")
    assert c.call("PEXPIRE", "a", 100000) == 1
    assert c.call("COPY", "a", "b") == 1
    assert c.call("GET", "b") == b"hello"
    assert 99000 <= c.call("PTTL", "b") <= 100000
    assert c.call("COPY", "a", "b") == 0
    c.ok("SET", "a", "new")
    assert c.call("COPY", "a", "b", "REPLACE") == 1
    assert c.call("GET", "b") == b"new"
    assert c.call("TTL", "b") == -1
    assert c.call("COPY", "nosuch", "b") == 0
    assert c.call("COPY", "a", "a") == E_SAME
    assert c.call("COPY", "a", "a", "DB", 0) == E_SAME


def test_copy_across_dbs_and_errors(c):
    c.ok("SET", "a", "v")
    assert c.call("COPY", "a", "a", "DB", 3) == 1
    c.ok("SELECT", 3)
    assert c.call("GET", "a") == b"v"
    c.ok("SELECT", 0)
    assert c.call("COPY", "a", "a", "DB", 3) == 0
    assert c.call("COPY", "a", "b", "DB", 99) == E_DBINDEX
    assert c.call("COPY", "a", "b", "DB", -1) == E_DBINDEX
    assert c.call("COPY", "a", "b", "DB", "x") == E_NOTINT
    assert c.call("COPY", "a", "b", "DB") == E_SYNTAX
    assert c.call("COPY", "a", "b", "FOO") == E_SYNTAX
    assert c.call("COPY", "a") == RespError(
        "ERR wrong number of arguments for 'copy' command")


@pytest.mark.parametrize("typ", TYPES)
def test_copy_collection_is_independent(c, typ):
    make(c, typ, "src")
    assert c.call("EXPIRE", "src", 100) == 1
    assert c.call("COPY", "src", "dst") == 1
    assert c.call("TYPE", "dst") == typ
    assert dump(c, typ, "dst") == EXPECTED[typ]
    assert 99 <= c.call("TTL", "dst") <= 100
    modify(c, typ, "dst")
    assert dump(c, typ, "src") == EXPECTED[typ]
    assert dump(c, typ, "dst") != EXPECTED[typ]
    # REPLACE over another type, and into another db
    c.ok("SET", "str", "x")
    assert c.call("COPY", "src", "str") == 0
    assert c.call("COPY", "src", "str", "REPLACE") == 1
    assert c.call("TYPE", "str") == typ
    assert c.call("COPY", "src", "src", "DB", 2) == 1
    c.ok("SELECT", 2)
    assert dump(c, typ, "src") == EXPECTED[typ]


# ---------------------------------------------------------------- SCAN KEYS RANDOMKEY DBSIZE
def scan_all(c, *opts):
    cursor, seen = b"0", set()
    while True:
        cursor, keys = c.call("SCAN", cursor, "COUNT", 100, *opts)
        seen.update(keys)
        if cursor == b"0":
            return seen


@pytest.mark.parametrize("typ", TYPES)
def test_scan_type_keys_dbsize(c, typ):
    make(c, typ, "coll1")
    make(c, typ, "coll2")
    c.ok("MSET", "s1", "1", "s2", "2")
    assert scan_all(c, "TYPE", typ) == {b"coll1", b"coll2"}
    assert scan_all(c, "TYPE", typ.upper()) == {b"coll1", b"coll2"}
    assert scan_all(c, "TYPE", "string") == {b"s1", b"s2"}
    assert scan_all(c, "TYPE", typ, "MATCH", "*1") == {b"coll1"}
    assert scan_all(c) == {b"coll1", b"coll2", b"s1", b"s2"}
    assert sorted(c.call("KEYS", "*")) == [b"coll1", b"coll2", b"s1", b"s2"]
    assert sorted(c.call("KEYS", "coll*")) == [b"coll1", b"coll2"]
    assert c.call("DBSIZE") == 4
    seen = {c.call("RANDOMKEY") for _ in range(50)}
    assert seen <= {b"coll1", b"coll2", b"s1", b"s2"}
    assert c.call("DEL", "s1", "s2") == 2
    for _ in range(10):
        assert c.call("RANDOMKEY") in (b"coll1", b"coll2")
    assert c.call("TOUCH", "coll1", "coll2", "nosuch") == 2
    c.ok("FLUSHDB")
    assert c.call("DBSIZE") == 0
    assert c.call("RANDOMKEY") is None


# ---------------------------------------------------------------- OBJECT
def test_object_encoding_strings(c):
    c.ok("SET", "int", "12345")
    c.ok("SET", "neg", "-7")
    c.ok("SET", "short", "hello")
    c.ok("SET", "e44", "x" * 44)
    c.ok("SET", "r45", "x" * 45)
    c.ok("SET", "notint", "0123")
    assert c.call("OBJECT", "ENCODING", "int") == b"int"
    assert c.call("OBJECT", "ENCODING", "neg") == b"int"
    assert c.call("OBJECT", "ENCODING", "short") == b"embstr"
    assert c.call("OBJECT", "ENCODING", "e44") == b"embstr"
    assert c.call("OBJECT", "ENCODING", "r45") == b"raw"
    assert c.call("OBJECT", "ENCODING", "notint") == b"embstr"
    assert c.call("OBJECT", "ENCODING", "nosuch") is None
    assert c.call("OBJECT", "encoding", "int") == b"int"


@pytest.mark.parametrize("typ", TYPES)
def test_object_encoding_collections(c, typ):
    make(c, typ, "k")
    enc = c.call("OBJECT", "ENCODING", "k")
    assert isinstance(enc, bytes) and enc


def test_object_other_subcommands(c):
    c.ok("SET", "small", "5")
    c.ok("SET", "s", "text")
    assert c.call("OBJECT", "REFCOUNT", "small") == 2147483647
    assert c.call("OBJECT", "REFCOUNT", "s") == 1
    assert c.call("OBJECT", "REFCOUNT", "nosuch") is None
    idle = c.call("OBJECT", "IDLETIME", "s")
    assert isinstance(idle, int) and 0 <= idle <= 5
    assert c.call("OBJECT", "FREQ", "s").msg.startswith(
        "ERR An LFU maxmemory policy is not selected")
    helptext = c.call("OBJECT", "HELP")
    assert helptext[0].startswith("OBJECT <subcommand>")
    assert any(line.startswith("ENCODING") for line in helptext)
    assert c.call("OBJECT", "FOO", "s") == RespError(
        "ERR unknown subcommand 'FOO'. Try OBJECT HELP.")
    assert c.call("OBJECT", "ENCODING") == RespError(
        "ERR wrong number of arguments for 'object|encoding' command")
    assert c.call("OBJECT", "ENCODING", "s", "x") == RespError(
        "ERR wrong number of arguments for 'object|encoding' command")
    assert c.call("OBJECT") == RespError("ERR wrong number of arguments for 'object' command")


# ---------------------------------------------------------------- MEMORY
def test_memory_usage(c):
    c.ok("SET", "small", "x")
    c.ok("SET", "big", "x" * 10000)
    small = c.call("MEMORY", "USAGE", "small")
    big = c.call("MEMORY", "USAGE", "big")
    assert isinstance(small, int) and small > 0
    assert big >= 10000 > small
    assert c.call("MEMORY", "USAGE", "nosuch") is None
    assert c.call("MEMORY", "USAGE", "big", "SAMPLES", 0) >= 10000
    assert c.call("MEMORY", "USAGE", "big", "SAMPLES", -1) == E_SYNTAX
    assert c.call("MEMORY", "USAGE", "big", "SAMPLES", "x") == E_NOTINT
    assert c.call("MEMORY", "USAGE", "big", "FOO") == E_SYNTAX
    assert c.call("MEMORY", "USAGE") == RespError(
        "ERR wrong number of arguments for 'memory|usage' command")
    assert c.call("MEMORY", "FOO") == RespError(
        "ERR unknown subcommand 'FOO'. Try MEMORY HELP.")
    assert c.call("MEMORY", "HELP")[0].startswith("MEMORY <subcommand>")
    stats = c.call("MEMORY", "STATS")
    fields = dict(zip(stats[::2], stats[1::2]))
    assert b"keys.count" in fields and fields[b"keys.count"] == 2
    assert b"total.allocated" in fields


@pytest.mark.parametrize("typ", TYPES)
def test_memory_usage_collection(c, typ):
    make(c, typ, "k")
    n = c.call("MEMORY", "USAGE", "k")
    assert isinstance(n, int) and n > 0


# ---------------------------------------------------------------- SLOWLOG
@pytest.fixture
def slowlog_all(c):
    """Log every command while the test runs; restore the defaults after."""
    c.ok("CONFIG", "SET", "slowlog-log-slower-than", 0)
    c.ok("CONFIG", "SET", "slowlog-max-len", 128)
    c.ok("SLOWLOG", "RESET")
    yield c
    c.ok("CONFIG", "SET", "slowlog-log-slower-than", 10000)
    c.ok("CONFIG", "SET", "slowlog-max-len", 128)
    c.ok("SLOWLOG", "RESET")


def test_slowlog_records_commands(slowlog_all):
    c = slowlog_all
    c.ok("CLIENT", "SETNAME", "slowpoke")
    c.ok("SET", "slowkey", "v")
    newest = c.call("SLOWLOG", "GET", 1)
    assert len(newest) == 1
    ident, ts, dur, args, peer, name = newest[0]
    assert isinstance(ident, int) and abs(ts - time.time()) < 10 and dur >= 0
    assert args == [b"SET", b"slowkey", b"v"]
    assert peer.startswith(b"127.0.0.1:")
    assert name == b"slowpoke"
    entries = c.call("SLOWLOG", "GET", -1)
    assert len(entries) == c.call("SLOWLOG", "LEN") - 1  # LEN itself was logged after
    ids = [e[0] for e in entries]
    assert ids == sorted(ids, reverse=True)
    assert len(c.call("SLOWLOG", "GET")) <= 10
    assert c.call("SLOWLOG", "GET", 0) == []
    assert c.call("SLOWLOG", "RESET") == "OK"
    assert c.call("SLOWLOG", "LEN") <= 1   # just the RESET, if anything


def test_slowlog_truncates_arguments(slowlog_all):
    c = slowlog_all
    assert c.call("DEL", *["k%d" % i for i in range(40)]) == 0
    c.ok("SET", "long", "y" * 200)
    long_entry, many_entry = c.call("SLOWLOG", "GET", 2)
    assert long_entry[3] == [b"SET", b"long", b"y" * 128 + b"... (72 more bytes)"]
    args = many_entry[3]
    assert len(args) == 32
    assert args[:3] == [b"DEL", b"k0", b"k1"]
    assert args[30] == b"k29"
    assert args[31] == b"... (10 more arguments)"


def test_slowlog_threshold_and_max_len(slowlog_all):
    c = slowlog_all
    c.ok("CONFIG", "SET", "slowlog-max-len", 3)
    for i in range(10):
        c.ok("SET", "k%d" % i, "v")
    assert c.call("SLOWLOG", "LEN") == 3
    c.ok("CONFIG", "SET", "slowlog-log-slower-than", 10000000)
    c.ok("SLOWLOG", "RESET")
    c.ok("SET", "fast", "v")
    assert c.call("SLOWLOG", "LEN") == 0
    c.ok("CONFIG", "SET", "slowlog-log-slower-than", -1)
    c.ok("SET", "fast", "v")
    assert c.call("SLOWLOG", "LEN") == 0


def test_slowlog_errors(c):
    err = RespError("ERR count should be greater than or equal to -1")
    assert c.call("SLOWLOG", "GET", -2) == err
    assert c.call("SLOWLOG", "GET", "x") == err
    assert c.call("SLOWLOG", "LEN", "x") == RespError(
        "ERR wrong number of arguments for 'slowlog|len' command")
    assert c.call("SLOWLOG", "FOO") == RespError(
        "ERR unknown subcommand 'FOO'. Try SLOWLOG HELP.")
    assert c.call("SLOWLOG", "HELP")[0].startswith("SLOWLOG <subcommand>")


# ---------------------------------------------------------------- SORT
def lst(c, key, *items):
    call(c, "lists", "DEL", key)
    return call(c, "lists", "RPUSH", key, *items)


def test_sort_list_numeric_alpha_desc_limit(c):
    lst(c, "l", 3, 1, 2, 10)
    assert c.call("SORT", "l") == [b"1", b"2", b"3", b"10"]
    assert c.call("SORT", "l", "DESC") == [b"10", b"3", b"2", b"1"]
    assert c.call("SORT", "l", "ALPHA") == [b"1", b"10", b"2", b"3"]
    assert c.call("SORT", "l", "ALPHA", "DESC") == [b"3", b"2", b"10", b"1"]
    assert c.call("SORT", "l", "LIMIT", 1, 2) == [b"2", b"3"]
    assert c.call("SORT", "l", "LIMIT", -5, 2) == [b"1", b"2"]
    assert c.call("SORT", "l", "LIMIT", 2, -1) == [b"3", b"10"]
    assert c.call("SORT", "l", "LIMIT", 10, 5) == []
    assert c.call("SORT", "l", "LIMIT", 0, 0) == []
    assert c.call("SORT", "l", "DESC", "LIMIT", 0, 1, "ASC") == [b"1"]
    assert c.call("SORT_RO", "l") == [b"1", b"2", b"3", b"10"]
    # the list itself is untouched
    assert c.call("LRANGE", "l", 0, -1) == [b"3", b"1", b"2", b"10"]


def test_sort_numbers_like_strtod(c):
    lst(c, "l", "1e2", "-3.5", "0x10", " 7", "inf", "-inf")
    assert c.call("SORT", "l") == [b"-inf", b"-3.5", b" 7", b"0x10", b"1e2", b"inf"]
    lst(c, "bad", "1", "two")
    assert c.call("SORT", "bad") == E_SCORES
    assert c.call("SORT", "bad", "ALPHA") == [b"1", b"two"]
    # equal scores fall back to comparing the elements
    lst(c, "ties", "1.0", "1", "01")
    assert c.call("SORT", "ties") == [b"01", b"1", b"1.0"]


def test_sort_errors(c):
    c.ok("SET", "str", "x")
    assert c.call("SORT", "str") == E_WRONGTYPE
    assert c.call("SORT", "nosuch") == []
    assert c.call("SORT", "nosuch", "FOO") == E_SYNTAX
    assert c.call("SORT", "nosuch", "LIMIT", 1) == E_SYNTAX
    assert c.call("SORT", "nosuch", "LIMIT", "a", 1) == E_NOTINT
    assert c.call("SORT", "nosuch", "BY") == E_SYNTAX
    assert c.call("SORT", "nosuch", "GET") == E_SYNTAX
    assert c.call("SORT_RO", "nosuch", "STORE", "dst") == E_SYNTAX
    assert c.call("SORT") == RespError("ERR wrong number of arguments for 'sort' command")


def test_sort_wrongtype_hash(c):
    call(c, "hashes", "HSET", "h", "f", "1")
    assert c.call("SORT", "h") == E_WRONGTYPE


def test_sort_by_nosort_keeps_list_order(c):
    lst(c, "l", 3, 1, 2, 10)
    assert c.call("SORT", "l", "BY", "nosort") == [b"3", b"1", b"2", b"10"]
    assert c.call("SORT", "l", "BY", "nosort", "DESC") == [b"10", b"2", b"1", b"3"]
    assert c.call("SORT", "l", "BY", "nosort", "LIMIT", 1, 2) == [b"1", b"2"]
    assert c.call("SORT", "l", "BY", "nosort", "DESC", "LIMIT", 1, 2) == [b"2", b"1"]


def test_sort_by_pattern_and_get(c):
    lst(c, "l", 1, 2, 3, 10)
    c.ok("MSET", "w_1", 30, "w_2", 10, "w_3", 20, "o_1", "one", "o_2", "two", "o_10", "ten")
    # w_10 is missing: it sorts as 0
    assert c.call("SORT", "l", "BY", "w_*") == [b"10", b"2", b"3", b"1"]
    assert c.call("SORT", "l", "BY", "w_*", "DESC") == [b"1", b"3", b"2", b"10"]
    assert c.call("SORT", "l", "BY", "w_*", "LIMIT", 1, 2) == [b"2", b"3"]
    assert c.call("SORT", "l", "GET", "o_*") == [b"one", b"two", None, b"ten"]
    assert c.call("SORT", "l", "GET", "#", "GET", "o_*", "LIMIT", 0, 2) == \
        [b"1", b"one", b"2", b"two"]
    # a GET pattern without '*' names no key
    assert c.call("SORT", "l", "GET", "o_1", "LIMIT", 0, 1) == [None]
    # ALPHA by pattern: missing values first
    c.ok("MSET", "n_1", "b", "n_2", "a", "n_3", "c")
    assert c.call("SORT", "l", "BY", "n_*", "ALPHA") == [b"10", b"2", b"1", b"3"]
    # a BY value that is not a number
    c.ok("SET", "w_10", "abc")
    assert c.call("SORT", "l", "BY", "w_*") == E_SCORES


def test_sort_by_and_get_hash_fields(c):
    lst(c, "l", "a", "b", "c")
    for name, rank in (("a", 3), ("b", 1), ("c", 2)):
        call(c, "hashes", "HSET", "info_" + name, "rank", rank, "name", name.upper())
    assert c.call("SORT", "l", "BY", "info_*->rank", "GET", "info_*->name") == \
        [b"B", b"C", b"A"]
    assert c.call("SORT", "l", "BY", "info_*->rank", "GET", "info_*->nosuch") == \
        [None, None, None]
    # a hash field pattern on a string key, and a string pattern on a hash
    c.ok("SET", "info_x", "1")
    lst(c, "l2", "x", "a")
    assert c.call("SORT", "l2", "ALPHA", "GET", "info_*->rank") == [b"3", None]
    assert c.call("SORT", "l2", "ALPHA", "GET", "info_*") == [None, b"1"]


def test_sort_by_many_keys(c):
    # patterns that name keys all over the keyspace
    n = 200
    lst(c, "l", *range(n))
    c.ok("MSET", *[x for i in range(n) for x in ("weight:%d" % i, n - i)])
    c.ok("MSET", *[x for i in range(n) for x in ("label:%d" % i, "L%d" % i)])
    out = c.call("SORT", "l", "BY", "weight:*", "GET", "label:*")
    assert out == [b"L%d" % i for i in reversed(range(n))]


def test_sort_set_and_zset(c):
    call(c, "sets", "SADD", "s", 5, 3, 9, 1)
    assert c.call("SORT", "s") == [b"1", b"3", b"5", b"9"]
    assert c.call("SORT", "s", "DESC", "LIMIT", 0, 2) == [b"9", b"5"]
    assert sorted(c.call("SORT", "s", "BY", "nosort")) == [b"1", b"3", b"5", b"9"]
    call(c, "sorted sets", "ZADD", "z", 1, "c", 2, "b", 3, "a")
    assert c.call("SORT", "z", "ALPHA") == [b"a", b"b", b"c"]
    assert c.call("SORT", "z", "BY", "nosort") == [b"c", b"b", b"a"]
    assert c.call("SORT", "z", "BY", "nosort", "DESC") == [b"a", b"b", b"c"]
    assert c.call("SORT", "z", "BY", "nosort", "LIMIT", 1, 5) == [b"b", b"a"]
    assert c.call("SORT", "z") == E_SCORES


def test_sort_store(c):
    lst(c, "l", 3, 1, 2)
    c.ok("SET", "dst", "a string")
    assert c.call("SORT", "l", "STORE", "dst") == 3
    assert c.call("TYPE", "dst") == "list"
    assert c.call("LRANGE", "dst", 0, -1) == [b"1", b"2", b"3"]
    c.ok("MSET", "o_1", "one", "o_3", "three")
    assert c.call("SORT", "l", "GET", "#", "GET", "o_*", "STORE", "dst") == 6
    assert c.call("LRANGE", "dst", 0, -1) == \
        [b"1", b"one", b"2", b"", b"3", b"three"]
    # storing into the sorted key itself
    assert c.call("SORT", "l", "DESC", "STORE", "l") == 3
    assert c.call("LRANGE", "l", 0, -1) == [b"3", b"2", b"1"]
    # an empty result deletes the destination
    assert c.call("SORT", "nosuch", "STORE", "dst") == 0
    assert c.call("EXISTS", "dst") == 0
    assert c.call("SORT", "l", "LIMIT", 5, 1, "STORE", "l") == 0
    assert c.call("EXISTS", "l") == 0


def test_sort_store_set_nosort_is_alpha(c):
    call(c, "lists", "RPUSH", "probe", "x")
    call(c, "sets", "SADD", "s", "b", "c", "a", "10")
    assert c.call("SORT", "s", "BY", "nosort", "STORE", "dst") == 4
    assert c.call("LRANGE", "dst", 0, -1) == [b"10", b"a", b"b", b"c"]


def test_sort_in_transaction(c):
    lst(c, "l", 1, 2, 3)
    c.ok("MSET", "w_1", 1, "w_2", 2, "w_3", 3)
    assert call(c, "transactions", "MULTI") == "OK"
    assert c.call("MSET", "w_1", 30, "w_2", 20, "w_3", 10) == "QUEUED"
    assert c.call("SORT", "l", "BY", "w_*") == "QUEUED"
    assert c.call("SORT", "l", "BY", "w_*", "GET", "w_*", "STORE", "dst") == "QUEUED"
    assert c.call("EXEC") == ["OK", [b"3", b"2", b"1"], 3]
    assert c.call("LRANGE", "dst", 0, -1) == [b"10", b"20", b"30"]
    # SORT_RO sees the transaction's earlier writes too
    assert c.call("MULTI") == "OK"
    assert c.call("SET", "w_2", 99) == "QUEUED"
    assert c.call("SORT_RO", "l", "BY", "w_*", "DESC") == "QUEUED"
    assert c.call("EXEC") == ["OK", [b"2", b"1", b"3"]]


def test_sort_concurrent_with_writes(server):
    """SORT BY locks the shards of the keys its pattern names; concurrent
    multi-key writes to those keys must neither deadlock nor tear."""
    c = server.resp()
    c.ok("FLUSHALL")
    n = 50
    lst(c, "l", *range(n))
    c.ok("MSET", *[x for i in range(n) for x in ("w:%d" % i, i)])
    stop = time.time() + 2.0
    errors = []

    def writer():
        w = server.resp()
        k = 0
        while time.time() < stop:
            # every weight moves together: a SORT sees them all old or all new
            k += 1
            sign = 1 if k % 2 else -1
            rep = w.call("MSET", *[x for i in range(n) for x in ("w:%d" % i, sign * i)])
            if rep != "OK":
                errors.append(rep)
        w.close()

    threads = [threading.Thread(target=writer) for _ in range(2)]
    for t in threads:
        t.start()
    ok = tryagain = 0
    asc = [b"%d" % i for i in range(n)]
    try:
        while time.time() < stop:
            out = c.call("SORT", "l", "BY", "w:*")
            if isinstance(out, RespError) and out.msg.startswith("TRYAGAIN"):
                tryagain += 1
                continue
            assert out in (asc, asc[::-1]), out
            ok += 1
    finally:
        for t in threads:
            t.join()
    assert not errors
    assert ok > 0 and tryagain <= ok


# ---------------------------------------------------------------- durability (Rowan)
@pytest.mark.rowan_only("restart recovery of collections written by RENAME/COPY/MOVE/SORT")
def test_renamed_copied_collections_survive_crash(server_factory):
    srv = server_factory()
    c = srv.resp()
    made = []
    for typ in TYPES:
        rep = c.call({"hash": "HSET", "list": "RPUSH", "set": "SADD", "zset": "ZADD"}[typ],
                     "probe", *(("1", "x") if typ in ("hash", "zset") else ("x",)))
        c.call("DEL", "probe")
        if isinstance(rep, RespError):
            continue
        made.append(typ)
        make(c, typ, typ + ":a")
        assert c.call("EXPIRE", typ + ":a", 1000) == 1
        assert c.call("RENAME", typ + ":a", typ + ":b") == "OK"
        assert c.call("COPY", typ + ":b", typ + ":c") == 1
        modify(c, typ, typ + ":c")
        assert c.call("COPY", typ + ":b", typ + ":d", "DB", 1) == 1
        make(c, typ, typ + ":m")
        assert c.call("MOVE", typ + ":m", 2) == 1
    if not made:
        pytest.skip("no collection type implemented on this server yet")
    sorted_ok = "list" in made
    if sorted_ok:
        assert c.call("SORT", "list:b", "ALPHA", "DESC", "STORE", "sorted") == 3
    srv.kill9()
    srv.start()
    c = srv.resp()
    for typ in made:
        assert c.call("EXISTS", typ + ":a") == 0
        assert dump(c, typ, typ + ":b") == EXPECTED[typ]
        assert 900 < c.call("TTL", typ + ":b") <= 1000
        assert dump(c, typ, typ + ":c") != EXPECTED[typ]
        assert c.call("EXISTS", typ + ":m") == 0
    if sorted_ok:
        assert c.call("LRANGE", "sorted", 0, -1) == [b"c", b"b", b"a"]
    c.ok("SELECT", 1)
    for typ in made:
        assert dump(c, typ, typ + ":d") == EXPECTED[typ]
    c.ok("SELECT", 2)
    for typ in made:
        assert dump(c, typ, typ + ":m") == EXPECTED[typ]
