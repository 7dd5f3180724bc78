"""Sessions driven by a per-reply transport (redis-compat/session.h, issue
15), through DEBUG SESSION (redis-compat/t_debug_session.c), the test
transport that behaves as the native edge does: each command carries a tag,
and each reply comes back whole, with its tag, in command order, once it
may leave. Rowan-only.

- replies by tag, in order, errors included;
- a blocking command (BLPOP) answered later, by a push, a timeout or CLIENT
  UNBLOCK, keeps its tag, and the commands after it wait for it;
- MULTI/EXEC: one reply per command, each with its tag;
- pub/sub: the subscribe replies with their tags, messages with tag 0;
- CLIENT REPLY OFF: a command's reply is empty but still delivered;
- the session is a client (CLIENT LIST, CLIENT KILL);
- "not before": a write's reply, and every reply after it, is held while a
  backup is stopped, and released when it continues."""
import os
import signal
import time

import pytest

from conftest import RespClient, RespError, wait_for, stop_process

pytestmark = pytest.mark.rowan_only("DEBUG SESSION is Rowan's test transport")


OPEN = []   # (port, id) of the sessions a test opened: closed after it


class Session:
    """A test session on the worker of connection `conn` (which alone can
    drive it: a session belongs to one worker)."""

    def __init__(self, conn):
        self.conn = conn
        self.id = conn.call("DEBUG", "SESSION", "OPEN")
        assert isinstance(self.id, int), self.id
        self.got = []
        OPEN.append((conn.sock.getpeername()[1], self.id))

    def run(self, tag, *args):
        assert self.conn.call("DEBUG", "SESSION", "RUN", self.id, tag, *args) == "OK"

    def read(self):
        rep = self.conn.call("DEBUG", "SESSION", "READ", self.id)
        if isinstance(rep, RespError):
            raise AssertionError(rep.msg)
        self.got += [(t, b) for t, b in rep]
        return self.got

    def wait(self, n, timeout=10.0):
        """The first n replies delivered, once there are n of them."""
        wait_for(lambda: len(self.read()) >= n, timeout=timeout)
        return self.got[:n]

    def quiet(self, secs=0.3):
        """Nothing more delivered within secs."""
        before = len(self.got)
        time.sleep(secs)
        return self.read()[before:] == []


@pytest.fixture(autouse=True)
def close_sessions():
    """A session outlives the connection that drove it (as a native one
    outlives a datagram): close them, so the shared server's next tests do
    not see their subscriptions or blocked commands."""
    yield
    while OPEN:
        port, sid = OPEN.pop()
        try:
            cn = RespClient(port)                        # any worker may kill it
        except OSError:
            continue                                     # that server is gone
        try:
            cn.call("CLIENT", "KILL", "ID", sid)         # 0 if already gone
            wait_for(lambda: cn.call("CLIENT", "LIST", "ID", sid) == b"")
        finally:
            cn.close()


@pytest.fixture
def conn(server):
    cl = server.resp()
    cl.call("FLUSHALL")
    return cl


def test_replies_by_tag_in_order(conn):
    s = Session(conn)
    s.run(1, "SET", "k", "v")
    s.run(2, "GET", "k")
    s.run(3, "INCR", "k")
    s.run(4, "NOSUCHCMD", "x")
    s.run(5, "PING")
    got = s.wait(5)
    assert got[:4] == [(1, b"+OK\r\n"), (2, b"$1\r\nv\r\n"),
                       (3, b"-ERR value is not an integer or out of range\r\n"),
                       (4, b"-ERR unknown command 'NOSUCHCMD', with args beginning with: 'x' \r\n")]
    assert got[4] == (5, b"+PONG\r\n")
    assert s.quiet()
    assert conn.call("GET", "k") == b"v"    # the same data set as RESP clients


def test_blocking_reply_keeps_its_tag(conn, server):
    s = Session(conn)
    s.run(11, "BLPOP", "q", "0")
    s.run(12, "PING")                       # waits behind the blocked command
    assert s.quiet()
    other = server.resp()
    assert other.call("RPUSH", "q", "a") == 1
    assert s.wait(2) == [(11, b"*2\r\n$1\r\nq\r\n$1\r\na\r\n"), (12, b"+PONG\r\n")]


def test_blocking_timeout_and_unblock_keep_their_tags(conn, server):
    s = Session(conn)
    s.run(21, "BLPOP", "q", "0.1")
    s.run(22, "PING")
    assert s.wait(2) == [(21, b"*-1\r\n"), (22, b"+PONG\r\n")]
    s.run(23, "BLPOP", "q", "0")
    wait_for(lambda: "flags=b" in conn.call("CLIENT", "LIST", "ID", s.id).decode())
    other = server.resp()
    assert other.call("CLIENT", "UNBLOCK", s.id, "ERROR") == 1
    assert s.wait(3)[2] == (23, b"-UNBLOCKED client unblocked via CLIENT UNBLOCK\r\n")


