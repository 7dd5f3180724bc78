"""LCS, SUBSTR and RESTORE-ASKING against a real redis-server: the same
commands on both, replies compared (RESP2 and RESP3)."""
import random
import shutil

import pytest
import redis


pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None,
                                reason="needs redis-server as the reference")


def replies(cl, cmds):
    """Exact replies (RespClient: errors come back as RespError values)."""
    out = []
    for args in cmds:
        v = cl.call(*args)
        out.append(repr(v))
    return out


def lcs_commands(rnd):
    cmds = [("lcs", "a", "b"), ("lcs", "a", "missing"), ("lcs", "missing", "missing2", "idx"),
            ("lcs", "a", "b", "len"), ("lcs", "a", "b", "idx"), ("lcs", "a", "b", "idx", "withmatchlen"),
            ("lcs", "a", "b", "idx", "minmatchlen", 2, "withmatchlen"),
            ("lcs", "a", "b", "IDX", "MINMATCHLEN", -3), ("lcs", "a", "b", "len", "idx"),
            ("lcs", "a", "b", "minmatchlen"), ("lcs", "a", "b", "minmatchlen", "x"),
            ("lcs", "a", "b", "bogus"), ("lcs", "a", "lst"), ("lcs", "a"),
            ("substr", "a", 1, 3), ("substr", "a", -3, -1), ("substr", "missing", 0, 1),
            ("substr", "lst", 0, 1), ("substr", "a", "x", 1), ("substr", "a", 0)]
    for _ in range(40):
        cmds.append(("set", "x", "".join(rnd.choice("abc") for _ in range(rnd.randrange(0, 30)))))
        cmds.append(("set", "y", "".join(rnd.choice("abcd") for _ in range(rnd.randrange(0, 30)))))
        cmds.append(("lcs", "x", "y", "idx", "withmatchlen"))
        cmds.append(("lcs", "x", "y"))
        cmds.append(("lcs", "y", "x", "idx", "minmatchlen", rnd.randrange(0, 4)))
    return cmds


@pytest.mark.parametrize("proto", [2, 3])
def test_lcs_substr_like_redis(server, ref_srv, proto):
    got, want = [], []
    for srv, out in ((server, got), (ref_srv, want)):
        cl = srv.resp()
        if proto == 3:
            cl.call("hello", 3)
        out.extend(replies(cl, [("flushall",), ("set", "a", "ohmytext"), ("set", "b", "mynewtext"),
                                ("rpush", "lst", "x")] + lcs_commands(random.Random(5))))
        cl.close()
    assert got == want


def test_lcs_table_bounded(r):
    r.set("a", "x" * 20000)
    r.set("b", "y" * 20000)
    with pytest.raises(redis.ResponseError, match="Insufficient memory"):
        r.execute_command("lcs", "a", "b")
    assert r.ping()


def test_restore_asking(r):
    r.set("k", "v")
    d = r.dump("k")
    assert r.execute_command("restore-asking", "k2", 0, d)
    assert r.get("k2") == b"v"
