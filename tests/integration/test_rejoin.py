"""A node that comes back without its whole history (Rowan-only; issue 10,
items 1 and 2): 3 nodes, k=3, utils/rowan-cluster, the load and model of
test_replication.py.

- A primary restarted with an EMPTY pool (kill -9, pool deleted) must not
  serve its shards empty, nor push them empty to its backups: it fetches
  them from a replica first (src/repl/reconcile.h). Every acknowledged write
  survives on all three nodes, and new writes keep replicating (the
  backups do not stall on a version regression: digests agree again and
  nothing stays pending).
- The same with its pool replaced by an OLDER copy of itself.
- While a backup that could confirm its history is down, the restarted
  primary refuses its shards with -TRYAGAIN instead of answering from
  what it has; once the backup is back, the shards are served, intact.
- The shard checks are visible: INFO shards_reconciling while waiting, the
  fetches in the log."""
import os
import shutil
import time

import pytest

from conftest import RespClient, RespError, key_slot, wait_for
from test_replication import (BASE_OPTS, Load, check_model, assert_checker_detects_loss,
                              owner_map, tag_on, wait_all_live, wait_digests_agree)

pytestmark = pytest.mark.rowan_only("Rowan cluster rejoin (reconcile.c)")


@pytest.fixture
def cl3(cluster_factory):
    cl = cluster_factory(3, 3, options=BASE_OPTS)
    wait_all_live(cl)
    return cl


def pool_path(node):
    return os.path.join(node.dir, "rowan.pool")


def rowan_fields(node):
    return node.info("rowan")["rowan"]


def assert_nothing_stuck(cl):
    """No backup keeps entries waiting, none stalled or diverged."""
    def settled():
        fs = [rowan_fields(nd) for nd in cl.nodes]
        return all(f["digest_pending"] == "0" for f in fs) and fs
    fs = wait_for(settled, timeout=20.0)
    assert fs, "entries still pending on a backup: %r" % [
        rowan_fields(nd)["digest_pending"] for nd in cl.nodes]
    for nd, f in zip(cl.nodes, fs):
        assert f["digest_stalled_shards"] == "0", (nd.name, f)
        assert f["digest_diverged"] == "0", (nd.name, f)
        assert f["shards_reconciling"] == "0" and f["shards_lost"] == "0", (nd.name, f)


def run_load(cl, owner, load, n):
    load.start()
    load.wait_acks(n)


def continued(cl, owner, prev, seed):
    """A new load on the same keys (writer i owns the same groups), checked
    against the model of the previous one: the keys keep their history."""
    load = Load(cl, owner, nwriters=len(prev.writers), seed=seed)
    load.model = prev.model
    for w in load.writers:
        w.model = prev.model
    return load


def second_round(cl, owner, prev, seed):
    """New writes after the rejoin replicate and converge (item 2)."""
    load = continued(cl, owner, prev, seed)
    load.start()
    load.wait_acks(300)
    load.stop()
    assert not load.model.violations, load.model.violations[:5]
    wait_digests_agree(cl)
    assert_nothing_stuck(cl)
    bad, checked, _ = check_model(cl, owner, load.model, load.keys())
    assert not bad, "\n".join(bad[:10])
    assert checked > 50


def test_wiped_primary_fetches_its_shards(cl3):
    cl = cl3
    owner = owner_map(cl)
    victim = 0
    load = Load(cl, owner, nwriters=6, seed=11)
    run_load(cl, owner, load, 800)
    mine = sum(1 for e in list(load.log) if e[2] == "ok" and e[5] == victim)
    assert mine >= 100, mine
    # under load: kill, wipe, restart while the writers keep going
    cl.kill9(victim)
    os.unlink(pool_path(cl.nodes[victim]))
    cl.restart(victim)
    f = rowan_fields(cl.nodes[victim])
    assert int(f["recovered_entries"]) == 0, f["recovered_entries"]
    wait_all_live(cl)
    t_live = time.monotonic()
    load.wait_acks(200, since=t_live)
    load.stop()
    assert not load.model.violations, load.model.violations[:5]
    unexpected = [u for w in load.writers for u in w.unexpected]
    assert not unexpected, unexpected[:5]
    log = cl.nodes[victim].log_tail(2000)
    assert "fetched from node" in log, log[-3000:]
    dg = wait_digests_agree(cl)
    assert sum(n for _, n in dg.values()) > 300
    bad, checked, anys = check_model(cl, owner, load.model, load.keys())
    assert not bad, "%d keys lost or wrong after the wiped primary rejoined:\n%s" % (
        len(bad), "\n".join(bad[:10]))
    victim_keys = [k for k in load.keys() if owner[key_slot(k)] == victim]
    bad, vchecked, _ = check_model(cl, owner, load.model, victim_keys)
    assert not bad and vchecked > 50, (vchecked, bad[:5])
    assert_checker_detects_loss(cl, owner, load.model)
    assert_nothing_stuck(cl)
    second_round(cl, owner, load, seed=12)


