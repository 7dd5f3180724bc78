"""Keyspace commands, databases and expiry, as Redis 7 documents them."""
import time

import pytest

from conftest import RespClient, RespError, wait_for

E_SYNTAX = RespError("ERR syntax error")
E_NOTINT = RespError("ERR value is not an integer or out of range")
E_DBINDEX = RespError("ERR DB index is out of range")


def E_ARITY(cmd):
    return RespError("ERR wrong number of arguments for '%s' command" % cmd)


# ---------------------------------------------------------------- DEL UNLINK EXISTS TYPE
def test_del_counts_deleted_keys(c):
    c.ok("MSET", "a", "1", "b", "2", "c", "3")
    assert c.call("DEL", "a", "b", "nosuch", "a") == 2
    assert c.call("MGET", "a", "b", "c") == [None, None, b"3"]
    assert c.call("DEL", "a") == 0
    assert c.call("DEL") == E_ARITY("del")


def test_unlink(c):
    c.ok("MSET", "a", "1", "b", "2")
    assert c.call("UNLINK", "a", "b", "nosuch") == 2
    assert c.call("EXISTS", "a", "b") == 0
    assert c.call("UNLINK") == E_ARITY("unlink")


def test_exists_counts_repeats(c):
    c.ok("SET", "a", "1")
    assert c.call("EXISTS", "a") == 1
    assert c.call("EXISTS", "a", "a", "nosuch", "a") == 3
    assert c.call("EXISTS", "nosuch") == 0
    assert c.call("EXISTS") == E_ARITY("exists")


def test_type(c):
    c.ok("SET", "s", "x")
    assert c.call("TYPE", "s") == "string"
    assert c.call("TYPE", "nosuch") == "none"
    assert c.call("TYPE") == E_ARITY("type")


def test_deleted_key_can_be_recreated(c):
    for i in range(20):
        assert c.call("SET", "k", "v%d" % i) == "OK"
        assert c.call("GET", "k") == b"v%d" % i
        assert c.call("DEL", "k") == 1
        assert c.call("GET", "k") is None


# ---------------------------------------------------------------- EXPIRE family
def test_expire_ttl_persist(c):
    assert c.call("TTL", "nosuch") == -2
    assert c.call("PTTL", "nosuch") == -2
    assert c.call("EXPIRE", "nosuch", 10) == 0
    c.ok("SET", "k", "v")
    assert c.call("TTL", "k") == -1
    assert c.call("PTTL", "k") == -1
    assert c.call("EXPIRE", "k", 100) == 1
    assert 0 < c.call("TTL", "k") <= 100
    assert c.call("PEXPIRE", "k", 200000) == 1
    assert 100000 < c.call("PTTL", "k") <= 200000
    assert c.call("PERSIST", "k") == 1
    assert c.call("TTL", "k") == -1
    assert c.call("PERSIST", "k") == 0
    assert c.call("PERSIST", "nosuch") == 0
    assert c.call("GET", "k") == b"v"


def test_expireat_pexpireat_expiretime(c):
    c.ok("SET", "k", "v")
    assert c.call("EXPIRETIME", "k") == -1
    assert c.call("PEXPIRETIME", "k") == -1
    assert c.call("EXPIRETIME", "nosuch") == -2
    assert c.call("PEXPIRETIME", "nosuch") == -2
    at = int(time.time()) + 3600
    assert c.call("EXPIREAT", "k", at) == 1
    assert c.call("EXPIRETIME", "k") == at
    assert c.call("PEXPIRETIME", "k") == at * 1000
    assert c.call("PEXPIREAT", "k", 99999999999999) == 1
    assert c.call("PEXPIRETIME", "k") == 99999999999999
    assert c.call("EXPIREAT", "nosuch", at) == 0
    assert c.call("PEXPIREAT", "nosuch", at * 1000) == 0


@pytest.mark.parametrize("cmd,arg", [("EXPIRE", -1), ("EXPIRE", 0), ("PEXPIRE", 0),
                                     ("EXPIREAT", 1), ("EXPIREAT", -5), ("PEXPIREAT", 1000)])
def test_expire_in_the_past_deletes(c, cmd, arg):
    c.ok("SET", "k", "v")
    assert c.call(cmd, "k", arg) == 1
    assert c.call("EXISTS", "k") == 0
    assert c.call("GET", "k") is None
    assert c.call("TTL", "k") == -2


