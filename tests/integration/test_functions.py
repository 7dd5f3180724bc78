"""Redis 7 functions: FUNCTION, FCALL, FCALL_RO (redis-compat/t_function.c).

Reply shapes and error texts are compared with a real redis-server (Debian's
7.0) running the same commands in the same order. Rowan only: libraries are
durable server metadata (a LOG_FUNCS log entry, not a key): a load, a delete
and a flush survive kill -9; libraries never show in DBSIZE, KEYS or the key
digest and FLUSHALL keeps them; FUNCTION DUMP payloads are Redis's (each
server restores the other's); in a static cluster every node gets them.
"""
import shutil
import time

import pytest

from conftest import RespClient, RespError, Server, wait_for
from differential import busy_conn, call as _reply, open_conns

pytestmark = pytest.mark.rowan_only


@pytest.fixture
def pair(fresh_pair):
    """(rowan RespClient, redis RespClient), both servers fresh."""
    return fresh_pair


LIB1 = """#!lua name=lib1
redis.register_function{function_name='rd', callback=function(k, a) return redis.call('get', k[1]) end,
                        flags={'no-writes'}, description='reads a key'}
"""
LIB2 = """#!lua name=lib2
redis.register_function('wr', function(k, a) redis.call('set', k[1], a[1]); return {a[1], #k, #a} end)
"""
LIB3 = """#!lua name=lib3
redis.register_function{function_name='sneaky', flags={'no-writes'},
                        callback=function(k, a) return redis.call('set', k[1], 'x') end}
"""


def fl(name, body):
    return "#!lua name=%s\n%s" % (name, body)


