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
