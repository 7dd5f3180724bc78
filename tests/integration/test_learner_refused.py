"""Found by tests/soak/chaos.py (m13: managed k=3, 200 ms lease, ASan, CPU
pressure), reproduced deterministically. Rowan-only: managed clusters.

The sequence (every shard, not only the shard 35 the chaos checker read):
  1. three members, k=3, writes acknowledged with min-replicas-to-write 1,
     so every acknowledged write is on its primary and on a backup;
  2. the two non-CM nodes stall (SIGSTOP, or CPU starvation): the CM fails
     both, it is the sole member and primary of every shard, with no backup
     (with min-replicas-to-write 1 it acknowledges nothing from then on);
  3. they come back and rejoin as *learners* (member.c learner_copy marks
     their copies damaged: a learner's copy may have holes);
  4. the CM is killed and its pool wiped; it restarts, the configuration
     still names it primary of every shard, and its pool holds nothing
     (reconcile.c holds_nothing): no backup to confirm, so every shard is
     refused (test_chaos_wipe.py: serving the empty copies would lose the
     history). The learners, whose copies held every acknowledged write,
     were never asked (only backups are) and never become backups (a
     refused shard is never caught up, so the CM never promotes them).
     Worse, in the chaos run's order (wipe first, learners joining the
     wiped primary after), the primary queued a re-sync of each shard to
     the new learners on adopting the configuration (repl.c
     repl_config_changed) whatever the shard's state: its EMPTY copies
     replaced theirs. The refusal hid the loss; nothing could recover it.
So the shards stay -CLUSTERDOWN for good, whatever restarts follow.

Fixed: a shard being reconciled or refused is never re-synced onto new
peers from a configuration change (settle re-syncs the learners once it
is decided), so the learners keep their copies. No automatic recovery is
proven safe from them (a learner's copy may lack acknowledged writes), so
the refusal is made actionable: the refused primary asks the learners
too, names them and their versions in its log line, and CLUSTER
ACCEPTCOPY on it (an operator accepting that such a copy may lack
acknowledged writes) fetches the most recent learner's copy, serves it
and re-syncs the others, which then become backups."""
import os
import signal
import time

import pytest

from conftest import ConnectionClosed, RespClient, RespError, stop_process, wait_for
from test_failover import OPTS, cm_node, digests, rowan, wait_digests_agree, wait_healthy

pytestmark = pytest.mark.rowan_only("managed Rowan cluster (ZooKeeper, cm.c, reconcile.c)")

NKEYS = 40


def _get(port, key):
    try:
        c = RespClient(port, timeout=10.0)
        try:
            return c.call("GET", key)
        finally:
            c.close()
    except (OSError, ConnectionClosed):
        return ConnectionError


def _call(port, *args):
    try:
        c = RespClient(port, timeout=10.0)
        try:
            return c.call(*args)
        finally:
            c.close()
    except (OSError, ConnectionClosed):
        return None


def _get_routed(cl, key):
    """GET through whichever node serves key (following -MOVED once)."""
    rep = _get(cl.nodes[0].port, key)
    if isinstance(rep, RespError) and rep.msg.startswith("MOVED"):
        port = int(rep.msg.split()[2].rsplit(":", 1)[1])
        rep = _get(port, key)
    return rep


def _settled(port, key):
    rep = _get(port, key)
    if rep is ConnectionError:
        return None
    if isinstance(rep, RespError) and (rep.msg.startswith(("TRYAGAIN", "LOADING", "MOVED")) or
                                       "holds no lease" in rep.msg):
        return None
    return (rep,)


def keys_held(nd):
    """Keys of every shard nd holds a copy of (ROWAN DIGEST counts)."""
    return sum(n for _, (_, n) in digests(nd).items())


def _refused(port):
    got = wait_for(lambda: _settled(port, "lk0"), timeout=30.0, interval=0.2)
    assert got, "the node never answered GET but TRYAGAIN or no lease"
    return got[0]


def test_wiped_primary_with_learner_copies_is_recoverable(cluster_factory):
    cl = cluster_factory(3, 3, options=OPTS, zookeeper=True)
    wait_healthy(cl)
    cc = cl.cluster_client()
    for i in range(NKEYS):       # 1. on every replica (k=3, all members)
        assert cc.set("lk%d" % i, "v%d" % i)
    wait_digests_agree(cl.nodes)    # every copy holds every key
    cm = cm_node(cl)
    assert cm is not None
    ci = cl.nodes.index(cm)
    others = [nd for nd in cl.nodes if nd is not cm]
    for nd in others:
        stop_process(nd.pid)
        nd.stopped = True
    try:
        # 2. the CM fails both: primary of every shard, no backups
        def both_failed():
            txt = cm.log_text(since_start=True)
            return all("CM: node %s failed: no lease" % nd.name in txt for nd in others) and \
                all(_get(cm.port, "lk%d" % i) in (b"v%d" % i, "v%d" % i) for i in range(NKEYS))
        assert wait_for(both_failed, timeout=20.0, interval=0.1), cm.log_tail()
        # its pool is lost: with nobody to confirm the history, refused
        # (test_chaos_wipe.py)
        cl.kill9(ci)
        os.unlink(os.path.join(cm.dir, "rowan.pool"))
        cl.restart(ci)
        rep = _refused(cm.port)
        assert isinstance(rep, RespError) and "CLUSTERDOWN" in rep.msg, rep
    finally:
        for nd in others:
            os.kill(nd.pid, signal.SIGCONT)
            nd.stopped = False
    # 3. the others rejoin, as learners of every shard (its primary is a
    # member); their copies hold every acknowledged write
    wait_healthy(cl)
    # their copies must survive: the refused primary's empty copy is never
    # re-synced onto them (the chaos run's learners were emptied so)
    time.sleep(1.0)
    for nd in others:
        assert keys_held(nd) == NKEYS, (nd.name, keys_held(nd))
    # 4. refused for good: a restart (the chaos run's next kills) checks
    # again, and nothing changed but the log line
    time.sleep(1.0)
    cl.kill9(ci)
    cl.restart(ci)
    rep = _refused(cm.port)
    assert isinstance(rep, RespError) and "CLUSTERDOWN" in rep.msg, rep
    time.sleep(2.0)
    rep = _get(cm.port, "lk0")
    assert isinstance(rep, RespError) and "CLUSTERDOWN" in rep.msg, rep
    log = cm.log_text(since_start=True)
    refusals = [l for l in log.splitlines() if "NOT served" in l]
    assert refusals, log[-3000:]
    # the refusal is actionable: names the learners' copies and the command
    assert all("Learners hold copies" in l and "CLUSTER ACCEPTCOPY" in l for l in refusals), \
        refusals[0]
    # 5. the operator accepts the learners' copies
    assert isinstance(_call(cm.port, "CLUSTER", "ACCEPTCOPY", "nope"), RespError)
    n = _call(cm.port, "CLUSTER", "ACCEPTCOPY", "ALL")
    assert isinstance(n, int) and n >= 1, n
    last = []

    def all_back():
        bad = []
        for i in range(NKEYS):
            rep = _get_routed(cl, "lk%d" % i)
            if rep not in (b"v%d" % i, "v%d" % i):
                bad.append(("lk%d" % i, rep))
        last[:] = bad
        return not bad
    assert wait_for(all_back, timeout=60.0, interval=0.5), (last[:5], cm.log_tail())
    # and the cluster heals: the learners become backups, nothing refused
    wait_healthy(cl)
    assert rowan(cm).get("shards_lost") == "0"
    cc2 = cl.cluster_client()
    assert cc2.set("after", "x") and cc2.get("after") == b"x"
