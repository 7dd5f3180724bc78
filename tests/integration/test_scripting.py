"""Lua scripting: EVAL, EVALSHA, EVAL_RO, SCRIPT (redis-compat/t_script.c).

Reply conversion and error texts are compared with a real redis-server
(Debian's 7.0) running the same scripts in the same order; atomicity,
durability (kill -9 after acknowledged EVAL writes), BUSY / SCRIPT KILL and
redis-py's Lock and Script are checked against Rowan.
"""
import json
import os
import subprocess
import threading
import time

import pytest
import redis

from conftest import RespClient, RespError, wait_for
from differential import busy_conn, call as _reply, open_conns

pytestmark = pytest.mark.rowan_only


@pytest.fixture
def pair(fresh_pair):
    """(rowan RespClient, redis RespClient), both servers fresh."""
    return fresh_pair


# Each case: commands run in order on both servers; every reply compared.
CASES = [
    ("eval", "return redis.call('nosuch')", "0"),
    ("eval", "return redis.call('subscribe','x')", "0"),
    ("eval", "return redis.pcall('incr','x','y')", "0"),
    ("set", "s", "foo"),
    ("eval", "return redis.call('incr','s')", "0"),
    ("eval", "return redis.pcall('incr','s')", "0"),
    ("eval", "return redis.call('hset','s','f','v')", "0"),
    ("eval", "x = 1", "0"),
    ("eval", "return x", "0"),
    ("eval", "return {1, 2, 3.99, 'a', false, nil, 5}", "0"),
    ("eval", "return {1, {2, {3, {}}}, {a=1}, true, -3.99}", "0"),
    ("eval", "return error('boom')", "0"),
    ("eval", "error({err='XCODE custom'})", "0"),
    ("eval", "return {err='My Error'}", "0"),
    ("eval", "return {ok='fine'}", "0"),
    ("eval", "return redis.error_reply('xx')", "0"),
    ("eval", "return redis.error_reply('MYCODE xx')", "0"),
    ("eval", "return redis.status_reply('FINE')", "0"),
    ("eval", "return redis.error_reply(1)", "0"),
    ("evalsha", "ffffffffffffffffffffffffffffffffffffffff", "0"),
    ("evalsha", "abc", "0"),
    ("eval", "syntax error here", "0"),
    ("eval", "return redis.call()", "0"),
    ("eval", "return redis.call({})", "0"),
    ("eval", "return os.time()", "0"),
    ("eval", "return io", "0"),
    ("eval", "return loadfile('/etc/passwd')", "0"),
    ("eval", "return dofile('/etc/passwd')", "0"),
    ("eval", "return math.random()", "0"),
    ("eval", "return math.random(100)", "0"),
    ("eval", "return {math.random(1000000), math.random(5, 10)}", "0"),
    ("eval", "return math.random()*1000000000", "0"),
    ("eval", "return tostring(3.5)", "0"),
    ("eval", "return redis.call('set','a')", "0"),
    ("eval", "return 1", "-1"),
    ("eval", "return 1", "5", "a"),
    ("eval", "return 1", "xx"),
    ("eval", "return {KEYS[1], KEYS[2], ARGV[1], #KEYS, #ARGV}", "2", "k1", "k2", "a1"),
    ("script", "load", "return 1"),
    ("script", "exists", "e0e1f9fabfc9d4800c877a703b823ac0578ff8db", "ffff"),
    ("evalsha", "E0E1F9FABFC9D4800C877A703B823AC0578FF8DB", "0"),
    ("evalsha_ro", "e0e1f9fabfc9d4800c877a703b823ac0578ff8db", "0"),
    ("script", "flush", "async"),
    ("script", "exists", "e0e1f9fabfc9d4800c877a703b823ac0578ff8db"),
    ("script", "flush", "sync"),
    ("script", "flush", "bogus"),
    ("script", "kill"),
    ("script", "bogus"),
    ("script", "load"),
    ("eval", "return redis.sha1hex('')", "0"),
    ("eval", "return redis.sha1hex()", "0"),
    ("eval", "return true", "0"),
    ("eval", "return false", "0"),
    ("eval", "return nil", "0"),
    ("eval", "return 'hello'", "0"),
    ("eval", "return 3.99", "0"),
    ("eval", "return -3.99", "0"),
    ("eval", "return redis.call('get', KEYS[1])", "1", "nokey"),
    ("eval", "return redis.pcall('nosuch')", "0"),
    ("eval", "return redis.setresp(4)", "0"),
    ("eval", "return redis.log(redis.LOG_WARNING, 'hi')", "0"),
    ("eval", "return redis.log(99, 'hi')", "0"),
    ("eval", "return redis.set_repl(redis.REPL_ALL)", "0"),
    ("eval", "return redis.set_repl(99)", "0"),
    ("eval", "return redis.replicate_commands()", "0"),
    ("eval_ro", "return redis.call('set','a','b')", "0"),
    ("eval_ro", "return redis.call('get','a')", "0"),
    ("eval", "return redis.call('eval','return 1', 0)", "0"),
    ("eval", "return redis.call('multi')", "0"),
    ("eval", "return redis.call('set', 'n', 3.5)", "0"),
    ("eval", "return redis.call('get', 'n')", "0"),
    ("eval", "redis.call('rpush', 'l', 'a', 'b'); return redis.call('lrange', 'l', 0, -1)", "0"),
    ("eval", "return redis.call('ping')", "0"),
    ("eval", "return redis.call('hgetall', 'nosuch')", "0"),
    ("eval", "return redis.call('blpop', 'emptylist', 0)", "0"),
    ("eval", "redis.call('select', 1); redis.call('set', 'x', 'db1')", "0"),
    ("get", "x"),
    ("eval", "return type(cjson) .. type(bit) .. type(print) .. type(setmetatable)", "0"),
    ("eval", "return cjson.encode({1, 2, 'x'})", "0"),
    ("eval", "return cjson.decode('[1,2,{\"a\":5}]')[3].a", "0"),
    ("eval", "return bit.band(0xff, 0x0f) + bit.bor(1, 2) + bit.lshift(1, 4)", "0"),
    ("eval", "return bit.tohex(65535)", "0"),
    ("eval", "return {1, 'a', {err='inner error'}}", "0"),    # Redis 7's shebang line
    ("eval", "#!lua\nreturn error('x')", "0"),
    ("eval", "#!lua flags=no-writes\nreturn redis.call('set','a','b')", "0"),
    ("eval", "#!lua flags=no-writes,allow-stale\nreturn 1", "0"),
    ("eval", "#!lua flags=bogus\nreturn 1", "0"),
    ("eval", "#!python\nreturn 1", "0"),
    ("eval", "#!lua name=x\nreturn 1", "0"),
    ("eval", "#!lua", "0"),
    ("eval", "#!lua flags=\nreturn 1", "0"),
    ("eval", "#!lua  flags=no-writes  \nreturn 2", "0"),
    ("eval", "#!lua\nreturn redis.call('set','a','b')", "0"),
    ("script", "load", "#!lua flags=no-writes\nreturn redis.call('set','a','c')"),
    ("evalsha", "bbae06d3970e71352e37e79f536543e123b5fd8f", "0"),
    # cmsgpack and struct (script_msgpack.c, script_struct.c): same bytes
    ("eval", "return cmsgpack.pack(1, -1, 200, -200, 70000, -70000, 5000000000, -5000000000, 1.5, 0.1, 'abc', true, false)", "0"),
    ("eval", "return cmsgpack.pack({1,2,3}, {a=1}, {}, string.rep('x', 40), string.rep('y', 300), string.rep('z', 70000))", "0"),
    ("eval", "return {cmsgpack.unpack(cmsgpack.pack(1, 'two', {3, 4}, 1.5))}", "0"),
    ("eval", 'return cjson.encode({cmsgpack.unpack(cmsgpack.pack({a={b={c=1}}, 2}))})', "0"),
    ("eval", 'return {cmsgpack.unpack_one(cmsgpack.pack(1, 2, 3), 1)}', "0"),
    ("eval", 'return {cmsgpack.unpack_limit(cmsgpack.pack(1, 2, 3), 2)}', "0"),
    ("eval", 'return {cmsgpack.unpack_one(cmsgpack.pack(1, 2, 3), 2)}', "0"),
    ("eval", "return cmsgpack.unpack('\\192')", "0"),
    ("eval", "return cmsgpack.unpack('\\205\\1')", "0"),
    ("eval", "return cmsgpack.unpack('\\193')", "0"),
    ("eval", 'return cmsgpack.pack()', "0"),
    ("eval", 'local t = {} t[1] = t return cmsgpack.pack(t)', "0"),
    ("eval", "return struct.pack('>I2i4<hBbc3s', 258, -2, 513, 255, -1, 'abcdef', 'zz')", "0"),
    ("eval", "return {struct.unpack('>I2i4<hBbc3s', struct.pack('>I2i4<hBbc3s', 258, -2, 513, 255, -1, 'abcdef', 'zz'))}", "0"),
    ("eval", "return struct.size('>I2i4hBb!4i')", "0"),
    ("eval", "return struct.pack('!4bi', 1, 2)", "0"),
    ("eval", "return {struct.unpack('<d', struct.pack('<d', 1.5))}", "0"),
    ("eval", "return {struct.unpack('Bc0', struct.pack('Bc0', 3, 'xyz'))}", "0"),
    ("eval", "return struct.pack('q', 1)", "0"),
    ("eval", "return {struct.unpack('>i', 'ab')}", "0"),
    ("eval", "return struct.pack('i', 'notanumber')", "0"),
    ("eval", "return struct.size('bq')", "0"),
    ("eval", "return {struct.unpack('bq', 'aa')}", "0"),
]

