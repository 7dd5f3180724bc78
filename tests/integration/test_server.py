"""Server and connection commands: PING ECHO TIME SHUTDOWN INFO CONFIG CLIENT
COMMAND WAIT WAITAOF HELLO AUTH QUIT, protected-mode."""
import os
import re
import time

import pytest
import redis

from conftest import RespError, Verbatim

E_SYNTAX = RespError("ERR syntax error")
E_NOTINT = RespError("ERR value is not an integer or out of range")
WRONGPASS = RespError("WRONGPASS invalid username-password pair or user is disabled.")
NOAUTH = RespError("NOAUTH Authentication required.")


def E_ARITY(cmd):
    return RespError("ERR wrong number of arguments for '%s' command" % cmd)


# ---------------------------------------------------------------- PING ECHO TIME
def test_ping(c, r):
    assert c.call("PING") == "PONG"
    assert c.call("PING", "hello") == b"hello"
    assert c.call("PING", b"\x00\r\n") == b"\x00\r\n"
    assert c.call("ping") == "PONG"
    assert c.call("PING", "a", "b") == E_ARITY("ping")
    assert r.ping() is True


def test_echo(c):
    assert c.call("ECHO", "a b") == b"a b"
    assert c.call("ECHO", "") == b""
    assert c.call("ECHO", bytes(range(256))) == bytes(range(256))
    assert c.call("ECHO") == E_ARITY("echo")
    assert c.call("ECHO", "a", "b") == E_ARITY("echo")


def test_time(c):
    rep = c.call("TIME")
    assert isinstance(rep, list) and len(rep) == 2
    assert all(isinstance(x, bytes) and x.isdigit() for x in rep)
    secs, usecs = int(rep[0]), int(rep[1])
    assert abs(secs - time.time()) < 120      # the machine's clock, not a speed check
    assert 0 <= usecs < 1000000
    assert c.call("TIME", "x") == E_ARITY("time")


# ---------------------------------------------------------------- INFO
SECTIONS = ["server", "clients", "memory", "persistence", "stats", "replication", "keyspace"]


def test_info_default_sections(server, c):
    info = server.info()
    for s in SECTIONS:
        assert s in info, "INFO lacks section # %s" % s.capitalize()
    rep = c.call("INFO")
    assert isinstance(rep, bytes)
    assert rep.startswith(b"# Server\r\n")
    assert rep.endswith(b"\r\n")


@pytest.mark.parametrize("arg", ["all", "everything", "default"])
def test_info_all(server, arg):
    info = server.info(arg)
    for s in SECTIONS:
        assert s in info


@pytest.mark.parametrize("section", SECTIONS)
def test_info_single_section(server, section):
    info = server.info(section)
    assert [k for k in info if k != "_all"] == [section]


def test_info_two_sections(server, c):
    info = server.info()
    rep = c.call("INFO", "server", "clients")
    from conftest import parse_info
    got = parse_info(rep)
    assert set(got) - {"_all"} == {"server", "clients"}
    assert info["server"]["tcp_port"] == got["server"]["tcp_port"]


def test_info_unknown_section_is_empty(c):
    assert c.call("INFO", "nosuchsection") == b""


