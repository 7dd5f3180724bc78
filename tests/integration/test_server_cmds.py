"""Focused checks for config.c and t_server.c that test_server.py leaves out:
rowan.conf and the embedded defaults, config files, CONFIG SET atomicity,
CONFIG REWRITE, RESETSTAT, CLIENT subcommands, COMMAND GETKEYS/LIST/DOCS,
RESET, DEBUG, ROWAN."""
import os
import re
import subprocess
import time

import pytest

from conftest import RespError, Server, Verbatim

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROWAN_CONF = os.path.join(REPO, "rowan.conf")

E_SYNTAX = RespError("ERR syntax error")


def E_ARITY(cmd):
    return RespError("ERR wrong number of arguments for '%s' command" % cmd)


def E_SET(name, why):
    return RespError("ERR CONFIG SET failed (possibly related to argument '%s') - %s" % (name, why))


def as_dict(flat):
    return dict(zip(flat[0::2], flat[1::2]))


class ConfServer(Server):
    """A server started as `rowan-server <conf> --option ...`."""

    def __init__(self, target, conf, extra=None):
        super().__init__(target, extra=extra)
        self.conf = conf

    def argv(self):
        a = super().argv()
        return [a[0], self.conf] + a[1:]


@pytest.fixture
def conf_server(request, target):
    made = []

    def make(conf_text, extra=None):
        srv = ConfServer(target, None, extra=extra)
        srv.conf = os.path.join(srv.dir, "test.conf")
        with open(srv.conf, "w") as f:
            f.write(conf_text)
        made.append(srv)
        srv.start()
        return srv

    yield make
    for srv in made:
        srv.cleanup()


# Options each test server gets on its command line (conftest's argv).
CMDLINE_OPTIONS = {"port", "bind", "dir", "pool-size", "workers", "logfile"}


# ---------------------------------------------------------------- defaults / rowan.conf
@pytest.mark.rowan_only("Rowan's embedded defaults and rowan.conf")
def test_rowan_conf_equals_embedded_defaults(server_factory, conf_server):
    """The shipped rowan.conf documents the defaults: starting with it must
    give exactly what starting without it gives."""
    with open(ROWAN_CONF) as f:
        text = f.read()
    plain = as_dict(server_factory().resp().call("CONFIG", "GET", "*"))
    with_file = as_dict(conf_server(text).resp().call("CONFIG", "GET", "*"))
    for k in CMDLINE_OPTIONS:
        plain.pop(k.encode(), None)
        with_file.pop(k.encode(), None)
    assert plain == with_file


@pytest.mark.rowan_only("Rowan's embedded defaults")
def test_embedded_defaults(server_factory):
    d = as_dict(server_factory().resp().call("CONFIG", "GET", "*"))
    expect = {
        "protected-mode": "yes", "tcp-backlog": "511", "timeout": "0", "tcp-keepalive": "300",
        "requirepass": "", "cluster-secret": "", "maxclients": "10000", "proto-max-bulk-len": "536870912",
        "client-query-buffer-limit": "1073741824", "daemonize": "no", "pidfile": "",
        "loglevel": "notice", "databases": "16", "hz": "10",
        "slowlog-log-slower-than": "10000", "slowlog-max-len": "128",
        "pool-file": "rowan.pool", "clean-threshold": "75", "shards": "64",
    }
    for k, v in expect.items():
        assert d.get(k.encode()) == v.encode(), k
    # every option of rowan.conf is known to CONFIG GET
    with open(ROWAN_CONF) as f:
        names = {ln.split()[0] for ln in f if ln.strip() and not ln.lstrip().startswith("#")}
    assert names <= {k.decode() for k in d}, names - {k.decode() for k in d}


@pytest.mark.rowan_only("workers 0 means one per CPU")
def test_workers_zero_stays_zero_in_config(server_factory):
    c = server_factory(extra={"workers": "0"}).resp()
    assert c.call("CONFIG", "GET", "workers") == [b"workers", b"0"]
    info = c.call("INFO", "rowan").decode()
    assert int(re.search(r"^workers:(\d+)\r$", info, re.M).group(1)) >= 1