def test_expire_errors(c):
    c.ok("SET", "k", "v")
    assert c.call("EXPIRE", "k", "abc") == E_NOTINT
    assert c.call("PEXPIRE", "k", "1.5") == E_NOTINT
    assert c.call("EXPIRE", "k", 9999999999999999) == RespError(
        "ERR invalid expire time in 'expire' command")
    assert c.call("PEXPIRE", "k", 9223372036854775807) == RespError(
        "ERR invalid expire time in 'pexpire' command")
    assert c.call("EXPIRE", "k", 10, "FOO") == RespError("ERR Unsupported option FOO")
    assert c.call("EXPIRE", "k", 10, "NX", "XX") == RespError(
        "ERR NX and XX, GT or LT options at the same time are not compatible")
    assert c.call("EXPIRE", "k", 10, "GT", "LT") == RespError(
        "ERR GT and LT options at the same time are not compatible")
    assert c.call("EXPIRE", "k") == E_ARITY("expire")
    assert c.call("TTL", "k") == -1


def test_expire_nx_xx(c):
    c.ok("SET", "k", "v")
    assert c.call("EXPIRE", "k", 100, "XX") == 0
    assert c.call("TTL", "k") == -1
    assert c.call("EXPIRE", "k", 100, "NX") == 1
    assert c.call("EXPIRE", "k", 200, "NX") == 0
    assert 0 < c.call("TTL", "k") <= 100
    assert c.call("EXPIRE", "k", 300, "XX") == 1
    assert 200 < c.call("TTL", "k") <= 300
    assert c.call("PEXPIRE", "k", 5000, "nx") == 0


def test_expire_gt_lt(c):
    c.ok("SET", "k", "v")
    # no TTL counts as infinite: GT never applies, LT always does
    assert c.call("EXPIRE", "k", 100, "GT") == 0
    assert c.call("TTL", "k") == -1
    assert c.call("EXPIRE", "k", 100, "LT") == 1
    assert 0 < c.call("TTL", "k") <= 100
    assert c.call("EXPIRE", "k", 50, "GT") == 0
    assert c.call("EXPIRE", "k", 500, "LT") == 0
    assert 0 < c.call("TTL", "k") <= 100
    assert c.call("EXPIRE", "k", 500, "GT") == 1
    assert 400 < c.call("TTL", "k") <= 500
    assert c.call("EXPIRE", "k", 50, "LT") == 1
    assert 0 < c.call("TTL", "k") <= 50
    at = int(time.time()) + 10000
    assert c.call("EXPIREAT", "k", at, "GT") == 1
    assert c.call("EXPIRETIME", "k") == at
    assert c.call("PEXPIREAT", "k", at * 1000 + 1, "LT") == 0
    assert c.call("PEXPIREAT", "k", at * 1000 - 1, "LT") == 1
    assert c.call("PEXPIRETIME", "k") == at * 1000 - 1


def test_rename_carries_ttl_and_value(c):
    c.ok("SET", "t", "1", "EX", 100)
    assert c.call("RENAME", "t", "u") == "OK"
    assert c.call("EXISTS", "t") == 0
    assert c.call("GET", "u") == b"1"
    assert 0 < c.call("TTL", "u") <= 100


# ---------------------------------------------------------------- lazy and active expiry
def test_lazy_expiry(c):
    c.ok("SET", "k", "v", "PX", 100)
    c.ok("SET", "keep", "v")
    time.sleep(0.3)
    assert c.call("GET", "k") is None
    assert c.call("EXISTS", "k") == 0
    assert c.call("TTL", "k") == -2
    assert c.call("GET", "keep") == b"v"


def test_expired_keys_are_invisible(c):
    c.ok("SET", "stay", "v")
    for i in range(50):
        c.ok("SET", "gone:%d" % i, "v", "PX", 50)
    time.sleep(0.3)
    assert c.call("KEYS", "*") == [b"stay"]
    assert c.call("MGET", *["gone:%d" % i for i in range(50)]) == [None] * 50
    assert c.call("EXISTS", *["gone:%d" % i for i in range(50)]) == 0
    assert c.call("RANDOMKEY") == b"stay"
    cursor, seen = 0, []
    for _ in range(1000):
        cursor, batch = c.call("SCAN", cursor)
        seen += batch
        if cursor == b"0":
            break
    assert set(seen) == {b"stay"}


