"""Keyspace-wide reads (DBSIZE, KEYS, SCAN, RANDOMKEY) after writes in the
same transaction or script, compared with a real redis-server.

EXEC and EVAL run their commands in one open db batch whose writes reach
the index only when the batch is logged; these reads read through it
(src/store/db.c, "keyspace-wide reads through the open batch"), so they see
the keys the transaction or script created, deleted, flushed or found
expired earlier, as Redis's do. Keys whose order differs between servers
(KEYS, SCAN) are sorted before comparing."""
import time

import pytest

from conftest import RespClient, RespError
from differential import call, fresh_ref


@pytest.fixture
def ref(ref_srv):
    return fresh_ref(ref_srv)


def norm(rep):
    """Replies with key lists in a canonical order: every list of bulk
    strings is sorted; SCAN's [cursor, keys] keeps its cursor first."""
    if isinstance(rep, list):
        items = [norm(x) for x in rep]
        if len(items) == 2 and isinstance(items[0], bytes) and isinstance(items[1], list):
            return [items[0], items[1]]          # SCAN: [cursor, sorted keys]
        if items and all(isinstance(x, bytes) for x in items):
            return sorted(items)
        return items
    return rep


def both(c, ref, *args):
    got, want = norm(call(c, *args)), norm(call(ref, *args))
    assert got == want, "%r:\n rowan %r\n redis %r" % (args, got, want)
    return got


def prepare(c, ref, *cmds):
    for cmd in cmds:
        both(c, ref, *cmd)


# A whole SCAN walk inside a script: every key once, sorted in Lua.
SCAN_ALL = """
local cur, seen = '0', {}
repeat
  local r = redis.call('scan', cur, 'count', 3)
  cur = r[1]
  for _, k in ipairs(r[2]) do seen[#seen + 1] = k end
until cur == '0'
table.sort(seen)
return seen
"""