# ---------------------------------------------------------------- config files
@pytest.mark.rowan_only("rowan.conf parsing")
def test_config_file_quoting_and_units(conf_server):
    srv = conf_server('# comment\n\n  maxclients 123\nrequirepass "a b\\x41"\n'
                      "proto-max-bulk-len 2MB\nloglevel WARNING\nhz 1000\n")
    c = srv.resp(password="a bA")
    d = as_dict(c.call("CONFIG", "GET", "*"))
    assert d[b"maxclients"] == b"123"
    assert d[b"requirepass"] == b"a bA"
    assert d[b"proto-max-bulk-len"] == b"2097152"
    assert d[b"loglevel"] == b"warning"
    assert d[b"hz"] == b"500"          # kept within 1..500, like Redis
    info = c.call("INFO", "server").decode()
    assert "config_file:%s\r\n" % os.path.realpath(srv.conf) in info


@pytest.mark.rowan_only("rowan.conf errors")
@pytest.mark.parametrize("line,why", [
    ("nosuch 1", "Bad directive or wrong number of arguments"),
    ("port 1 2", "Bad directive or wrong number of arguments"),
    ('port "12', "Unbalanced quotes in configuration line"),
    ("port 99999", "argument must be between 0 and 65535 inclusive"),
    ("protected-mode maybe", "argument must be 'yes' or 'no'"),
])
def test_bad_config_file_refuses_to_start(tmp_path, line, why):
    conf = tmp_path / "bad.conf"
    conf.write_text("timeout 0\n" + line + "\n")
    binary = os.environ.get("ROWAN_SERVER", "/work/main/src/rowan-server")
    p = subprocess.run([binary, str(conf), "--dir", str(tmp_path), "--port", "1"],
                       capture_output=True, text=True, timeout=20)
    assert p.returncode != 0
    assert "line 2" in p.stderr and why in p.stderr, p.stderr


@pytest.mark.rowan_only("command line errors")
def test_bad_command_line_option(tmp_path):
    binary = os.environ.get("ROWAN_SERVER", "/work/main/src/rowan-server")
    p = subprocess.run([binary, "--dir", str(tmp_path), "--maxclients", "lots"],
                       capture_output=True, text=True, timeout=20)
    assert p.returncode != 0
    assert "--maxclients" in p.stderr and "couldn't be parsed into an integer" in p.stderr


# ---------------------------------------------------------------- CONFIG SET / RESETSTAT
def test_config_set_is_all_or_nothing(server_factory):
    c = server_factory().resp()
    assert c.call("CONFIG", "SET", "timeout", "7", "maxclients", "abc") == E_SET(
        "maxclients", "argument couldn't be parsed into an integer")
    assert c.call("CONFIG", "GET", "timeout") == [b"timeout", b"0"]
    assert c.call("CONFIG", "SET", "timeout", "7", "databases", "1") == E_SET(
        "databases", "can't set immutable config")
    assert c.call("CONFIG", "GET", "timeout") == [b"timeout", b"0"]
    assert c.call("CONFIG", "SET", "timeout", "7", "hz") == E_SYNTAX
    assert c.call("CONFIG", "SET", "TIMEOUT", "7", "Hz", "20") == "OK"
    assert as_dict(c.call("CONFIG", "GET", "timeout", "hz")) == {b"timeout": b"7", b"hz": b"20"}


def test_config_set_limits(server_factory):
    c = server_factory().resp()
    assert c.call("CONFIG", "SET", "proto-max-bulk-len", "1x") == E_SET(
        "proto-max-bulk-len", "argument must be a memory value")
    assert c.call("CONFIG", "SET", "loglevel", "loud") == E_SET(
        "loglevel", "argument(s) must be one of the following: debug, verbose, notice, warning")
    assert c.call("CONFIG", "SET", "hz", "1000") == "OK"
    assert c.call("CONFIG", "GET", "hz") == [b"hz", b"500"]


@pytest.mark.rowan_only("Rowan-only options are immutable")
@pytest.mark.parametrize("name", ["pool-size", "pool-file", "workers", "shards", "dir", "bind"])
def test_rowan_options_immutable(server_factory, name):
    c = server_factory().resp()
    assert c.call("CONFIG", "SET", name, "1") == E_SET(name, "can't set immutable config")


