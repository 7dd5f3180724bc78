"""Differential testing helpers: run the same commands against the
rowan-server under test and a real redis-server (Debian's, the reference),
and compare the exact replies (RespClient: errors with their full text).

Use the `ref` fixture (a module-scoped redis-server, see ref_server) with
`c` (RespClient on Rowan): both(c, ref, cmd...) runs one command on both,
asserts equal replies and returns Rowan's. Skipped when the tests already
target redis (nothing to compare with) or no redis-server is installed."""
import shutil

import pytest

from conftest import RespClient, RespError, Server


def ref_server(request, target):
    if target == "redis":
        pytest.skip("differential test: already running against redis-server")
    if not shutil.which("redis-server"):
        pytest.skip("no redis-server to compare with")
    srv = Server("redis")
    srv.start()
    request.addfinalizer(srv.cleanup)
    return srv


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
