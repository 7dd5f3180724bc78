"""Found by tests/soak/chaos.py (faults under CPU and disk pressure),
reproduced deterministically. Rowan-only: managed clusters.

A wiped sole replica: under CPU starvation a managed cluster can shrink to
one member (the CM fails the others when their leases lapse); the writes
it then acknowledges live on that node alone. If that node then loses its
pool (kill -9, directory wiped) and comes back, the configuration still
names it as the primary of every shard (no other member holds them), and
its pool holds nothing of them. It must not serve those empty copies as
the shards' history: a read of an acknowledged key answered nil is an
acknowledged write lost silently, and the node would then re-sync its
empty copies onto the other nodes when they rejoin as learners (what the
chaos run showed: with min-replicas-to-write 1 the sole member acknowledged
nothing, the returning nodes' learner copies held every acknowledged
write, and the wiped node's empty copies replaced them). It refuses them (-CLUSTERDOWN), as a
damaged copy no replica can repair is refused (reconcile.h) -- also after
a later restart, when its pool exists again but still holds nothing."""
import os
import signal
import time

import pytest

from conftest import ConnectionClosed, RespClient, RespError, stop_process, wait_for
from test_failover import OPTS, cm_node, wait_healthy

pytestmark = pytest.mark.rowan_only("managed Rowan cluster (ZooKeeper, cm.c, reconcile.c)")


def _set_until_ok(port, key, value, timeout=20.0):
    """SET through one node until it acknowledges (the others' failure must
    first be committed, and their shards promoted to this node)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            c = RespClient(port, timeout=10.0)
            try:
                last = c.call("SET", key, value)
            finally:
                c.close()
        except (OSError, ConnectionClosed) as e:   # a reconfiguration closed it
            last = e
        if last == "OK":
            return
        time.sleep(0.1)
    raise AssertionError("SET %s never acknowledged by the sole member: %r" % (key, last))


def test_wiped_sole_replica_refuses_instead_of_serving_empty(cluster_factory):
    # min-replicas-to-write 0: the sole member acknowledges writes (with the
    # default 1 it refuses them, and the learners' copies hold the history)
    cl = cluster_factory(3, 3, options=dict(OPTS, **{"min-replicas-to-write": 0}), zookeeper=True)
    wait_healthy(cl)
    cm = cm_node(cl)
    assert cm is not None
    others = [nd for nd in cl.nodes if nd is not cm]
    for nd in others:
        stop_process(nd.pid)
        nd.stopped = True
    try:
        # the CM fails both: it is the only member, primary of every shard
        for i in range(20):
            _set_until_ok(cm.port, "solekey%d" % i, "v%d" % i)
        # its pool is lost
        ci = cl.nodes.index(cm)
        cl.kill9(ci)
        os.unlink(os.path.join(cm.dir, "rowan.pool"))
        cl.restart(ci)

        def settled():
            try:
                c = RespClient(cm.port, timeout=10.0)
                try:
                    rep = c.call("GET", "solekey0")
                finally:
                    c.close()
            except (OSError, ConnectionClosed):
                return None
            if isinstance(rep, RespError) and (rep.msg.startswith(("TRYAGAIN", "LOADING")) or
                                               "holds no lease" in rep.msg):
                return None     # not yet decided
            return (rep,)
        # and again after a plain restart: the pool exists now, and still
        # holds nothing of the shards (the chaos run's second kill)
        for what in ("wiped", "restarted again"):
            got = wait_for(settled, timeout=20.0, interval=0.1)
            assert got, "the %s node never answered GET but TRYAGAIN or no lease" % what
            rep = got[0]
            assert isinstance(rep, RespError) and "no replica holds" in rep.msg, (
                "the %s sole replica answered %r for an acknowledged key (expected "
                "-CLUSTERDOWN: no replica holds the shard's history)" % (what, rep))
            assert "NOT served" in cm.log_text(since_start=True)
            cl.kill9(ci)
            cl.restart(ci)
    finally:
        for nd in others:
            os.kill(nd.pid, signal.SIGCONT)
            nd.stopped = False