RESP3_CASES = [
    ("eval", "redis.setresp(3); return redis.call('hgetall', 'h')", "0"),
    ("eval", "redis.setresp(3); local r = redis.call('hgetall', 'h'); return r['map']['f']", "0"),
    ("eval", "redis.setresp(3); return redis.call('smembers', 'st')", "0"),
    ("eval", "redis.setresp(3); return redis.call('get', 'nosuch')", "0"),
    ("eval", "redis.setresp(3); return redis.call('zscore', 'z', 'm')", "0"),
    ("eval", "redis.setresp(3); return {double=3.5}", "0"),
    ("eval", "redis.setresp(3); return true", "0"),
    ("eval", "redis.setresp(3); return false", "0"),
    ("eval", "return {double=3.5}", "0"),
    ("eval", "return true", "0"),
    ("eval", "return false", "0"),
    ("eval", "return {map={a=1}}", "0"),
    ("eval", "return {set={a=true}}", "0"),
]


def test_replies_and_errors_match_redis(pair):
    rowan, ref = pair
    for case in CASES:
        assert _reply(rowan, *case) == _reply(ref, *case), case


def test_resp3_conversions_match_redis(pair):
    rowan, ref = pair
    for cl in pair:
        cl.call("hset", "h", "f", "v")
        cl.call("sadd", "st", "m")
        cl.call("zadd", "z", "1.5", "m")
    for proto in ("2", "3"):
        for cl in pair:
            cl.call("hello", proto)
        for case in RESP3_CASES:
            assert _reply(rowan, *case) == _reply(ref, *case), (proto, case)


