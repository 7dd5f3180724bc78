"""Time during a script or a transaction, compared with a real redis-server
(7.0): a key's expiry is judged at the time the script or EXEC began, so a
key that expires while it runs is still there for all of it (EXISTS, GET,
KEYS, SCAN, DBSIZE, RANDOMKEY); TIME, PTTL and new expiries use the real
time (PTTL of such a key is 0). After the script the key is gone, and its
deletion is logged as any lazy expiry (db.c, expiry_now)."""
import time

import pytest

from conftest import RespClient
from differential import call, fresh_ref


@pytest.fixture
def ref(ref_srv):
    return fresh_ref(ref_srv)


def both(c, ref, *args):
    got, want = call(c, *args), call(ref, *args)
    assert got == want, "%r:\n rowan %r\n redis %r" % (args, got, want)
    return got


# Lua: wait until TIME (which is not frozen) has moved on by `ms`.
WAIT = ("local function wait(ms) local t = redis.call('time');"
        " local t0 = t[1] * 1000000 + t[2]; repeat t = redis.call('time')"
        " until t[1] * 1000000 + t[2] - t0 >= ms * 1000 end; ")


def test_key_set_in_script_does_not_expire_during_it(c, ref):
    body = WAIT + ("redis.call('set','k','v','px',5); wait(40);"
                   " return {redis.call('exists','k'), redis.call('get','k'), redis.call('pttl','k'),"
                   " redis.call('dbsize'), redis.call('keys','*')}")
    assert both(c, ref, "EVAL", body, "0") == [1, b"v", 0, 1, [b"k"]]
    both(c, ref, "EXISTS", "k")
    both(c, ref, "DBSIZE")


def test_key_expiring_during_script_stays_for_all_of_it(c, ref):
    for cl in (c, ref):
        assert cl.call("DEBUG", "SET-ACTIVE-EXPIRE", "0") == "OK"
    try:
        body = WAIT + ("local a = redis.call('exists','k'); wait(400);"
                       " return {a, redis.call('exists','k'), redis.call('get','k'),"
                       " redis.call('pttl','k'), redis.call('type','k'), redis.call('keys','*'),"
                       " redis.call('scan','0'), redis.call('randomkey'),"
                       " redis.call('llen','l'), redis.call('exists','l')}")
        reps = []
        for cl in (c, ref):
            # (each write waits for its fsync: time for three)
            assert cl.call("SET", "k", "v", "PX", "300") == "OK"
            assert cl.call("RPUSH", "l", "a") == 1
            assert cl.call("PEXPIRE", "l", "250") == 1
            reps.append(call(cl, "EVAL", body, "0"))
        got, want = reps
        # KEYS and SCAN orders may differ; RANDOMKEY is either key
        for rep in (got, want):
            rep[5] = sorted(rep[5])
            rep[6][1] = sorted(rep[6][1])
            assert rep[7] in (b"k", b"l")
            rep[7] = b"k"
        assert got == want
        assert got[:5] == [1, 1, b"v", 0, "string"]
        assert got[8:] == [1, 1]
        both(c, ref, "EXISTS", "k", "l")
        both(c, ref, "DBSIZE")
    finally:
        for cl in (c, ref):
            cl.call("DEBUG", "SET-ACTIVE-EXPIRE", "1")


def test_collection_expiring_during_function_stays(c, ref):
    lib = ("#!lua name=frz\n" + WAIT +
           "redis.register_function('f', function(keys, args)\n"
           "  redis.call('rpush', keys[1], 'a', 'b'); redis.call('pexpire', keys[1], 5)\n"
           "  wait(40)\n"
           "  return {redis.call('llen', keys[1]), redis.call('lrange', keys[1], 0, -1),"
           " redis.call('pttl', keys[1])}\n"
           "end)")
    for cl in (c, ref):
        call(cl, "FUNCTION", "DELETE", "frz")
    both(c, ref, "FUNCTION", "LOAD", lib)
    assert both(c, ref, "FCALL", "f", "1", "lst") == [2, [b"a", b"b"], 0]
    both(c, ref, "EXISTS", "lst")
    both(c, ref, "FUNCTION", "DELETE", "frz")


def test_time_is_not_frozen_in_script(c, ref):
    body = WAIT + "local a = redis.call('time'); wait(20); return {a, redis.call('time')}"
    for cl in (c, ref):
        a, b = call(cl, "EVAL", body, "0")
        assert int(b[0]) * 10**6 + int(b[1]) - (int(a[0]) * 10**6 + int(a[1])) >= 20000


def test_transaction_judges_expiry_at_its_start(c, ref):
    queued = [("EXISTS", "k"), ("DEBUG", "SLEEP", "0.3"), ("EXISTS", "k"), ("PTTL", "k"),
              ("GET", "k"), ("DBSIZE",), ("KEYS", "*")]
    reps = []
    for cl in (c, ref):
        assert cl.call("SET", "k", "v", "PX", "200") == "OK"
        assert cl.call("MULTI") == "OK"
        for cmd in queued:
            assert cl.call(*cmd) == "QUEUED"
        reps.append(cl.call("EXEC"))
    assert reps[0] == reps[1] == [1, "OK", 1, 0, b"v", 1, [b"k"]]
    both(c, ref, "EXISTS", "k")


@pytest.mark.rowan_only
def test_key_expired_after_script_is_deleted_and_logged(server_factory):
    """The key the script still saw is deleted by the next lookup, and that
    deletion is logged: gone after kill -9 and recovery, with the other
    key kept."""
    srv = server_factory()
    cl = RespClient(srv.port)
    assert cl.call("DEBUG", "SET-ACTIVE-EXPIRE", "0") == "OK"
    body = WAIT + "redis.call('set','k','v','px',5); redis.call('set','keep',1); wait(30); return redis.call('get','k')"
    assert cl.call("EVAL", body, "0") == b"v"
    assert cl.call("GET", "k") is None
    info = cl.call("INFO", "stats").decode()
    assert "expired_keys:1\r\n" in info
    cl.close()
    srv.kill9()
    srv.start()
    cl = RespClient(srv.port)
    assert cl.call("KEYS", "*") == [b"keep"]
    cl.close()
