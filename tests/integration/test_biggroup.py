"""Batches larger than one group entry (src/store/db.c, "Batches larger
than one group"): MSET of 100k and 300k keys, DEL/UNLINK of them, MSETNX,
MULTI with many SETs and EVAL writing 100k keys. Such a batch's effects do
not fit one 4 MiB log entry: they are logged as pieces and committed by one
small entry, so the batch is still all or nothing.

Covered: replies and final state (DBSIZE, sampled GETs) compared with a
real redis-server; the same after DEBUG RELOAD and after kill -9 + restart;
kill -9 in the middle of a huge MSET (DEBUG CHUNK-CRASH counts pieces too)
and at moments around one: after restart all of its keys or none; the
cleaner relocating pieces' entries; a 2-node cluster where the backup's
digests agree with the primary's after a huge MSET, also after the backup
is killed and restarted."""
import random
import shutil
import time

import pytest

from conftest import RespClient, Server, wait_for
from test_bigbatch import _send
from test_bigvalues import _wait_digests_agree, _wait_live

pytestmark = pytest.mark.rowan_only("a batch logged as pieces and a commit")

VAL = b"v" * 100


def key(i, p=b"k"):
    return b"%s:%08d" % (p, i)


def mset_args(n, p=b"k", val=VAL, cmd=b"MSET"):
    args = [cmd]
    for i in range(n):
        args += [key(i, p), val]
    return args


def answered(s, timeout):
    """Whether the command sent by _send was answered within timeout."""
    s.settimeout(timeout)
    try:
        return bool(s.recv(65536))
    except OSError:
        return False
    finally:
        s.close()


def both(c, ref, *args):
    got, want = c.call(*args), ref.call(*args)
    assert got == want, "%r...: rowan %r, redis %r" % (args[:3], got, want)
    return got


def sample(cl, n, p=b"k", step=997):
    """The values of every step-th key and the last one, and DBSIZE."""
    keys = [key(i, p) for i in range(0, n, step)] + [key(n - 1, p)]
    return cl.call("DBSIZE"), cl.call("MGET", *keys)


@pytest.fixture
def pair2(server_factory, request):
    if not shutil.which("redis-server"):
        pytest.skip("redis-server not installed")
    srv = server_factory({"pool-size": "1gb"})
    ref_srv = Server("redis")
    ref_srv.start()
    request.addfinalizer(ref_srv.cleanup)
    c, ref = srv.resp(), ref_srv.resp()
    for x in (c, ref):
        x.sock.settimeout(600)
    return srv, c, ref


def test_huge_batches_against_redis(pair2):
    """MSET of 100k and 300k keys, MSETNX, DEL and UNLINK of them, MULTI
    with 100k SETs, EVAL writing 100k keys: replies and state equal to
    redis-server's, also after DEBUG RELOAD and kill -9 + restart."""
    srv, c, ref = pair2
    both(c, ref, *mset_args(100000))
    assert sample(c, 100000) == sample(ref, 100000)
    both(c, ref, *mset_args(300000, b"m", b"w" * 100))
    assert sample(c, 300000, b"m") == sample(ref, 300000, b"m")
    # MSETNX: refused whole when one key exists, then all new keys
    both(c, ref, *mset_args(100000, b"k", b"x", b"MSETNX"))
    both(c, ref, *mset_args(100000, b"n", b"y" * 50, b"MSETNX"))
    assert sample(c, 100000, b"n") == sample(ref, 100000, b"n")
    # DEL of 100k keys (half of them missing), UNLINK of 300k
    both(c, ref, "DEL", *[key(i) for i in range(50000, 150000)])
    both(c, ref, "UNLINK", *[key(i, b"m") for i in range(300000)])
    assert sample(c, 100000) == sample(ref, 100000)
    # MULTI with 100k SETs (and an INCR), one reply each
    for x in (c, ref):
        assert x.call("MULTI") == "OK"
        for i in range(100000):
            x.send_command("SET", key(i, b"t"), b"%d" % i)
        for i in range(100000):
            assert x.read_reply() == "QUEUED"
        assert x.call("INCR", "counter") == "QUEUED"
    got, want = c.call("EXEC"), ref.call("EXEC")
    assert got == want and len(got) == 100001
    # a script writing 100k keys
    script = ("for i = 1, tonumber(ARGV[1]) do redis.call('SET', 'e:' .. i, ARGV[2]) end "
              "return redis.call('GET', 'e:' .. ARGV[1])")
    both(c, ref, "EVAL", script, 0, 100000, b"s" * 80)
    want = [sample(ref, 100000), sample(ref, 100000, b"n"), sample(ref, 100000, b"t"),
            ref.call("MGET", "e:1", "e:50000", "e:100000", "counter")]

    def state(x):
        return [sample(x, 100000), sample(x, 100000, b"n"), sample(x, 100000, b"t"),
                x.call("MGET", "e:1", "e:50000", "e:100000", "counter")]
    assert state(c) == want
    assert c.call("DEBUG", "RELOAD") == "OK"
    assert state(c) == want
    srv.kill9()
    # recovery replays ~1M entries: well over the default 10 s under ASan
    srv.start(timeout=120)
    c = srv.resp()
    c.sock.settimeout(600)
    assert state(c) == want
    inf = srv.client().info("rowan")
    assert int(inf["recovery_corrupt_entries"]) == 0, inf


