"""Differential tests for differences from Redis 7.0 found in existing
commands (issue 12): the same commands against rowan-server and Debian's
redis-server, replies compared exactly."""
import pytest

from conftest import RespClient
from differential import both


@pytest.fixture
def cl(pair):
    """A fresh connection to each server of the pair, keyspace flushed."""
    made = [RespClient(s.port) for s in pair]
    for m in made:
        assert m.call("FLUSHALL") == "OK"
    yield made
    for m in made:
        m.close()


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
