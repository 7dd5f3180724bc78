"""Pipelined batches against redis-server, byte for byte the same input.

A read that brings several commands makes rowan walk them for their keys
before running them (redis-compat/prefetch.c, src/store/db_prefetch.c:
cache hints, with shard locks taken by trylock). The hints must change
nothing: the same stream, however the reads cut it, gets the same replies as
from redis-server, including SELECT and SWAPDB inside the batch, commands
whose first argument is no key, inline commands, a large argument, and a
malformed command at the end."""
import random
import time

from conftest import RawConn, RespError, encode_command


def _mixed_stream(rng, n):
    """n commands of many shapes, as bytes, and their count."""
    out = []
    for i in range(n):
        k = "pk:%d" % rng.randrange(40)
        pick = rng.randrange(14)
        if pick == 0:
            cmd = ("SELECT", str(rng.randrange(3)))
        elif pick == 1:
            cmd = ("SWAPDB", "0", str(1 + rng.randrange(2)))
        elif pick == 2:
            cmd = ("PING",)
        elif pick == 3:
            cmd = ("ECHO", "not-a-key-%d" % i)
        elif pick == 4:
            cmd = ("INCR", "ctr:%d" % rng.randrange(5))
        elif pick == 5:
            cmd = ("DEL", k, "pk:%d" % rng.randrange(40))
        elif pick == 6:
            cmd = ("MSET", k, "m%d" % i, "pk:%d" % rng.randrange(40), "n%d" % i)
        elif pick == 7:
            cmd = ("HSET", "h" + k, "f%d" % rng.randrange(3), "v%d" % i)
        elif pick == 8:
            cmd = ("GET", "h" + k)   # WRONGTYPE or nil or a value
        elif pick == 9:
            cmd = ("APPEND", k, "+%d" % i)
        elif pick == 10:
            cmd = ("EXISTS", k)
        elif pick == 11:
            out.append(b"GET " + k.encode() + b"\r\n")   # inline
            continue
        else:
            cmd = ("SET", k, "v%d" % i) if pick == 12 else ("GET", k)
        out.append(encode_command(*cmd))
    return b"".join(out), n


def _replay(port, data, n, chunks):
    """Send data cut at the given sizes (a pause between pieces, so the
    server reads them separately), read n replies."""
    c = RawConn(port)
    try:
        pos = 0
        for size in chunks:
            if pos >= len(data):
                break
            c.send(data[pos:pos + size])
            pos += size
            time.sleep(0.002)
        if pos < len(data):
            c.send(data[pos:])
        return [c.read_reply() for _ in range(n)]
    finally:
        c.sock.close()


def _reset(port):
    c = RawConn(port)
    assert c.call("FLUSHALL") == "OK"
    c.sock.close()


def _state(port):
    c = RawConn(port)
    got = []
    for db in range(3):
        assert c.call("SELECT", str(db)) == "OK"
        for i in range(40):
            k = "pk:%d" % i
            got.append((db, k, c.call("GET", k), c.call("HGETALL", "h" + k)))
        for i in range(5):
            got.append((db, i, c.call("GET", "ctr:%d" % i)))
    c.sock.close()
    return got


def _same(pair, data, n, chunks):
    rowan, redis = pair
    for s in pair:
        _reset(s.port)
    got = _replay(rowan.port, data, n, chunks)
    want = _replay(redis.port, data, n, chunks)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g == w, "reply %d: rowan %r, redis %r" % (i, g, w)
    assert _state(rowan.port) == _state(redis.port)


def test_one_batch(pair):
    data, n = _mixed_stream(random.Random(1), 300)
    _same(pair, data, n, [len(data)])


def test_batches_cut_anywhere(pair):
    rng = random.Random(2)
    data, n = _mixed_stream(rng, 300)
    for _ in range(3):
        chunks = [rng.choice((1, 7, 33, 144, 500, 2304, 4000)) for _ in range(400)]
        _same(pair, data, n, chunks)


def test_large_argument_in_a_batch(pair):
    big = "x" * (40 * 1024)   # above the edge's large-argument threshold
    cmds = [("SET", "a", "1"), ("SET", "big", big), ("GET", "a"), ("STRLEN", "big"),
            ("SET", "b", "2"), ("GET", "big")]
    data = b"".join(encode_command(*c) for c in cmds)
    _same(pair, data, len(cmds), [len(data)])
    _same(pair, data, len(cmds), [100, 20000, 5, 30000])


def test_malformed_after_valid_commands(pair):
    """The valid commands before a malformed one run and answer as in
    redis; then the connection gets a protocol error and is closed."""
    valid = [("SET", "m%d" % i, str(i)) for i in range(10)] + [("GET", "m3")]
    data = b"".join(encode_command(*c) for c in valid) + b"*2\r\n$3\r\nGET\r\n$-5\r\n"
    for s in pair:
        _reset(s.port)
    replies = []
    for s in pair:
        c = RawConn(s.port)
        c.send(data)
        got = [c.read_reply() for _ in range(len(valid))]
        err = c.read_reply()
        assert isinstance(err, RespError) and "Protocol error" in str(err.msg)
        assert c.wait_closed()
        replies.append(got)
    assert replies[0] == replies[1]
    assert replies[0][-1] == b"3"
    for s in pair:   # still serving
        c = RawConn(s.port)
        assert c.call("GET", "m9") == b"9"
        c.sock.close()