# Each case: commands run in order on both servers; every reply compared.
CASES = [
    # FUNCTION LOAD: the header and its errors
    ("function", "load", "return 1"),
    ("function", "load", "#!lua"),
    ("function", "load", "#!lua name=x"),
    ("function", "load", "#!lua\nreturn 1"),
    ("function", "load", "#!foo name=x\n"),
    ("function", "load", "#!lua name=x foo=bar\n"),
    ("function", "load", "#!lua name=a name=b\nreturn 1"),
    ("function", "load", "#!lua name=a-b\nreturn 1"),
    ("function", "load", "#!lua name=nf\nlocal x = 1"),
    ("function", "load", "#!lua name=ce\nthis is bad"),
    ("function", "load", fl("e1", "redis.call('ping')")),
    ("function", "load", fl("e2", "x = 1")),
    ("function", "load", fl("e3", "redis.register_function('f', 'notfn')")),
    ("function", "load", fl("e4", "redis.register_function('f', function() end, 5)")),
    ("function", "load", fl("e5", "redis.register_function()")),
    ("function", "load", fl("e6", "redis.register_function('f')")),
    ("function", "load", fl("e7", "redis.register_function{function_name='y', callback=function() end, foo=1}")),
    ("function", "load", fl("e8", "redis.register_function{function_name='y'}")),
    ("function", "load", fl("e9", "redis.register_function{callback=function() end}")),
    ("function", "load", fl("e10", "redis.register_function{function_name='y', callback=function() end, flags='no-writes'}")),
    ("function", "load", fl("e11", "redis.register_function{function_name='y', callback=function() end, flags={'bad'}}")),
    ("function", "load", fl("e12", "redis.register_function('', function() end)")),
    ("function", "load", fl("e13", "redis.register_function('x', function() end) redis.register_function('x', function() end)")),
    ("function", "load", fl("e14", "local s = redis.sha1hex('a')")),
    ("function", "load", fl("e15", "while true do end")),
    ("function", "load", "extra", fl("e16", "redis.register_function('f', function() end)")),
    ("function", "load", fl("lg", "redis.log(redis.LOG_WARNING, 'loading lg') redis.register_function('lgf', function() return redis.REDIS_VERSION_NUM > 0 end)")),
    ("fcall", "lgf", "0"),
    ("function", "delete", "lg"),
    # the load-time globals hold only `redis`; the functions see the sandbox
    ("function", "load", fl("g1", "local x = string")),
    ("function", "load", fl("g2", "local x = error")),
    ("function", "load", fl("g3", "local x = KEYS")),
    ("function", "load", fl("rt", "local function helper() return 5 end\n"
                                  "redis.register_function('p', function(k, a) return {string.len('abc'), type(k), "
                                  "tostring(redis.sha1hex ~= nil), cjson.encode({1}), helper()} end)\n"
                                  "redis.register_function('q', function(k, a) x = 1 return 1 end)\n"
                                  "redis.register_function('r', function(k, a) return redis.register_function end)\n"
                                  "redis.register_function('s', function(k, a) return KEYS end)")),
    ("fcall", "p", "0"),
    ("fcall", "q", "0"),
    ("fcall", "r", "0"),
    ("fcall", "s", "0"),
    ("function", "delete", "rt"),
    # loading, conflicts, REPLACE
    ("function", "load", LIB1),
    ("function", "load", LIB1),
    ("function", "load", "REPLACE", LIB1),
    ("function", "load", fl("other", "redis.register_function('rd', function() end)")),
    ("function", "load", LIB2),
    ("function", "load", LIB3),
    ("function", "load", fl("allflags", "redis.register_function{function_name='af', callback=function() return 1 end, "
                                        "flags={'no-writes','allow-oom','allow-stale','no-cluster','allow-cross-slot-keys'}}")),
    # FCALL, FCALL_RO
    ("fcall", "wr", "1", "k", "v", "extra"),
    ("fcall", "rd", "1", "k"),
    ("fcall_ro", "rd", "1", "k"),
    ("fcall_ro", "wr", "1", "k", "v"),
    ("fcall", "sneaky", "1", "k"),
    ("fcall_ro", "sneaky", "1", "k"),
    ("fcall", "af", "0"),
    ("fcall", "nosuch", "0"),
    ("fcall", "nosuch", "x"),
    ("fcall", "rd", "x"),
    ("fcall", "rd", "-1"),
    ("fcall", "rd", "5", "a"),
    ("fcall",),
    ("fcall", "rd"),
    ("get", "k"),
    # LIST (one function per library: Redis lists a library's functions in
    # its dict's order)
    ("function", "list", "libraryname", "lib1"),
    ("function", "list", "libraryname", "lib1", "withcode"),
    ("function", "list", "withcode", "libraryname", "allf*"),
    ("function", "list", "libraryname", "nomatch*"),
    ("function", "list", "libraryname"),
    ("function", "list", "foo"),
    ("function", "list", "withcode", "withcode"),
    ("function", "list", "libraryname", "a", "libraryname", "b"),
    # STATS, DELETE, FLUSH, KILL, HELP, RESTORE argument errors
    ("function", "stats"),
    ("function", "delete", "nolib"),
    ("function", "delete", "lib3"),
    ("function", "delete", "lib3"),
    ("function", "delete"),
    ("function", "kill"),
    ("function", "help"),
    ("function", "nosub"),
    ("function", "restore", "a", "b"),
    ("function", "restore", "xyz"),
    ("function", "flush", "foo"),
    ("function", "flush", "async"),
    ("function", "list"),
    ("function", "stats"),
    ("fcall", "rd", "1", "k"),
]


def test_differential(pair):
    rowan, ref = pair
    for cmd in CASES:
        a, b = _reply(rowan, *cmd), _reply(ref, *cmd)
        assert a == b, "%r: rowan %r, redis %r" % (cmd, a, b)


