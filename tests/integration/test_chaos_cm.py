"""Found by tests/soak/chaos.py (faults under CPU and disk pressure): a CM
paused past its ZooKeeper session committed a configuration after it
resumed. Rowan-only: managed clusters.

The CM thread sleeps between ticks; SIGSTOP can land anywhere, also inside
a tick, after its check that its session is still the one that won the
election. Resumed after the session expired (another node is CM by then),
the tick goes on with the lease renewals it slept through, fails the live
members and commits that -- on a fresh session, since the version check
alone does not know who writes. The chaos run showed a configuration with
no member and a lost acknowledged XADD. The commit is now fenced by the
CM's ephemeral election znode (gone with the session that created it) in
one ZooKeeper transaction with the write."""
import os
import signal
import time

import pytest

from conftest import stop_process, wait_for
from test_failover import OPTS, alive_nodes, cm_node, rowan, wait_healthy

pytestmark = pytest.mark.rowan_only("managed Rowan cluster (ZooKeeper, cm.c)")


def test_paused_cm_commits_nothing_after_it_resumes(cluster_factory):
    cl = cluster_factory(3, 3, options=OPTS, zookeeper=True)
    wait_healthy(cl)
    stale = []
    for rnd in range(4):
        cm = cm_node(cl)
        assert cm is not None
        for nd in cl.nodes:
            nd.mark_log()
        stop_process(cm.pid)
        cm.stopped = True
        try:
            # another node wins the election once the session expired
            others = [nd for nd in cl.nodes if nd is not cm]

            def new_cm():
                for nd in others:
                    try:
                        if rowan(nd).get("cm_active") == "1":
                            return nd
                    except Exception:  # noqa: BLE001 (polling)
                        pass
                return None
            assert wait_for(new_cm, timeout=20.0, interval=0.05), "no new CM elected"
            # resume it while the new CM still waits out its grace period
        finally:
            os.kill(cm.pid, signal.SIGCONT)
            cm.stopped = False
        time.sleep(1.5)
        log = cm.log_since_mark()
        for line in log.splitlines():
            if "this node is the configuration manager" in line:
                break        # elected again (the new CM died): its commits are fine
            if "CM: committed configuration" in line:
                stale.append("round %d: %s" % (rnd, line))
        wait_healthy(cl, n=len(alive_nodes(cl)), timeout=60.0)
    assert not stale, "a paused CM committed after it resumed, its session replaced:\n" + \
        "\n".join(stale)