def test_self_referencing_table_is_cut(server, r):
    """A table that contains itself converts to a bounded nesting with an
    error at the bottom, as Redis's "reached lua stack limit"."""
    cl = RespClient(server.port)
    cl.send_command("eval", "local t = {}; t[1] = t; return t", "0")
    data = b""
    while b"reached lua stack limit" not in data:
        chunk = cl.sock.recv(65536)
        assert chunk
        data += chunk
    assert data.count(b"*1\r\n") > 100
    cl.close()
    assert r.ping()


def test_script_writes_are_atomic_under_concurrency(server, r):
    """Read-modify-write in a script racing other scripts and INCR: no
    update is lost, and a reader never sees a script half done."""
    incr = "local v = tonumber(redis.call('get', KEYS[1]) or '0'); " \
           "redis.call('set', KEYS[1], v + 1); return v + 1"
    pairset = "redis.call('set', KEYS[1], ARGV[1]); redis.call('set', KEYS[2], ARGV[1])"
    threads, errors, per = [], [], 200

    def scripts(i):
        cl = server.client()
        try:
            for j in range(per):
                cl.eval(incr, 1, "counter")
                cl.eval(pairset, 2, "pa", "pb", "%d-%d" % (i, j))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    def incrs():
        cl = server.client()
        for _ in range(per):
            cl.incr("counter")

    def reader(stop):
        cl = server.client()
        while not stop.is_set():
            a, b = cl.mget("pa", "pb")
            if a != b:
                errors.append(("torn", a, b))

    stop = threading.Event()
    rd = threading.Thread(target=reader, args=(stop,))
    rd.start()
    for i in range(3):
        threads.append(threading.Thread(target=scripts, args=(i,)))
    threads.append(threading.Thread(target=incrs))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    rd.join()
    assert not errors
    assert int(server.client().get("counter")) == 4 * per