def _stat(server, name):
    return int(server.info("stats")["stats"][name])


def test_active_expiry(server, c):
    before = _stat(server, "expired_keys")
    c.ok("SET", "keep", "v")
    for i in range(30):
        c.ok("SET", "x:%d" % i, "v", "PX", 100)
    assert c.call("DBSIZE") in range(1, 32)
    # nobody touches the keys: the server must remove them by itself
    dbsize = wait_for(lambda: c.call("DBSIZE") == 1, timeout=8.0)
    assert dbsize, "expired keys still counted by DBSIZE after 8 s: %r" % c.call("DBSIZE")
    assert _stat(server, "expired_keys") >= before + 30
    assert c.call("GET", "keep") == b"v"


def test_lazy_expiry_counts_in_stats(server, c):
    before = _stat(server, "expired_keys")
    c.ok("SET", "k", "v", "PX", 20)
    time.sleep(0.1)
    assert c.call("GET", "k") is None
    assert _stat(server, "expired_keys") >= before + 1


# ---------------------------------------------------------------- KEYS
def test_keys_glob(c):
    names = ["hello", "hallo", "hxllo", "hllo", "heeeello", "h*llo", "h\\llo", "hbllo", "other"]
    for n in names:
        c.ok("SET", n, "1")

    def keys(p):
        return sorted(x.decode() for x in c.call("KEYS", p))

    assert keys("*") == sorted(names)
    assert keys("h?llo") == sorted(["hello", "hallo", "hxllo", "h*llo", "h\\llo", "hbllo"])
    assert keys("h*llo") == sorted(n for n in names if n != "other")
    assert keys("h[ae]llo") == ["hallo", "hello"]
    assert keys("h[^e]llo") == sorted(["hallo", "hxllo", "h*llo", "h\\llo", "hbllo"])
    assert keys("h[a-b]llo") == ["hallo", "hbllo"]
    assert keys("h\\*llo") == ["h*llo"]
    assert keys("h\\\\llo") == ["h\\llo"]
    assert keys("nomatch*") == []
    assert c.call("KEYS") == E_ARITY("keys")


def test_keys_binary_names(c):
    c.ok("SET", b"a\x00b", "1")
    c.ok("SET", b"a\xffb", "1")
    assert sorted(c.call("KEYS", "a?b")) == sorted([b"a\x00b", b"a\xffb"])


# ---------------------------------------------------------------- SCAN
def _scan_all(c, *opts, count_limit=100000):
    cursor, seen, calls = b"0", [], 0
    while True:
        rep = c.call("SCAN", cursor, *opts)
        assert isinstance(rep, list) and len(rep) == 2, rep
        cursor, batch = rep
        assert isinstance(cursor, bytes) and cursor.isdigit(), cursor
        seen += batch
        calls += 1
        assert calls < count_limit, "SCAN did not finish"
        if cursor == b"0":
            return seen, calls


def test_scan_full_iteration(c, r):
    keys = {b"key:%d" % i for i in range(1500)}
    p = r.pipeline(transaction=False)
    for k in keys:
        p.set(k, b"v")
    p.execute()
    seen, calls = _scan_all(c, "COUNT", 10)
    assert set(seen) == keys            # every key at least once, nothing else
    assert calls > 1                    # COUNT 10 cannot fetch 1500 keys at once
    seen, _ = _scan_all(c)
    assert set(seen) == keys
    assert set(r.scan_iter(count=100)) == keys


def test_scan_match_and_type(c, r):
    p = r.pipeline(transaction=False)
    for i in range(300):
        p.set("user:%d" % i, "u")
        p.set("item:%d" % i, "i")
    p.execute()
    seen, _ = _scan_all(c, "MATCH", "user:1*", "COUNT", 50)
    assert set(seen) == {b"user:%d" % i for i in range(300) if str(i).startswith("1")}
    seen, _ = _scan_all(c, "TYPE", "string")
    assert len(set(seen)) == 600
    seen, _ = _scan_all(c, "TYPE", "list")
    assert seen == []
    seen, _ = _scan_all(c, "MATCH", "item:2?", "TYPE", "string", "COUNT", 1000)
    assert set(seen) == {b"item:%d" % i for i in range(20, 30)}


