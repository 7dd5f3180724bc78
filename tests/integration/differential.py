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


def open_conns(srv, n=4):
    """Connections accepted and served before a script starts: worker 0
    accepts every connection and hands them round robin to the workers."""
    conns = []
    for _ in range(n):
        cl = srv.resp()
        cl.sock.settimeout(1.0)
        conns.append(cl)
    return conns


def busy_conn(conns, *probe):
    """One of conns that answers -BUSY while a script runs (one served by
    another worker than the script's: the script's worker waits for it)."""
    for cl in conns:
        try:
            rep = call(cl, *(probe or ("ping",)))
        except OSError:
            continue
        if isinstance(rep, RespError) and rep.msg.startswith("BUSY"):
            return cl
    raise AssertionError("no connection got -BUSY")


def both(c, ref, *args):
    got, want = call(c, *args), call(ref, *args)
    assert got == want, "%r: rowan %r, redis %r" % (args, got, want)
    return got


def fresh_ref(srv):
    cl = RespClient(srv.port)
    assert cl.call("FLUSHALL") == "OK"
    return cl