# (setup commands, script body); the script's reply is compared.
SCRIPT_CASES = [
    ([], "redis.call('set','a',1); return redis.call('dbsize')"),
    ([], "redis.call('set','a',1); redis.call('set','a',2); return redis.call('dbsize')"),
    ([], "redis.call('set','a',1); redis.call('set','b',1); redis.call('del','a');"
         " return {redis.call('dbsize'), redis.call('keys','*'), redis.call('exists','a'),"
         " redis.call('exists','b'), redis.call('randomkey')}"),
    ([("MSET", "x", "1", "y", "2", "z", "3")],
     "redis.call('del','x'); redis.call('set','n',1); redis.call('set','y',5);"
     " local k = redis.call('keys','*'); table.sort(k); return {redis.call('dbsize'), k}"),
    ([("MSET", "x", "1", "y", "2")],
     "redis.call('del','x','y'); return {redis.call('dbsize'), redis.call('keys','*'),"
     " redis.call('randomkey')}"),
    ([("MSET", "x", "1", "y", "2")],
     "redis.call('del','x','y'); redis.call('set','only',1);"
     " return {redis.call('dbsize'), redis.call('randomkey')}"),
    ([("MSET", "x", "1")],
     "redis.call('del','x'); redis.call('set','x',2); return {redis.call('dbsize'),"
     " redis.call('keys','*')}"),
    # collections: created, grown, emptied (deleted)
    ([("RPUSH", "old", "1")],
     "redis.call('rpush','l','a','b'); redis.call('sadd','s','m'); redis.call('hset','h','f','v');"
     " redis.call('zadd','z',1,'m'); local n1 = redis.call('dbsize');"
     " redis.call('lpop','l'); redis.call('lpop','l'); redis.call('lpop','old');"
     " local k = redis.call('keys','*'); table.sort(k); return {n1, redis.call('dbsize'), k}"),
    # SCAN: a full walk, and its TYPE and MATCH filters
    ([("MSET", "a1", "1", "a2", "2", "b1", "3")],
     "redis.call('del','a1'); redis.call('set','a3',1); redis.call('rpush','al',1);" + SCAN_ALL),
    ([("SET", "s0", "1")],
     "redis.call('rpush','l1',1); redis.call('set','s1',1);"
     " local r = redis.call('scan','0','count',1000,'type','list'); return r"),
    ([("SET", "s0", "1"), ("SET", "t0", "1")],
     "redis.call('set','s1',1); redis.call('del','s0');"
     " local r = redis.call('scan','0','count',1000,'match','s*'); return r"),
    # FLUSHALL / FLUSHDB inside the script, before and after writes
    ([("MSET", "x", "1", "y", "2")],
     "redis.call('set','a',1); redis.call('flushall'); redis.call('set','b',1);"
     " return {redis.call('dbsize'), redis.call('keys','*'), redis.call('exists','a'),"
     " redis.call('randomkey')}"),
    ([], "redis.call('set','a',1); redis.call('flushall');"
         " return {redis.call('dbsize'), redis.call('keys','*'), redis.call('get','a')}"),
    ([("SET", "d0", "1")],
     "redis.call('select',1); redis.call('set','d1',1); redis.call('set','d1b',1);"
     " local n1 = redis.call('dbsize'); redis.call('flushdb'); redis.call('set','d1c',1);"
     " local k1 = redis.call('keys','*'); redis.call('select',0);"
     " return {n1, redis.call('dbsize'), k1, redis.call('keys','*')}"),
    # a batch large enough for db.c's lookup table (64+ sub-entries), then
    # flushed and written again
    ([("MSET", "k1", "old", "k500", "old")],
     "for i = 1, 300 do redis.call('set', 'k' .. i, i) end;"
     " for i = 1, 300, 3 do redis.call('del', 'k' .. i) end;"
     " local n1, k1 = redis.call('dbsize'), #redis.call('keys', '*');"
     " redis.call('flushall'); for i = 1, 70 do redis.call('set', 'f' .. i, i) end;"
     " redis.call('del', 'f1'); return {n1, k1, redis.call('dbsize'), #redis.call('keys', '*')}"),
    # keys with a TTL set by the script are counted and listed
    ([("SET", "x", "1")],
     "redis.call('set','y',1); redis.call('swapdb',0,1); local a = redis.call('keys','*');"
     " redis.call('set','z',1); redis.call('swapdb',0,1);"
     " local k = redis.call('keys','*'); table.sort(k); return {a, k, redis.call('dbsize')}"),
    ([], "redis.call('set','t',1,'ex',100); redis.call('set','p',1);"
         " redis.call('expire','p',100); local k = redis.call('keys','*'); table.sort(k);"
         " return {redis.call('dbsize'), k}"),
]


@pytest.mark.parametrize("case", range(len(SCRIPT_CASES)))
def test_script_sees_its_own_writes(c, ref, case):
    cmds, body = SCRIPT_CASES[case]
    prepare(c, ref, *cmds)
    both(c, ref, "EVAL", body, "0")
    # and after the script, outside any batch
    both(c, ref, "DBSIZE")
    both(c, ref, "KEYS", "*")
    both(c, ref, "SELECT", "1")
    both(c, ref, "KEYS", "*")
    both(c, ref, "FLUSHDB")
    both(c, ref, "SELECT", "0")


def test_function_sees_its_own_writes(c, ref):
    lib = ("#!lua name=kib\n"
           "redis.register_function('mk', function(keys, args)\n"
           "  redis.call('set', keys[1], 1)\n"
           "  redis.call('del', keys[2])\n"
           "  return {redis.call('dbsize'), redis.call('exists', keys[1])}\n"
           "end)")
    call(c, "FUNCTION", "DELETE", "kib")
    call(ref, "FUNCTION", "DELETE", "kib")
    both(c, ref, "FUNCTION", "LOAD", lib)
    both(c, ref, "SET", "gone", "1")
    both(c, ref, "FCALL", "mk", "2", "new", "gone")
    both(c, ref, "FUNCTION", "DELETE", "kib")