def test_differential_resp3_shapes(server_factory, request):
    """FUNCTION LIST and STATS are maps and sets in RESP3."""
    if not shutil.which("redis-server"):
        pytest.skip("redis-server not installed")
    rowan = server_factory()
    ref = Server("redis")
    ref.start()
    request.addfinalizer(ref.stop)
    for srv in (rowan, ref):
        c = srv.resp()
        assert c.call("hello", "3")
    outs = []
    for srv in (rowan, ref):
        c = srv.resp()
        c.call("hello", "3")
        c.call("function", "load", LIB1)
        outs.append([c.call("function", "list"), c.call("function", "stats"),
                     c.call("fcall", "rd", "1", "nokey")])
    assert outs[0] == outs[1]


def test_script_flush_keeps_functions_and_eval_is_separate(server_factory):
    srv = server_factory()
    c = srv.resp()
    assert c.call("function", "load", LIB2) == b"lib2"
    assert c.call("script", "flush") == "OK"
    assert c.call("fcall", "wr", "1", "k", "v") == [b"v", 1, 1]
    # an EVAL script cannot register functions
    e = _reply(c, "eval", "redis.register_function('z', function() end)", "0")
    assert isinstance(e, RespError)


def test_functions_are_not_keys(server_factory):
    srv = server_factory()
    c = srv.resp()
    c.call("debug", "set-active-expire", "1")
    before = c.call("debug", "digest")
    assert c.call("function", "load", LIB1) == b"lib1"
    assert c.call("function", "load", LIB2) == b"lib2"
    assert c.call("dbsize") == 0
    assert c.call("keys", "*") == []
    assert c.call("scan", "0") == [b"0", []]
    assert c.call("debug", "digest") == before
    assert c.call("fcall", "wr", "1", "k", "v") == [b"v", 1, 1]
    assert c.call("dbsize") == 1
    assert c.call("flushall") == "OK"
    assert c.call("dbsize") == 0
    # FLUSHALL keeps libraries, as in Redis
    assert c.call("fcall_ro", "rd", "1", "k") is None
    assert len(c.call("function", "list")) == 2


def test_load_delete_flush_survive_kill9(server_factory):
    srv = server_factory()
    c = srv.resp()
    assert c.call("function", "load", LIB1) == b"lib1"
    assert c.call("function", "load", LIB2) == b"lib2"
    assert c.call("fcall", "wr", "1", "k", "v1") == [b"v1", 1, 1]
    srv.kill9()
    srv.restart()
    c = srv.resp()
    assert sorted(lib[1] for lib in c.call("function", "list")) == [b"lib1", b"lib2"]
    assert c.call("fcall_ro", "rd", "1", "k") == b"v1"
    assert c.call("function", "stats")[3] == [b"LUA", [b"libraries_count", 2, b"functions_count", 2]]
    # REPLACE, then DELETE: the newest state comes back each time
    assert c.call("function", "load", "replace",
                  LIB1.replace("redis.call('get', k[1])", "'replaced'")) == b"lib1"
    assert c.call("function", "delete", "lib2") == "OK"
    srv.kill9()
    srv.restart()
    c = srv.resp()
    assert [lib[1] for lib in c.call("function", "list")] == [b"lib1"]
    assert c.call("fcall", "rd", "1", "k") == b"replaced"
    assert isinstance(_reply(c, "fcall", "wr", "1", "k", "v"), RespError)
    assert c.call("get", "k") == b"v1"
    assert c.call("function", "flush") == "OK"
    srv.kill9()
    srv.restart()
    c = srv.resp()
    assert c.call("function", "list") == []
    assert c.call("get", "k") == b"v1"
    # many loads: the cleaner keeps only the live entry; a restart still
    # finds the newest
    for i in range(50):
        assert c.call("function", "load", "replace",
                      fl("many", "redis.register_function('m', function() return %d end)" % i)) == b"many"
    srv.kill9()
    srv.restart()
    assert srv.resp().call("fcall", "m", "0") == 49