def test_config_resetstat(server_factory):
    c = server_factory().resp()
    for _ in range(5):
        c.call("PING")
    info = c.call("INFO", "commandstats").decode()
    assert "cmdstat_ping:calls=" in info
    assert c.call("CONFIG", "RESETSTAT") == "OK"
    info = c.call("INFO", "commandstats").decode()
    assert "cmdstat_ping" not in info
    stats = c.call("INFO", "stats").decode()
    n = int(re.search(r"total_commands_processed:(\d+)", stats).group(1))
    assert n <= 2, stats
    assert c.call("CONFIG", "RESETSTAT", "x") == E_ARITY("config|resetstat")


# ---------------------------------------------------------------- CONFIG REWRITE
def test_config_rewrite_without_file(server_factory):
    c = server_factory().resp()
    assert c.call("CONFIG", "REWRITE") == RespError("ERR The server is running without a config file")


@pytest.mark.rowan_only("REWRITE output format")
def test_config_rewrite_keeps_comments_and_round_trips(conf_server):
    srv = conf_server("# my comment\nmaxclients 50\n# another\ntimeout 3\ntimeout 4\n")
    c = srv.resp()
    assert c.call("CONFIG", "SET", "maxclients", "60", "requirepass", 'p w"d',
                  "proto-max-bulk-len", "2mb") == "OK"
    assert c.call("CONFIG", "REWRITE") == "OK"
    text = open(srv.conf).read()
    lines = text.splitlines()
    assert lines[0] == "# my comment"
    assert lines[1] == "maxclients 60"
    assert lines[2] == "# another"
    assert lines[3] == "timeout 4"            # the value in force; duplicate dropped
    assert "timeout" not in "\n".join(lines[4:])
    assert "# Generated by CONFIG REWRITE" in lines
    assert 'requirepass "p w\\"d"' in lines
    assert "proto-max-bulk-len 2mb" in lines
    assert "hz 10" not in lines               # defaults are not added
    # the rewritten file starts a server with the same configuration
    before = as_dict(c.call("CONFIG", "GET", "*"))
    srv.stop()
    srv.start()
    c = srv.resp(password='p w"d')
    assert as_dict(c.call("CONFIG", "GET", "*")) == before
    assert c.call("CONFIG", "REWRITE") == "OK"
    assert open(srv.conf).read() == text      # stable


# ---------------------------------------------------------------- CLIENT
@pytest.mark.redis_min("7.2.0")
def test_client_setinfo(server, c):
    assert c.call("CLIENT", "SETINFO", "LIB-NAME", "redis-py") == "OK"
    assert c.call("CLIENT", "SETINFO", "lib-ver", "5.0.1") == "OK"
    line = c.call("CLIENT", "INFO").decode()
    assert "lib-name=redis-py" in line and "lib-ver=5.0.1" in line
    assert c.call("CLIENT", "SETINFO", "lib-name", "a b") == RespError(
        "ERR lib-name cannot contain spaces, newlines or special characters.")
    assert c.call("CLIENT", "SETINFO", "color", "red") == RespError("ERR Unrecognized option 'color'")
    assert c.call("CLIENT", "SETINFO", "lib-name") == E_ARITY("client|setinfo")
    assert c.call("CLIENT", "NO-TOUCH", "off") == "OK"
    assert "SETINFO <option> <value>" in c.call("CLIENT", "HELP")


def test_client_setname_rules(c):
    assert c.call("CLIENT", "SETNAME", "a\nb") == RespError(
        "ERR Client names cannot contain spaces, newlines or special characters.")
    assert c.call("CLIENT", "SETNAME", "ok-name") == "OK"
    assert c.call("CLIENT", "GETNAME") == b"ok-name"
    assert c.call("CLIENT", "SETNAME", "") == "OK"
    assert c.call("CLIENT", "GETNAME") is None


def test_client_list_filters(server, c):
    other = server.resp()
    oid, myid = other.call("CLIENT", "ID"), c.call("CLIENT", "ID")
    out = c.call("CLIENT", "LIST", "ID", str(oid)).decode()
    assert out.endswith("\n") and out.count("\n") == 1 and "id=%d " % oid in out
    out = c.call("CLIENT", "LIST", "ID", str(oid), str(myid)).decode()
    assert out.count("\n") == 2
    assert c.call("CLIENT", "LIST", "TYPE", "normal").decode().count("\n") >= 2
    assert c.call("CLIENT", "LIST", "TYPE", "pubsub") == b""
    assert c.call("CLIENT", "LIST", "TYPE", "bogus") == RespError("ERR Unknown client type 'bogus'")
    assert c.call("CLIENT", "LIST", "ID", "x") == RespError("ERR Invalid client ID")
    assert c.call("CLIENT", "LIST", "bogus") == E_SYNTAX


