"""Replication settings other suites leave at their defaults, through real
3-node clusters: replication-mode rpc (the RPC-KV baseline the benchmark
compares against) must keep every guarantee of rowan mode; INFO rowan must
report what issue 4 lists (replication latency percentiles, b-log segments
by state, digest lag, durable-version lag per shard); and
replication-transport verbs must refuse to start, clearly, without an RDMA
device rather than fall back to something else."""
import os
import subprocess
import tempfile

import pytest
from redis.cluster import RedisCluster

from conftest import DEFAULT_BINARY, RespClient, free_port, tmp_root, wait_for

pytestmark = pytest.mark.rowan_only("Rowan replication settings")


def digests(cl):
    return [{int(r[0]): r[1] for r in cl.client(i).execute_command("ROWAN", "DIGEST")}
            for i in range(3)]


def replicas_agree(cl):
    d = digests(cl)
    return all(len({x.get(s) for x in d}) == 1 for s in d[0])


def load(cl, n):
    rc = RedisCluster(host="127.0.0.1", port=cl.nodes[0].port)
    for i in range(n):
        rc.set("k:%d" % i, "v%d" % i)
        rc.hset("h:%d" % (i % 17), "f%d" % i, i)
        rc.rpush("l:%d" % (i % 5), i)
    return rc


def test_rpc_mode_replicates_and_holds_replies(cluster_factory):
    cl = cluster_factory(3, 3, options={"replication-mode": "rpc", "replication-timeout": 1500})
    rc = load(cl, 400)
    infos = [cl.client(i).info("rowan") for i in range(3)]
    for x in infos:
        assert x["replication_mode"] == "rpc"
        assert int(x["repl_peers_live"]) == 2
        # backup work is done by workers: nothing lands in the control
        # thread's b-log, yet the digest applied what the workers fed it
        assert int(x["blog_messages"]) == 0
    assert wait_for(lambda: replicas_agree(cl), timeout=30)
    assert sum(int(r[2]) for r in cl.client(0).execute_command("ROWAN", "DIGEST")) == 400 + 17 + 5
    assert rc.get("k:399") == b"v399"
    # a dead backup makes writes fail, not silently succeed, in rpc mode too
    cl.kill9(2)
    r0 = cl.client(0)
    refused = 0
    for i in range(200):
        key = "probe:%d" % i
        if cl.nodes[0].port != rc.get_node_from_key(key).port:
            continue
        with pytest.raises(Exception) as exc:
            r0.set(key, "x")
        assert "NOREPLICAS" in str(exc.value)
        refused += 1
        if refused == 3:
            break
    assert refused == 3
    cl.restart(2)
    assert wait_for(lambda: all(
        int(cl.client(i).info("rowan")["repl_peers_live"]) == 2 for i in range(3)), timeout=30)
    rc2 = RedisCluster(host="127.0.0.1", port=cl.nodes[0].port)
    rc2.set("after", "restart")
    assert wait_for(lambda: replicas_agree(cl), timeout=30)


def test_info_rowan_reports_replication(cluster_factory):
    cl = cluster_factory(3, 3)
    load(cl, 300)
    assert wait_for(lambda: replicas_agree(cl), timeout=30)
    x = cl.client(1).info("rowan")
    assert x["replication_mode"] == "rowan" and x["replication_transport"] == "tcp"
    assert int(x["replication_factor"]) == 3
    assert int(x["repl_batches"]) > 0
    p50, p99, p999 = (int(x["repl_latency_usec_p%s" % q]) for q in ("50", "99", "999"))
    assert 0 < p50 <= p99 <= p999
    assert int(x["blog_messages"]) > 0 and int(x["blog_bytes"]) > 0
    assert int(x["blog_segments_using"]) >= 1
    for f in ("blog_segments_used", "blog_segments_committed", "digest_pending",
              "digest_committed_segments"):
        assert int(x[f]) >= 0
    assert int(x["digest_applied"]) > 0
    # load has stopped and the replicas agree: nothing is left to digest
    # and every shard's durable watermark has caught up with its versions
    assert wait_for(lambda: int(cl.client(1).info("rowan")["digest_lag_bytes"]) == 0, timeout=10)
    x = cl.client(1).info("rowan")
    assert int(x["durable_lag_max"]) == 0
    raw = RespClient(cl.nodes[1].port).ok("INFO", "rowan").decode()
    assert "\r\ndurable_lag_by_shard:\r\n" in raw   # no shard lags: an empty list


def test_verbs_transport_without_device_refuses_to_start():
    if os.path.isdir("/sys/class/infiniband") and os.listdir("/sys/class/infiniband"):
        pytest.skip("this machine has an RDMA device; test-verbs exercises the transport")
    binary = os.environ.get("ROWAN_SERVER", DEFAULT_BINARY)
    with tempfile.TemporaryDirectory(dir=tmp_root()) as d:
        conf = os.path.join(d, "rowan.conf")
        with open(conf, "w") as f:
            f.write("cluster-node a 127.0.0.1 1 11\ncluster-node b 127.0.0.1 2 12\n"
                    "cluster-self a\nreplication-transport verbs\nport %d\n" % free_port())
        p = subprocess.run([binary, conf, "--dir", d, "--pool-size", "64mb"],
                           capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert "replication-transport verbs" in p.stderr and "no RDMA device" in p.stderr
