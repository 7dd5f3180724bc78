"""Streams: differential tests against a real redis-server (Debian's 7.0)
run side by side with rowan-server -- the same command sequences, replies
compared exactly (IDs given explicitly; times and Redis's radix-tree layout
masked) -- plus Rowan-only checks: blocking XREAD / XREADGROUP wake-ups,
entries and consumer-group state surviving kill -9, a 3-node cluster whose
replicas' digests agree after stream and group writes, bounded memory for
huge COUNTs, and redis-py's stream API on top of it all."""
import threading
import time

import pytest

from conftest import RespClient, RespError, Server, key_slot, wait_for

pytestmark = pytest.mark.rowan_only("differential: starts its own rowan-server and redis-server")

WRONGTYPE = RespError("WRONGTYPE Operation against a key holding the wrong kind of value")


# --------------------------------------------------------------------------
# the pair of servers
# --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def servers():
    rowan = Server("rowan")
    ref = Server("redis")
    rowan.start()
    ref.start()
    yield rowan, ref
    rowan.cleanup()
    ref.cleanup()


class Pair:
    def __init__(self, rowan, ref):
        self.a = rowan.resp()
        self.b = ref.resp()

    def both(self, *args, mask=None):
        ra = self.a.call(*args)
        rb = self.b.call(*args)
        if mask is not None:
            ra, rb = mask(ra), mask(rb)
        assert ra == rb, "%r:\n rowan %r\n redis %r" % (args, ra, rb)
        return ra

    def close(self):
        self.a.close()
        self.b.close()


@pytest.fixture
def d(servers):
    p = Pair(*servers)
    p.both("FLUSHALL")
    yield p
    p.close()


def masked_fields(names):
    """A mask replacing the values of the named fields (at any depth of a
    flat field/value list) by '*'."""
    names = set(n.encode() for n in names)

    def mask(v):
        if isinstance(v, list):
            out = []
            skip = False
            for x in v:
                if skip:
                    out.append("*")
                    skip = False
                    continue
                out.append(mask(x))
                skip = isinstance(x, bytes) and x in names
            return out
        return v
    return mask


def pel_times(v):
    """XPENDING extended / XINFO FULL pending rows: mask idle/delivery times."""
    if isinstance(v, list) and len(v) in (3, 4) and isinstance(v[0], bytes) and b"-" in v[0] \
            and all(isinstance(x, int) for x in v[-2:]):
        return v[:-2] + ["*", v[-1]]
    if isinstance(v, list):
        return [pel_times(x) for x in v]
    return v


XINFO_MASK = masked_fields(["radix-tree-nodes", "seen-time", "idle"])


def xinfo_mask(v):
    return pel_times(XINFO_MASK(v))


# --------------------------------------------------------------------------
# XADD, XLEN, XRANGE, XREVRANGE, XDEL
# --------------------------------------------------------------------------
def test_xadd_ids_and_errors(d):
    d.both("XADD", "s", "1-1", "a", "1", "b", "2")
    d.both("XADD", "s", "1-*", "c", "3")
    d.both("XADD", "s", "1", "d", "4")
    d.both("XADD", "s", "2-*", "e", "5")
    d.both("XADD", "s", "2-5", "f", "6")
    d.both("XADD", "s", "0-0", "x", "y")
    d.both("XADD", "new", "0-0", "x", "y")
    d.both("XADD", "new", "0-*", "x", "y")
    d.both("XADD", "new", "0", "x", "y")
    for bad in ("abc", "1-x", "-", "+", "18446744073709551616", "1-18446744073709551616",
                "-1", "1--1", "1-2-3", "", "1-*-", "*-1", " 5", "+5"):
        d.both("XADD", "s", bad, "f", "v")
    d.both("XADD", "s", "18446744073709551615-18446744073709551615", "f", "v")
    d.both("XADD", "s", "*", "f", "v")
    d.both("XADD", "s", "18446744073709551615-*", "f", "v")
    d.both("XADD", "big", "5-18446744073709551615", "f", "v")
    d.both("XADD", "big", "5-*", "f", "v")
    d.both("XADD", "big", "*", "f", "v", mask=lambda r: r if isinstance(r, RespError) else "id")
    d.both("XRANGE", "s", "-", "+")
    d.both("XLEN", "s")
    d.both("XLEN", "nokey")
    # arity and field counts
    d.both("XADD", "s", "*")
    d.both("XADD", "s", "9-1", "f")
    d.both("XADD", "s", "9-1", "f", "v", "g")
    d.both("XADD", "s")
    # NOMKSTREAM
    d.both("XADD", "nokey", "NOMKSTREAM", "1-1", "f", "v")
    d.both("EXISTS", "nokey")
    d.both("XADD", "big", "NOMKSTREAM", "6-1", "f", "v")
    # binary and empty fields, repeated fields kept
    d.both("XADD", "bin", "1-1", b"\x00\r\n", b"\xff", "", "", "f", "1", "f", "2")
    d.both("XRANGE", "bin", "-", "+")
    d.both("TYPE", "bin")
    d.both("OBJECT", "ENCODING", "bin")


def test_xadd_wrongtype(d):
    d.both("SET", "str", "x")
    for cmd in (("XADD", "str", "1-1", "f", "v"), ("XLEN", "str"), ("XRANGE", "str", "-", "+"),
                ("XREVRANGE", "str", "+", "-"), ("XDEL", "str", "1-1"),
                ("XTRIM", "str", "MAXLEN", "1"), ("XREAD", "STREAMS", "str", "0"),
                ("XGROUP", "CREATE", "str", "g", "0"), ("XINFO", "STREAM", "str"),
                ("XACK", "str", "g", "1-1"), ("XPENDING", "str", "g"), ("XSETID", "str", "1-1")):
        d.both(*cmd)
    d.both("XADD", "s", "1-1", "f", "v")
    d.both("LPUSH", "s", "x")
    d.both("GET", "s")