def test_primary_with_older_pool_copy(cl3):
    cl = cl3
    owner = owner_map(cl)
    victim = 1
    nd = cl.nodes[victim]
    load = Load(cl, owner, nwriters=4, seed=21)
    run_load(cl, owner, load, 400)
    load.stop()
    # an older copy of the victim's pool, taken while it is down
    cl.kill9(victim)
    old = pool_path(nd) + ".old"
    shutil.copyfile(pool_path(nd), old)
    cl.restart(victim)
    wait_all_live(cl)
    # more history: the same keys written again, deleted, expired...
    load2 = continued(cl, owner, load, seed=23)
    run_load(cl, owner, load2, 600)
    load2.stop()
    assert not load.model.violations, load.model.violations[:5]
    wait_digests_agree(cl)
    cl.kill9(victim)
    os.replace(old, pool_path(nd))
    cl.restart(victim)
    wait_all_live(cl)
    bad, checked, _ = check_model(cl, owner, load.model, load2.keys())
    assert not bad, "%d keys went back to an older state:\n%s" % (len(bad), "\n".join(bad[:10]))
    assert checked > 100
    assert "fetched from node" in nd.log_tail(3000)
    wait_digests_agree(cl)
    assert_nothing_stuck(cl)
    second_round(cl, owner, load2, seed=22)


def test_restarted_primary_waits_for_its_backups(cl3):
    cl = cl3
    owner = owner_map(cl)
    tag = tag_on(owner, 0, "wait")
    key = "{%s}k" % tag
    c = RespClient(cl.nodes[0].port)
    assert c.call("SET", key, "kept") == "OK"
    c.close()
    cl.kill9(0)
    cl.kill9(1)
    os.unlink(pool_path(cl.nodes[0]))
    cl.restart(0)
    # node2 alone cannot vouch for node0's shards' history (node1 may hold
    # more): node0 answers -TRYAGAIN, never an empty value
    c = RespClient(cl.nodes[0].port)
    for _ in range(5):
        rep = c.call("GET", key)
        assert isinstance(rep, RespError) and rep.msg.startswith("TRYAGAIN"), rep
        time.sleep(0.1)
    assert int(rowan_fields(cl.nodes[0])["shards_reconciling"]) > 0
    rep = c.call("SET", key, "lost?")
    assert isinstance(rep, RespError) and rep.msg.startswith("TRYAGAIN"), rep
    cl.restart(1)
    wait_all_live(cl)
    assert wait_for(lambda: c.call("GET", key) == b"kept", timeout=20.0), c.call("GET", key)
    c.close()
    wait_digests_agree(cl)
    assert_nothing_stuck(cl)


def test_damaged_primary_copy_is_repaired_from_a_replica(cl3):
    """Issue 10 item 3, in a cluster: a byte flipped in the newest entry of a
    key in the primary's pool. The node starts anyway, marks the shard
    damaged, and fetches it from a backup instead of serving the older
    value recovery could reconstruct: the key reads back with its latest
    acknowledged value, on every replica."""
    cl = cl3
    owner = owner_map(cl)
    victim = 0
    tag = tag_on(owner, victim, "dmg")
    key = "{%s}k" % tag
    c = RespClient(cl.nodes[victim].port)
    try:
        assert c.call("SET", key, b"OLD-" + b"o" * 300) == "OK"
        for i in range(20):
            assert c.call("SET", "{%s}f%d" % (tag, i), b"filler-%d" % i) == "OK"
        newest = b"NEWEST-" + b"n" * 300
        assert c.call("SET", key, newest) == "OK"
    finally:
        c.close()
    cl.kill9(victim)
    with open(pool_path(cl.nodes[victim]), "r+b") as f:
        data = f.read()
        off = data.find(newest)
        assert off > 0
        f.seek(off + 30)
        f.write(bytes([data[off + 30] ^ 0x01]))
    cl.restart(victim)
    wait_all_live(cl)
    f = rowan_fields(cl.nodes[victim])
    assert int(f["recovery_corrupt_entries"]) >= 1, f
    log = cl.nodes[victim].log_tail(400)
    assert "CORRUPTION" in log and "and its copy is damaged" in log, log[-3000:]
    c = RespClient(cl.nodes[victim].port)
    try:
        assert c.call("GET", key) == newest
        assert c.call("GET", "{%s}f7" % tag) == b"filler-7"
    finally:
        c.close()
    wait_digests_agree(cl)