def test_client_kill_filters(server, c):
    v = server.resp()
    vid = v.call("CLIENT", "ID")
    laddr = "%s:%d" % v.sock.getpeername()
    assert c.call("CLIENT", "KILL", "ID", str(vid), "SKIPME", "maybe") == E_SYNTAX
    assert c.call("CLIENT", "KILL", "TYPE", "bogus") == RespError("ERR Unknown client type 'bogus'")
    assert c.call("CLIENT", "KILL", "USER", "nobody") == RespError("ERR No such user 'nobody'")
    # three arguments is the old form: "ID" is taken as an address
    assert c.call("CLIENT", "KILL", "ID") == RespError("ERR No such client")
    # LADDR matches every client of this listener but SKIPME (default yes) spares us
    assert c.call("CLIENT", "KILL", "LADDR", laddr, "ID", str(vid)) == 1
    assert v.wait_closed(10)
    assert c.call("PING") == "PONG"


def test_client_kill_self(server):
    me = server.resp()
    myid = me.call("CLIENT", "ID")
    assert me.call("CLIENT", "KILL", "ID", str(myid), "SKIPME", "no") == 1
    assert me.wait_closed(10)


def test_client_misc(c):
    assert c.call("CLIENT", "NO-EVICT", "on") == "OK"
    assert c.call("CLIENT", "NO-EVICT", "maybe") == E_SYNTAX
    assert c.call("CLIENT", "REPLY", "ON") == "OK"
    assert c.call("CLIENT", "PAUSE", "10") == "OK"
    assert c.call("CLIENT", "PAUSE", "-1") == RespError("ERR timeout is negative")
    assert c.call("CLIENT", "PAUSE", "x") == RespError("ERR timeout is not an integer or out of range")
    assert c.call("CLIENT", "PAUSE", "10", "SOME") == RespError("ERR CLIENT PAUSE mode must be WRITE or ALL")
    assert c.call("CLIENT", "UNPAUSE") == "OK"
    assert c.call("CLIENT", "GETREDIR") == -1
    assert c.call("CLIENT", "UNBLOCK", "12345") == 0
    assert c.call("CLIENT", "BOGUS") == RespError("ERR unknown subcommand 'BOGUS'. Try CLIENT HELP.")
    assert c.call("CLIENT", "ID", "x") == E_ARITY("client|id")
    help_lines = c.call("CLIENT", "HELP")
    assert help_lines[0].startswith("CLIENT <subcommand>")


# ---------------------------------------------------------------- RESET / DEBUG / ROWAN / misc
def test_reset(server_factory):
    srv = server_factory(extra={"requirepass": "pw"})
    c = srv.resp(password="pw")
    c.ok("SELECT", 3)
    c.ok("CLIENT", "SETNAME", "n1")
    assert isinstance(c.call("HELLO", "3"), dict)
    assert c.call("RESET") == "RESET"
    assert c.call("PING") == RespError("NOAUTH Authentication required.")
    assert c.call("AUTH", "pw") == "OK"
    assert c.call("CLIENT", "GETNAME") is None
    line = c.call("CLIENT", "INFO").decode()
    assert " db=0 " in line and "resp=2" in line


@pytest.mark.rowan_only("redis-server 7 disables DEBUG by default")
def test_debug(c):
    t = time.monotonic()
    assert c.call("DEBUG", "SLEEP", "0.2") == "OK"
    assert time.monotonic() - t >= 0.15
    assert c.call("DEBUG", "SLEEP", "0") == "OK"
    # Beyond what a sleep can be converted to, redis-server answers at once;
    # these once made a worker spin forever (undefined double -> time_t cast).
    t = time.monotonic()
    for secs in ("inf", "1e300", "1e13", "nan", "-5"):
        assert c.call("DEBUG", "SLEEP", secs) == "OK"
    assert time.monotonic() - t < 2
    assert c.call("PING") == "PONG"


