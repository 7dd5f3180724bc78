"""Differential tests for differences from Redis 7.0 found in existing
commands (issue 12): the same commands against rowan-server and Debian's
redis-server, replies compared exactly."""
import time

import pytest

from conftest import RespClient, wait_for
from differential import both


@pytest.fixture
def cl(pair_conns):
    return pair_conns


# ---- transactions ----

def test_no_multi_commands_refused_in_multi(cl):
    c, ref = cl
    both(c, ref, "MULTI")
    for cmd in (("SAVE",), ("SHUTDOWN",), ("SHUTDOWN", "NOSAVE")):
        both(c, ref, *cmd)
    both(c, ref, "SET", "a", "b")
    both(c, ref, "EXEC")   # EXECABORT, and the server is still up
    both(c, ref, "PING")
    both(c, ref, "EXISTS", "a")


def test_refused_command_leaves_client_clean(cl):
    c, ref = cl
    both(c, ref, "MULTI")
    both(c, ref, "NOSUCHCMD")
    both(c, ref, "GET")                 # wrong arity
    both(c, ref, "EXEC")
    # the transaction is over: a new one works normally
    both(c, ref, "MULTI")
    both(c, ref, "SET", "k", "v")
    both(c, ref, "EXEC")
    both(c, ref, "MULTI")
    both(c, ref, "SAVE")
    both(c, ref, "DISCARD")
    both(c, ref, "MULTI")
    both(c, ref, "GET", "k")
    both(c, ref, "EXEC")


# ---- number formats: Redis 7.0 prints scores with "%.17g" ----

@pytest.mark.parametrize("proto", [2, 3])
def test_score_format(cl, proto):
    c, ref = cl
    for x in cl:
        x.call("HELLO", str(proto))
    both(c, ref, "ZADD", "z", "0.72003990724684663", "a", "1.5", "b", "3", "c", "1e300", "d")
    both(c, ref, "ZADD", "z", "inf", "e", "-inf", "f", "0.1", "g")
    both(c, ref, "ZSCORE", "z", "a")
    both(c, ref, "ZSCORE", "z", "g")
    both(c, ref, "ZSCORE", "z", "e")
    both(c, ref, "ZMSCORE", "z", "a", "b", "nope", "d", "f")
    both(c, ref, "ZINCRBY", "z", "0.1", "b")
    both(c, ref, "ZADD", "z", "INCR", "0.1", "c")
    both(c, ref, "ZRANGE", "z", "0", "-1", "WITHSCORES")
    both(c, ref, "ZREVRANGEBYSCORE", "z", "+inf", "-inf", "WITHSCORES")
    both(c, ref, "ZUNIONSTORE", "u", "1", "z", "WEIGHTS", "0.3")
    both(c, ref, "ZRANGE", "u", "0", "-1", "WITHSCORES")
    both(c, ref, "ZPOPMIN", "z")
    both(c, ref, "ZPOPMAX", "z", "2")
    both(c, ref, "ZSCAN", "z", "0")


# ---- blocking ----

def blocked_clients(cl):
    info = cl.call("INFO", "clients").decode()
    return int(info.split("blocked_clients:")[1].split()[0])


def block(srv_cl, db, *cmd):
    """A new connection to srv_cl's server, selected on db, blocked in cmd
    (waited for until the server counts it blocked)."""
    b = RespClient(srv_cl.sock.getpeername()[1])
    assert b.call("SELECT", str(db)) == "OK"
    b.send_command(*cmd)
    assert wait_for(lambda: blocked_clients(srv_cl) == 1)
    return b


def run_both(cl, fn):
    """fn(client) on each server; the results must be equal."""
    got, want = [fn(x) for x in cl]
    assert got == want, "rowan %r, redis %r" % (got, want)
    return got


@pytest.mark.parametrize("bcmd,push", [
    (("BLPOP", "l", "0"), ("RPUSH", "l", "y")),
    (("BZPOPMIN", "l", "0"), ("ZADD", "l", "1", "y")),
])
def test_blocked_stays_blocked_when_key_changes_type(cl, bcmd, push):
    def scenario(x):
        b = block(x, 0, *bcmd)
        replies = [x.call("MULTI"), x.call(*push),
                   x.call("DEL", "l"), x.call("SET", "l", "foo"), x.call("EXEC")]
        time.sleep(0.3)   # a wrong wake-up would have answered by now
        still = blocked_clients(x)
        x.call("DEL", "l")
        x.call(*push)
        replies += [still, b.read_reply()]
        b.close()
        return replies
    run_both(cl, scenario)


def test_swapdb_wakes_blocked_clients(cl):
    def scenario(x):
        b = block(x, 0, "BLPOP", "l", "3")
        x.call("SELECT", "1")
        replies = [x.call("RPUSH", "l", "a", "b"), x.call("SWAPDB", "0", "1"),
                   b.read_reply(), x.call("LRANGE", "l", "0", "-1")]
        x.call("SELECT", "0")
        replies.append(x.call("LRANGE", "l", "0", "-1"))
        b.close()
        return replies
    run_both(cl, scenario)


# ---- COMMAND ----