def test_multi_exec_one_reply_per_command(conn):
    s = Session(conn)
    for tag, cmd in enumerate((("MULTI",), ("SET", "a", "1"), ("INCR", "a"), ("EXEC",)), 31):
        s.run(tag, *cmd)
    assert s.wait(4) == [(31, b"+OK\r\n"), (32, b"+QUEUED\r\n"), (33, b"+QUEUED\r\n"),
                         (34, b"*2\r\n+OK\r\n:2\r\n")]
    assert conn.call("GET", "a") == b"2"


def test_pubsub_messages_come_with_tag_0(conn, server):
    s = Session(conn)
    s.run(41, "SUBSCRIBE", "ch")
    assert s.wait(1) == [(41, b"*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n")]
    other = server.resp()
    assert other.call("PUBLISH", "ch", "hello") == 1
    assert other.call("PUBLISH", "ch", "again") == 1
    # (a publisher on another worker hands messages over at its round's
    # end: they may come in one delivery or two)
    want = (b"*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$5\r\nhello\r\n"
            b"*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$5\r\nagain\r\n")
    wait_for(lambda: b"".join(b for t, b in s.read()[1:]) == want)
    assert all(t == 0 for t, _ in s.got[1:])
    s.run(42, "PING")
    wait_for(lambda: s.read()[-1][0] == 42)
    assert s.got[-1] == (42, b"*2\r\n$4\r\npong\r\n$0\r\n\r\n")


def test_reply_off_delivers_empty_replies(conn):
    s = Session(conn)
    s.run(51, "CLIENT", "REPLY", "OFF")
    s.run(52, "SET", "x", "1")
    s.run(53, "CLIENT", "REPLY", "ON")
    assert s.wait(3) == [(51, b""), (52, b""), (53, b"+OK\r\n")]


def test_client_pause_holds_the_session_in_order(conn, server):
    s = Session(conn)
    other = server.resp()
    assert other.call("CLIENT", "PAUSE", "100000", "WRITE") == "OK"
    try:
        s.run(91, "SET", "p", "1")          # a write: waits for the pause
        s.run(92, "PING")                   # and so does what follows it
        assert s.quiet(0.5)
    finally:
        assert other.call("CLIENT", "UNPAUSE") == "OK"   # from another connection
    assert s.wait(2) == [(91, b"+OK\r\n"), (92, b"+PONG\r\n")]


def test_session_is_a_client(conn, server):
    s = Session(conn)
    line = conn.call("CLIENT", "LIST", "ID", s.id).decode()
    assert "id=%d " % s.id in line and " fd=-1 " in line, line
    s.run(61, "CLIENT", "SETNAME", "native1")
    assert s.wait(1) == [(61, b"+OK\r\n")]
    assert "name=native1" in conn.call("CLIENT", "LIST", "ID", s.id).decode()
    other = server.resp()
    assert other.call("CLIENT", "KILL", "ID", s.id) == 1
    wait_for(lambda: conn.call("CLIENT", "LIST", "ID", s.id) == b"")
    assert "no such session" in conn.err("DEBUG", "SESSION", "READ", s.id)
    s2 = Session(conn)
    assert conn.call("DEBUG", "SESSION", "CLOSE", s2.id) == "OK"
    assert conn.call("CLIENT", "LIST", "ID", s2.id) == b""


def test_queued_commands_are_bounded(server_factory):
    srv = server_factory(extra={"client-query-buffer-limit": "1mb"})
    conn = srv.resp()
    s = Session(conn)
    s.run(71, "BLPOP", "q", "0")
    big = "x" * (300 * 1024)
    for tag in range(72, 76):                # queued behind the BLPOP: over 1 MB
        s.run(tag, "ECHO", big)
    wait_for(lambda: conn.call("CLIENT", "LIST", "ID", s.id) == b"")
    assert conn.call("PING") == "PONG"


def test_reply_held_until_replicated(cluster_factory):
    from test_replication import BASE_OPTS, owner_map, tag_on, wait_all_live
    cl = cluster_factory(3, 3, options=dict(BASE_OPTS, **{"replication-timeout": 60000, "enable-debug-command": "yes"}))
    wait_all_live(cl)
    owner = owner_map(cl)
    prim, stopped = 0, 2
    key = "{%s}:held" % tag_on(owner, prim, "s")
    conn = RespClient(cl.nodes[prim].port)
    s = Session(conn)
    s.run(81, "SET", key, "old")
    assert s.wait(1) == [(81, b"+OK\r\n")]
    pid = cl.nodes[stopped].pid
    stop_process(pid)
    try:
        s.run(82, "SET", key, "new")
        s.run(83, "PING")                   # behind the held reply: in order
        assert s.quiet(1.5), "delivered while backup node%d was stopped: %r" % (stopped, s.got)
    finally:
        os.kill(pid, signal.SIGCONT)
    assert s.wait(3, timeout=30)[1:] == [(82, b"+OK\r\n"), (83, b"+PONG\r\n")]
    conn.close()
