"""RESP protocol handling over raw sockets: error texts, pipelining, inline
commands, malformed input, size limits, maxclients, a garbage barrage, and a
hiredis C client."""
import os
import random
import selectors
import shutil
import socket
import subprocess
import time

import pytest

from conftest import HERE, RawConn, RespError, encode_command


def _drain(cn, timeout=10.0):
    """Read everything until the server closes (returns (data, True)) or
    until timeout (returns (data, False))."""
    cn.sock.settimeout(timeout)
    data = bytes(cn.reader.buf)        # what the reply parser already buffered
    cn.reader.buf.clear()
    try:
        while True:
            d = cn.sock.recv(1 << 16)
            if not d:
                return data, True
            data += d
    except (ConnectionResetError, BrokenPipeError):
        return data, True
    except socket.timeout:
        return data, False


def _alive_and_working(srv):
    assert srv.alive(), "server process is gone"
    c = srv.resp()
    assert c.call("PING") == "PONG"
    assert c.call("SET", "__probe", "ok") == "OK"
    assert c.call("GET", "__probe") == b"ok"
    c.close()


# ---------------------------------------------------------------- error texts
def test_unknown_command_text(raw):
    cn = raw()
    cn.send(b"*3\r\n$3\r\nfoo\r\n$1\r\na\r\n$1\r\nb\r\n")
    assert cn.read_line() == b"-ERR unknown command 'foo', with args beginning with: 'a' 'b' "
    cn.send(b"*1\r\n$6\r\nNOSUCH\r\n")
    assert cn.read_line() == b"-ERR unknown command 'NOSUCH', with args beginning with: "
    cn.send(b"foo bar\r\n")
    assert cn.read_line() == b"-ERR unknown command 'foo', with args beginning with: 'bar' "
    # the connection stays usable
    assert cn.call("PING") == "PONG"


def test_wrong_arity_text(raw):
    cn = raw()
    cn.send(b"*1\r\n$3\r\nGET\r\n")
    assert cn.read_line() == b"-ERR wrong number of arguments for 'get' command"
    cn.send(b"*3\r\n$3\r\nget\r\n$1\r\na\r\n$1\r\nb\r\n")
    assert cn.read_line() == b"-ERR wrong number of arguments for 'get' command"
    assert cn.call("SET", "x") == RespError("ERR wrong number of arguments for 'set' command")
    assert cn.call("PING") == "PONG"


# ---------------------------------------------------------------- pipelining
def test_pipeline_1000_commands_one_write(raw):
    cn = raw()
    buf = []
    for i in range(500):
        buf.append(encode_command("SET", "p:%d" % i, "value-%d" % i))
        buf.append(encode_command("GET", "p:%d" % i))
    data = b"".join(buf)
    cn.send(data)          # one sendall of ~30 KB holding 1000 commands
    for i in range(500):
        assert cn.read_reply() == "OK", i
        assert cn.read_reply() == b"value-%d" % i, i
    # the server is shared with other tests: count this test's keys only
    assert len(cn.call("KEYS", "p:*")) == 500


def test_pipeline_mixed_replies_in_order(raw):
    cn = raw()
    cmds = []
    want = []
    for i in range(250):
        cmds.append(("INCR", "ctr")); want.append(i + 1)
        cmds.append(("GET", "missing:%d" % i)); want.append(None)
        cmds.append(("GET",)); want.append(RespError("ERR wrong number of arguments for 'get' command"))
        cmds.append(("ECHO", "e%d" % i)); want.append(b"e%d" % i)
    cn.send(b"".join(encode_command(*x) for x in cmds))
    got = [cn.read_reply() for _ in cmds]
    assert got == want


def test_command_split_into_single_bytes(raw):
    cn = raw()
    data = encode_command("SET", "split", "a\r\nb") + encode_command("GET", "split")
    for i in range(len(data)):
        cn.send(data[i:i + 1])
    assert cn.read_reply() == "OK"
    assert cn.read_reply() == b"a\r\nb"


def test_redis_py_big_pipeline(r):
    p = r.pipeline(transaction=False)
    for i in range(2000):
        p.set("rp:%d" % i, i)
    assert p.execute() == [True] * 2000
    p = r.pipeline(transaction=False)
    for i in range(2000):
        p.get("rp:%d" % i)
    assert p.execute() == [str(i).encode() for i in range(2000)]


# ---------------------------------------------------------------- inline commands
def test_inline_commands(raw):
    cn = raw()
    cn.send(b"PING\r\n")
    assert cn.read_reply() == "PONG"
    cn.send(b"ping hello\r\n")
    assert cn.read_reply() == b"hello"
    cn.send(b"set ik 'x y'\r\n")
    assert cn.read_reply() == "OK"
    cn.send(b"get ik\r\n")
    assert cn.read_reply() == b"x y"
    cn.send(b'set ik2 "a\\x41\\n"\r\n')
    assert cn.read_reply() == "OK"
    cn.send(b"get ik2\r\n")
    assert cn.read_reply() == b"aA\n"
    # LF alone ends a line; empty lines are ignored
    cn.send(b"PING\n\r\n\r\nPING\r\n")
    assert cn.read_reply() == "PONG"
    assert cn.read_reply() == "PONG"
    # inline and multibulk mixed in one write
    cn.send(b"INCR ictr\r\n" + encode_command("INCR", "ictr") + b"INCR ictr\r\n")
    assert [cn.read_reply() for _ in range(3)] == [1, 2, 3]