def test_command_info_movablekeys(cl):
    c, ref = cl
    mine = {e[0]: e for e in c.call("COMMAND")}
    for e in ref.call("COMMAND"):
        m = mine.get(e[0])
        if m is None:
            continue   # a command Rowan lacks: not this test's business
        want_movable = "movablekeys" in e[2]
        assert ("movablekeys" in m[2]) == want_movable, e[0]
        if want_movable:
            assert m[3:6] == e[3:6], (e[0], m[3:6], e[3:6])   # legacy key range


@pytest.mark.parametrize("cmd", [
    ("ZUNIONSTORE", "d", "2", "a", "b", "WEIGHTS", "1", "2"),
    ("ZINTERSTORE", "d", "1", "a", "AGGREGATE", "MAX"),
    ("ZDIFFSTORE", "d", "2", "a", "b"),
    ("ZINTER", "2", "a", "b", "WITHSCORES"),
    ("ZINTERCARD", "2", "a", "b", "LIMIT", "1"),
    ("SINTERCARD", "1", "a"),
    ("LMPOP", "2", "a", "b", "LEFT", "COUNT", "2"),
    ("BLMPOP", "0", "2", "a", "b", "LEFT"),
    ("ZMPOP", "1", "a", "MIN"),
    ("BZMPOP", "0", "2", "a", "b", "MIN"),
    ("ZUNIONSTORE", "d", "x", "a"),
    ("ZUNIONSTORE", "d", "5", "a"),
    ("XREAD", "COUNT", "2", "STREAMS", "s1", "s2", "0", "0"),
    ("MSET", "a", "1", "b", "2"),
])
def test_command_getkeys_only_keys(cl, cmd):
    c, ref = cl
    both(c, ref, "COMMAND", "GETKEYS", *cmd)


@pytest.mark.parametrize("cmd", [
    ("SET", "k", "v"), ("SET", "k", "v", "GET"), ("GET", "k"), ("GETDEL", "k"),
    ("DEL", "a", "b"), ("UNLINK", "a"), ("INCR", "k"), ("APPEND", "k", "v"),
    ("LPUSH", "l", "x"), ("LPOP", "l"), ("LMOVE", "a", "b", "LEFT", "RIGHT"),
    ("RPOPLPUSH", "a", "b"), ("SMOVE", "a", "b", "m"), ("RENAME", "a", "b"),
    ("RENAMENX", "a", "b"), ("COPY", "a", "b"), ("ZUNIONSTORE", "d", "2", "a", "b"),
    ("SINTERSTORE", "d", "a", "b"), ("SUNIONSTORE", "d", "a"), ("BITOP", "AND", "d", "a", "b"),
    ("PFMERGE", "d", "a", "b"), ("ZRANGESTORE", "d", "s", "0", "-1"),
    ("BITFIELD", "k", "GET", "u8", "0"), ("BITFIELD", "k", "SET", "u8", "0", "1"),
    ("HSET", "h", "f", "v"), ("HDEL", "h", "f"), ("EXPIRE", "k", "10"), ("PERSIST", "k"),
    ("MSET", "a", "1", "b", "2"), ("SETNX", "k", "v"), ("GETEX", "k", "PERSIST"),
    ("XADD", "s", "*", "f", "v"), ("ZADD", "z", "1", "m"), ("SPOP", "s"), ("TOUCH", "a"),
    ("TYPE", "k"), ("EXISTS", "k"), ("OBJECT", "ENCODING", "k"), ("DUMP", "k"),
    ("MEMORY", "USAGE", "k"), ("XGROUP", "CREATE", "s", "g", "$"), ("XGROUP", "DESTROY", "s", "g"),
    ("XGROUP", "SETID", "s", "g", "0"), ("XINFO", "STREAM", "s"),
])
def test_command_getkeysandflags(cl, cmd):
    c, ref = cl
    both(c, ref, "COMMAND", "GETKEYSANDFLAGS", *cmd)


# ---- help and truth ----

def test_client_help_as_redis(cl):
    """Every line of Redis 7.0's CLIENT HELP, in its order; Rowan may add
    subcommands it really has (7.2's), never a 'not supported' note."""
    c, ref = cl
    mine, want = c.call("CLIENT", "HELP"), ref.call("CLIENT", "HELP")
    it = iter(mine)
    assert all(line in it for line in want), (mine, want)
    assert not any("support" in str(line) or "Rowan" in str(line) for line in mine)
    # the subcommands it lists answer as Redis's do
    for cmd in (("CLIENT", "REPLY", "ON"), ("CLIENT", "TRACKING", "OFF"), ("CLIENT", "GETREDIR"),
                ("CLIENT", "UNPAUSE"), ("CLIENT", "UNBLOCK", "999999"), ("CLIENT", "NO-EVICT", "ON"),
                ("CLIENT", "CACHING", "YES")):
        both(c, ref, *cmd)


# ---- replication stream: refused, documented (docs/DECISIONS.md) ----

def test_sync_psync_refused(cl):
    c, ref = cl
    for cmd in (("SYNC",), ("PSYNC", "?", "-1")):
        assert "not supported" in c.err(*cmd)
        assert c.call("PING") == "PONG"      # the connection goes on
    for cmd in (("SYNC", "x"), ("PSYNC", "?")):  # arity as Redis's
        both(c, ref, *cmd)
    both(c, ref, "MULTI")
    both(c, ref, "SYNC")
    both(c, ref, "PSYNC", "?", "-1")
    both(c, ref, "EXEC")
