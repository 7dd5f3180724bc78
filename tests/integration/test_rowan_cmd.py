"""ROWAN DIGEST and ROWAN SHARD (redis-compat/t_rowan.c, src/store/db_shard.c).

A shard's digest hashes its contents: every key of every db with its type,
value and expiry, independent of insertion order, log layout, versions and
encodings. So it must survive kill -9 and a clean restart unchanged, move
when anything changes, and be equal on two servers that reached the same
contents by different routes (orders, overwrites, deletions, SWAPDB,
encodings that never convert back). ROWAN SHARD reports the shard's slots,
replicas, role, key count and versions."""
import re

import pytest

from conftest import RespError

pytestmark = pytest.mark.rowan_only("ROWAN is Rowan's own admin command")

NSHARDS = 64           # the default `shards`
HEX16 = re.compile(rb"^[0-9a-f]{16}$")
FAR_MS = 4102444800000  # 2100-01-01, an absolute expiry no test outlives


def digests(c):
    """{shard: (hex digest, keys)} from ROWAN DIGEST."""
    rep = c.call("ROWAN", "DIGEST")
    assert isinstance(rep, list), rep
    out = {}
    for sid, d, n in rep:
        assert HEX16.match(d), d
        out[sid] = (d, n)
    return out


def shard_info(c, sid):
    flat = c.call("ROWAN", "SHARD", sid)
    assert isinstance(flat, list) and len(flat) == 16, flat
    return dict(zip([k.decode() for k in flat[0::2]], flat[1::2]))


def load_all_types(srv, order):
    """The same final contents for order 0 and 1, reached differently."""
    r = srv.client()
    p = r.pipeline(transaction=False)
    if order == 0:
        # db 7 gets its keys through SWAPDB 6 7 (a different physical db)
        srv.client(db=6).set("sw:a", "swapped")
        srv.client(db=6).rpush("sw:l", "x", "y")
        r.swapdb(6, 7)
        # strings, overwritten and with expiries
        for i in range(200):
            p.set("s:%d" % i, "old")
        for i in range(200):
            p.set("s:%d" % i, "v%d" % i)
        p.set("ttl:a", "x", pxat=FAR_MS)
        p.set("ttl:b", "y")
        p.pexpireat("ttl:b", FAR_MS + 1)
        # a hash that went over 512 fields (hashtable, sticky) and back
        for i in range(600):
            p.hset("h:big", "f%d" % i, "v%d" % i)
        for i in range(10, 600):
            p.hdel("h:big", "f%d" % i)
        p.hset("h:small", mapping={"a": "1", "b": "2", "c": "3"})
        # sets and zsets
        p.sadd("set:1", *["m%d" % i for i in range(50)])
        p.sadd("set:int", *[str(i) for i in range(20)])
        p.zadd("z:1", {"a": 1, "b": 2, "c": 3.5})
        p.zadd("z:1", {"b": 9})
        p.zadd("z:1", {"b": 2})
        p.zadd("z:big", {"m" * 80: 0, "x": 1.25})
        p.pexpireat("z:big", FAR_MS + 2)
        # lists
        p.rpush("l:1", "a", "b", "c", "d")
        p.lpush("l:2", "3", "2", "1")
        # a key written in db 0, then moved to db 1 by SWAPDB
        p.set("db:moved", "m")
        p.sadd("db:movedset", "q")
        p.execute()
        r.swapdb(0, 1)
        # that swap moved everything above into db 1: swap back, only the
        # two db: keys stay moved
        r.swapdb(0, 1)
        r.move("db:moved", 1)
        r.move("db:movedset", 1)
        # a key set and deleted
        r.set("gone", "1")
        r.delete("gone")
    else:
        srv.client(db=7).rpush("sw:l", "x", "y")
        srv.client(db=7).set("sw:a", "swapped")
        r.set("db:moved", "m")
        r.sadd("db:movedset", "q")
        r.move("db:moved", 1)
        r.move("db:movedset", 1)
        p = r.pipeline(transaction=False)
        p.rpush("l:2", "1", "2", "3")
        p.rpush("l:1", "a", "c", "d")
        p.linsert("l:1", "before", "c", "b")
        p.zadd("z:big", {"x": 1.25, "m" * 80: -0.0})
        p.pexpireat("z:big", FAR_MS + 2)
        p.zadd("z:1", {"c": 3.5, "b": 2, "a": 1})
        p.sadd("set:int", *[str(i) for i in reversed(range(20))])
        p.sadd("set:1", *["m%d" % i for i in reversed(range(50))])
        p.hset("h:small", mapping={"c": "3", "b": "2", "a": "1"})
        for i in reversed(range(10)):
            p.hset("h:big", "f%d" % i, "v%d" % i)
        p.set("ttl:b", "y", pxat=FAR_MS + 1)
        p.set("ttl:a", "x")
        p.pexpireat("ttl:a", FAR_MS)
        for i in reversed(range(200)):
            p.set("s:%d" % i, "v%d" % i)
        p.execute()