def test_scan_guarantee_under_concurrent_changes(server, c, r):
    """Keys present for the whole iteration are returned at least once, even
    while other keys are added and removed."""
    stable = {b"stable:%d" % i for i in range(800)}
    p = r.pipeline(transaction=False)
    for k in stable:
        p.set(k, b"s")
    p.execute()
    other = server.resp()
    cursor, seen, n = b"0", set(), 0
    while True:
        cursor, batch = c.call("SCAN", cursor, "COUNT", 20)
        seen.update(batch)
        # churn: add and delete unrelated keys between SCAN calls
        for j in range(20):
            other.ok("SET", "churn:%d:%d" % (n, j), "c")
        if n:
            other.ok("DEL", *["churn:%d:%d" % (n - 1, j) for j in range(20)])
        n += 1
        assert n < 10000
        if cursor == b"0":
            break
    assert stable <= seen


def test_scan_errors(c):
    assert c.call("SCAN", "abc") == RespError("ERR invalid cursor")
    assert c.call("SCAN", 0, "COUNT", 0) == E_SYNTAX
    assert c.call("SCAN", 0, "COUNT", "x") == E_NOTINT
    assert c.call("SCAN", 0, "FOO", "bar") == E_SYNTAX
    assert c.call("SCAN", 0, "MATCH") == E_SYNTAX
    assert c.call("SCAN") == E_ARITY("scan")


def test_scan_empty_db(c):
    assert c.call("SCAN", 0) == [b"0", []]


# ---------------------------------------------------------------- RENAME RENAMENX
def test_rename(c):
    c.ok("SET", "a", "1")
    c.ok("SET", "b", "2")
    assert c.call("RENAME", "a", "b") == "OK"
    assert c.call("GET", "b") == b"1"
    assert c.call("EXISTS", "a") == 0
    assert c.call("RENAME", "nosuch", "x") == RespError("ERR no such key")
    assert c.call("RENAME", "b", "b") == "OK"
    assert c.call("GET", "b") == b"1"
    # renaming over a key with a TTL drops the old TTL, keeps the source's
    c.ok("SET", "t", "x", "EX", 100)
    c.ok("SET", "s", "y")
    assert c.call("RENAME", "s", "t") == "OK"
    assert c.call("TTL", "t") == -1
    assert c.call("RENAME", "a") == E_ARITY("rename")


def test_renamenx(c):
    c.ok("MSET", "a", "1", "b", "2")
    assert c.call("RENAMENX", "a", "b") == 0
    assert c.call("MGET", "a", "b") == [b"1", b"2"]
    assert c.call("RENAMENX", "a", "c") == 1
    assert c.call("MGET", "a", "c") == [None, b"1"]
    assert c.call("RENAMENX", "nosuch", "x") == RespError("ERR no such key")
    assert c.call("RENAMENX", "c", "c") == 0
    assert c.call("RENAMENX") == E_ARITY("renamenx")


# ---------------------------------------------------------------- RANDOMKEY TOUCH DBSIZE
def test_randomkey(c):
    assert c.call("RANDOMKEY") is None
    names = {b"k%d" % i for i in range(10)}
    for k in names:
        c.ok("SET", k, "v")
    got = {c.call("RANDOMKEY") for _ in range(50)}
    assert got <= names
    assert c.call("RANDOMKEY", "x") == E_ARITY("randomkey")


def test_touch(c):
    c.ok("MSET", "a", "1", "b", "2")
    assert c.call("TOUCH", "a", "b", "nosuch", "a") == 3
    assert c.call("TOUCH") == E_ARITY("touch")


def test_dbsize(c):
    assert c.call("DBSIZE") == 0
    for i in range(25):
        c.ok("SET", "k%d" % i, "v")
    assert c.call("DBSIZE") == 25
    c.ok("DEL", "k0", "k1")
    assert c.call("DBSIZE") == 23
    assert c.call("DBSIZE", "x") == E_ARITY("dbsize")


# ---------------------------------------------------------------- databases
def test_databases_are_separate(server, c):
    d1 = server.resp()
    assert d1.call("SELECT", 1) == "OK"
    assert d1.call("SET", "k", "in-db1") == "OK"
    assert c.call("GET", "k") is None
    assert c.call("KEYS", "*") == []
    assert c.call("DBSIZE") == 0
    assert c.call("EXISTS", "k") == 0
    c.ok("SET", "k", "in-db0")
    assert d1.call("GET", "k") == b"in-db1"
    assert d1.call("DBSIZE") == 1
    assert c.call("SELECT", 15) == "OK"
    assert c.call("DBSIZE") == 0