def test_script_expired_key_found_by_lookup_is_not_counted(c, ref):
    """A key already expired (active expiry off) counts in DBSIZE until a
    lookup deletes it: in the script, that deletion is counted at once."""
    for cl in (c, ref):
        assert cl.call("DEBUG", "SET-ACTIVE-EXPIRE", "0") == "OK"
    try:
        prepare(c, ref, ("SET", "live", "1"), ("SET", "e", "1", "PX", "1"))
        time.sleep(0.05)
        both(c, ref, "EVAL",
             "local n0 = redis.call('dbsize'); local k = redis.call('keys','*');"
             " local ex = redis.call('exists','e');"
             " return {n0, k, ex, redis.call('dbsize'), redis.call('randomkey')}", "0")
        both(c, ref, "DBSIZE")
    finally:
        for cl in (c, ref):
            cl.call("DEBUG", "SET-ACTIVE-EXPIRE", "1")


# (setup commands, queued commands); EXEC's reply is compared.
MULTI_CASES = [
    ([], [("SET", "a", "1"), ("DBSIZE",), ("KEYS", "*"), ("RANDOMKEY",)]),
    ([("MSET", "x", "1", "y", "2")],
     [("DEL", "x"), ("SET", "n", "1"), ("DBSIZE",), ("KEYS", "*"),
      ("SCAN", "0", "COUNT", "1000"), ("EXISTS", "x", "n")]),
    ([("MSET", "x", "1")],
     [("DEL", "x"), ("DBSIZE",), ("RANDOMKEY",), ("SET", "x", "2"), ("DBSIZE",)]),
    ([("RPUSH", "l", "a")],
     [("RPUSH", "l2", "a"), ("DBSIZE",), ("LPOP", "l"), ("LPOP", "l2"), ("DBSIZE",),
      ("KEYS", "*")]),
    ([("MSET", "x", "1", "y", "2")],
     [("SET", "a", "1"), ("FLUSHALL",), ("GET", "a"), ("DBSIZE",), ("SET", "b", "1"),
      ("DBSIZE",), ("KEYS", "*"), ("RANDOMKEY",)]),
    ([],
     [("SET", "a", "1"), ("FLUSHDB",), ("DBSIZE",), ("GET", "a")]),
    ([("SET", "d0", "1")],
     [("SELECT", "2"), ("SET", "d2", "1"), ("DBSIZE",), ("KEYS", "*"), ("SELECT", "0"),
      ("DBSIZE",), ("KEYS", "*")]),
    # SWAPDB: later commands see the swapped databases, and swaps compose
    ([("SET", "x", "1")],
     [("SWAPDB", "0", "1"), ("SWAPDB", "0", "1"), ("GET", "x"), ("DBSIZE",)]),
    ([("SET", "x", "1")],
     [("SET", "y", "2"), ("SWAPDB", "0", "1"), ("GET", "x"), ("GET", "y"), ("DBSIZE",),
      ("KEYS", "*"), ("RANDOMKEY",), ("SELECT", "1"), ("GET", "x"), ("GET", "y"),
      ("KEYS", "*"), ("DBSIZE",), ("SELECT", "0")]),
    ([("SET", "x", "1")],
     [("SWAPDB", "0", "1"), ("SET", "z", "1"), ("RPUSH", "l", "a"), ("SWAPDB", "0", "1"),
      ("GET", "z"), ("EXISTS", "x", "l"), ("SELECT", "1"), ("GET", "z"), ("LRANGE", "l", "0", "-1"),
      ("FLUSHDB",), ("SELECT", "0"), ("KEYS", "*")]),
]


@pytest.mark.parametrize("case", range(len(MULTI_CASES)))
def test_transaction_sees_its_own_writes(c, ref, case):
    cmds, queued = MULTI_CASES[case]
    prepare(c, ref, *cmds)
    both(c, ref, "MULTI")
    for cmd in queued:
        both(c, ref, *cmd)
    both(c, ref, "EXEC")
    both(c, ref, "SELECT", "0")
    both(c, ref, "DBSIZE")
    both(c, ref, "KEYS", "*")
    both(c, ref, "GET", "a")
    both(c, ref, "FLUSHALL")