def test_kill9_during_huge_mset(server_factory):
    """DEBUG CHUNK-CRASH n kills the server after the n-th piece of a huge
    MSET, before its commit: after restart none of its keys exist, and
    recovery says it ignored them. Then kills at moments around huge MSETs:
    an acknowledged one is all there, an unacknowledged one all or none."""
    srv = server_factory({"pool-size": "1gb"})
    c = srv.resp()
    c.sock.settimeout(600)
    assert c.call("SET", "keep", "1") == "OK"
    n = 200000   # ~30 MB of effects: about 8 pieces
    for crash in (1, 4, 7):
        assert c.call("DEBUG", "CHUNK-CRASH", crash) == "OK"
        s = _send(srv.port, mset_args(n, b"c%d" % crash))
        assert wait_for(lambda: srv.proc.poll() is not None, timeout=120), \
            "DEBUG CHUNK-CRASH %d did not fire" % crash
        assert not answered(s, 0.1)
        srv.start()
        c = srv.resp()
        c.sock.settimeout(600)
        assert c.call("DBSIZE") == 1, "a huge MSET cut short after %d pieces left keys" % crash
        log = srv.log_text(since_start=True)
        assert "whose commit was never written" in log, log[-2000:]
        assert int(srv.client().info("rowan")["recovery_corrupt_entries"]) == 0
    assert c.call("DEBUG", "RELOAD") == "OK"
    assert c.call("DBSIZE") == 1
    rnd = random.Random(7)
    total = 1
    for attempt in range(4):
        p = b"r%d" % attempt
        s = _send(srv.port, mset_args(n // 2, p))
        time.sleep(rnd.choice((0.0, 0.05, 0.2, 0.5)))
        acked = answered(s, 0.001)
        srv.kill9()
        srv.start()
        c = srv.resp()
        c.sock.settimeout(600)
        got = c.call("DBSIZE")
        assert got in (total, total + n // 2), "a huge MSET torn: %d keys (before %d)" % (got, total)
        if acked:
            assert got == total + n // 2, "an acknowledged MSET was lost"
        if got > total:
            assert c.call("GET", key(n // 2 - 1, p)) == VAL
        total = got
        assert int(srv.client().info("rowan")["recovery_corrupt_entries"]) == 0


def test_cleaner_moves_pieces(server_factory):
    """MSET of 60k keys, overwritten 30 times (about 300 MB of log) in a
    256 MB pool: the cleaner relocates the pieces' entries; every sampled
    value is the last one, before and after kill -9 and DEBUG RELOAD."""
    srv = server_factory({"pool-size": "256mb"})
    c = srv.resp()
    c.sock.settimeout(600)
    n = 60000
    for r in range(30):
        val = b"%03d" % r + b"z" * 150
        rep = c.call(*mset_args(n, b"k", val))
        for _ in range(100):   # the pool may be full until the cleaner catches up
            if rep == "OK":
                break
            assert str(rep).startswith("OOM"), rep
            time.sleep(0.2)
            rep = c.call(*mset_args(n, b"k", val))
        assert rep == "OK", rep

    def check(c):
        size, vals = sample(c, n, step=101)
        assert size == n and all(v == val for v in vals)
    assert int(srv.client().info("rowan")["clean_segments"]) > 0
    check(c)
    assert c.call("DEBUG", "RELOAD") == "OK"
    check(c)
    srv.kill9()
    srv.start()
    c = srv.resp()
    c.sock.settimeout(600)
    check(c)
    assert int(srv.client().info("rowan")["recovery_corrupt_entries"]) == 0


def test_cluster_replicates_huge_mset(cluster_factory):
    """2 nodes, each the backup of the other: a huge MSET (one slot, by a
    hash tag) and a DEL of its keys replicate, the shards' digests agree;
    also after the backup is killed and restarted (its b-log's pieces are
    replayed with their commit) and after another huge MSET meanwhile."""
    cl = cluster_factory(2, 2, options={"pool-size": "512mb", "replication-timeout": 1500})
    _wait_live(cl)
    rc = cl.cluster_client(socket_timeout=300)
    nd = rc.get_node_from_key("{h}")
    c = RespClient(nd.port, host=nd.host)
    c.sock.settimeout(300)
    n = 100000
    assert c.call(*mset_args(n, b"{h}a")) == "OK"
    d = _wait_digests_agree(cl)
    assert sum(x[1] for x in d.values()) >= n
    assert c.call("DEL", *[key(i, b"{h}a") for i in range(0, n, 2)]) == n // 2
    _wait_digests_agree(cl)
    backup = 1 - [i for i, x in enumerate(cl.nodes) if x.port == nd.port][0]
    cl.kill9(backup)
    cl.restart(backup)
    _wait_live(cl)
    _wait_digests_agree(cl)
    assert c.call(*mset_args(n, b"{h}b")) == "OK"
    d = _wait_digests_agree(cl)
    assert sum(x[1] for x in d.values()) >= n + n // 2
    assert rc.get(key(n - 1, b"{h}b")) == VAL and rc.get(key(1, b"{h}a")) == VAL
    assert rc.get(key(0, b"{h}a")) is None


def test_huge_mset_without_room(server_factory):
    """A huge MSET the pool has no room for: -OOM (no_room), nothing
    applied; a smaller one then works, and the server keeps serving."""
    srv = server_factory({"pool-size": "64mb"})
    c = srv.resp()
    c.sock.settimeout(300)
    assert c.call("SET", "keep", "1") == "OK"
    rep = c.call(*mset_args(400000))
    assert str(rep).startswith("OOM command not allowed when the storage pool is full"), rep
    assert c.call("DBSIZE") == 1 and c.call("EXISTS", key(0), key(399999)) == 0
    assert srv.client().info("rowan")["oom_last_reason"] == "no_room"
    assert c.call(*mset_args(60000)) == "OK"
    assert c.call("DBSIZE") == 60001
    srv.kill9()
    srv.start()
    c = srv.resp()
    assert c.call("DBSIZE") == 60001 and c.call("GET", key(59999)) == VAL


def test_primary_killed_inside_huge_mset(cluster_factory):
    """A managed 3-node cluster (k=3): the primary of a slot is killed
    (kill -9) while it ships a huge MSET to its backups, as soon as they
    have received a segment of it (its pieces) but, with 45 MB to go, most
    likely not its commit. The new primary takes in everything it holds of
    the shard (committed or not): the pieces must not be among it. After the
    failover the MSET is all there or not at all, the earlier keys are, and
    the survivors' digests agree."""
    from test_failover import OPTS, primary_of_key, wait_digests_agree, wait_healthy
    cl = cluster_factory(3, 3, options=dict(OPTS, **{"pool-size": "512mb"}), zookeeper=True)
    wait_healthy(cl)
    victim = primary_of_key(cl, "{h}")
    nd = cl.nodes[victim]
    survivors = [x for i, x in enumerate(cl.nodes) if i != victim]
    c = RespClient(nd.port)
    c.sock.settimeout(300)
    assert c.call(*mset_args(1000, b"{h}old")) == "OK"
    n = 300000

    def blog(x):
        return int(x.info("rowan")["rowan"]["blog_segments"])
    before = [blog(x) for x in survivors]
    s = _send(nd.port, mset_args(n, b"{h}new"))
    assert wait_for(lambda: any(blog(x) > b for x, b in zip(survivors, before)), timeout=60,
                    interval=0.005), "the backups received nothing"
    nd.kill9()
    nd.stopped = True
    acked = answered(s, 0.1)
    wait_healthy(cl, n=2)
    wait_digests_agree(survivors, timeout=60)
    for x in survivors:
        r = RespClient(x.port)
        r.sock.settimeout(120)
        try:
            if r.call("GET", key(999, b"{h}old")) == VAL:   # the new primary
                got = r.call("EXISTS", *[key(i, b"{h}new") for i in range(0, n, 97)])
                want = len(range(0, n, 97))
                assert got in (0, want), "a huge MSET torn by a failover: %d of %d" % (got, want)
                if acked:
                    assert got == want
                assert r.call("GET", key(0, b"{h}old")) == VAL
                break
        finally:
            r.close()
    else:
        pytest.fail("no survivor serves the slot")