def test_select_errors(c):
    assert c.call("SELECT", 16) == E_DBINDEX
    assert c.call("SELECT", -1) == E_DBINDEX
    assert c.call("SELECT", "a") == E_NOTINT
    assert c.call("SELECT") == E_ARITY("select")
    assert c.call("SET", "still", "db0") == "OK"
    d = RespClient(c.sock.getpeername()[1])
    try:
        assert d.call("GET", "still") == b"db0"
    finally:
        d.close()


def test_flushdb_only_current_db(server, c):
    d1 = server.resp()
    d1.ok("SELECT", 1)
    d1.ok("SET", "a", "1")
    c.ok("SET", "b", "2")
    assert c.call("FLUSHDB") == "OK"
    assert c.call("DBSIZE") == 0
    assert d1.call("GET", "a") == b"1"
    assert d1.call("FLUSHDB", "ASYNC") == "OK"
    assert d1.call("DBSIZE") == 0
    assert c.call("FLUSHDB", "SYNC") == "OK"
    assert c.call("FLUSHDB", "FOO") == E_SYNTAX


def test_flushall_every_db(server, c):
    d3 = server.resp()
    d3.ok("SELECT", 3)
    d3.ok("SET", "a", "1")
    c.ok("SET", "b", "2")
    assert c.call("FLUSHALL") == "OK"
    assert c.call("DBSIZE") == 0
    assert d3.call("DBSIZE") == 0
    assert d3.call("GET", "a") is None
    assert c.call("FLUSHALL", "ASYNC") == "OK"
    assert c.call("FLUSHALL", "SYNC") == "OK"
    assert c.call("FLUSHALL", "FOO") == E_SYNTAX


def test_move(server, c):
    d1 = server.resp()
    d1.ok("SELECT", 1)
    c.ok("SET", "k", "v", "EX", 100)
    assert c.call("MOVE", "k", 1) == 1
    assert c.call("EXISTS", "k") == 0
    assert d1.call("GET", "k") == b"v"
    assert 0 < d1.call("TTL", "k") <= 100
    assert c.call("MOVE", "nosuch", 1) == 0
    # an existing key in the target db is not overwritten
    c.ok("SET", "k", "again")
    assert c.call("MOVE", "k", 1) == 0
    assert c.call("GET", "k") == b"again"
    assert d1.call("GET", "k") == b"v"
    assert c.call("MOVE", "k", 0) == RespError("ERR source and destination objects are the same")
    assert c.call("MOVE", "k", 16) == E_DBINDEX
    assert c.call("MOVE", "k", "x") == E_NOTINT


def test_swapdb(server, c):
    d1 = server.resp()
    d1.ok("SELECT", 1)
    c.ok("SET", "k", "zero")
    c.ok("SET", "only0", "x")
    d1.ok("SET", "k", "one")
    assert c.call("SWAPDB", 0, 1) == "OK"
    # connections stay on their db number and see the swapped contents
    assert c.call("GET", "k") == b"one"
    assert c.call("EXISTS", "only0") == 0
    assert d1.call("GET", "k") == b"zero"
    assert d1.call("GET", "only0") == b"x"
    assert c.call("DBSIZE") == 1
    assert d1.call("DBSIZE") == 2
    assert c.call("SWAPDB", 0, 1) == "OK"
    assert c.call("GET", "k") == b"zero"
    assert c.call("SWAPDB", 0, 0) == "OK"
    assert c.call("GET", "k") == b"zero"
    assert c.call("SWAPDB", 0, 16) == E_DBINDEX
    assert c.call("SWAPDB", "a", 0) == RespError("ERR invalid first DB index")
    assert c.call("SWAPDB", 0, "b") == RespError("ERR invalid second DB index")
    assert c.call("SWAPDB", 0) == E_ARITY("swapdb")


def test_swapdb_then_writes(server, c):
    """Writes after a swap go to the database the connection now sees."""
    d2 = server.resp()
    d2.ok("SELECT", 2)
    c.ok("SWAPDB", 0, 2)
    c.ok("SET", "after", "swap")
    assert d2.call("GET", "after") is None
    c.ok("SWAPDB", 0, 2)
    assert c.call("GET", "after") is None
    assert d2.call("GET", "after") == b"swap"
