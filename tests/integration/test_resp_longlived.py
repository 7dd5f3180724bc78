"""Long-lived connections (issue 10 item 14): nothing a connection did
earlier changes how its later requests are parsed or what they cost.

* A connection that once sent a huge request (1,048,576 arguments, a 20 MB
  bulk) or got a huge reply keeps no more than a small buffer afterwards
  (CLIENT LIST's qbuf-free, argv-mem, omem, tot-mem), on every connection.
* CONFIG SET proto-max-bulk-len applies to connections that are already
  open, and AUTH lifts Redis's limits for unauthenticated clients.
* After all that, an out-of-range multibulk length is still refused at once
  on the same connection.
* A pipeline written whole before any reply is read (redis-py's) is
  served: the server never stops reading a client that is still writing;
  and one whose writer then shuts its side down gets every reply.
* A short run of tests/soak/resp_soak.py: long-lived connections sending
  random valid, unknown, inline, empty and split requests, checked reply by
  reply, with PING liveness checks after every batch (`make soak-resp` runs
  it for longer).
"""
import os
import socket
import subprocess
import sys

import pytest

from conftest import HERE, RawConn, RespError, encode_command, wait_for

SOAK = os.path.join(os.path.dirname(HERE), "soak", "resp_soak.py")
MAX_MULTIBULK = 1024 * 1024


def client_fields(line):
    return dict(kv.split("=", 1) for kv in line.split(" ") if "=" in kv)


def huge_unknown(nargs):
    """An unknown command with nargs one-byte arguments (Rowan and Redis
    both answer it without executing anything)."""
    return b"*%d\r\n$8\r\nzznosuch\r\n" % (nargs + 1) + b"$1\r\na\r\n" * nargs


def test_large_requests_leave_no_buffers_behind(server_factory, target):
    srv = server_factory()
    conns = [RawConn(srv.port) for _ in range(4)]
    for i, cn in enumerate(conns):
        cn.call("CLIENT", "SETNAME", "big%d" % i)
        cn.send(huge_unknown(MAX_MULTIBULK - 1))
        rep = cn.read_reply()
        assert isinstance(rep, RespError) and rep.msg.startswith("ERR unknown command 'zznosuch'")
        value = bytes([65 + i]) * (20 << 20)
        assert cn.call("ECHO", value) == value          # a 20 MB bulk in, 20 MB out
        assert cn.call("PING") == "PONG"
    admin = srv.resp()

    def small_enough():
        lines = admin.call("CLIENT", "LIST").decode().strip().split("\n")
        big = [client_fields(l) for l in lines if " name=big" in l]
        assert len(big) == 4, lines
        ok = all(int(f["qbuf-free"]) <= 64 * 1024 and int(f["argv-mem"]) <= 64 * 1024 and
                 int(f["omem"]) <= 128 * 1024 and int(f["tot-mem"]) <= 512 * 1024 for f in big)
        return ok or None
    # Redis shrinks its buffers in a cron, so this polls (a liveness bound).
    if not wait_for(small_enough, timeout=10.0):
        raise AssertionError("connections keep what their largest request needed:\n%s"
                             % admin.call("CLIENT", "LIST").decode())
    # the same connections still parse and refuse at once
    for cn in conns:
        assert cn.call("ECHO", "still") == b"still"
        cn.send(b"*3000000000\r\n")
        assert cn.read_line() == b"-ERR Protocol error: invalid multibulk length"
        assert cn.wait_closed(), "not closed after a protocol error"


@pytest.mark.rowan_only("Redis 7 allows INT_MAX arguments; Rowan keeps Redis 6's 1024*1024")
def test_multibulk_length_limit_on_a_used_connection(server_factory):
    srv = server_factory()
    cn = RawConn(srv.port)
    cn.send(huge_unknown(MAX_MULTIBULK - 1))           # exactly the most allowed
    assert cn.read_reply().msg.startswith("ERR unknown command")
    cn.send(b"*%d\r\n" % (MAX_MULTIBULK + 1))
    assert cn.read_line() == b"-ERR Protocol error: invalid multibulk length"
    assert cn.wait_closed()