def test_acknowledged_script_writes_survive_kill9(server_factory):
    srv = server_factory()
    cl = srv.client()
    script = """
        for i = 1, tonumber(ARGV[1]) do
            redis.call('set', KEYS[1] .. i, i)
            redis.call('hset', KEYS[2], 'f' .. i, i)
        end
        redis.call('rpush', KEYS[3], 'a', 'b', 'c')
        return redis.call('hlen', KEYS[2])
    """
    assert cl.eval(script, 3, "k:", "h", "l", 300) == 300
    sha = cl.script_load("return redis.call('incrby', KEYS[1], ARGV[1])")
    assert cl.evalsha(sha, 1, "ctr", 7) == 7
    srv.kill9()
    srv.restart()
    cl = srv.client()
    assert cl.get("k:1") == b"1" and cl.get("k:300") == b"300"
    assert cl.hlen("h") == 300
    assert cl.lrange("l", 0, -1) == [b"a", b"b", b"c"]
    assert cl.get("ctr") == b"7"
    # The script cache is not data: EVALSHA after a restart asks for EVAL.
    with pytest.raises(redis.exceptions.NoScriptError):
        cl.evalsha(sha, 1, "ctr", 1)


def test_eval_inside_multi(server, r):
    cl = server.client()
    p = cl.pipeline(transaction=True)
    p.set("a", "1")
    p.eval("return redis.call('incr', 'a')", 0)
    p.get("a")
    assert p.execute() == [True, 2, b"2"]


def test_busy_reply_and_script_kill(server_factory):
    srv = server_factory(extra={"busy-reply-threshold": "200"})
    conns = open_conns(srv)
    out = {}

    def run():
        cl = srv.client()
        try:
            cl.eval("local i = 0 while true do i = i + 1 end", 0)
        except redis.exceptions.ResponseError as e:
            out["err"] = str(e)

    t = threading.Thread(target=run)
    t.start()
    time.sleep(0.3)
    cl = busy_conn(conns)
    assert _reply(cl, "get", "x") == RespError(
        "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.")
    assert _reply(cl, "script", "kill") == "OK"
    t.join(10)
    assert not t.is_alive()
    assert out["err"].startswith("Script killed by user with SCRIPT KILL... script: ")
    assert _reply(cl, "script", "kill") == RespError("NOTBUSY No scripts in execution right now.")
    assert _reply(cl, "ping") == "PONG"
    assert srv.client().ping()
    assert srv.client().config_get("lua-time-limit") == {"lua-time-limit": "200"}


def test_script_that_wrote_is_unkillable_and_shutdown_keeps_none(server_factory):
    srv = server_factory(extra={"lua-time-limit": "200"})
    conns = open_conns(srv)

    def run():
        try:
            srv.client().eval("redis.call('set', 'w', '1') while true do end", 0)
        except Exception:
            pass

    t = threading.Thread(target=run, daemon=True)
    t.start()
    time.sleep(0.3)
    cl = busy_conn(conns)
    rep = _reply(cl, "script", "kill")
    assert isinstance(rep, RespError) and rep.msg.startswith("UNKILLABLE Sorry the script")
    cl.send_command("shutdown", "nosave")
    assert srv.wait_exit(15) == 0
    srv.restart()
    # The script never finished: none of its effects were logged.
    assert srv.client().exists("w") == 0


def test_redis_py_lock_and_script(server, r):
    cl = server.client()
    lock = cl.lock("resource", timeout=10)
    assert lock.acquire(blocking=False)
    assert not cl.lock("resource", timeout=10).acquire(blocking=False)
    assert lock.extend(5)
    lock.release()
    assert cl.get("resource") is None
    other = cl.lock("resource", timeout=10)
    assert other.acquire(blocking=False)
    cl.set("resource", "someone-else")   # the lock script compares tokens
    with pytest.raises(redis.exceptions.LockNotOwnedError):
        other.release()
    assert cl.get("resource") == b"someone-else"

    cl.script_flush()
    add = cl.register_script("return redis.call('incrby', KEYS[1], ARGV[1])")
    assert add(keys=["n"], args=[5]) == 5   # NOSCRIPT, then EVAL
    assert add(keys=["n"], args=[2]) == 7   # EVALSHA
    assert cl.script_exists(add.sha) == [True]


