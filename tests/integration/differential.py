"""Differential testing helpers: run the same commands against the
rowan-server under test and a real redis-server (Debian's, the reference),
and compare the exact replies (RespClient: errors with their full text).

Use the `ref` fixture (on conftest's module-scoped `ref_srv`) with
`c` (RespClient on Rowan): both(c, ref, cmd...) runs one command on both,
asserts equal replies and returns Rowan's."""
from conftest import RespClient, RespError


def call(cl, *args):
    try:
        return cl.call(*args)
    except RespError as e:
        return e


def both(c, ref, *args):
    got, want = call(c, *args), call(ref, *args)
    assert got == want, "%r: rowan %r, redis %r" % (args, got, want)
    return got


def fresh_ref(srv):
    cl = RespClient(srv.port)
    assert cl.call("FLUSHALL") == "OK"
    return cl
