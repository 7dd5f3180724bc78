"""Native ports in a ZooKeeper-managed cluster (issue 15).

Each managed node registers its own native port with its address
(member.c, nodes/<name>); the configuration manager carries it into the
configuration (cm.c, the `native=` word of a node line), so CLUSTER SLOTS
and CLUSTER SHARDS on every node name every node's own native port, and
a client routes to nodes whose native ports follow no common offset from
their RESP ports. A node restarted with a new native port has the new one
in the configuration within a second or two.

Clients: librowan (through librowan-test, tests/integration/
librowan_test.c) and the python native client (native_client.py, routing
by the CLUSTER SLOTS it reads over the native path itself). Both route
every key to its primary, before and after a CLUSTER FAILOVER."""
import time

import pytest

from conftest import RespClient, free_port, key_slot, request_failover, wait_for
from native_client import NativeClient, RespError
from test_librowan import (free_udp_ports, native_cluster, run,  # noqa: F401 (fixture)
                           steady_through_failovers)
from test_failover import OPTS, wait_healthy

pytestmark = pytest.mark.rowan_only("the native datagram path (issue 15)")


def announced(port):
    """{resp port: native port} from CLUSTER SLOTS and from CLUSTER SHARDS
    of the node at port (None for a node named without one)."""
    rc = RespClient(port)
    try:
        slots, shards = {}, {}
        for line in rc.call("CLUSTER", "SLOTS"):
            for node in line[2:]:
                meta = dict(zip(node[3][::2], node[3][1::2])) if len(node) > 3 else {}
                slots[node[1]] = meta.get(b"native-port")
        for shard in rc.call("CLUSTER", "SHARDS"):
            sh = dict(zip(shard[::2], shard[1::2]))
            for node in sh[b"nodes"]:
                m = dict(zip(node[::2], node[1::2]))
                shards[m[b"port"]] = m.get(b"native-port")
        return slots, shards
    finally:
        rc.close()


def all_announce(cl, by_resp, every=True):
    """Every node's CLUSTER SLOTS and SHARDS name each node they list with
    its own native port; every: and they list every node (a node that
    holds no copy yet, a learner, is not listed)."""
    for nd in cl.nodes:
        try:
            slots, shards = announced(nd.port)
        except Exception:
            return False
        for got in (slots, shards):
            if any(by_resp.get(p) != n for p, n in got.items()):
                return False
            if len(got) < (len(by_resp) if every else 2):
                return False
    return True


RETRIED = ("TRYAGAIN", "NOREPLICAS", "CLUSTERDOWN",
           "ERR native session closed before this request's reply")


class Router:
    """The python native client, routing: the slot map and every node's
    native port read over the native path (CLUSTER SLOTS through a seed),
    one NativeClient per node."""

    def __init__(self, seed_native_port):
        self.links = {}
        self.seed = seed_native_port
        self.read_config(seed_native_port)

    def term(self):
        info = self.link(self.seed).call("CLUSTER", "INFO").decode()
        return int(info.split("cluster_current_epoch:")[1].split()[0])

    def link(self, nport):
        if nport not in self.links:
            self.links[nport] = NativeClient(nport, timeout=0.3)
        return self.links[nport]

    def read_config(self, nport):
        self.read_term = self.term()
        self.slots = [None] * 16384
        for line in self.link(nport).call("CLUSTER", "SLOTS"):
            node = line[2]
            meta = dict(zip(node[3][::2], node[3][1::2]))
            for s in range(line[0], line[1] + 1):
                self.slots[s] = meta[b"native-port"]
        assert None not in self.slots

    def call(self, key, *args):
        # TRYAGAIN (a shard still being checked), NOREPLICAS (a backup still
        # catching up), a lease that lapsed for a moment on a loaded machine
        # (CLUSTERDOWN, or the node closed the session: outcome unknown):
        # the cluster is settling; the commands used here are idempotent, so
        # they are simply sent again.
        # MOVED: only after the configuration moved on since it was read (a
        # term after the last one a wait saw settled: learners becoming
        # backups, or a lease lost on this loaded machine); then it is read
        # again. Under the configuration it read, every key goes to its
        # primary first.
        for _ in range(150):
            r = self.link(self.slots[key_slot(key)]).call(*args)
            if isinstance(r, RespError) and str(r).startswith("MOVED"):
                if self.term() == self.read_term:
                    return r
                self.read_config(self.seed)
                continue
            if not (isinstance(r, RespError) and str(r).startswith(RETRIED)):
                return r
            time.sleep(0.1)
        return r

    def close(self):
        for c in self.links.values():
            c.close()


def route_every_key(router, prefix, n, tag):
    """SET then GET n keys through the router: never -MOVED (each went to its
    primary first), every value read back."""
    for i in range(n):
        k = "%s%d" % (prefix, i)
        r = router.call(k, "SET", k, "%s%d" % (tag, i))
        assert r == b"OK", (k, r)
    for i in range(n):
        k = "%s%d" % (prefix, i)
        assert router.call(k, "GET", k) == b"%s%d" % (tag.encode(), i), k


