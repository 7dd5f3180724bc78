"""Found by tests/soak/chaos.py (faults under CPU and disk pressure):
a client blocked (BLPOP 0, XREAD BLOCK 0) on a node that stops being the
primary of its keys' slot. Rowan-only: managed clusters."""
import time

import pytest

from conftest import ConnectionClosed, RespClient, RespError, wait_for
from test_failover import OPTS, wait_healthy

pytestmark = pytest.mark.rowan_only("managed Rowan cluster (ZooKeeper, blocking.c)")


@pytest.mark.parametrize("cmd", [("BLPOP", "{bq}:list", "0"),
                                 ("XREAD", "BLOCK", "0", "STREAMS", "{bq}:stream", "$")])
def test_blocked_client_is_redirected_when_its_slot_moves(cluster_factory, cmd):
    """BLPOP 0 / XREAD BLOCK 0 on the primary of the key's slot; a manual
    failover (CLUSTER FAILOVER on another node) moves the slot. The pushes
    now go to the new primary: the waiter must be answered (-MOVED, as
    Redis Cluster redirects its blocked clients, or a close), not left
    blocked forever on a node that no longer serves the key. The chaos run
    saw an XREAD BLOCK 0 unanswered for 50 s after a failover."""
    from conftest import key_slot
    from test_failover import slot_map
    cl = cluster_factory(3, 3, options=OPTS, zookeeper=True)
    wait_healthy(cl)
    slot = key_slot("{bq}")
    for _ in range(3):
        owner = slot_map(cl)[slot]
        prim = next(nd for nd in cl.nodes if nd.port == owner)
        waiter = RespClient(prim.port, timeout=10.0)
        waiter.send_command(*cmd)
        time.sleep(0.3)          # blocked now
        # the backup that takes the slot: whichever of the others does
        moved = None
        for nd in cl.nodes:
            if nd is prim:
                continue
            c = RespClient(nd.port)
            try:
                assert c.call("CLUSTER", "FAILOVER") == "OK"
            finally:
                c.close()
            moved = wait_for(lambda: (slot_map(cl) or [owner] * (slot + 1))[slot] != owner,
                             timeout=10.0)
            if moved:
                break
        assert moved, "no manual failover moved slot %d" % slot
        wait_healthy(cl, n=3)
        if "failed; " in "".join(nd.log_tail(200) for nd in cl.nodes):
            waiter.close()       # a lease lapsed meanwhile: proves nothing, again
            continue
        try:
            rep = waiter.read_reply()
        except ConnectionClosed:
            rep = "closed"
        except OSError as e:
            rep = e
        finally:
            waiter.close()
        assert rep == "closed" or (isinstance(rep, RespError) and
                                   rep.msg.startswith(("MOVED", "CLUSTERDOWN"))), (
            "the client blocked on the old primary got %r (expected -MOVED, or a close)" % (rep,))
        return
    pytest.skip("a member's lease lapsed during each of 3 tries")