APPS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "apps")


def test_ioredis_define_command(server, r):
    """ioredis's defineCommand (npm, tests/apps), unchanged: EVALSHA with
    the NOSCRIPT fallback to EVAL, in a pipeline too, and script errors."""
    if not os.path.isdir(os.path.join(APPS, "node_modules", "ioredis")):
        pytest.fail("ioredis is not installed: run `npm ci --prefix tests/apps` (make does)")
    p = subprocess.run(["node", os.path.join(APPS, "ioredis_script.js"), str(server.port)],
                       capture_output=True, text=True, timeout=60)
    res = json.loads(p.stdout.strip().splitlines()[-1])
    assert res == {"first": 5, "second": 10, "third": 12, "swap": ["A", "B"],
                   "after": ["B", "A"], "pipeline": [1, 3], "error": "NOPE not today"}, \
        (res, p.stderr)


def test_scripts_follow_cluster_routing(cluster_factory):
    """In a cluster, EVAL's declared keys route like any command's (-MOVED,
    -CROSSSLOT), and a script may only touch keys this node is primary of,
    and the node that owns a key runs the same script."""
    from conftest import NSLOTS, key_slot
    cl = cluster_factory(3, 3)
    ports = [nd.port for nd in cl.nodes]
    owner = [None] * NSLOTS
    for start, end, primary, *_ in cl.nodes[0].resp().ok("CLUSTER", "SLOTS"):
        for s in range(start, end + 1):
            owner[s] = ports.index(primary[1])
    mine = next("k%d" % i for i in range(10000) if owner[key_slot("k%d" % i)] == 0)
    other = next("k%d" % i for i in range(10000) if owner[key_slot("k%d" % i)] == 1)
    c0 = cl.nodes[0].resp()
    script = "redis.call('set', KEYS[1], ARGV[1]); return redis.call('get', KEYS[1])"
    assert c0.call("EVAL", script, "1", mine, "v") == b"v"
    assert c0.err("EVAL", script, "1", other, "v") == "MOVED %d 127.0.0.1:%d" % (
        key_slot(other), ports[1])
    assert c0.err("EVAL", script, "2", mine, other, "v") == \
        "CROSSSLOT Keys in request don't hash to the same slot"
    rep = c0.err("EVAL", "return redis.call('set', ARGV[1], 'x')", "0", other)
    assert rep.startswith("ERR Script attempted to access a non local key in a cluster node"), rep
    assert cl.nodes[1].resp().call("EXISTS", other) == 0
    assert cl.nodes[1].resp().call("EVAL", script, "1", other, "w") == b"w"


def test_kill9_during_scripts_keeps_each_all_or_none(server_factory):
    """kill -9 while scripts that write 200 keys each run back to back:
    after recovery every script's effects are all there or all absent, and
    every acknowledged one is there."""
    srv = server_factory()
    script = "for i = 1, 200 do redis.call('set', KEYS[1] .. ':' .. i, ARGV[1]) end " \
             "redis.call('hset', 'done', KEYS[1], ARGV[1]) return 200"
    acked, stop = [], threading.Event()

    def run():
        cl = srv.client()
        n = 0
        while not stop.is_set():
            try:
                cl.eval(script, 1, "g%d" % n, n)
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
                return
            acked.append(n)
            n += 1

    t = threading.Thread(target=run)
    t.start()
    wait_for(lambda: len(acked) >= 20, timeout=20)
    srv.kill9()
    stop.set()
    t.join(10)
    srv.restart()
    cl = srv.client()
    done = cl.hgetall("done")
    for n in range(max(acked) + 3):
        present = cl.exists(*["g%d:%d" % (n, i) for i in range(1, 201)])
        assert present in (0, 200), (n, present)
        assert (present == 200) == (("g%d" % n).encode() in done), n
        if n in acked:
            assert present == 200, n