def test_config_set_proto_max_bulk_len_reaches_open_connections(server_factory):
    srv = server_factory()
    old = RawConn(srv.port)
    assert old.call("PING") == "PONG"                  # opened before the change
    admin = srv.resp()
    assert admin.call("CONFIG", "SET", "proto-max-bulk-len", "1mb") == "OK"
    old.send(b"*3\r\n$3\r\nSET\r\n$3\r\nbig\r\n$2000000\r\n")
    assert old.read_line() == b"-ERR Protocol error: invalid bulk length"
    assert old.wait_closed()
    assert admin.call("CONFIG", "SET", "proto-max-bulk-len", "512mb") == "OK"
    assert admin.call("SET", "big", b"b" * 2000000) == "OK"
    assert admin.call("EXISTS", "big") == 1


@pytest.mark.parametrize("request_bytes,error", [
    (b"*11\r\n", "unauthenticated multibulk length"),
    (b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$16385\r\n", "unauthenticated bulk length"),
])
def test_unauthenticated_limits(server_factory, request_bytes, error):
    """As Redis: before AUTH, at most 10 arguments of at most 16384 bytes,
    so a stranger cannot make the server buffer a large request."""
    srv = server_factory(extra={"requirepass": "secret"})
    cn = RawConn(srv.port)
    cn.send(request_bytes)
    assert cn.read_line() == b"-ERR Protocol error: " + error.encode()
    assert cn.wait_closed()
    # within the limits: the usual NOAUTH; after AUTH the limits are gone
    cn = RawConn(srv.port)
    cn.send(encode_command("SET", "k", b"v" * 16384))
    assert cn.read_reply() == RespError(
        "NOAUTH Authentication required.")
    assert cn.call("AUTH", "secret") == "OK"
    assert cn.call("SET", "k", b"v" * 100000) == "OK"
    assert cn.call("DEL", *["k%d" % i for i in range(20)]) == 0


@pytest.mark.parametrize("n,size", [(300, 100000), (20000, 1000), (100000, 100)])
def test_pipeline_written_before_its_replies_are_read(server_factory, n, size):
    """redis-py's pipeline (like hiredis's) writes every command before it
    reads a reply. Here 30 MB, 20 MB and 13 MB of requests whose replies are
    as large: the client is blocked in write() until the server reads it, so
    a server that stopped reading it while its replies waited (output
    back-pressure) would leave both waiting for ever. The socket timeout is
    a liveness bound, not a timing."""
    srv = server_factory()
    r = srv.client(socket_timeout=60)
    value = b"v" * size
    pipe = r.pipeline(transaction=False)
    for _ in range(n):
        pipe.echo(value)
    replies = pipe.execute()
    assert len(replies) == n and all(v == value for v in replies)
    assert r.ping()


@pytest.mark.rowan_only("Redis frees a client at EOF, dropping replies it has not written yet")
def test_pipeline_then_eof_gets_every_reply(server_factory):
    """A client writes 20,000 ECHOs of 1 KB, shuts its side down, and only
    then reads: the commands waiting behind back-pressure when the EOF
    arrives still run, and every reply comes before the close."""
    srv = server_factory()
    n, value = 20000, b"e" * 1000
    sock = socket.create_connection(("127.0.0.1", srv.port), timeout=60)
    sock.sendall(encode_command("ECHO", value) * n)
    sock.shutdown(socket.SHUT_WR)
    reply = b"$%d\r\n%s\r\n" % (len(value), value)
    data = bytearray()
    while True:
        chunk = sock.recv(1 << 20)
        if not chunk:
            break
        data += chunk
    sock.close()
    assert len(data) == n * len(reply) and data[-len(reply):] == reply
    assert srv.resp().call("PING") == "PONG"


def test_resp_soak_short(server_factory, target, tmp_path):
    """20 s of tests/soak/resp_soak.py against one server; every reply is
    checked and every batch ends with PINGs that must be answered."""
    srv = server_factory(extra={"pool-size": "256mb"})
    seconds = os.environ.get("ROWAN_SOAK_SECONDS", "20")
    cmd = [sys.executable, SOAK, "--port", str(srv.port), "--seconds", seconds,
           "--outdir", str(tmp_path)]
    if target == "redis":
        cmd.append("--redis-limits")
    run = subprocess.run(cmd, capture_output=True, text=True,
                         timeout=float(seconds) + 120)
    assert run.returncode == 0, "resp_soak failed:\n%s%s" % (run.stdout, run.stderr)
    assert "resp_soak: ok" in run.stdout, run.stdout
    assert srv.alive()
