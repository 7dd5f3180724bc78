"""DEBUG subcommands (issue 12): PROTOCOL, DIGEST, DIGEST-VALUE,
CHANGE-REPL-ID, RELOAD, JMAP, and the older SLEEP, SET-ACTIVE-EXPIRE and
OBJECT, differentially against redis-server where the outputs are
comparable (PROTOCOL byte for byte), and the digest's own promises
(forty zeros when empty; equal data, equal digest, across Rowan servers of
different shard counts and histories; stable across kill -9 + restart)."""
import socket
import time

import pytest

from conftest import Server, _teardown_servers, encode_command

ZERO = "0" * 40
TYPES = ("string integer double bignum null array set map attrib push "
         "verbatim true false nope").split()


def raw_reply(port, args, proto=2, expect_replies=1):
    """The exact bytes the server answers to one command (RESP2 or RESP3),
    read until expect_replies complete top-level replies arrived."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        if proto == 3:
            s.sendall(encode_command("HELLO", "3"))
            _read_replies(s, 1)
        s.sendall(encode_command(*args))
        return _read_replies(s, expect_replies)
    finally:
        s.close()


def _read_replies(s, n):
    """Read until n complete RESP replies (attributes do not count)."""
    buf = b""
    while True:
        pos, done = 0, 0
        try:
            while done < n:
                pos, counted = _skip(buf, pos)
                done += counted
            return buf
        except IndexError:
            chunk = s.recv(65536)
            assert chunk, "connection closed after %r" % buf
            buf += chunk


def _skip(buf, pos):
    """Skip one RESP value at pos: (next pos, 1, or 0 for an attribute)."""
    end = buf.index(b"\r\n", pos) if b"\r\n" in buf[pos:] else None
    if end is None:
        raise IndexError
    t, line = buf[pos:pos + 1], buf[pos + 1:end]
    pos = end + 2
    if t in (b"$", b"=", b"!"):
        n = int(line)
        if n < 0:
            return pos, 1
        if len(buf) < pos + n + 2:
            raise IndexError
        return pos + n + 2, 1
    if t in (b"*", b"~", b">", b"%", b"|"):
        n = int(line)
        items = max(n, 0) * (2 if t in (b"%", b"|") else 1)
        for _ in range(items):
            pos, _c = _skip(buf, pos)
        return pos, 0 if t == b"|" else 1
    return pos, 1


@pytest.fixture(scope="module")
def pair_ports(pair):
    return [s.port for s in pair]


@pytest.mark.parametrize("proto", [2, 3])
@pytest.mark.parametrize("name", TYPES)
def test_protocol_same_bytes_as_redis(pair_ports, proto, name):
    # RESP3 push: the push, then a real reply (an attribute is no reply).
    n = 2 if name == "push" and proto == 3 else 1
    got = [raw_reply(p, ["DEBUG", "PROTOCOL", name], proto, n) for p in pair_ports]
    assert got[0] == got[1], name


@pytest.mark.parametrize("args", [
    ["DEBUG", "NOPE"], ["DEBUG", "PROTOCOL"], ["DEBUG", "DIGEST", "x"],
    ["DEBUG", "RELOAD", "BAD"], ["DEBUG", "CHANGE-REPL-ID"], ["DEBUG", "SLEEP", "0"],
    ["DEBUG", "SET-ACTIVE-EXPIRE", "1"], ["DEBUG", "OBJECT", "missing"],
    ["DEBUG", "DIGEST-VALUE"], ["DEBUG", "DIGEST-VALUE", "missing", "missing2"],
    ["DEBUG", "RELOAD"], ["DEBUG"],
])
def test_replies_like_redis(pair_ports, args):
    got = [raw_reply(p, args) for p in pair_ports]
    assert got[0] == got[1], args


def test_object_line_like_redis(pair):
    for s in pair:
        s.client().set("k", "12345")
    lines = [s.client(decode=True).execute_command("DEBUG", "OBJECT", "k") for s in pair]
    for line in lines:
        assert line.startswith("Value at:") and "encoding:int" in line, line
        assert "lru_seconds_idle:" in line
    for s in pair:
        s.client().delete("k")


def test_jmap_is_a_noop(server):
    assert server.client().execute_command("DEBUG", "JMAP") in (b"OK", "OK", True)


def fill(cl, order):
    """The same dataset, written in the given order, with other history."""
    ops = [
        lambda: cl.set("s", "v1"),
        lambda: cl.set("n", 42),
        lambda: cl.rpush("l", "a", "b", "c"),
        lambda: cl.hset("h", mapping={"f1": "x", "f2": "y", "f3": "z"}),
        lambda: cl.sadd("set", *["m%d" % i for i in range(300)]),
        lambda: cl.zadd("z", {"a": 1, "b": 2.5, "c": -3}),
        lambda: cl.xadd("st", {"f": "v"}, id="1-1"),
        lambda: cl.set("e", "x", pxat=4102444800000),
        lambda: cl.set("gone", "1"),
    ]
    for i in order:
        ops[i]()
    cl.delete("gone")


def digest(cl):
    d = cl.execute_command("DEBUG", "DIGEST")
    return d.decode() if isinstance(d, bytes) else d


def test_digest_empty_is_forty_zeros(server):
    cl = server.client()
    cl.flushall()
    assert digest(cl) == ZERO
    cl.set("k", "v")
    assert digest(cl) != ZERO and len(digest(cl)) == 40
    cl.delete("k")
    assert digest(cl) == ZERO


def test_digest_equal_data_equal_digest_across_servers():
    # Different shard counts and write orders: the same data, the same digest.
    made = [Server("rowan", extra={"shards": "64"}), Server("rowan", extra={"shards": "7"})]
    try:
        for s in made:
            s.start()
        a, b = made[0].client(), made[1].client()
        fill(a, range(9))
        fill(b, reversed(range(9)))
        # b also takes a detour: a member added and removed again
        b.sadd("set", "extra")
        b.srem("set", "extra")
        da, db = digest(a), digest(b)
        assert da == db != ZERO
        # any change shows
        for change, undo in [
            (lambda: b.hset("h", "f1", "X"), lambda: b.hset("h", "f1", "x")),
            (lambda: b.rpush("l", "d"), lambda: b.rpop("l")),
            (lambda: b.zadd("z", {"a": 1.5}), lambda: b.zadd("z", {"a": 1})),
            (lambda: b.persist("e"), lambda: b.pexpireat("e", 4102444800000)),
        ]:
            change()
            assert digest(b) != da
            undo()
            assert digest(b) == da
        # the same value under another db is another dataset
        b.move("s", 3)
        assert digest(b) != da
        b.execute_command("SELECT", 3)
        b.move("s", 0)
        b.execute_command("SELECT", 0)
        assert digest(b) == da
        # DIGEST-VALUE: the value alone, whatever the key
        a.rpush("l2", "a", "b", "c")
        va = a.execute_command("DEBUG", "DIGEST-VALUE", "l", "l2", "missing", "s")
        va = [v.decode() if isinstance(v, bytes) else v for v in va]
        assert va[0] == va[1] != ZERO
        assert va[2] == ZERO
        assert va[3] not in (ZERO, va[0])
        vb = b.execute_command("DEBUG", "DIGEST-VALUE", "l", "set", "h", "z")
        vb2 = a.execute_command("DEBUG", "DIGEST-VALUE", "l", "set", "h", "z")
        assert vb == vb2
    finally:
        _teardown_servers(made)


def test_digest_survives_kill9_and_reload(server_factory):
    srv = server_factory()
    cl = srv.client()
    fill(cl, range(9))
    before = digest(cl)
    assert cl.execute_command("DEBUG", "RELOAD") in (b"OK", "OK", True)
    assert digest(cl) == before
    srv.kill9()
    srv.restart()
    cl = srv.client()
    assert digest(cl) == before
    assert cl.lrange("l", 0, -1) == [b"a", b"b", b"c"]


def test_debug_disabled_refuses_new_subcommands(server_factory):
    srv = server_factory(extra={"enable-debug-command": "no"})
    cl = srv.resp()
    for args in (["DEBUG", "DIGEST"], ["DEBUG", "PROTOCOL", "map"], ["DEBUG", "RELOAD"]):
        assert "DEBUG command not allowed" in cl.err(*args)


def test_object_and_digest_value_under_concurrent_writes(server_factory):
    # DEBUG names no key in the command table, so it must lock the key's
    # shard itself: DEBUG OBJECT once read a list freed by a concurrent DEL
    # (SEGV in list_encoding under ASan).
    import threading
    srv = server_factory()
    stop = time.time() + 3
    errors = []

    def writer():
        cl = srv.client()
        while time.time() < stop:
            p = cl.pipeline(transaction=False)
            p.rpush("l", *range(200)).delete("l")
            p.hset("h", mapping={str(i): i for i in range(50)}).delete("h")
            p.execute()

    def reader():
        cl = srv.client()
        while time.time() < stop:
            for k in ("l", "h"):
                try:
                    cl.execute_command("DEBUG", "OBJECT", k)
                except Exception as e:   # a missing key is fine
                    if "no such key" not in str(e):
                        errors.append(e)
                        return
                cl.execute_command("DEBUG", "DIGEST-VALUE", k)
                cl.execute_command("DEBUG", "DIGEST")

    ts = [threading.Thread(target=writer), threading.Thread(target=reader),
          threading.Thread(target=reader)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert errors == []
    assert srv.client().ping()


def _dispatched_debug_subcommands():
    """The names DEBUG's dispatchers (debugCommand in t_server.c,
    debug_extra in t_debug.c) compare argv[1] with."""
    import os
    import re
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "redis-compat")
    names = set()
    for fname, fn in (("t_server.c", "void debugCommand(client *c)"),
                      ("t_debug.c", "int debug_extra(client *c)")):
        src = open(os.path.join(root, fname)).read()
        body = src[src.index(fn):]
        body = body[:body.index("\n}\n")]
        names |= set(re.findall(r'arg_is\(c, 1, "([a-z-]+)"\)', body))
    return names


def test_every_implemented_subcommand_is_in_help(server):
    """Every subcommand the dispatchers know has its line in DEBUG HELP, and
    each answers something other than the unknown-subcommand error (it is
    implemented)."""
    names = _dispatched_debug_subcommands()
    assert {"object", "sleep", "digest", "chunk-crash", "repl-block-fault", "session",
            "coldread", "help"} <= names, names
    cl = server.client(decode=True)
    lines = cl.execute_command("DEBUG", "HELP")
    listed = {line.split()[0].lower() for line in lines if line and not line.startswith(" ")}
    missing = names - listed
    assert not missing, "DEBUG HELP lacks %s" % sorted(missing)
    extra = listed - names - {"debug"}
    assert not extra, "DEBUG HELP lists unimplemented %s" % sorted(extra)