def test_empty_and_null_multibulk_are_ignored(raw):
    cn = raw()
    cn.send(b"*0\r\n*-1\r\n*1\r\n$4\r\nPING\r\n")
    assert cn.read_reply() == "PONG"


# ---------------------------------------------------------------- malformed input
MALFORMED = [
    (b"*abc\r\n", "ERR Protocol error: invalid multibulk length"),
    (b"*3000000000\r\n", "ERR Protocol error: invalid multibulk length"),
    (b"*1\r\nfoo\r\n", "ERR Protocol error: expected '$', got 'f'"),
    (b"*1\r\n:4\r\n", "ERR Protocol error: expected '$', got ':'"),
    (b"*1\r\n$abc\r\n", "ERR Protocol error: invalid bulk length"),
    (b"*1\r\n$-5\r\n", "ERR Protocol error: invalid bulk length"),
    (b"*1\r\n$600000000\r\n", "ERR Protocol error: invalid bulk length"),
    (b'SET "a b\r\n', "ERR Protocol error: unbalanced quotes in request"),
    (b"x" * 70000, "ERR Protocol error: too big inline request"),
]


@pytest.mark.parametrize("data,msg", MALFORMED, ids=[m[0][:16].decode("latin1") for m in MALFORMED])
def test_malformed_request_error_and_close(server, raw, data, msg):
    cn = raw()
    cn.send(encode_command("PING") + data)
    assert cn.read_reply() == "PONG"       # what came before is still served
    rest, closed = _drain(cn)
    assert rest == b"-" + msg.encode() + b"\r\n"
    assert closed, "connection left open after a protocol error"
    _alive_and_working(server)


# ---------------------------------------------------------------- limits
def test_proto_max_bulk_len(server_factory):
    srv = server_factory(extra={"proto-max-bulk-len": "1mb"})
    c = srv.resp()
    assert c.call("CONFIG", "GET", "proto-max-bulk-len") == [b"proto-max-bulk-len", b"1048576"]
    ok = b"a" * 1048576
    assert c.call("SET", "fits", ok) == "OK"
    assert c.call("STRLEN", "fits") == 1048576
    cn = RawConn(srv.port)
    cn.send(b"*3\r\n$3\r\nSET\r\n$3\r\nbig\r\n$1048577\r\n")
    rest, closed = _drain(cn)
    assert rest == b"-ERR Protocol error: invalid bulk length\r\n"
    assert closed
    cn.close()
    assert c.call("EXISTS", "big") == 0
    # SETRANGE / APPEND cannot grow a string past the limit either
    assert c.call("APPEND", "fits", "x") == RespError(
        "ERR string exceeds maximum allowed size (proto-max-bulk-len)")
    assert c.call("SETRANGE", "fits", 1048576, "x") == RespError(
        "ERR string exceeds maximum allowed size (proto-max-bulk-len)")
    assert c.call("STRLEN", "fits") == 1048576


def test_proto_max_bulk_len_config_set(server_factory):
    srv = server_factory()
    c = srv.resp()
    assert c.call("CONFIG", "SET", "proto-max-bulk-len", "1mb") == "OK"
    cn = RawConn(srv.port)
    cn.send(b"*3\r\n$3\r\nSET\r\n$3\r\nbig\r\n$2000000\r\n")
    rest, closed = _drain(cn)
    assert rest == b"-ERR Protocol error: invalid bulk length\r\n"
    assert closed
    assert c.call("EXISTS", "big") == 0


def test_client_query_buffer_limit(server_factory):
    srv = server_factory(extra={"client-query-buffer-limit": "1mb"})
    c = srv.resp()
    assert c.call("CONFIG", "GET", "client-query-buffer-limit") == \
        [b"client-query-buffer-limit", b"1048576"]
    # below the limit: fine
    assert c.call("SET", "small", b"s" * 900000) == "OK"
    # one 3 MB command: the connection is closed, nothing is written
    cn = RawConn(srv.port)
    try:
        cn.send(encode_command("SET", "huge", b"h" * 3000000))
    except (BrokenPipeError, ConnectionResetError):
        pass
    rest, closed = _drain(cn)
    assert closed, "a 3 MB query over a 1 MB client-query-buffer-limit was not refused"
    assert rest == b"" or rest.startswith(b"-ERR"), rest[:200]
    assert c.call("EXISTS", "huge") == 0
    assert c.call("STRLEN", "small") == 900000
    _alive_and_working(srv)