def test_xrange(d):
    for i in range(1, 21):
        d.both("XADD", "s", "%d-%d" % (i // 3, i), "n", str(i))
    for args in (("-", "+"), ("-", "+", "COUNT", "5"), ("3", "5"), ("3-4", "5-15"),
                 ("(3-4", "5"), ("3", "(5-15"), ("(3-4", "(3-5"), ("(3", "+"),
                 ("-", "+", "COUNT", "0"), ("-", "+", "COUNT", "-3"), ("5", "3"),
                 ("(18446744073709551615-18446744073709551615", "+"), ("-", "(0-0"),
                 ("(-", "+"), ("-", "(+"), ("x", "+"), ("-", "+", "COUNT"), ("-", "+", "FOO", "1"),
                 ("-", "+", "COUNT", "x"), ("0", "18446744073709551615"),
                 ("-", "+", "COUNT", "9223372036854775807")):
        d.both("XRANGE", "s", *args)
        rev = (args[1], args[0]) + args[2:]
        d.both("XREVRANGE", "s", *rev)
    d.both("XRANGE", "nokey", "-", "+")
    d.both("XRANGE", "nokey", "-", "+", "COUNT", "0")
    d.both("XRANGE", "s", "-")


def test_xdel_and_empty_stream(d):
    for i in range(1, 8):
        d.both("XADD", "s", "1-%d" % i, "f", str(i))
    d.both("XDEL", "s", "1-2", "1-2", "1-9", "1-4")
    d.both("XDEL", "s", "1-3", "bad")
    d.both("XDEL", "nokey", "1-1")
    d.both("XLEN", "s")
    d.both("XRANGE", "s", "-", "+")
    d.both("XINFO", "STREAM", "s", mask=xinfo_mask)
    d.both("XDEL", "s", "1-1", "1-3", "1-5", "1-6", "1-7")
    # An emptied stream stays (unlike other collections).
    d.both("EXISTS", "s")
    d.both("XLEN", "s")
    d.both("XINFO", "STREAM", "s", mask=xinfo_mask)
    d.both("XADD", "s", "1-7", "f", "v")
    d.both("XADD", "s", "1-8", "f", "v")


def test_generic_key_commands(d):
    d.both("XADD", "s", "1-1", "f", "v")
    d.both("XADD", "s", "2-1", "g", "w")
    d.both("XGROUP", "CREATE", "s", "grp", "0")
    d.both("XREADGROUP", "GROUP", "grp", "c", "COUNT", "1", "STREAMS", "s", ">")
    d.both("TYPE", "s")
    d.both("OBJECT", "ENCODING", "s")
    d.both("EXPIRE", "s", "100")
    d.both("TTL", "s")
    d.both("COPY", "s", "s2")
    d.both("TTL", "s2")
    d.both("XRANGE", "s2", "-", "+")
    d.both("XINFO", "GROUPS", "s2")
    d.both("XPENDING", "s2", "grp")
    d.both("RENAME", "s2", "s3")
    d.both("XINFO", "STREAM", "s3", "FULL", mask=xinfo_mask)
    d.both("PERSIST", "s3")
    d.both("TTL", "s3")
    d.both("SCAN", "0", "TYPE", "stream", mask=lambda r: sorted(r[1]))
    d.both("SORT", "s")
    d.both("MEMORY", "USAGE", "s", mask=lambda r: isinstance(r, int) and r > 0)
    d.both("MOVE", "s", "1")
    d.both("SELECT", "1")
    d.both("XLEN", "s")
    d.both("MOVE", "s", "0")
    d.both("SELECT", "0")
    d.both("SWAPDB", "0", "1")
    d.both("SWAPDB", "0", "1")
    d.both("XRANGE", "s", "-", "+")
    d.both("DEL", "s", "s3")
    d.both("EXISTS", "s", "s2", "s3")


# --------------------------------------------------------------------------
# trimming: MAXLEN / MINID, exact and approximate (node boundaries)
# --------------------------------------------------------------------------
def test_trim_exact(d):
    for i in range(1, 31):
        d.both("XADD", "s", "%d-1" % i, "f", str(i))
    d.both("XTRIM", "s", "MAXLEN", "25")
    d.both("XTRIM", "s", "MAXLEN", "=", "20")
    d.both("XTRIM", "s", "MINID", "12")
    d.both("XTRIM", "s", "MINID", "=", "15-0")
    d.both("XRANGE", "s", "-", "+")
    d.both("XADD", "s", "MAXLEN", "3", "40-1", "f", "v")
    d.both("XADD", "s", "MINID", "30", "41-1", "f", "v")
    d.both("XRANGE", "s", "-", "+")
    d.both("XADD", "s", "MAXLEN", "0", "42-1", "f", "v")
    d.both("XLEN", "s")
    d.both("XINFO", "STREAM", "s", mask=xinfo_mask)
    d.both("XTRIM", "nokey", "MAXLEN", "1")
    for bad in (("MAXLEN",), ("MAXLEN", "-1"), ("MAXLEN", "x"), ("MINID", "x"),
                ("MAXLEN", "1", "MINID", "1"), ("MAXLEN", "1", "LIMIT", "10"),
                ("LIMIT", "10"), ("MAXLEN", "~", "1", "LIMIT", "-1"), ("FOO",),
                ("MAXLEN", "~"), ("MAXLEN", "1", "extra")):
        d.both("XTRIM", "s", *bad)
    d.both("XADD", "s", "MAXLEN", "1", "MINID", "1", "*", "f", "v")
    d.both("XADD", "s", "LIMIT", "5", "*", "f", "v")
    d.both("XADD", "s", "MAXLEN", "5", "LIMIT", "5", "*", "f", "v")


def test_trim_approx_nodes(d):
    for i in range(1, 351):
        d.both("XADD", "s", "%d-1" % i, "f", str(i))
    d.both("XTRIM", "s", "MAXLEN", "~", "320")
    d.both("XTRIM", "s", "MAXLEN", "~", "180")
    d.both("XLEN", "s")
    d.both("XTRIM", "s", "MINID", "~", "290")
    d.both("XTRIM", "s", "MAXLEN", "~", "0", "LIMIT", "50")
    d.both("XTRIM", "s", "MAXLEN", "~", "0", "LIMIT", "100")
    d.both("XINFO", "STREAM", "s", mask=xinfo_mask)
    d.both("XADD", "s", "MAXLEN", "~", "10", "400-1", "f", "v")
    d.both("XLEN", "s")
    # Deleted entries still count in their node.
    for i in range(401, 460):
        d.both("XADD", "t", "%d-1" % i, "f", str(i))
    d.both("XDEL", "t", *["%d-1" % i for i in range(401, 450, 2)])
    d.both("XTRIM", "t", "MAXLEN", "~", "5")
    d.both("XINFO", "STREAM", "t", mask=xinfo_mask)
    # Big values: nodes close on stream-node-max-bytes.
    for i in range(1, 40):
        d.both("XADD", "b", "%d-1" % i, "f", "x" * 700)
    d.both("XTRIM", "b", "MAXLEN", "~", "20")
    d.both("XLEN", "b")
    d.both("XINFO", "STREAM", "b", mask=lambda r: xinfo_mask(r)[:6])


def test_node_config(servers, d):
    d.both("CONFIG", "SET", "stream-node-max-entries", "10")
    try:
        d.both("CONFIG", "GET", "stream-node-max-entries")
        for i in range(1, 60):
            d.both("XADD", "s", "%d-1" % i, "f", str(i))
        d.both("XTRIM", "s", "MAXLEN", "~", "25")
        d.both("XLEN", "s")
        d.both("XINFO", "STREAM", "s", mask=lambda r: xinfo_mask(r)[:4])
    finally:
        d.both("CONFIG", "SET", "stream-node-max-entries", "100")
    d.both("CONFIG", "GET", "stream-node-max-bytes")


# --------------------------------------------------------------------------
# XREAD (non-blocking)
# --------------------------------------------------------------------------
def test_xread(d):
    for i in range(1, 6):
        d.both("XADD", "a", "1-%d" % i, "f", str(i))
        d.both("XADD", "b", "2-%d" % i, "g", str(i))
    d.both("XREAD", "STREAMS", "a", "b", "0", "0")
    d.both("XREAD", "COUNT", "2", "STREAMS", "a", "b", "1-3", "0")
    d.both("XREAD", "STREAMS", "a", "b", "$", "$")
    d.both("XREAD", "STREAMS", "a", "nokey", "1-5", "0")
    d.both("XREAD", "STREAMS", "a", "b", "1-5", "2-4")
    d.both("XREAD", "COUNT", "-5", "STREAMS", "a", "0")
    d.both("XREAD", "COUNT", "9223372036854775807", "STREAMS", "a", "0")
    for bad in (("STREAMS", "a"), ("STREAMS", "a", "b", "0"), ("STREAMS", "a", "x"),
                ("STREAMS", "a", ">"), ("GROUP", "g", "c", "STREAMS", "a", "0"),
                ("NOACK", "STREAMS", "a", "0"), ("COUNT", "x", "STREAMS", "a", "0"),
                ("BLOCK", "x", "STREAMS", "a", "0"), ("BLOCK", "-1", "STREAMS", "a", "0"),
                ("FOO", "STREAMS", "a", "0"), ("COUNT", "1"), ("STREAMS", "a", "+")):
        d.both("XREAD", *bad)
    d.both("XREAD", "BLOCK", "10", "STREAMS", "a", "$")
    d.both("XREAD", "BLOCK", "10", "STREAMS", "a", "0")


def test_resp3_shapes(d):
    d.both("HELLO", "3", mask=lambda r: None)
    d.both("XADD", "a", "1-1", "f", "v")
    d.both("XREAD", "STREAMS", "a", "0")
    d.both("XRANGE", "a", "-", "+")
    d.both("XGROUP", "CREATE", "a", "g", "0")
    d.both("XREADGROUP", "GROUP", "g", "c", "STREAMS", "a", ">")
    d.both("XINFO", "GROUPS", "a")
    d.both("XINFO", "STREAM", "a", mask=xinfo_mask)
    d.both("XREAD", "STREAMS", "a", "1-1")
    d.both("XPENDING", "a", "g", "-", "+", "10", mask=pel_times)


# --------------------------------------------------------------------------
# consumer groups
# --------------------------------------------------------------------------
def test_xgroup(d):
    d.both("XGROUP", "CREATE", "s", "g", "$")
    d.both("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
    d.both("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
    d.both("XGROUP", "CREATE", "s", "g2", "0", "ENTRIESREAD", "3")
    d.both("XGROUP", "CREATE", "s", "g3", "0", "ENTRIESREAD", "-2")
    d.both("XGROUP", "CREATE", "s", "g3", "0", "ENTRIESREAD", "x")
    d.both("XGROUP", "CREATE", "s", "g3", "bad")
    d.both("XGROUP", "CREATE", "s", "g3", "0", "FOO")
    d.both("XGROUP", "CREATE", "s", "g3", "0", "MKSTREAM", "ENTRIESREAD", "1", "X")
    d.both("XGROUP", "CREATE", "s")
    d.both("XGROUP", "FOO")
    d.both("XGROUP", "HELP", mask=lambda r: isinstance(r, list))
    for i in range(1, 6):
        d.both("XADD", "s", "1-%d" % i, "f", str(i))
    d.both("XGROUP", "CREATECONSUMER", "s", "g", "alice")
    d.both("XGROUP", "CREATECONSUMER", "s", "g", "alice")
    d.both("XGROUP", "CREATECONSUMER", "s", "nog", "alice")
    d.both("XGROUP", "CREATECONSUMER", "nokey", "g", "alice")
    d.both("XGROUP", "SETID", "s", "g", "1-2")
    d.both("XGROUP", "SETID", "s", "g", "$", "ENTRIESREAD", "5")
    d.both("XGROUP", "SETID", "s", "g", "0", "ENTRIESREAD")
    d.both("XGROUP", "SETID", "s", "nog", "0")
    d.both("XGROUP", "SETID", "s", "g", "-")
    d.both("XINFO", "GROUPS", "s")
    d.both("XREADGROUP", "GROUP", "g", "bob", "STREAMS", "s", ">")
    d.both("XGROUP", "SETID", "s", "g", "0")
    d.both("XREADGROUP", "GROUP", "g", "bob", "COUNT", "2", "STREAMS", "s", ">")
    d.both("XINFO", "CONSUMERS", "s", "g", mask=XINFO_MASK)
    d.both("XGROUP", "DELCONSUMER", "s", "g", "bob")
    d.both("XGROUP", "DELCONSUMER", "s", "g", "bob")
    d.both("XPENDING", "s", "g")
    d.both("XGROUP", "DESTROY", "s", "g")
    d.both("XGROUP", "DESTROY", "s", "g")
    d.both("XGROUP", "DESTROY", "nokey", "g")
    d.both("XINFO", "GROUPS", "s")


def test_xreadgroup_and_pending(d):
    for i in range(1, 11):
        d.both("XADD", "s", "1-%d" % i, "f", str(i))
    d.both("XGROUP", "CREATE", "s", "g", "0")
    d.both("XREADGROUP", "GROUP", "g", "alice", "COUNT", "3", "STREAMS", "s", ">")
    d.both("XREADGROUP", "GROUP", "g", "bob", "COUNT", "2", "STREAMS", "s", ">")
    d.both("XREADGROUP", "GROUP", "g", "carol", "NOACK", "COUNT", "1", "STREAMS", "s", ">")
    d.both("XREADGROUP", "GROUP", "g", "alice", "STREAMS", "s", "0")
    d.both("XREADGROUP", "GROUP", "g", "alice", "COUNT", "1", "STREAMS", "s", "1-1")
    d.both("XREADGROUP", "GROUP", "g", "nobody", "STREAMS", "s", "0")
    d.both("XPENDING", "s", "g")
    d.both("XPENDING", "s", "g", "-", "+", "10", mask=pel_times)
    d.both("XPENDING", "s", "g", "-", "+", "10", "bob", mask=pel_times)
    d.both("XPENDING", "s", "g", "-", "+", "10", "nobody")
    d.both("XPENDING", "s", "g", "(1-1", "(1-5", "2", mask=pel_times)
    d.both("XPENDING", "s", "g", "IDLE", "0", "-", "+", "10", mask=pel_times)
    d.both("XPENDING", "s", "g", "IDLE", "100000", "-", "+", "10")
    d.both("XPENDING", "s", "g", "IDLE", "10", "-", "+")
    d.both("XPENDING", "s", "g", "-", "+")
    d.both("XPENDING", "s", "g", "-", "+", "x")
    d.both("XPENDING", "s", "nog")
    d.both("XPENDING", "nokey", "g")
    d.both("XACK", "s", "g", "1-1", "1-1", "1-2", "1-9")
    d.both("XACK", "s", "g", "1-3", "bad")
    d.both("XACK", "s", "nog", "1-3")
    d.both("XACK", "nokey", "g", "1-3")
    d.both("XPENDING", "s", "g")
    # deleted entries show up as nil in the history
    d.both("XDEL", "s", "1-4")
    d.both("XREADGROUP", "GROUP", "g", "bob", "STREAMS", "s", "0")
    d.both("XINFO", "GROUPS", "s")
    d.both("XINFO", "STREAM", "s", "FULL", mask=xinfo_mask)
    d.both("XINFO", "STREAM", "s", "FULL", "COUNT", "2", mask=xinfo_mask)
    d.both("XINFO", "STREAM", "s", "FULL", "COUNT", "0", mask=xinfo_mask)
    for bad in (("GROUP", "g", "c", "STREAMS", "s", "$"), ("GROUP", "nog", "c", "STREAMS", "s", ">"),
                ("GROUP", "g", "c", "STREAMS", "nokey", ">"), ("STREAMS", "s", ">", "x"),
                ("GROUP", "g", "c", "STREAMS", "s"), ("COUNT", "1", "STREAMS", "s", ">"),
                ("GROUP", "g", "c", "STREAMS", "s", "x")):
        d.both("XREADGROUP", *bad)
    # many streams in one call
    d.both("XADD", "t", "5-1", "f", "v")
    d.both("XGROUP", "CREATE", "t", "g", "0")
    d.both("XREADGROUP", "GROUP", "g", "alice", "STREAMS", "s", "t", ">", ">")
    d.both("XREADGROUP", "GROUP", "g", "alice", "STREAMS", "s", "t", "0", "0")


def test_lag_and_entries_read(d):
    for i in range(1, 6):
        d.both("XADD", "s", "1-%d" % i, "f", str(i))
    d.both("XGROUP", "CREATE", "s", "g1", "0")
    d.both("XGROUP", "CREATE", "s", "g2", "1-2")
    d.both("XGROUP", "CREATE", "s", "g3", "$")
    d.both("XGROUP", "CREATE", "s", "g4", "0", "ENTRIESREAD", "0")
    d.both("XINFO", "GROUPS", "s")
    d.both("XREADGROUP", "GROUP", "g1", "c", "COUNT", "2", "STREAMS", "s", ">")
    d.both("XREADGROUP", "GROUP", "g4", "c", "COUNT", "2", "STREAMS", "s", ">")
    d.both("XINFO", "GROUPS", "s")
    d.both("XDEL", "s", "1-4")
    d.both("XINFO", "GROUPS", "s")
    d.both("XREADGROUP", "GROUP", "g1", "c", "STREAMS", "s", ">")
    d.both("XREADGROUP", "GROUP", "g2", "c", "STREAMS", "s", ">")
    d.both("XINFO", "GROUPS", "s")
    d.both("XTRIM", "s", "MAXLEN", "1")
    d.both("XINFO", "GROUPS", "s")
    d.both("XINFO", "STREAM", "s", mask=xinfo_mask)


def test_xclaim(d):
    for i in range(1, 8):
        d.both("XADD", "s", "1-%d" % i, "f", str(i))
    d.both("XGROUP", "CREATE", "s", "g", "0")
    d.both("XREADGROUP", "GROUP", "g", "alice", "STREAMS", "s", ">")
    d.both("XCLAIM", "s", "g", "bob", "0", "1-1", "1-2")
    d.both("XCLAIM", "s", "g", "bob", "0", "1-3", "JUSTID")
    d.both("XCLAIM", "s", "g", "bob", "1000000", "1-4")
    d.both("XCLAIM", "s", "g", "carol", "0", "1-4", "RETRYCOUNT", "7", "IDLE", "5000", "JUSTID")
    d.both("XCLAIM", "s", "g", "carol", "0", "1-5", "TIME", "1", "LASTID", "9-9")
    d.both("XCLAIM", "s", "g", "carol", "0", "1-9", "FORCE")
    d.both("XACK", "s", "g", "1-6")
    d.both("XCLAIM", "s", "g", "carol", "0", "1-6")
    d.both("XCLAIM", "s", "g", "carol", "0", "1-6", "FORCE")
    d.both("XDEL", "s", "1-7")
    d.both("XCLAIM", "s", "g", "carol", "0", "1-7")
    # repeated IDs are claimed again, from the state the first mention left
    d.both("XCLAIM", "s", "g", "erin", "0", "1-1", "1-2", "1-1", "1-6", "1-6", "1-7", "1-1")
    d.both("XCLAIM", "s", "g", "fred", "0", "1-2", "1-2", "JUSTID")
    d.both("XCLAIM", "s", "g", "gina", "3000", "1-4", "1-4", "1-3", "IDLE", "4000")
    d.both("XPENDING", "s", "g", "-", "+", "10", mask=pel_times)
    d.both("XPENDING", "s", "g", "IDLE", "4000", "-", "+", "10", mask=pel_times)
    d.both("XINFO", "GROUPS", "s")
    for bad in (("x", "1-1"), ("0", "1-1", "FOO"), ("0", "1-1", "IDLE", "x"),
                ("0", "1-1", "TIME", "x"), ("0", "1-1", "RETRYCOUNT", "x"),
                ("0", "1-1", "LASTID", "x"), ("0", "bad")):
        d.both("XCLAIM", "s", "g", "dave", *bad)
    d.both("XCLAIM", "s", "nog", "dave", "0", "1-1")
    d.both("XCLAIM", "nokey", "g", "dave", "0", "1-1")
    d.both("XINFO", "CONSUMERS", "s", "g", mask=XINFO_MASK)


def test_xautoclaim(d):
    for i in range(1, 12):
        d.both("XADD", "s", "1-%d" % i, "f", str(i))
    d.both("XGROUP", "CREATE", "s", "g", "0")
    d.both("XREADGROUP", "GROUP", "g", "alice", "STREAMS", "s", ">")
    d.both("XDEL", "s", "1-3", "1-4")
    d.both("XAUTOCLAIM", "s", "g", "bob", "0", "0", "COUNT", "3")
    d.both("XAUTOCLAIM", "s", "g", "bob", "0", "1-6", "COUNT", "2", "JUSTID")
    d.both("XAUTOCLAIM", "s", "g", "bob", "0", "(1-8")
    d.both("XAUTOCLAIM", "s", "g", "carol", "100000", "0")
    d.both("XAUTOCLAIM", "s", "g", "carol", "0", "0", "COUNT", "100000000")
    d.both("XPENDING", "s", "g", "-", "+", "20", mask=pel_times)
    for bad in (("x", "0"), ("0", "x"), ("0", "0", "COUNT", "0"), ("0", "0", "COUNT", "x"),
                ("0", "0", "FOO"), ("0", "(18446744073709551615-18446744073709551615")):
        d.both("XAUTOCLAIM", "s", "g", "dave", *bad)
    d.both("XAUTOCLAIM", "s", "nog", "dave", "0", "0")
    d.both("XAUTOCLAIM", "nokey", "g", "dave", "0", "0")


def test_xsetid_and_xinfo(d):
    d.both("XSETID", "nokey", "1-1")
    d.both("XADD", "s", "5-1", "f", "v")
    d.both("XADD", "s", "5-2", "f", "v")
    d.both("XDEL", "s", "5-1")
    d.both("XSETID", "s", "5-1")
    d.both("XSETID", "s", "5-2", "ENTRIESADDED", "0")
    d.both("XSETID", "s", "5-2", "ENTRIESADDED", "-1")
    d.both("XSETID", "s", "5-2", "MAXDELETEDID", "6-0")
    d.both("XSETID", "s", "5-2", "FOO", "1")
    d.both("XSETID", "s", "x")
    d.both("XSETID", "s", "10-0", "ENTRIESADDED", "100", "MAXDELETEDID", "9-0")
    d.both("XSETID", "s", "9-5")
    d.both("XADD", "s", "10-0", "f", "v")
    d.both("XADD", "s", "10-*", "f", "v")
    d.both("XINFO", "STREAM", "s", mask=xinfo_mask)
    d.both("XINFO", "STREAM", "nokey")
    d.both("XINFO", "STREAM", "s", "FULL", "COUNT")
    d.both("XINFO", "STREAM", "s", "FOO")
    d.both("XINFO", "STREAM", "s", "FULL", "COUNT", "x")
    d.both("XINFO", "GROUPS", "s", "x")
    d.both("XINFO", "CONSUMERS", "s", "nog")
    d.both("XINFO", "FOO", "s")
    d.both("XINFO", "HELP", mask=lambda r: isinstance(r, list))
    d.both("XSETID", "e", "1-1")
    d.both("XGROUP", "CREATE", "e", "g", "$", "MKSTREAM")
    d.both("XSETID", "e", "7-7", "ENTRIESADDED", "3")
    d.both("XINFO", "STREAM", "e", mask=xinfo_mask)
    d.both("XINFO", "GROUPS", "e")


def test_multi_exec(d):
    d.both("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
    d.both("MULTI")
    d.both("XADD", "s", "1-1", "f", "v")
    d.both("XADD", "s", "1-2", "f", "w")
    d.both("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">")
    d.both("XREADGROUP", "GROUP", "g", "c", "BLOCK", "0", "STREAMS", "s", ">")
    d.both("XREAD", "BLOCK", "0", "STREAMS", "s", "$")
    d.both("XACK", "s", "g", "1-1")
    d.both("XLEN", "s")
    d.both("EXEC", mask=pel_times)
    d.both("XPENDING", "s", "g", "-", "+", "10", mask=pel_times)


@pytest.mark.parametrize("seed", list(range(1, 9)))
def test_random_sequences(d, seed):
    # Seeded random command sequences, the same on both servers. IDs are
    # explicit; min-idle times are 0 or far beyond the test's length, so
    # the two clocks never decide differently.
    import random
    rnd = random.Random(seed)
    keys = ["s0", "s1"]
    nxt = {k: 1 for k in keys}
    d.both("XGROUP", "CREATE", "s0", "g", "0", "MKSTREAM")
    d.both("XGROUP", "CREATE", "s1", "g", "$", "MKSTREAM")

    def rid(k):
        return "%d-%d" % (rnd.randint(0, nxt[k] + 2), rnd.randint(0, 3))

    for _ in range(600):
        k = rnd.choice(keys)
        op = rnd.randrange(13)
        if op <= 3:
            ms = nxt[k]
            nxt[k] += rnd.randint(0, 2)
            trim = []
            r = rnd.random()
            if r < 0.3:
                trim = ["MAXLEN", rnd.choice(["~", "=", "~"]), str(rnd.randint(0, 150))]
            elif r < 0.4:
                trim = ["MINID", rnd.choice(["~", "="]), rid(k)]
            if trim and trim[1] == "~" and rnd.random() < 0.3:
                trim += ["LIMIT", str(rnd.randint(0, 250))]
            d.both("XADD", k, *trim, "%d-*" % ms, "f", str(rnd.randint(0, 9)) * rnd.randint(0, 300))
        elif op == 4:
            d.both("XDEL", k, *[rid(k) for _ in range(rnd.randint(1, 4))])
        elif op == 5:
            d.both("XTRIM", k, rnd.choice(["MAXLEN", "MINID"]), rnd.choice(["~", "="]),
                   str(rnd.randint(0, 120)) if rnd.random() < 0.5 else rid(k))
        elif op == 6:
            lo, hi = sorted([rid(k), rid(k)], key=lambda x: tuple(map(int, x.split("-"))))
            d.both(rnd.choice(["XRANGE", "XREVRANGE"]), k, rnd.choice(["-", lo, "(" + lo]),
                   rnd.choice(["+", hi, "(" + hi]), "COUNT", str(rnd.randint(0, 5)))
        elif op == 7:
            d.both("XREADGROUP", "GROUP", "g", rnd.choice("abc"), "COUNT", str(rnd.randint(1, 6)),
                   *(["NOACK"] if rnd.random() < 0.2 else []),
                   "STREAMS", k, rnd.choice([">", ">", "0", rid(k)]))
        elif op == 8:
            d.both("XACK", k, "g", *[rid(k) for _ in range(rnd.randint(1, 4))])
        elif op == 9:
            d.both("XCLAIM", k, "g", rnd.choice("abcd"), rnd.choice(["0", "100000000"]),
                   *[rid(k) for _ in range(rnd.randint(1, 3))],
                   *rnd.choice([[], ["JUSTID"], ["FORCE"], ["RETRYCOUNT", "5"], ["LASTID", rid(k)]]))
        elif op == 10:
            d.both("XAUTOCLAIM", k, "g", rnd.choice("abcd"), rnd.choice(["0", "100000000"]),
                   rid(k), "COUNT", str(rnd.randint(1, 5)), *rnd.choice([[], ["JUSTID"]]))
        elif op == 11:
            d.both("XPENDING", k, "g", "-", "+", "100", *rnd.choice([[], ["a"], ["b"]]), mask=pel_times)
            d.both("XPENDING", k, "g")
        else:
            r = rnd.random()
            if r < 0.2:
                d.both("XGROUP", "SETID", k, "g", rid(k))
            elif r < 0.3:
                d.both("XGROUP", "DELCONSUMER", k, "g", rnd.choice("abcd"))
            d.both("XINFO", "GROUPS", k)
            d.both("XINFO", "STREAM", k, mask=xinfo_mask)
            d.both("XLEN", k)
    for k in keys:
        d.both("XINFO", "STREAM", k, "FULL", "COUNT", "0", mask=xinfo_mask)


def test_command_table(d):
    for name in ("xadd", "xrange", "xlen", "xdel", "xtrim", "xack", "xclaim", "xsetid", "xpending"):
        d.both("COMMAND", "INFO", name, mask=lambda r: [r[0][0], r[0][1], r[0][3:6]])
    d.both("COMMAND", "GETKEYS", "XADD", "s", "*", "f", "v")
    d.both("COMMAND", "GETKEYS", "XREAD", "COUNT", "2", "STREAMS", "a", "b", "0", "0")
    d.both("COMMAND", "GETKEYS", "XREADGROUP", "GROUP", "g", "c", "STREAMS", "streams", ">")
    d.both("COMMAND", "GETKEYS", "XREAD", "STREAMS", "a", "b", "0")
    d.both("COMMAND", "GETKEYS", "XINFO", "STREAM", "s")
    d.both("COMMAND", "GETKEYS", "XGROUP", "CREATE", "s", "g", "0")


def _call_async_on(port, *args):
    box = {}
    cl = RespClient(port)

    def run():
        box["reply"] = cl.call(*args)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, box, cl


def test_blocked_group_reader_told_when_gone(servers):
    # The same scenario on both servers: a blocked XREADGROUP whose group is
    # destroyed, or whose key is deleted, gets Redis's error.
    replies = []
    for srv in servers:
        c = srv.resp()
        c.call("FLUSHALL")
        out = []
        for gone in (("XGROUP", "DESTROY", "s", "g"), ("DEL", "s"), ("UNLINK", "x", "s")):
            c.call("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
            t, box, cl = _call_async_on(srv.port, "XREADGROUP", "GROUP", "g", "c", "BLOCK", "0",
                                        "STREAMS", "s", ">")
            assert wait_for(lambda: srv.info("clients")["clients"]["blocked_clients"] == "1", 10)
            out.append(c.call(*gone))
            t.join(10)
            out.append(box.get("reply"))
            cl.close()
            c.call("DEL", "s")
        replies.append(out)
    assert replies[0] == replies[1]
    assert replies[0][1] == RespError("NOGROUP the consumer group this client was blocked on no longer exists")


# --------------------------------------------------------------------------
# Rowan-only: blocking, durability, replication, memory bounds, redis-py
# --------------------------------------------------------------------------
@pytest.fixture
def rowan(servers):
    srv = servers[0]
    c = srv.resp()
    c.call("FLUSHALL")
    return srv


def _call_async(port, *args):
    box = {}
    cl = RespClient(port)

    def run():
        box["reply"] = cl.call(*args)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, box, cl


def _blocked_count(srv, n):
    return wait_for(lambda: srv.info("clients")["clients"]["blocked_clients"] == str(n), 10)


def test_xread_block_wakeup(rowan):
    c = rowan.resp()
    c.call("XADD", "s", "1-1", "f", "v")
    t1, b1, c1 = _call_async(rowan.port, "XREAD", "BLOCK", "0", "STREAMS", "s", "$")
    t2, b2, c2 = _call_async(rowan.port, "XREAD", "BLOCK", "10000", "COUNT", "5", "STREAMS", "nokey", "s", "$", "$")
    assert _blocked_count(rowan, 2)
    time.sleep(0.2)
    assert "reply" not in b1
    # '$' meant "after 1-1", whatever arrives meanwhile
    assert c.call("XADD", "s", "2-1", "g", "w") == b"2-1"
    t1.join(10)
    t2.join(10)
    assert b1["reply"] == [[b"s", [[b"2-1", [b"g", b"w"]]]]]
    assert b2["reply"] == [[b"s", [[b"2-1", [b"g", b"w"]]]]]
    # timeout: null array; a stream created later wakes a waiter on it
    assert RespClient(rowan.port).call("XREAD", "BLOCK", "100", "STREAMS", "s", "$") is None
    t3, b3, c3 = _call_async(rowan.port, "XREAD", "BLOCK", "0", "STREAMS", "later", "0")
    assert _blocked_count(rowan, 1)
    c.call("XADD", "later", "3-1", "h", "x")
    t3.join(10)
    assert b3["reply"] == [[b"later", [[b"3-1", [b"h", b"x"]]]]]
    for cl in (c1, c2, c3):
        cl.close()


def test_xread_block_every_reader_woken(rowan):
    # The first waiter asks for entries after 100-0: an entry at 2-1 is not
    # for it, but must still reach the '$' waiter queued behind it.
    c = rowan.resp()
    c.call("XADD", "s", "1-1", "f", "v")
    t1, b1, c1 = _call_async(rowan.port, "XREAD", "BLOCK", "0", "STREAMS", "s", "100-0")
    assert _blocked_count(rowan, 1)
    t2, b2, c2 = _call_async(rowan.port, "XREAD", "BLOCK", "0", "STREAMS", "s", "$")
    assert _blocked_count(rowan, 2)
    c.call("XADD", "s", "2-1", "g", "w")
    t2.join(10)
    assert b2.get("reply") == [[b"s", [[b"2-1", [b"g", b"w"]]]]]
    assert "reply" not in b1
    c.call("XADD", "s", "100-1", "h", "x")
    t1.join(10)
    assert b1.get("reply") == [[b"s", [[b"100-1", [b"h", b"x"]]]]]
    for cl in (c1, c2):
        cl.close()


def test_xreadgroup_block_wakeup(rowan):
    c = rowan.resp()
    c.call("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
    t1, b1, c1 = _call_async(rowan.port, "XREADGROUP", "GROUP", "g", "alice", "BLOCK", "0", "STREAMS", "s", ">")
    t2, b2, c2 = _call_async(rowan.port, "XREADGROUP", "GROUP", "g", "bob", "BLOCK", "0", "STREAMS", "s", ">")
    assert _blocked_count(rowan, 2)
    c.call("XADD", "s", "1-1", "f", "v")
    assert wait_for(lambda: "reply" in b1 or "reply" in b2, 10)
    time.sleep(0.2)
    # exactly one consumer got the entry; the other still waits
    assert ("reply" in b1) != ("reply" in b2)
    first, other = (b1, b2) if "reply" in b1 else (b2, b1)
    assert first["reply"] == [[b"s", [[b"1-1", [b"f", b"v"]]]]]
    c.call("XADD", "s", "1-2", "f", "w")
    assert wait_for(lambda: "reply" in other, 10)
    assert other["reply"] == [[b"s", [[b"1-2", [b"f", b"w"]]]]]
    pend = c.call("XPENDING", "s", "g")
    assert pend[0] == 2
    assert sorted(pend[3]) == [[b"alice", b"1"], [b"bob", b"1"]]
    for cl in (c1, c2):
        cl.close()


def _state(c, key):
    # Unmasked: seen-times and delivery times are logged absolute values.
    full = c.call("XINFO", "STREAM", key, "FULL", "COUNT", "0")
    return full, c.call("XRANGE", key, "-", "+")


def test_kill9_keeps_entries_and_groups(server_factory):
    srv = server_factory()
    c = srv.resp()
    for i in range(1, 301):
        assert c.call("XADD", "s", "MAXLEN", "~", "250", "%d-1" % i, "f", str(i), "g", "x" * (i % 50)) == b"%d-1" % i
    c.call("XDEL", "s", "280-1", "281-1")
    c.call("XGROUP", "CREATE", "s", "g", "0")
    c.call("XGROUP", "CREATE", "s", "other", "$", "ENTRIESREAD", "7")
    # many small group writes: the history gets compacted into snapshots
    for i in range(60):
        c.call("XREADGROUP", "GROUP", "g", "c%d" % (i % 3), "COUNT", "2", "STREAMS", "s", ">")
    c.call("XACK", "s", "g", *["%d-1" % i for i in range(1, 300, 3)])
    c.call("XCLAIM", "s", "g", "thief", "0", "200-1", "201-1", "RETRYCOUNT", "9")
    c.call("XAUTOCLAIM", "s", "g", "auto", "0", "0", "COUNT", "5")
    c.call("XGROUP", "CREATECONSUMER", "s", "g", "idle-one")
    c.call("XSETID", "s", "1000-0", "ENTRIESADDED", "5000", "MAXDELETEDID", "281-1")
    c.call("XADD", "e", "1-1", "f", "v")
    c.call("XDEL", "e", "1-1")
    # A short stream with a long history: it is recovered from snapshots
    # (object.h compacts a history past twice the collection's size).
    c.call("XGROUP", "CREATE", "churn", "g", "$", "MKSTREAM")
    for i in range(1, 401):
        c.call("XADD", "churn", "%d-1" % i, "f", "x" * 40)
        c.call("XREADGROUP", "GROUP", "g", "c%d" % (i % 4), "STREAMS", "churn", ">")
        if i % 2:
            c.call("XACK", "churn", "g", "%d-1" % i)
        if i > 3:
            c.call("XDEL", "churn", "%d-1" % (i - 3))
    before = {k: _state(c, k) for k in ("s", "e", "churn")}
    pend = c.call("XPENDING", "s", "g", "-", "+", "1000")
    for _ in range(2):
        srv.kill9()
        srv.restart()
        c = srv.resp()
        after = {k: _state(c, k) for k in ("s", "e", "churn")}
        assert after == before
        # delivery times are logged, not recomputed: only idle moves on
        assert [p[:2] + p[3:] for p in c.call("XPENDING", "s", "g", "-", "+", "1000")] == \
               [p[:2] + p[3:] for p in pend]
    assert c.call("XADD", "s", "1000-0", "f", "v") == RespError(
        "ERR The ID specified in XADD is equal or smaller than the target stream top item")
    assert c.call("XADD", "s", "1000-1", "f", "v") == b"1000-1"


def test_kill9_under_load_keeps_acknowledged(server_factory):
    # Writers run until the server is killed; everything acknowledged must
    # be there after the restart: entries added, deliveries pending, acks.
    srv = server_factory()
    stop = threading.Event()
    logs = {}

    def writer(key):
        log = logs[key] = {"added": [], "delivered": [], "acked": [], "ack_sent": set()}
        try:
            c = RespClient(srv.port)
            c.call("XGROUP", "CREATE", key, "g", "$", "MKSTREAM")
            i = 0
            while not stop.is_set():
                i += 1
                if c.call("XADD", key, "%d-1" % i, "f", "v%d" % i) == b"%d-1" % i:
                    log["added"].append(b"%d-1" % i)
                if i % 3 == 0:
                    rep = c.call("XREADGROUP", "GROUP", "g", "c", "COUNT", "2", "STREAMS", key, ">")
                    if isinstance(rep, list):
                        ids = [e[0] for e in rep[0][1]]
                        log["delivered"] += ids
                        if ids:
                            log["ack_sent"].add(ids[0])
                            if c.call("XACK", key, "g", ids[0]) == 1:
                                log["acked"].append(ids[0])
        except Exception:   # the kill: connection reset or closed
            return

    threads = [threading.Thread(target=writer, args=("w%d" % k,), daemon=True) for k in range(3)]
    for t in threads:
        t.start()
    time.sleep(1.5)
    srv.kill9()
    stop.set()
    for t in threads:
        t.join(10)
    srv.restart()
    c = srv.resp()
    for key, log in logs.items():
        assert log["added"], key
        ids = set(e[0] for e in c.call("XRANGE", key, "-", "+"))
        assert set(log["added"]) <= ids, key
        pending = set(p[0] for p in c.call("XPENDING", key, "g", "-", "+", "1000000"))
        for i in log["delivered"]:
            if i not in log["ack_sent"]:
                assert i in pending, (key, i)
        for i in log["acked"]:
            assert i not in pending, (key, i)
        group = c.call("XINFO", "GROUPS", key)[0]
        assert group[6] == b"last-delivered-id"
        if log["delivered"]:
            ms = lambda x: int(x.split(b"-")[0])
            assert ms(group[7]) >= max(ms(x) for x in log["delivered"]), key


def test_memory_bounds(rowan):
    c = rowan.resp()
    c.call("XADD", "s", "1-1", "f", "v")
    c.call("XGROUP", "CREATE", "s", "g", "0")
    huge = "9223372036854775807"
    assert len(c.call("XRANGE", "s", "-", "+", "COUNT", huge)) == 1
    assert len(c.call("XREAD", "COUNT", huge, "STREAMS", "s", "0")[0][1]) == 1
    assert len(c.call("XREADGROUP", "GROUP", "g", "c", "COUNT", huge, "STREAMS", "s", ">")[0][1]) == 1
    assert c.call("XPENDING", "s", "g", "-", "+", huge)[0][0] == b"1-1"
    assert c.call("XAUTOCLAIM", "s", "g", "c", "0", "0", "COUNT", "576460752303423487")[1][0][0] == b"1-1"
    assert c.call("XINFO", "STREAM", "s", "FULL", "COUNT", huge)[1] == 1
    # XREADGROUP without COUNT on a long stream: at most 65536 entries per
    # call (their pending entries must fit one log entry); the next call
    # gets the rest.
    from conftest import encode_command
    n = 70000
    c.send(b"".join(encode_command("XADD", "long", "%d-1" % i, "f", "v") for i in range(1, n + 1)))
    for i in range(1, n + 1):
        assert c.read_reply() == b"%d-1" % i
    c.call("XGROUP", "CREATE", "long", "g", "0")
    first = c.call("XREADGROUP", "GROUP", "g", "c", "STREAMS", "long", ">")[0][1]
    assert len(first) == 65536 and first[-1][0] == b"65536-1"
    rest = c.call("XREADGROUP", "GROUP", "g", "c", "STREAMS", "long", ">")[0][1]
    assert len(rest) == n - 65536 and rest[0][0] == b"65537-1"
    assert c.call("XPENDING", "long", "g")[0] == n
    assert len(c.call("XREADGROUP", "GROUP", "g", "c", "NOACK", "STREAMS", "long", "0")[0][1]) == 65536
    # An XADD whose fields do not fit one log entry is logged in pieces
    # (src/store/bigval.c), as Redis takes it.
    args = ["XADD", "big", "1-1"]
    for i in range(300000):
        args += ["f%d" % i, "v" * 8]
    assert c.call(*args) == b"1-1"
    got = c.call("XRANGE", "big", "-", "+")
    assert len(got) == 1 and len(got[0][1]) == 600000
    assert got[0][1][-2:] == [b"f299999", b"v" * 8]
    assert c.call("PING") == "PONG"


def test_redis_py_api(rowan):
    r = rowan.client(decode=True)
    assert r.xadd("s", {"a": "1"}, id="1-1") == "1-1"
    i2 = r.xadd("s", {"b": "2"})
    assert r.xlen("s") == 2
    assert r.xrange("s") == [("1-1", {"a": "1"}), (i2, {"b": "2"})]
    assert r.xgroup_create("s", "g", id="0") is True
    got = r.xreadgroup("g", "c", {"s": ">"}, count=1)
    assert got == [["s", [("1-1", {"a": "1"})]]]
    assert r.xack("s", "g", "1-1") == 1
    info = r.xinfo_stream("s")
    assert info["length"] == 2 and info["groups"] == 1
    assert r.xinfo_groups("s")[0]["name"] == "g"
    assert r.xpending("s", "g")["pending"] == 0
    assert r.xtrim("s", maxlen=1) == 0          # "~": no whole node to drop, as in Redis
    assert r.xtrim("s", maxlen=1, approximate=False) == 1
    assert r.xread({"s": 0}) == [["s", [(i2, {"b": "2"})]]]


def test_cluster_replicas_agree(cluster_factory):
    from test_replication import BASE_OPTS, owner_map, wait_digests_agree
    cl = cluster_factory(3, 3, options=BASE_OPTS)
    owner = owner_map(cl)
    conns = {}

    def node_for(key):
        i = owner[key_slot(key)]
        if i not in conns:
            conns[i] = RespClient(cl.nodes[i].port)
        return conns[i]

    keys = ["st%d" % j for j in range(12)]
    for k in keys:
        c = node_for(k)
        for i in range(1, 41):
            assert c.call("XADD", k, "MAXLEN", "~", "30", "%d-1" % i, "f", str(i)) == b"%d-1" % i
        assert c.call("XGROUP", "CREATE", k, "g", "0") == "OK"
        c.call("XREADGROUP", "GROUP", "g", "a", "COUNT", "7", "STREAMS", k, ">")
        c.call("XREADGROUP", "GROUP", "g", "b", "COUNT", "5", "STREAMS", k, ">")
        c.call("XACK", k, "g", "12-1", "13-1")
        c.call("XCLAIM", k, "g", "z", "0", "14-1")
        c.call("XDEL", k, "20-1")
        c.call("XTRIM", k, "MAXLEN", "25")
        # clock-chosen IDs and times are the primary's, logged as values
        assert isinstance(c.call("XADD", k, "*", "auto", "1"), bytes)
        c.call("XAUTOCLAIM", k, "g", "y", "0", "0", "COUNT", "3")
    # XREAD's keys are after STREAMS: one slot is fine, two are CROSSSLOT
    c = node_for("{t}a")
    assert c.call("XREAD", "STREAMS", "{t}a", "{t}b", "0", "0") is None
    assert c.call("XREAD", "STREAMS", "st0", "st1", "0", "0") == RespError(
        "CROSSSLOT Keys in request don't hash to the same slot")
    wait_digests_agree(cl)
    for cn in conns.values():
        cn.close()