def test_dump_restore(server_factory, request):
    srv = server_factory()
    c = srv.resp()
    c.call("function", "load", LIB1)
    c.call("function", "load", LIB2)
    dump = c.call("function", "dump")
    assert isinstance(dump, bytes)
    assert isinstance(_reply(c, "function", "restore", dump), RespError)   # APPEND: collision
    assert str(_reply(c, "function", "restore", dump)) in ("Library lib1 already exists",
                                                          "ERR Library lib1 already exists",
                                                          "Library lib2 already exists",
                                                          "ERR Library lib2 already exists")
    assert c.call("function", "restore", dump, "replace") == "OK"
    assert c.call("function", "flush") == "OK"
    assert c.call("function", "restore", dump) == "OK"
    assert sorted(lib[1] for lib in c.call("function", "list")) == [b"lib1", b"lib2"]
    c.call("function", "load", fl("solo", "redis.register_function('s', function() return 's' end)"))
    assert c.call("function", "restore", dump, "flush") == "OK"
    assert sorted(lib[1] for lib in c.call("function", "list")) == [b"lib1", b"lib2"]
    # a function name clash with another library
    c.call("function", "flush")
    c.call("function", "load", fl("clash", "redis.register_function('wr', function() end)"))
    assert "Function wr already exists" in str(_reply(c, "function", "restore", dump, "replace"))
    # damaged payloads
    bad = dump[:-1] + bytes([dump[-1] ^ 1])
    assert "DUMP payload version or checksum are wrong" in str(_reply(c, "function", "restore", bad))
    # the payload is Redis's: each server restores the other's dump
    if shutil.which("redis-server"):
        ref = Server("redis")
        ref.start()
        request.addfinalizer(ref.stop)
        rc = ref.resp()
        big = fl("big", "-- " + "ab" * 500 + "\nredis.register_function('bigf', function() return 'B' end)")
        rc.call("function", "load", big)     # Redis LZF-compresses its code
        rc.call("function", "load", LIB1)
        assert c.call("function", "restore", rc.call("function", "dump"), "flush") == "OK"
        assert c.call("fcall", "bigf", "0") == b"B"
        assert sorted(lib[1] for lib in c.call("function", "list")) == [b"big", b"lib1"]
        assert rc.call("function", "restore", dump, "flush") == "OK"
        assert sorted(lib[1] for lib in rc.call("function", "list")) == [b"lib1", b"lib2"]
        assert c.call("function", "restore", rc.call("function", "dump"), "flush") == "OK"
        assert c.call("function", "dump") == rc.call("function", "dump") or \
            sorted(lib[1] for lib in c.call("function", "list")) == [b"lib1", b"lib2"]
        # a key's DUMP is not a function payload
        rc.call("set", "s", "v")
        assert _reply(c, "function", "restore", rc.call("dump", "s")) == \
            _reply(rc, "function", "restore", rc.call("dump", "s"))
    # restored libraries are durable
    c.call("function", "restore", dump, "flush")
    srv.kill9()
    srv.restart()
    assert sorted(lib[1] for lib in srv.resp().call("function", "list")) == [b"lib1", b"lib2"]


def test_fcall_ro_rules(server_factory):
    srv = server_factory()
    c = srv.resp()
    c.call("function", "load", LIB1)
    c.call("function", "load", LIB2)
    c.call("function", "load", LIB3)
    assert "Can not execute a script with write flag using *_ro command" in str(
        _reply(c, "fcall_ro", "wr", "1", "k", "v"))
    # a no-writes function cannot write, even through FCALL
    assert "Write commands are not allowed from read-only scripts" in str(
        _reply(c, "fcall", "sneaky", "1", "k"))
    assert c.call("exists", "k") == 0
    assert c.call("fcall_ro", "rd", "1", "k") is None
    # FUNCTION and FCALL are not callable from scripts
    assert "not allowed from script" in str(_reply(c, "eval", "return redis.call('fcall', 'rd', 1, 'k')", "0"))
    assert "not allowed from script" in str(_reply(c, "eval", "return redis.call('function', 'list')", "0"))