def test_randomkey_in_script_picks_old_and_new_keys(c, ref):
    """RANDOMKEY draws from the keys the script created as well as the old
    ones, never from the ones it deleted."""
    prepare(c, ref, ("MSET", "old", "1", "dead", "1"))
    body = ("redis.call('set','new',1); redis.call('del','dead'); local seen = {};"
            " for i = 1, 200 do seen[redis.call('randomkey')] = 1 end;"
            " local r = {}; for k in pairs(seen) do r[#r + 1] = k end; table.sort(r); return r")
    got = both(c, ref, "EVAL", body, "0")
    assert got == [b"new", b"old"]


@pytest.mark.rowan_only
def test_flushall_in_exec_removes_the_transactions_own_keys_across_kill9(server_factory):
    """MULTI / SET a / FLUSHALL / SET b / EXEC on an empty server: the flush
    also removes what the transaction wrote before it (its FLUSHDB
    sub-entries are logged even for shards that had no key), in memory and
    after kill -9 and recovery."""
    srv = server_factory()
    cl = RespClient(srv.port)
    for cmd in (("MULTI",), ("SET", "a", "1"), ("RPUSH", "l", "x"), ("FLUSHALL",),
                ("SET", "b", "2")):
        cl.call(*cmd)
    assert cl.call("EXEC") == ["OK", 1, "OK", "OK"]
    assert cl.call("GET", "a") is None
    assert cl.call("DBSIZE") == 1
    cl.close()
    srv.kill9()
    srv.start()
    cl = RespClient(srv.port)
    assert cl.call("KEYS", "*") == [b"b"]
    assert cl.call("EXISTS", "a", "l") == 0
    cl.close()


@pytest.mark.rowan_only
def test_swapdb_in_exec_composes_across_kill9(server_factory):
    """MULTI / SET a / SWAPDB 0 1 / SET b / SWAPDB 0 1 / EXEC: the second
    swap undoes the first (each SWAPDB's map is built on the batch's
    pending one), so a ends in db 0 and b in db 1, in memory and after
    kill -9 and recovery."""
    srv = server_factory()
    cl = RespClient(srv.port)
    for cmd in (("MULTI",), ("SET", "a", "1"), ("SWAPDB", "0", "1"), ("SET", "b", "2"),
                ("SWAPDB", "0", "1")):
        cl.call(*cmd)
    assert cl.call("EXEC") == ["OK", "OK", "OK", "OK"]

    def check(conn):
        assert conn.call("SELECT", "0") == "OK"
        assert conn.call("KEYS", "*") == [b"a"]
        assert conn.call("SELECT", "1") == "OK"
        assert conn.call("KEYS", "*") == [b"b"]

    check(cl)
    cl.close()
    srv.kill9()
    srv.start()
    cl = RespClient(srv.port)
    check(cl)
    cl.close()


@pytest.mark.rowan_only
def test_lookups_after_a_flush_in_a_large_script_stay_fast(c):
    """A script that flushes and then writes and reads 30000 keys: lookups
    in the batch after its FLUSHALL go through its hash table (db.c
    batch_find) instead of a walk of the whole batch per lookup, which took
    minutes."""
    c.call("SET", "before", "1")
    t0 = time.monotonic()
    rep = c.call("EVAL", "redis.call('flushall'); for i = 1, 30000 do redis.call('incr', 'j' .. i) end;"
                 " return {redis.call('dbsize'), redis.call('get', 'j7'), redis.call('exists', 'before')}",
                 "0")
    took = time.monotonic() - t0
    assert rep == [30000, b"1", 0]
    assert took < 30, "took %.1fs" % took


def keyspace_lines(info):
    """INFO keyspace's db lines without avg_ttl (Redis estimates it, Rowan
    says 0)."""
    if isinstance(info, bytes):
        info = info.decode()
    return [line.split(",avg_ttl")[0] for line in info.split("\r\n") if line.startswith("db")]


INFO_KS = "redis.call('info','keyspace')"