@pytest.mark.rowan_only("ROWAN command")
def test_rowan_command(c):
    assert c.call("ROWAN", "VERSION") == b"0.1.0"
    assert c.call("ROWAN", "NOPE") == RespError("ERR unknown subcommand 'NOPE'. Try ROWAN HELP.")
    assert c.call("ROWAN", "HELP")[0].startswith("ROWAN <subcommand>")
    assert c.call("DEBUG", "JMAP") == "OK"
    assert c.call("DEBUG", "NOPE") == RespError(
        "ERR unknown subcommand or wrong number of arguments for 'NOPE'. Try DEBUG HELP.")


def test_save_family(c):
    assert c.call("SAVE") == "OK"
    assert c.call("BGSAVE", "FOO") == E_SYNTAX
    assert c.call("BGREWRITEAOF") == "Background append only file rewriting started"
    assert isinstance(c.call("LASTSAVE"), int)
    assert c.call("PING", "a", "b") == E_ARITY("ping")


@pytest.mark.redis_min("7.2.0")
def test_waitaof_validation(c):
    assert c.call("WAITAOF", "-1", "0", "0") == RespError("ERR value is out of range, must be positive")
    assert c.call("WAITAOF", "0", "0", "-1") == RespError("ERR timeout is negative")


# ---------------------------------------------------------------- COMMAND
def test_command_getkeys(c):
    assert c.call("COMMAND", "GETKEYS", "MSET", "a", "1", "b", "2") == [b"a", b"b"]
    assert c.call("COMMAND", "GETKEYS", "GET", "k") == [b"k"]
    assert c.call("COMMAND", "GETKEYS", "NOSUCH", "k") == RespError("ERR Invalid command specified")
    assert c.call("COMMAND", "GETKEYS", "GET", "a", "b") == RespError(
        "ERR Invalid number of arguments specified for command")
    assert c.call("COMMAND", "GETKEYS", "ECHO", "a") == RespError("ERR The command has no key arguments")
    rep = c.call("COMMAND", "GETKEYSANDFLAGS", "GET", "k")
    assert rep[0][0] == b"k" and b"RO" in [bytes(x, "ascii") if isinstance(x, str) else x for x in rep[0][1]]


def test_command_list_filterby(c):
    names = c.call("COMMAND", "LIST", "FILTERBY", "PATTERN", "exp*")
    assert set(names) >= {b"expire", b"expireat", b"expiretime"}
    assert all(n.startswith(b"exp") for n in names)
    conn = c.call("COMMAND", "LIST", "FILTERBY", "ACLCAT", "connection")
    assert b"ping" in conn and b"get" not in conn
    assert c.call("COMMAND", "LIST", "FILTERBY", "MODULE", "x") == []
    assert c.call("COMMAND", "LIST", "FILTERBY", "BOGUS", "x") == E_SYNTAX


def test_command_docs_and_info(c):
    docs = c.call("COMMAND", "DOCS", "get", "nosuch")
    assert docs[0] == b"get" and len(docs) == 2
    d = as_dict(docs[1])
    assert {b"summary", b"since", b"group"} <= set(d) and d[b"group"] == b"string"
    rep = c.call("COMMAND", "INFO", "get", "nosuch")
    assert rep[1] is None and rep[0][0] == b"get" and len(rep[0]) == 10
    assert c.call("COMMAND", "BOGUS") == RespError("ERR unknown subcommand 'BOGUS'. Try COMMAND HELP.")
    assert c.call("COMMAND", "COUNT", "x") == E_ARITY("command|count")


def test_info_format(c):
    text = c.call("INFO", "everything")
    assert isinstance(text, bytes)
    body = text.decode()
    assert body.endswith("\r\n") and not body.endswith("\r\n\r\n")
    for block in body.split("\r\n\r\n"):
        lines = block.split("\r\n")
        assert lines[0].startswith("# "), block[:80]
        for ln in lines[1:]:
            if ln:
                assert ":" in ln, ln
    assert "# Commandstats" in body
    assert c.call("INFO", "nosuchsection") == b""
    rep = c.call("HELLO", "3")
    assert rep[b"proto"] == 3
    v = c.call("INFO", "server")
    assert isinstance(v, Verbatim) and v.fmt == b"txt"