def test_cluster_every_node_gets_libraries(cluster_factory):
    cl = cluster_factory(3, 3, options={"replication-timeout": 1500, "workers": 2})
    n0 = RespClient(cl.nodes[0].port)
    assert n0.call("function", "load", LIB2) == b"lib2"
    n0.close()

    def everywhere(names):
        for nd in cl.nodes:
            c = RespClient(nd.port)
            try:
                got = sorted(lib[1] for lib in c.call("function", "list"))
            finally:
                c.close()
            if got != names:
                return False
        return True

    wait_for(lambda: everywhere([b"lib2"]), timeout=20)
    # loaded on another node: the newest set wins everywhere
    n1 = RespClient(cl.nodes[1].port)
    assert n1.call("function", "load", LIB1) == b"lib1"
    n1.close()
    wait_for(lambda: everywhere([b"lib1", b"lib2"]), timeout=20)
    # FCALL's keys route like any command's: the key's primary runs it,
    # the others answer -MOVED
    served, moved = 0, 0
    for nd in cl.nodes:
        c = RespClient(nd.port)
        rep = _reply(c, "fcall", "wr", "1", "fk", "v")
        c.close()
        if rep == [b"v", 1, 1]:
            served += 1
        else:
            assert isinstance(rep, RespError) and rep.msg.startswith("MOVED"), rep
            moved += 1
    assert (served, moved) == (1, 2)
    # libraries survive kill -9 of a node
    cl.nodes[2].kill9()
    cl.nodes[2].restart()
    wait_for(lambda: everywhere([b"lib1", b"lib2"]), timeout=30)
    n2 = RespClient(cl.nodes[2].port)
    n2.call("function", "delete", "lib1")
    n2.close()
    wait_for(lambda: everywhere([b"lib2"]), timeout=20)


BUSY_FN = "BUSY Redis is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE."


def test_busy_function_stats_and_kill(server_factory):
    """The texts are redis-server 7.0.15's for the same sequence."""
    import threading
    import time
    srv = server_factory(extra={"busy-reply-threshold": "200"})
    c = srv.resp()
    c.call("function", "load", fl("busy", "redis.register_function('spin', function() "
                                          "local i = 0 while true do i = i + 1 end end)"))
    conns = open_conns(srv)
    out = {}

    def run():
        out["r"] = _reply(srv.resp(), "fcall", "spin", "0")

    t = threading.Thread(target=run)
    t.start()
    time.sleep(0.4)
    busy = busy_conn(conns, "get", "x")
    assert _reply(busy, "get", "x") == RespError(BUSY_FN)
    st = busy.call("function", "stats")
    assert st[0] == b"running_script" and st[1][0:5] == [b"name", b"spin", b"command",
                                                        [b"fcall", b"spin", b"0"], b"duration_ms"]
    assert st[1][5] >= 200
    assert _reply(busy, "script", "kill") == RespError(BUSY_FN)
    assert busy.call("function", "kill") == "OK"
    t.join(10)
    assert not t.is_alive()
    assert out["r"] == RespError("ERR Script killed by user with SCRIPT KILL... script: spin, "
                                 "on @user_function:2.")
    assert _reply(busy, "function", "kill") == RespError("NOTBUSY No scripts in execution right now.")
    assert busy.call("function", "stats")[1] is None


def test_cleaner_keeps_the_live_library_entry(server_factory):
    """Overwrites fill a small pool so the cleaner reclaims every segment,
    the one holding the library entry included: the entry is kept (copied,
    the shard's reference moved) and a restart still finds it; superseded
    entries are not kept (the pool never fills with them)."""
    srv = server_factory(extra={"pool-size": "32mb"})
    c = srv.resp()
    pad = "-- " + "x" * 200000 + "\n"
    assert c.call("function", "load", fl("big", pad + "redis.register_function('b', function() return 'big' end)")) == b"big"
    val = b"v" * 100000

    def retrying(*cmd):     # a full pool answers "retry" while it is cleaned
        deadline = time.time() + 20
        while True:
            rep = _reply(c, *cmd)
            if not isinstance(rep, RespError) or time.time() > deadline:
                return rep
            time.sleep(0.05)

    for i in range(60):     # superseded entries: ~12 MB if none were dropped
        assert retrying("function", "load", "replace",
                        fl("big", pad + "redis.register_function('b', function() return 'big%d' end)" % i)) == b"big"
    for i in range(600):    # ~60 MB of overwrites of 20 keys in a 32 MB pool
        assert retrying("set", "k%d" % (i % 20), val) == "OK"
    info = srv.info("rowan")["rowan"]
    assert int(info["clean_segments"]) > 0
    assert c.call("fcall", "b", "0") == b"big59"
    srv.kill9()
    srv.restart()
    c = srv.resp()
    assert c.call("fcall", "b", "0") == b"big59"
    assert c.call("dbsize") == 20