# (setup commands, script body returning a list of INFO keyspace texts)
INFO_SCRIPT_CASES = [
    ([], "redis.call('set','a',1); return {%s}" % INFO_KS),
    ([("MSET", "x", "1", "y", "2"), ("SET", "t", "1", "EX", "100")],
     "local i0 = %s; redis.call('del','x'); redis.call('set','n',1,'ex',100);"
     " redis.call('persist','t'); redis.call('select',3); redis.call('rpush','l',1);"
     " redis.call('expire','l',100); return {i0, %s}" % (INFO_KS, INFO_KS)),
    ([("SET", "x", "1", "EX", "100"), ("HSET", "h", "f", "v")],
     "redis.call('expire','h',50); redis.call('hset','h','g','w'); local i1 = %s;"
     " redis.call('set','x',2); redis.call('flushall'); redis.call('set','z',1,'px',100000);"
     " return {i1, %s}" % (INFO_KS, INFO_KS)),
    ([("SET", "x", "1")],
     "redis.call('set','y',1,'ex',100); redis.call('swapdb',0,1); return {%s}" % INFO_KS),
]


@pytest.mark.parametrize("case", range(len(INFO_SCRIPT_CASES)))
def test_info_keyspace_in_script_counts_its_own_writes(c, ref, case):
    cmds, body = INFO_SCRIPT_CASES[case]
    prepare(c, ref, *cmds)
    got, want = call(c, "EVAL", body, "0"), call(ref, "EVAL", body, "0")
    assert [keyspace_lines(x) for x in got] == [keyspace_lines(x) for x in want]
    assert keyspace_lines(call(c, "INFO", "keyspace")) == keyspace_lines(call(ref, "INFO", "keyspace"))
    both(c, ref, "FLUSHALL")


def test_info_keyspace_in_function_counts_its_own_writes(c, ref):
    lib = ("#!lua name=kis\n"
           "redis.register_function('mk', function(keys, args)\n"
           "  redis.call('set', keys[1], 1, 'ex', 100)\n"
           "  redis.call('del', keys[2])\n"
           "  return redis.call('info', 'keyspace')\n"
           "end)")
    for cl in (c, ref):
        call(cl, "FUNCTION", "DELETE", "kis")
    both(c, ref, "FUNCTION", "LOAD", lib)
    prepare(c, ref, ("MSET", "gone", "1", "stay", "1"))
    got, want = call(c, "FCALL", "mk", "2", "new", "gone"), call(ref, "FCALL", "mk", "2", "new", "gone")
    assert keyspace_lines(got) == keyspace_lines(want) == ["db0:keys=2,expires=1"]
    both(c, ref, "FUNCTION", "DELETE", "kis")


def test_info_keyspace_in_transaction_counts_its_own_writes(c, ref):
    prepare(c, ref, ("MSET", "x", "1", "y", "2"))
    queued = [("INFO", "keyspace"), ("SET", "a", "1", "EX", "100"), ("DEL", "x"),
              ("INFO", "keyspace"), ("SELECT", "2"), ("RPUSH", "l", "1"), ("INFO",),
              ("FLUSHALL",), ("INFO", "keyspace"), ("SELECT", "0")]
    reps = {}
    for name, cl in (("rowan", c), ("redis", ref)):
        assert cl.call("MULTI") == "OK"
        for cmd in queued:
            assert cl.call(*cmd) == "QUEUED"
        reps[name] = [keyspace_lines(x) if isinstance(x, (bytes, str)) and "# " in str(x) else x
                      for x in cl.call("EXEC")]
    assert reps["rowan"] == reps["redis"]
    assert reps["rowan"][3] == ["db0:keys=2,expires=1"]


def test_full_info_in_transaction_and_script_answers(c):
    """INFO everything inside EXEC and a script, which hold every shard
    lock: the sections that read per-shard figures must not lock them
    again (they used to hang the worker)."""
    c.sock.settimeout(10)
    assert c.call("MULTI") == "OK"
    assert c.call("SET", "a", "1") == "QUEUED"
    assert c.call("INFO", "everything") == "QUEUED"
    rep = c.call("EXEC")
    assert rep[0] == "OK" and b"db0:keys=1," in rep[1]
    rep = c.call("EVAL", "redis.call('set','b',1); return redis.call('info','everything')", "0")
    assert b"db0:keys=2," in rep
    assert c.call("PING") == "PONG"