def test_digest_reply_shapes_and_errors(server_factory):
    srv = server_factory()
    c = srv.resp()
    d0 = c.call("ROWAN", "DIGEST", 0)
    assert HEX16.match(d0), d0
    all_ = digests(c)
    assert sorted(all_) == list(range(NSHARDS))
    # empty shards: all the same digest, 0 keys
    assert {v for v in all_.values()} == {(d0, 0)}
    for bad in ("-1", str(NSHARDS), "abc", "1.5"):
        rep = c.call("ROWAN", "DIGEST", bad)
        assert rep == RespError("ERR invalid shard '%s': shards are 0-%d" % (bad, NSHARDS - 1)), rep
        rep = c.call("ROWAN", "SHARD", bad)
        assert isinstance(rep, RespError) and "0-%d" % (NSHARDS - 1) in str(rep), rep
    assert c.call("ROWAN", "DIGEST", 1, 2) == RespError(
        "ERR wrong number of arguments for 'rowan|digest' command")
    assert c.call("ROWAN", "SHARD") == RespError(
        "ERR wrong number of arguments for 'rowan|shard' command")
    help_ = c.call("ROWAN", "HELP")
    assert any(line.startswith("DIGEST") for line in help_), help_
    assert any(line.startswith("SHARD") for line in help_), help_
    assert c.call("ROWAN", "VERSION") == b"0.1.0"


def test_digest_moves_with_each_change(server_factory):
    srv = server_factory()
    c = srv.resp()
    r = srv.client()
    before = digests(c)
    r.set("k", "v")
    after = digests(c)
    changed = [s for s in after if after[s] != before[s]]
    assert len(changed) == 1, changed
    sid = changed[0]
    assert after[sid][1] == 1
    assert c.call("ROWAN", "DIGEST", sid) == after[sid][0]
    seen = {after[sid][0]}

    def step(*cmd):
        r.execute_command(*cmd)
        d = c.call("ROWAN", "DIGEST", sid)
        assert d not in seen, "digest did not change after %r" % (cmd,)
        seen.add(d)
        return d

    # every change to the shard's only key(s) gives a digest never seen yet
    d_set = step("SET", "k", "w")
    step("PEXPIREAT", "k", FAR_MS)
    step("PEXPIREAT", "k", FAR_MS + 1)
    r.persist("k")
    assert c.call("ROWAN", "DIGEST", sid) == d_set   # the same contents again
    step("MOVE", "k", 2)
    srv.client(db=2).move("k", 0)
    assert c.call("ROWAN", "DIGEST", sid) == d_set
    d_empty = step("DEL", "k")
    assert d_empty == before[sid][0]       # an empty shard
    step("HSET", "k", "f", "1")
    step("HSET", "k", "f", "2")
    step("HSET", "k", "g", "2")
    r.delete("k")
    step("RPUSH", "k", "a", "b")
    step("RPUSH", "k", "c")
    # same elements, other order
    r.delete("k")
    r.rpush("k", "a", "c", "b")
    d = c.call("ROWAN", "DIGEST", sid)
    assert d not in seen
    seen.add(d)
    r.delete("k")
    step("ZADD", "k", 1, "a")
    step("ZADD", "k", 2, "a")
    step("ZADD", "k", 2, "b")
    r.delete("k")
    step("SADD", "k", "a")
    step("SADD", "k", "b")
    step("SREM", "k", "a")
    # back to a state seen before: the digest comes back too
    r.delete("k")
    r.set("k", "w")
    assert c.call("ROWAN", "DIGEST", sid) in seen


def test_digest_survives_kill9_and_restart(server_factory):
    srv = server_factory()
    r = srv.client()
    load_all_types(srv, 0)
    # a transaction (one group entry in the log) and a swap of dbs 3 and 4
    p = srv.client(db=3).pipeline(transaction=True)
    p.set("tx:a", "1")
    p.hset("tx:h", "f", "v")
    p.execute()
    r.swapdb(3, 4)
    before = digests(srv.resp())
    assert sum(n for _, n in before.values()) > 0
    srv.kill9()
    srv.start()
    assert digests(srv.resp()) == before
    srv.restart()
    assert digests(srv.resp()) == before


def test_same_contents_same_digest_on_two_servers(server_factory):
    a = server_factory()
    b = server_factory()
    load_all_types(a, 0)
    load_all_types(b, 1)
    da, db_ = digests(a.resp()), digests(b.resp())
    assert da == db_
    assert sum(n for _, n in da.values()) == a.client().dbsize() + 2 + 2  # + dbs 1, 7
    # one difference anywhere tells them apart, in exactly one shard
    b.client().zadd("z:1", {"c": 3.25})
    db2 = digests(b.resp())
    assert sum(1 for s in da if da[s] != db2[s]) == 1
    b.client().zadd("z:1", {"c": 3.5})
    assert digests(b.resp()) == da


def test_shard_fields(server_factory):
    srv = server_factory()
    c = srv.resp()
    r = srv.client()
    per = 16384 // NSHARDS
    for sid in (0, 1, NSHARDS - 1):
        info = shard_info(c, sid)
        assert set(info) == {"first_slot", "last_slot", "primary", "backups", "role", "keys",
                             "next_version", "durable_version"}
        assert info["first_slot"] == sid * per
        assert info["last_slot"] == sid * per + per - 1
        assert info["primary"] is None          # standalone: no node names
        assert info["backups"] == []
        assert info["role"] == b"primary"
        assert info["keys"] == 0
    for i in range(100):
        r.set("key:%d" % i, i)
    srv.client(db=5).set("key:0", "in db 5")
    dig = digests(c)
    total = 0
    for sid in range(NSHARDS):
        info = shard_info(c, sid)
        assert info["keys"] == dig[sid][1]
        total += info["keys"]
        # every write was acknowledged, so every version handed out is durable
        assert info["durable_version"] == info["next_version"] - 1
        assert info["next_version"] >= 1 + info["keys"]
    assert total == 101