def test_cluster_node_down_during_load_is_caught_up(cluster_factory):
    """A node that was down while a library was loaded gets it when it is
    caught up (the re-sync of the shard that holds the entry carries it)."""
    cl = cluster_factory(3, 3, options={"replication-timeout": 1500, "workers": 2})
    cl.nodes[2].kill9()
    n0 = RespClient(cl.nodes[0].port)
    # the outcome is unknown while a backup is down (-NOREPLICAS), as for keys
    _reply(n0, "function", "load", LIB2)
    n0.close()
    cl.nodes[2].restart()

    def node2_has():
        c = RespClient(cl.nodes[2].port)
        try:
            c.sock.settimeout(2)
            rep = _reply(c, "function", "list")
            return not isinstance(rep, RespError) and [lib[1] for lib in rep] == [b"lib2"]
        except OSError:
            return False
        finally:
            c.close()

    def node0_has():
        c = RespClient(cl.nodes[0].port)
        try:
            return [lib[1] for lib in c.call("function", "list")] == [b"lib2"]
        finally:
            c.close()

    assert node0_has()
    wait_for(node2_has, timeout=40)


def test_acl_checks_fcall_declared_keys(pair):
    """A user limited to some keys may FCALL with those as declared keys,
    not with others (Redis checks FCALL's keys like any command's)."""
    for c in pair:
        c.call("function", "load", LIB1)
        c.call("function", "load", LIB2)
        c.call("acl", "setuser", "fu", "on", ">pw", "~mine*", "+@all")
    outs = []
    for c in pair:
        c.call("auth", "fu", "pw")
        outs.append([_reply(c, "fcall", "wr", "1", "mine1", "v"),
                     _reply(c, "fcall", "wr", "1", "other", "v"),
                     _reply(c, "fcall_ro", "rd", "1", "other"),
                     _reply(c, "fcall_ro", "rd", "1", "mine1")])
    assert outs[0] == outs[1]
    assert isinstance(outs[0][1], RespError)


def test_function_stats_during_eval_is_busy(server_factory):
    """As in Redis 7.0: FUNCTION STATS answers -BUSY while an EVAL script
    (not a function) runs; FUNCTION KILL does not stop a script."""
    import threading
    srv = server_factory(extra={"busy-reply-threshold": "200"})
    conns = []
    for _ in range(4):
        cl = srv.resp()
        cl.sock.settimeout(1.0)
        conns.append(cl)
    out = {}
    t = threading.Thread(target=lambda: out.update(r=_reply(srv.resp(), "eval", "while true do end", "0")))
    t.start()
    time.sleep(0.4)
    busy = None
    for cl in conns:
        try:
            rep = _reply(cl, "ping")
        except OSError:
            continue
        if isinstance(rep, RespError) and rep.msg.startswith("BUSY"):
            busy = cl
            break
    assert busy is not None
    script_busy = RespError("BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.")
    assert _reply(busy, "function", "stats") == script_busy
    assert _reply(busy, "function", "kill") == script_busy
    assert busy.call("script", "kill") == "OK"
    t.join(10)
    assert not t.is_alive() and isinstance(out["r"], RespError)