def test_info_server_fields(server):
    s = server.info("server")["server"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", s["redis_version"]), s["redis_version"]
    assert int(s["tcp_port"]) == server.port
    assert int(s["process_id"]) == server.proc.pid
    assert int(s["uptime_in_seconds"]) >= 0
    assert re.fullmatch(r"[0-9a-f]{40}", s["run_id"]), s["run_id"]
    assert s["redis_mode"] == "standalone"


def test_info_clients_and_stats(server, c):
    others = [server.resp() for _ in range(3)]
    cl = server.info("clients")["clients"]
    assert int(cl["connected_clients"]) >= 4
    st0 = server.info("stats")["stats"]
    c.ok("SET", "k", "v")
    c.ok("GET", "k")
    c.ok("GET", "k")
    c.call("GET", "nosuch")
    st1 = server.info("stats")["stats"]
    assert int(st1["total_commands_processed"]) >= int(st0["total_commands_processed"]) + 4
    assert int(st1["keyspace_hits"]) >= int(st0["keyspace_hits"]) + 2
    assert int(st1["keyspace_misses"]) >= int(st0["keyspace_misses"]) + 1
    assert int(st1["total_connections_received"]) >= 4
    assert "expired_keys" in st1
    for o in others:
        o.close()


def test_info_memory_persistence_replication(server):
    info = server.info("all")
    assert int(info["memory"]["used_memory"]) > 0
    assert info["persistence"]["loading"] == "0"
    assert info["replication"]["role"] == "master"
    assert int(info["replication"]["connected_slaves"]) == 0


def test_info_keyspace_lines(server, c):
    assert server.info("keyspace")["keyspace"] == {}
    c.ok("SET", "a", "1")
    c.ok("SET", "b", "1")
    c.ok("SET", "t", "1", "EX", 1000)
    d2 = server.resp()
    d2.ok("SELECT", 2)
    d2.ok("MSET", "x", "1", "y", "2")
    ks = server.info("keyspace")["keyspace"]
    assert set(ks) == {"db0", "db2"}
    assert re.fullmatch(r"keys=3,expires=1,avg_ttl=\d+", ks["db0"]), ks["db0"]
    assert re.fullmatch(r"keys=2,expires=0,avg_ttl=\d+", ks["db2"]), ks["db2"]
    d2.ok("FLUSHDB")
    assert set(server.info("keyspace")["keyspace"]) == {"db0"}


@pytest.mark.rowan_only("the # Rowan INFO section")
def test_info_rowan_section(server, c):
    assert "rowan" in server.info(), "INFO (default) lacks the # Rowan section"
    ro = server.info("rowan")
    assert set(ro) - {"_all"} == {"rowan"}
    fields = ro["rowan"]
    for f in ("recovery_dropped_bytes", "recovery_corrupt_entries"):
        assert f in fields, "# Rowan lacks %s" % f
        assert int(fields[f]) == 0, "fresh server reports %s=%s" % (f, fields[f])


# ---------------------------------------------------------------- CONFIG
def test_config_get(server, c):
    assert c.call("CONFIG", "GET", "maxclients") == [b"maxclients", b"10000"]
    assert c.call("CONFIG", "GET", "databases") == [b"databases", b"16"]
    assert c.call("CONFIG", "GET", "port") == [b"port", str(server.port).encode()]
    assert c.call("CONFIG", "GET", "nosuchoption") == []
    rep = c.call("CONFIG", "GET", "port", "databases")
    assert dict(zip(rep[0::2], rep[1::2])) == {b"port": str(server.port).encode(),
                                               b"databases": b"16"}
    # glob patterns
    rep = c.call("CONFIG", "GET", "max*")
    d = dict(zip(rep[0::2], rep[1::2]))
    assert d.get(b"maxclients") == b"10000"
    assert all(k.startswith(b"max") for k in d)
    rep = c.call("CONFIG", "GET", "*")
    assert len(rep) % 2 == 0 and len(rep) >= 20
    d = dict(zip(rep[0::2], rep[1::2]))
    assert os.path.realpath(d[b"dir"].decode()) == os.path.realpath(server.dir)


def test_config_set_and_get(server_factory):
    srv = server_factory()
    c = srv.resp()
    assert c.call("CONFIG", "SET", "timeout", "30") == "OK"
    assert c.call("CONFIG", "GET", "timeout") == [b"timeout", b"30"]
    assert c.call("CONFIG", "SET", "maxclients", "100", "timeout", "0") == "OK"
    assert c.call("CONFIG", "GET", "maxclients") == [b"maxclients", b"100"]
    assert c.call("CONFIG", "GET", "timeout") == [b"timeout", b"0"]
    assert c.call("CONFIG", "SET", "loglevel", "warning") == "OK"
    assert c.call("CONFIG", "GET", "loglevel") == [b"loglevel", b"warning"]
    # sizes take units
    assert c.call("CONFIG", "SET", "proto-max-bulk-len", "2mb") == "OK"
    assert c.call("CONFIG", "GET", "proto-max-bulk-len") == [b"proto-max-bulk-len", b"2097152"]


def _config_err_prefix(name):
    return "ERR CONFIG SET failed (possibly related to argument '%s')" % name


def test_config_set_errors(server_factory):
    srv = server_factory()
    c = srv.resp()
    assert c.call("CONFIG", "SET", "nosuch", "1") == RespError(
        "ERR Unknown option or number of arguments for CONFIG SET - 'nosuch'")
    for name, val in [("maxclients", "abc"), ("maxclients", "0"), ("timeout", "-1"),
                      ("protected-mode", "maybe"), ("loglevel", "loud"), ("hz", "x")]:
        msg = c.err("CONFIG", "SET", name, val)
        assert msg.startswith(_config_err_prefix(name)), msg
    msg = c.err("CONFIG", "SET", "databases", "5")
    assert msg == _config_err_prefix("databases") + " - can't set immutable config", msg
    msg = c.err("CONFIG", "SET", "maxclients", "10", "maxclients", "5")
    assert msg == _config_err_prefix("maxclients") + " - duplicate parameter", msg
    assert c.call("CONFIG", "SET", "timeout") == E_ARITY("config|set")
    assert c.call("CONFIG", "GET") == E_ARITY("config|get")
    assert c.call("CONFIG") == E_ARITY("config")
    assert c.call("CONFIG", "FOO") == RespError("ERR unknown subcommand 'FOO'. Try CONFIG HELP.")
    # nothing changed
    assert c.call("CONFIG", "GET", "maxclients") == [b"maxclients", b"10000"]
    assert c.call("CONFIG", "GET", "databases") == [b"databases", b"16"]


def test_protected_mode_reflected(server_factory):
    srv = server_factory()
    c = srv.resp()
    assert c.call("CONFIG", "GET", "protected-mode") == [b"protected-mode", b"yes"]
    assert c.call("CONFIG", "SET", "protected-mode", "no") == "OK"
    assert c.call("CONFIG", "GET", "protected-mode") == [b"protected-mode", b"no"]
    srv2 = server_factory(extra={"protected-mode": "no"})
    assert srv2.resp().call("CONFIG", "GET", "protected-mode") == [b"protected-mode", b"no"]


def test_option_from_command_line(server_factory):
    srv = server_factory(extra={"maxclients": "77", "timeout": "12"})
    c = srv.resp()
    assert c.call("CONFIG", "GET", "maxclients") == [b"maxclients", b"77"]
    assert c.call("CONFIG", "GET", "timeout") == [b"timeout", b"12"]


# ---------------------------------------------------------------- CLIENT
def _fields(line):
    return dict(kv.split("=", 1) for kv in line.strip().split(" ") if "=" in kv)


def test_client_setname_getname(c):
    assert c.call("CLIENT", "GETNAME") is None
    assert c.call("CLIENT", "SETNAME", "worker-1") == "OK"
    assert c.call("CLIENT", "GETNAME") == b"worker-1"
    assert c.call("CLIENT", "SETNAME", "a b") == RespError(
        "ERR Client names cannot contain spaces, newlines or special characters.")
    assert c.call("CLIENT", "SETNAME", "a\nb") == RespError(
        "ERR Client names cannot contain spaces, newlines or special characters.")
    assert c.call("CLIENT", "GETNAME") == b"worker-1"
    assert c.call("CLIENT", "SETNAME", "") == "OK"
    assert c.call("CLIENT", "GETNAME") is None
    assert c.call("CLIENT", "SETNAME") == E_ARITY("client|setname")
    assert c.call("CLIENT", "GETNAME", "x") == E_ARITY("client|getname")


def test_client_id_info_list(server, c):
    my_id = c.call("CLIENT", "ID")
    assert isinstance(my_id, int) and my_id > 0
    other = server.resp()
    other_id = other.call("CLIENT", "ID")
    assert other_id != my_id
    c.ok("CLIENT", "SETNAME", "me")
    c.ok("SELECT", 3)
    info = c.call("CLIENT", "INFO")
    assert isinstance(info, bytes) and info.endswith(b"\n")
    f = _fields(info.decode())
    assert f["id"] == str(my_id)
    assert f["name"] == "me"
    assert f["db"] == "3"
    local = c.sock.getsockname()
    assert f["addr"] == "%s:%d" % local
    lst = c.call("CLIENT", "LIST")
    assert isinstance(lst, bytes)
    lines = [_fields(l) for l in lst.decode().splitlines() if l.strip()]
    ids = {l["id"] for l in lines}
    assert {str(my_id), str(other_id)} <= ids
    mine = [l for l in lines if l["id"] == str(my_id)][0]
    assert mine["name"] == "me" and mine["addr"] == "%s:%d" % local
    only = c.call("CLIENT", "LIST", "ID", other_id)
    assert [_fields(l)["id"] for l in only.decode().splitlines() if l.strip()] == [str(other_id)]
    assert c.call("CLIENT", "FOO") == RespError("ERR unknown subcommand 'FOO'. Try CLIENT HELP.")
    assert c.call("CLIENT") == E_ARITY("client")


def test_client_kill(server, c):
    v1 = server.resp()
    v1_id = v1.call("CLIENT", "ID")
    assert c.call("CLIENT", "KILL", "ID", v1_id) == 1
    assert v1.wait_closed(10), "killed client's connection stayed open"
    assert c.call("CLIENT", "KILL", "ID", v1_id) == 0
    v2 = server.resp()
    addr = "%s:%d" % v2.sock.getsockname()
    assert c.call("CLIENT", "KILL", addr) == "OK"
    assert v2.wait_closed(10)
    v3 = server.resp()
    addr3 = "%s:%d" % v3.sock.getsockname()
    assert c.call("CLIENT", "KILL", "ADDR", addr3) == 1
    assert v3.wait_closed(10)
    assert c.call("CLIENT", "KILL", "127.0.0.1:1") == RespError("ERR No such client")
    assert c.call("CLIENT", "KILL", "ID", "abc") == RespError("ERR client-id should be greater than 0")
    # the killer is still fine
    assert c.call("PING") == "PONG"


# ---------------------------------------------------------------- COMMAND
COMMAND_TABLE = [  # name, arity, first key, last key, step, W(rite)/R(eadonly)/-; from Redis 7
    ("get", 2, 1, 1, 1, "R"), ("set", -3, 1, 1, 1, "W"), ("setnx", 3, 1, 1, 1, "W"),
    ("setex", 4, 1, 1, 1, "W"), ("psetex", 4, 1, 1, 1, "W"), ("getset", 3, 1, 1, 1, "W"),
    ("getdel", 2, 1, 1, 1, "W"), ("getex", -2, 1, 1, 1, "W"), ("mget", -2, 1, -1, 1, "R"),
    ("mset", -3, 1, -1, 2, "W"), ("msetnx", -3, 1, -1, 2, "W"), ("append", 3, 1, 1, 1, "W"),
    ("strlen", 2, 1, 1, 1, "R"), ("incr", 2, 1, 1, 1, "W"), ("decr", 2, 1, 1, 1, "W"),
    ("incrby", 3, 1, 1, 1, "W"), ("decrby", 3, 1, 1, 1, "W"), ("incrbyfloat", 3, 1, 1, 1, "W"),
    ("getrange", 4, 1, 1, 1, "R"), ("setrange", 4, 1, 1, 1, "W"), ("setbit", 4, 1, 1, 1, "W"),
    ("getbit", 3, 1, 1, 1, "R"), ("bitcount", -2, 1, 1, 1, "R"),
    ("del", -2, 1, -1, 1, "W"), ("unlink", -2, 1, -1, 1, "W"), ("exists", -2, 1, -1, 1, "R"),
    ("type", 2, 1, 1, 1, "R"), ("expire", -3, 1, 1, 1, "W"), ("pexpire", -3, 1, 1, 1, "W"),
    ("expireat", -3, 1, 1, 1, "W"), ("pexpireat", -3, 1, 1, 1, "W"),
    ("expiretime", 2, 1, 1, 1, "R"), ("pexpiretime", 2, 1, 1, 1, "R"), ("ttl", 2, 1, 1, 1, "R"),
    ("pttl", 2, 1, 1, 1, "R"), ("persist", 2, 1, 1, 1, "W"), ("keys", 2, 0, 0, 0, "R"),
    ("scan", -2, 0, 0, 0, "R"), ("rename", 3, 1, 2, 1, "W"), ("renamenx", 3, 1, 2, 1, "W"),
    ("randomkey", 1, 0, 0, 0, "R"), ("touch", -2, 1, -1, 1, "R"), ("dbsize", 1, 0, 0, 0, "R"),
    ("flushdb", -1, 0, 0, 0, "W"), ("flushall", -1, 0, 0, 0, "W"), ("select", 2, 0, 0, 0, "-"),
    ("move", 3, 1, 1, 1, "W"), ("swapdb", 3, 0, 0, 0, "W"),
    ("ping", -1, 0, 0, 0, "-"), ("echo", 2, 0, 0, 0, "-"), ("time", 1, 0, 0, 0, "-"),
    ("shutdown", -1, 0, 0, 0, "-"), ("info", -1, 0, 0, 0, "-"), ("config", -2, 0, 0, 0, "-"),
    ("client", -2, 0, 0, 0, "-"), ("command", -1, 0, 0, 0, "-"), ("wait", 3, 0, 0, 0, "-"),
    ("auth", -2, 0, 0, 0, "-"), ("hello", -1, 0, 0, 0, "-"), ("quit", -1, 0, 0, 0, "-"),
]


def test_command_count(c):
    n = c.call("COMMAND", "COUNT")
    assert isinstance(n, int)
    assert n >= len(COMMAND_TABLE)
    assert c.call("COMMAND", "COUNT", "x") == E_ARITY("command|count")
    assert c.call("COMMAND", "FOO") == RespError("ERR unknown subcommand 'FOO'. Try COMMAND HELP.")


def test_command_info_matches_redis(c):
    names = [t[0] for t in COMMAND_TABLE]
    rep = c.call("COMMAND", "INFO", *names)
    assert isinstance(rep, list) and len(rep) == len(names)
    problems = []
    for want, got in zip(COMMAND_TABLE, rep):
        name, arity, first, last, step, rw = want
        if got is None:
            problems.append("%s: missing" % name)
            continue
        gname, garity, gflags, gfirst, glast, gstep = got[:6]
        flags = {f.decode() if isinstance(f, bytes) else f for f in gflags}
        if gname != name.encode():
            problems.append("%s: name %r" % (name, gname))
        if (garity, gfirst, glast, gstep) != (arity, first, last, step):
            problems.append("%s: arity/keys %r, Redis has %r" %
                            (name, (garity, gfirst, glast, gstep), (arity, first, last, step)))
        if rw == "W" and "write" not in flags:
            problems.append("%s: lacks the write flag (%s)" % (name, sorted(flags)))
        if rw == "R" and "readonly" not in flags:
            problems.append("%s: lacks the readonly flag (%s)" % (name, sorted(flags)))
    assert not problems, "\n".join(problems)
    assert c.call("COMMAND", "INFO", "get", "nosuchcommand") [1] is None
    assert c.call("COMMAND", "INFO", "GET")[0][0] == b"get"


def test_command_docs(c):
    rep = c.call("COMMAND", "DOCS", "get", "set")
    assert isinstance(rep, list) and len(rep) == 4
    docs = dict(zip(rep[0::2], rep[1::2]))
    assert set(docs) == {b"get", b"set"}
    get = docs[b"get"]
    fields = dict(zip(get[0::2], get[1::2]))
    assert fields[b"group"] == b"string"
    assert isinstance(fields[b"summary"], bytes) and fields[b"summary"]
    assert c.call("COMMAND", "DOCS", "nosuchcommand") == []


def test_command_list_everything(c):
    rep = c.call("COMMAND")
    assert isinstance(rep, list)
    names = {x[0] for x in rep}
    assert {t[0].encode() for t in COMMAND_TABLE} <= names
    assert len(rep) == c.call("COMMAND", "COUNT")


# ---------------------------------------------------------------- WAIT WAITAOF
def test_wait_answers(c):
    c.ok("SET", "k", "v")
    assert c.call("WAIT", 0, 0) == 0
    assert c.call("WAIT", 0, 1000) == 0
    assert c.call("WAIT", "a", 0) == E_NOTINT
    assert c.call("WAIT", 0) == E_ARITY("wait")


@pytest.mark.redis_min("7.2")
def test_waitaof_shape(c):
    c.ok("SET", "k", "v")
    rep = c.call("WAITAOF", 0, 0, 0)
    assert isinstance(rep, list) and len(rep) == 2
    assert all(isinstance(x, int) and x >= 0 for x in rep)
    assert c.call("WAITAOF", 0, 0) == E_ARITY("waitaof")


@pytest.mark.rowan_only("every Rowan write is durable locally, so WAITAOF 1 is met at once")
def test_waitaof_local_durability(c):
    c.ok("SET", "k", "v")
    assert c.call("WAITAOF", 1, 0, 0) == [1, 0]


# ---------------------------------------------------------------- HELLO / RESP3
def test_hello_2(c):
    my_id = c.call("CLIENT", "ID")
    rep = c.call("HELLO", "2")
    assert isinstance(rep, list) and len(rep) % 2 == 0
    d = dict(zip(rep[0::2], rep[1::2]))
    assert d[b"proto"] == 2
    assert d[b"id"] == my_id
    assert d[b"mode"] == b"standalone"
    assert d[b"role"] == b"master"
    assert isinstance(d[b"server"], bytes) and isinstance(d[b"version"], bytes)
    assert d[b"modules"] == []


def test_hello_3_resp3_replies(server, c):
    my_id = c.call("CLIENT", "ID")
    rep = c.call("HELLO", "3")
    assert isinstance(rep, dict), "HELLO 3 must answer with a RESP3 map: %r" % (rep,)
    assert rep[b"proto"] == 3
    assert rep[b"id"] == my_id
    assert rep[b"role"] == b"master"
    # the wire format changes: nulls are '_', CONFIG GET is a map
    c.send_command("GET", "nosuch")
    assert c.reader._line() == b"_"
    c.ok("SET", "k", "v")
    c.send_command("GET", "k")
    assert c.read_reply() == b"v"
    assert c.call("CONFIG", "GET", "maxclients") == {b"maxclients": b"10000"}
    assert c.call("MGET", "k", "nosuch") == [b"v", None]
    assert c.call("EXISTS", "k") == 1
    assert c.call("PING") == "PONG"
    info = c.call("INFO", "server")
    assert isinstance(info, (bytes, Verbatim)) and b"tcp_port:%d" % server.port in info
    assert c.call("GET") == E_ARITY("get")
    # and back to RESP2
    rep = c.call("HELLO", "2")
    assert isinstance(rep, list)
    c.send_command("GET", "nosuch")
    assert c.reader._line() == b"$-1"


def test_hello_errors(c):
    assert c.call("HELLO", "4") == RespError("NOPROTO unsupported protocol version")
    assert c.call("HELLO", "1") == RespError("NOPROTO unsupported protocol version")
    assert c.call("HELLO", "foo") == RespError(
        "ERR Protocol version is not an integer or out of range")
    assert c.call("HELLO", "2", "SETNAME", "x", "y") == RespError("ERR Syntax error in HELLO option 'y'")
    assert c.call("PING") == "PONG"


def test_hello_setname(c):
    rep = c.call("HELLO", "2", "SETNAME", "hello-name")
    assert isinstance(rep, list)
    assert c.call("CLIENT", "GETNAME") == b"hello-name"


def test_hello_without_version(c):
    rep = c.call("HELLO")
    assert isinstance(rep, list)
    d = dict(zip(rep[0::2], rep[1::2]))
    assert d[b"proto"] == 2


# ---------------------------------------------------------------- AUTH
def test_auth_without_password_configured(c):
    assert c.call("AUTH", "x") == RespError(
        "ERR AUTH <password> called without any password configured for the default "
        "user. Are you sure your configuration is correct?")
    # the default user has no password ("nopass"): AUTH default <anything> passes
    assert c.call("AUTH", "default", "x") == "OK"
    assert c.call("AUTH") == E_ARITY("auth")


def test_requirepass(server_factory):
    srv = server_factory(extra={"requirepass": "s3cret"})
    c = srv.resp()
    assert c.call("GET", "k") == NOAUTH
    assert c.call("PING") == NOAUTH
    assert c.call("SET", "k", "v") == NOAUTH
    assert c.call("CLIENT", "ID") == NOAUTH
    assert c.call("AUTH", "wrong") == WRONGPASS
    assert c.call("AUTH", "default", "wrong") == WRONGPASS
    assert c.call("GET", "k") == NOAUTH
    assert c.call("AUTH", "s3cret") == "OK"
    assert c.call("SET", "k", "v") == "OK"
    assert c.call("GET", "k") == b"v"
    c2 = srv.resp()
    assert c2.call("AUTH", "default", "s3cret") == "OK"
    assert c2.call("GET", "k") == b"v"
    # a client that never authenticated wrote nothing
    c3 = srv.resp()
    assert c3.call("SET", "k", "evil") == NOAUTH
    assert c2.call("GET", "k") == b"v"
    # QUIT is allowed before AUTH
    assert c3.call("QUIT") == "OK"
    assert c3.wait_closed(10)
    # redis-py with and without the password
    assert srv.client(password="s3cret").get("k") == b"v"
    with pytest.raises(redis.AuthenticationError):
        srv.client().get("k")
    with pytest.raises(redis.ResponseError, match="^WRONGPASS"):
        srv.client(password="nope").get("k")


def test_hello_auth(server_factory):
    srv = server_factory(extra={"requirepass": "pw"})
    c = srv.resp()
    msg = c.err("HELLO", "3")
    assert msg.startswith("NOAUTH "), msg
    assert c.call("HELLO", "2", "AUTH", "default", "wrong") == WRONGPASS
    assert c.call("GET", "k") == NOAUTH
    rep = c.call("HELLO", "3", "AUTH", "default", "pw")
    assert isinstance(rep, dict) and rep[b"proto"] == 3
    assert c.call("SET", "k", "v") == "OK"


def test_requirepass_set_at_runtime(server_factory):
    srv = server_factory()
    admin = srv.resp()
    assert admin.call("CONFIG", "SET", "requirepass", "later") == "OK"
    assert admin.call("CONFIG", "GET", "requirepass") == [b"requirepass", b"later"]
    newc = srv.resp()
    assert newc.call("GET", "k") == NOAUTH
    assert newc.call("AUTH", "later") == "OK"
    assert newc.call("GET", "k") is None
    assert admin.call("CONFIG", "SET", "requirepass", "") == "OK"
    assert srv.resp().call("GET", "k") is None


# ---------------------------------------------------------------- QUIT
def test_quit(server, c):
    assert c.call("QUIT") == "OK"
    assert c.wait_closed(10)


def test_quit_discards_pipelined_rest(server, raw):
    cn = raw()
    cn.send(b"QUIT\r\n*3\r\n$3\r\nSET\r\n$6\r\nafterq\r\n$1\r\n1\r\n")
    assert cn.read_reply() == "OK"
    assert cn.wait_closed(10)
    c = server.resp()
    assert c.call("EXISTS", "afterq") == 0


# ---------------------------------------------------------------- SHUTDOWN / SIGTERM
@pytest.mark.parametrize("args", [("SHUTDOWN",), ("SHUTDOWN", "NOSAVE"), ("shutdown", "save")])
def test_shutdown_command(server_factory, args):
    srv = server_factory()
    c = srv.resp()
    c.ok("SET", "k", "v")
    c.send_command(*args)
    assert c.wait_closed(15), "connection not closed after SHUTDOWN"
    rc = srv.wait_exit(15)
    assert rc == 0, "server exit status after %s: %r" % (args, rc)


def test_shutdown_syntax_error(server_factory):
    srv = server_factory()
    c = srv.resp()
    assert c.call("SHUTDOWN", "FOO") == E_SYNTAX
    assert c.call("PING") == "PONG"
    assert srv.alive()


def test_sigterm_exits_cleanly(server_factory):
    srv = server_factory()
    srv.resp().ok("SET", "k", "v")
    rc, killed = srv.stop()
    assert not killed, "server ignored SIGTERM for 10 s"
    assert rc == 0, "exit status after SIGTERM: %r" % rc


@pytest.mark.rowan_only("data survives a restart (redis-server here runs without persistence)")
@pytest.mark.parametrize("how", ["SHUTDOWN", "SIGTERM"])
def test_data_survives_clean_restart(server_factory, how):
    srv = server_factory()
    c = srv.resp()
    c.ok("MSET", "a", "1", "b", "2")
    c.ok("SET", "t", "x", "EX", 1000)
    c.ok("SELECT", 5)
    c.ok("SET", "in5", "five")
    if how == "SHUTDOWN":
        c.send_command("SHUTDOWN")
        assert c.wait_closed(15)
        assert srv.wait_exit(15) == 0
    else:
        assert srv.stop() == (0, False)
    srv.start()
    c = srv.resp()
    assert c.call("MGET", "a", "b", "t") == [b"1", b"2", b"x"]
    assert 0 < c.call("TTL", "t") <= 1000
    c.ok("SELECT", 5)
    assert c.call("GET", "in5") == b"five"