def test_managed_nodes_announce_their_own_native_ports(native_cluster):
    """Managed cluster, native ports with no common offset: every node
    shows every node's port; librowan and the python client route every
    key to its primary; after CLUSTER FAILOVERs (a new term, other
    primaries) too."""
    nports = free_udp_ports(3)
    cl = native_cluster(3, 3, options=OPTS, zookeeper=True, native_ports=nports)
    wait_healthy(cl)
    by_resp = {nd.port: nports[i] for i, nd in enumerate(cl.nodes)}
    assert wait_for(lambda: all_announce(cl, by_resp), timeout=30), \
        [announced(nd.port) for nd in cl.nodes]
    out, _ = run("127.0.0.1", nports[2], "spread", 300)
    assert out["ok"] == "1" and out["redirects"] == "0", out
    router = Router(nports[1])
    route_every_key(router, "py:", 200, "a")
    router.close()
    primaries0 = {line[0]: line[2][1] for line in RespClient(cl.nodes[0].port).call("CLUSTER", "SLOTS")}
    for nd in cl.nodes[1:]:
        assert request_failover(nd.port) == "OK"
        time.sleep(1.0)
    wait_healthy(cl)
    primaries1 = {line[0]: line[2][1] for line in RespClient(cl.nodes[0].port).call("CLUSTER", "SLOTS")}
    assert primaries0 != primaries1, "the failovers moved no primary"
    assert all_announce(cl, by_resp)
    # a fresh librowan and a fresh router read the new configuration
    out, _ = run("127.0.0.1", nports[0], "spread", 300)
    assert out["ok"] == "1" and out["redirects"] == "0", out
    router = Router(nports[0])
    route_every_key(router, "py2:", 200, "b")
    router.close()
    crc = cl.cluster_client()
    for i in range(0, 300, 23):
        assert crc.get("lr:s:%d" % i) == b"v%d" % i
    for i in range(0, 200, 17):
        assert crc.get("py:%d" % i) == b"a%d" % i and crc.get("py2:%d" % i) == b"b%d" % i


def test_librowan_follows_failover_across_unrelated_native_ports(native_cluster):
    """A running librowan client through planned failovers in a managed
    cluster with unrelated native ports: refused as stale, it re-reads the
    configuration and reaches the new primaries at their own native ports;
    every acknowledged INCR counted once."""
    nports = free_udp_ports(3)
    cl = native_cluster(3, 3, options=OPTS, zookeeper=True, native_ports=nports)
    wait_healthy(cl)
    by_resp = {nd.port: nports[i] for i, nd in enumerate(cl.nodes)}
    assert wait_for(lambda: all_announce(cl, by_resp), timeout=30)
    out = steady_through_failovers(cl, nports[0], "lr:mfo")
    assert int(out["term"]) > int(out["term0"]), out
    assert int(out["acked_new_term"]) > 100, out
    wait_healthy(cl)
    final = int(cl.cluster_client().get("lr:mfo"))
    assert final >= int(out["last"])
    assert final <= int(out["acked"]) + int(out["failed"])


def test_restart_with_new_native_port_updates_configuration(cluster_factory):
    """Nodes of a managed cluster started without native ports, then
    restarted with random ones: the configuration manager carries each
    node's new port into the configuration, every node shows them."""
    from test_native import native_cluster as restart_with_native
    # A lease long enough that a restart is not a failure: a node that lost
    # its shards to a failover while away may hold no copy afterwards, and a
    # node that holds nothing is in no CLUSTER SLOTS view to check. (A
    # restarted node serves again once its old lease has run out.)
    cl = restart_with_native(cluster_factory, 3, 2, zookeeper=True,
                             options={"cluster-lease-ms": 5000})
    wait_healthy(cl)
    by_resp = {nd.port: nd.native_port for nd in cl.nodes}
    assert wait_for(lambda: all_announce(cl, by_resp, every=False), timeout=60), \
        [announced(nd.port) for nd in cl.nodes]
    router = Router(cl.nodes[2].native_port)
    route_every_key(router, "rs:", 150, "r")
    router.close()
    # once more, one node with yet another port
    nd = cl.nodes[1]
    nd.stop()
    with open(nd.conf, "a") as f:
        nd.native_port = free_port()
        f.write("native-port %d\n" % nd.native_port)
    nd.start()
    wait_healthy(cl)
    by_resp[nd.port] = nd.native_port
    assert wait_for(lambda: all_announce(cl, by_resp, every=False) and
                    all(announced(x.port)[1].get(nd.port) == nd.native_port for x in cl.nodes),
                    timeout=60), [announced(x.port) for x in cl.nodes]