def test_maxclients(server_factory):
    srv = server_factory(extra={"maxclients": "5"})
    # The fixture's own connections are closed, but the server may not have
    # seen them go yet: the first client waits until it is the only one.
    first = RawConn(srv.port)

    def alone():
        info = first.call("INFO", "clients").decode()
        return "connected_clients:1\r\n" in info
    from conftest import wait_for
    assert wait_for(alone, timeout=10)
    conns = [first] + [RawConn(srv.port) for _ in range(4)]
    for cn in conns:
        assert cn.call("PING") == "PONG"
    extra = RawConn(srv.port)
    rest, closed = _drain(extra)
    assert rest == b"-ERR max number of clients reached\r\n"
    assert closed
    extra.close()
    # a slot frees up when a client leaves
    conns.pop().close()

    def can_connect():
        cn = RawConn(srv.port)
        try:
            return cn.call("PING") == "PONG"
        except Exception:
            return False
        finally:
            cn.close()

    assert wait_for(can_connect, timeout=10)
    for cn in conns:
        assert cn.call("PING") == "PONG"
        cn.close()
    st = srv.info("stats")["stats"]
    assert int(st["rejected_connections"]) >= 1


# ---------------------------------------------------------------- garbage barrage
SAFE_CMDS = [("SET", "g", "v"), ("GET", "g"), ("PING",), ("ECHO", "x" * 40), ("INCR", "n"),
             ("MGET", "a", "b", "c"), ("DEL", "g"), ("APPEND", "g", "zz"), ("STRLEN", "g"),
             ("SETRANGE", "g", "3", "abc"), ("GETRANGE", "g", "0", "-1"), ("EXISTS", "g")]


def _garbage(rng):
    kind = rng.randrange(6)
    if kind == 0:                                   # random bytes
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 4000)))
    if kind == 1:                                   # mutated valid commands
        data = bytearray(b"".join(encode_command(*rng.choice(SAFE_CMDS))
                                  for _ in range(rng.randrange(1, 20))))
        for _ in range(rng.randrange(1, 10)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        return bytes(data)
    if kind == 2:                                   # hostile headers
        return rng.choice([b"*99999999\r\n", b"*-99\r\n$-1\r\n", b"*2\r\n$99999999999999999999\r\n",
                           b"*1\r\n$2147483648\r\n", b"*" + b"9" * 200 + b"\r\n", b"$5\r\nhello\r\n",
                           b"*1\r\n*1\r\n$4\r\nPING\r\n", b"\r\n" * 500, b"\x00" * 3000,
                           b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$10\r\nshort\r\n"])
    if kind == 3:                                   # a truncated command, then nothing
        data = encode_command(*rng.choice(SAFE_CMDS))
        return data[:rng.randrange(1, len(data))]
    if kind == 4:                                   # long inline junk
        return bytes(rng.choice(b"abc '\"\\x ") for _ in range(rng.randrange(100, 20000))) + b"\r\n"
    return b"".join(encode_command(*rng.choice(SAFE_CMDS)) for _ in range(50))   # valid


def test_garbage_barrage_never_crashes(server_factory):
    srv = server_factory()
    rng = random.Random(20261122)
    # round 1: send and hang up at once
    for _ in range(60):
        cn = RawConn(srv.port)
        try:
            cn.send(_garbage(rng))
        except OSError:
            pass
        if rng.random() < 0.5:
            cn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        cn.close()
    # round 2: many connections at once, each fed several chunks, replies drained
    conns = [RawConn(srv.port) for _ in range(40)]
    for _ in range(4):
        for cn in conns:
            try:
                cn.send(_garbage(rng))
            except OSError:
                pass
    sel = selectors.DefaultSelector()
    for cn in conns:
        cn.sock.setblocking(False)
        sel.register(cn.sock, selectors.EVENT_READ)
    deadline = time.monotonic() + 5
    open_socks = len(conns)
    while open_socks and time.monotonic() < deadline:
        for key, _ in sel.select(timeout=0.2):
            try:
                d = key.fileobj.recv(1 << 16)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                d = b""
            if not d:
                sel.unregister(key.fileobj)
                open_socks -= 1
    sel.close()
    for cn in conns:
        cn.close()
    _alive_and_working(srv)
    assert srv.alive()


# ---------------------------------------------------------------- hiredis from C
def test_hiredis_smoke(server, tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "no C compiler (cc) on PATH"
    exe = str(tmp_path / "hiredis_smoke")
    build = subprocess.run([cc, "-std=gnu11", "-O1", "-Wall", "-Wextra", "-Werror",
                            "-o", exe, os.path.join(HERE, "hiredis_smoke.c"), "-lhiredis"],
                           capture_output=True, text=True)
    assert build.returncode == 0, "building hiredis_smoke failed:\n" + build.stderr
    c = server.resp()
    c.ok("FLUSHALL")
    run = subprocess.run([exe, str(server.port)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, "hiredis_smoke failed (rc %d):\n%s%s" % (
        run.returncode, run.stdout, run.stderr[-4000:])
    assert "0 failures" in run.stdout
