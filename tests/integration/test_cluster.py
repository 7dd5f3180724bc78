"""The static cluster and the Redis Cluster protocol: 3 nodes, k=3, started
by utils/rowan-cluster (the cluster_factory fixture).

Routing (-MOVED, -CROSSSLOT), real cluster clients (redis-cli -c and
redis-py's RedisCluster) over keys in every slot, the CLUSTER subcommands'
replies and their consistency, keyspace-wide commands limited to the shards
a node is primary of, and rowan-cluster status. Nothing here assumes when
backups have applied a write."""
import re
import shutil
import subprocess

import pytest
import redis

from conftest import NSLOTS, RespClient, RespError, key_slot, wait_for

pytestmark = pytest.mark.rowan_only("a Rowan cluster started by utils/rowan-cluster")





def key_for_slot(slot, prefix="k"):
    """A key hashing to slot (a hash tag that hashes there)."""
    i = 0
    while True:
        tag = "%s%d" % (prefix, i)
        if key_slot(tag) == slot:
            return "{%s}" % tag
        i += 1


def slot_keys(n):
    """n keys spread so that every one of the 16384 slots gets some when
    n >= 16384: key i is tagged for slot i % 16384."""
    tags = {}
    i = 0
    while len(tags) < NSLOTS:
        s = key_slot("t%d" % i)
        tags.setdefault(s, "t%d" % i)
        i += 1
    return ["{%s}:%d" % (tags[j % NSLOTS], j) for j in range(n)]


@pytest.fixture
def cl3(cluster_factory):
    return cluster_factory(3, 3)


def owner_map(cl):
    """slot -> index of the node CLUSTER SLOTS names as its primary."""
    slots = cl.nodes[0].resp().ok("CLUSTER", "SLOTS")
    ports = [nd.port for nd in cl.nodes]
    owner = [None] * NSLOTS
    for entry in slots:
        start, end, primary = entry[0], entry[1], entry[2]
        for s in range(start, end + 1):
            assert owner[s] is None
            owner[s] = ports.index(primary[1])
    assert None not in owner, "every slot is served"
    return owner


def test_rowan_cluster_status(cl3):
    out = cl3.status()
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 3
    for i, (line, nd) in enumerate(zip(lines, cl3.nodes)):
        assert line.startswith("node%d 127.0.0.1:%d pid %d up " % (i, nd.port, nd.pid)), line
        assert "role=master" in line and "keys=0" in line, line
    # the start output: one line per node
    started = cl3.start_output.stdout.strip().splitlines()
    assert [l.split()[0] for l in started] == ["node0", "node1", "node2"]


def test_moved_and_crossslot(cl3):
    owner = owner_map(cl3)
    c0 = cl3.nodes[0].resp()
    for slot in (0, 300, 700, 5000, 12182, NSLOTS - 1):
        key = key_for_slot(slot)
        o = owner[slot]
        if o == 0:
            assert c0.call("SET", key, "v") == "OK"
            assert c0.call("GET", key) == b"v"
        else:
            want = "MOVED %d 127.0.0.1:%d" % (slot, cl3.nodes[o].port)
            assert c0.err("SET", key, "v") == want
            assert c0.err("GET", key) == want          # reads go to the primary too
            assert c0.call("READONLY") == "OK"
            assert c0.err("GET", key) == want          # ... even after READONLY
            co = cl3.nodes[o].resp()
            assert co.call("SET", key, "v") == "OK"
            assert co.call("GET", key) == b"v"
    a, b = key_for_slot(1), key_for_slot(2)
    cross = "CROSSSLOT Keys in request don't hash to the same slot"
    for i in range(3):
        c = cl3.nodes[i].resp()
        assert c.err("MSET", a, "1", b, "2") == cross
        assert c.err("DEL", a, b) == cross
        assert c.err("RENAME", a, b) == cross
    # hash tags keep multi-key commands in one slot
    tagged = ["{user1000}.a", "{user1000}.b", "{user1000}.c"]
    slot = key_slot("user1000")
    co = cl3.nodes[owner[slot]].resp()
    assert co.call("MSET", tagged[0], "1", tagged[1], "2") == "OK"
    assert co.call("MGET", *tagged) == [b"1", b"2", None]
    assert co.call("RENAME", tagged[0], tagged[2]) == "OK"
    assert co.call("SUNIONSTORE", tagged[0], tagged[0]) == 0
    assert co.call("EXISTS", *tagged) == 2
    assert co.call("ASKING") == "OK"
    assert co.call("READWRITE") == "OK"


def test_multi_exec_in_cluster(cl3):
    owner = owner_map(cl3)
    slot_here = next(s for s in range(NSLOTS) if owner[s] == 0)
    slot_here2 = next(s for s in range(slot_here + 1, NSLOTS) if owner[s] == 0)
    slot_other = next(s for s in range(NSLOTS) if owner[s] == 1)
    k1, k2 = key_for_slot(slot_here), key_for_slot(slot_here2)
    k1b = "{%s}x" % k1[1:-1]
    c = cl3.nodes[0].resp()
    # one slot: runs
    assert c.call("MULTI") == "OK"
    assert c.call("SET", k1, "a") == "QUEUED"
    assert c.call("SET", k1b, "b") == "QUEUED"
    assert c.call("EXEC") == ["OK", "OK"]
    # a queued command for another node: MOVED at queue time, EXEC aborts
    assert c.call("MULTI") == "OK"
    assert c.call("SET", k1, "c") == "QUEUED"
    assert c.err("SET", key_for_slot(slot_other), "x").startswith("MOVED %d " % slot_other)
    assert c.err("EXEC").startswith("EXECABORT")
    assert c.call("GET", k1) == b"a"
    # two of our slots in one transaction: CROSSSLOT at EXEC, discarded
    assert c.call("MULTI") == "OK"
    assert c.call("SET", k1, "d") == "QUEUED"
    assert c.call("SET", k2, "e") == "QUEUED"
    assert c.err("EXEC") == "CROSSSLOT Keys in request don't hash to the same slot"
    assert c.err("EXEC") == "ERR EXEC without MULTI"
    assert c.call("GET", k1) == b"a"
    assert c.call("EXISTS", k2) == 0


def test_cluster_clients_over_all_slots(cl3):
    rc = cl3.cluster_client(decode=True)
    keys = slot_keys(NSLOTS + 500)
    pipe = rc.pipeline()
    for i, k in enumerate(keys):
        pipe.set(k, i)
    assert all(pipe.execute())
    pipe = rc.pipeline()
    for k in keys:
        pipe.get(k)
    assert pipe.execute() == [str(i) for i in range(len(keys))]
    # every node holds exactly the keys of the slots it is primary of
    owner = owner_map(cl3)
    want = [0, 0, 0]
    for k in keys:
        want[owner[key_slot(k)]] += 1
    for i in range(3):
        r = cl3.client(i)
        assert r.dbsize() == want[i]
        listed = r.keys("*")
        assert len(listed) == want[i]
        assert all(owner[key_slot(k)] == i for k in listed)
        scanned = list(r.scan_iter(count=1000))
        assert sorted(scanned) == sorted(listed)
        rk = r.randomkey()
        assert owner[key_slot(rk)] == i
        info = r.info("keyspace")
        assert info["db0"]["keys"] == want[i]
    assert sum(want) == len(keys)


@pytest.mark.skipif(shutil.which("redis-cli") is None, reason="needs redis-cli")
def test_redis_cli_follows_redirects(cl3):
    port = cl3.nodes[0].port
    keys = slot_keys(NSLOTS)[::97] + ["foo", "bar", "baz", "{user}1"]
    for i, k in enumerate(keys):
        out = subprocess.run(["redis-cli", "-c", "-p", str(port), "SET", k, "v%d" % i],
                             capture_output=True, text=True, timeout=30)
        assert out.stdout.strip() == "OK", (k, out.stdout, out.stderr)
    for i, k in enumerate(keys):
        out = subprocess.run(["redis-cli", "-c", "-p", str(cl3.nodes[i % 3].port), "GET", k],
                             capture_output=True, text=True, timeout=30)
        assert out.stdout.strip() == "v%d" % i, (k, out.stdout, out.stderr)
    rc = cl3.cluster_client(decode=True)
    assert [rc.get(k) for k in keys] == ["v%d" % i for i in range(len(keys))]


def test_cluster_introspection_is_consistent(cl3):
    ids = []
    for i, nd in enumerate(cl3.nodes):
        c = nd.resp()
        myid = c.ok("CLUSTER", "MYID").decode()
        assert re.fullmatch(r"[0-9a-f]{40}", myid)
        ids.append(myid)
    assert len(set(ids)) == 3
    owner = owner_map(cl3)
    r = cl3.client(1, decode=True)
    # NODES: every node a master, its slots = SLOTS' ranges with it as primary
    text = r.execute_command("CLUSTER", "NODES")
    lines = [l for l in text.split("\n") if l]
    assert len(lines) == 3
    from_nodes = [None] * NSLOTS
    for line in lines:
        f = line.split(" ")
        nid, addr, flags, master = f[0], f[1], f[2], f[3]
        i = ids.index(nid)
        assert addr == "127.0.0.1:%d@%d" % (cl3.nodes[i].port, cl3.nodes[i].port + 10000)
        assert flags == ("myself,master" if i == 1 else "master")
        assert master == "-" and f[7] == "connected"
        for rng in f[8:]:
            a, _, b = rng.partition("-")
            for s in range(int(a), int(b or a) + 1):
                from_nodes[s] = i
    assert from_nodes == owner
    # SLOTS: the backups of each range are the two other nodes (k=3)
    for entry in cl3.nodes[2].resp().ok("CLUSTER", "SLOTS"):
        assert len(entry) == 5
        nodes = entry[2:]
        assert sorted(n[1] for n in nodes) == sorted(nd.port for nd in cl3.nodes)
        for n in nodes:
            assert n[0] == b"127.0.0.1" and n[2].decode() in ids and n[3] == []
        assert nodes[0][2].decode() == ids[owner[entry[0]]]
    # redis-py's parsers
    parsed = r.cluster("slots")
    assert len(parsed) > 0
    shards = r.execute_command("CLUSTER", "SHARDS")
    assert len(shards) == 3
    covered = [None] * NSLOTS
    for sh in shards:
        sh = dict(zip(sh[::2], sh[1::2]))
        nodes = [dict(zip(n[::2], n[1::2])) for n in sh["nodes"]]
        assert [n["role"] for n in nodes] == ["master", "replica", "replica"]
        assert all(n["health"] == "online" and n["ip"] == "127.0.0.1" for n in nodes)
        m = ids.index(nodes[0]["id"])
        assert nodes[0]["port"] == cl3.nodes[m].port
        rngs = sh["slots"]
        for a, b in zip(rngs[::2], rngs[1::2]):
            for s in range(a, b + 1):
                covered[s] = m
    assert covered == owner
    info = r.execute_command("CLUSTER", "INFO")
    fields = dict(l.split(":", 1) for l in info.split("\r\n") if l)
    assert fields["cluster_state"] == "ok"
    assert fields["cluster_slots_assigned"] == "16384"
    assert fields["cluster_known_nodes"] == "3" and fields["cluster_size"] == "3"
    # KEYSLOT, COUNTKEYSINSLOT, GETKEYSINSLOT
    for k in ("foo", "{user1000}.following", "", "a{b}c"):
        assert r.execute_command("CLUSTER", "KEYSLOT", k) == key_slot(k)
    slot = next(s for s in range(NSLOTS) if owner[s] == 1)
    tag = key_for_slot(slot)[1:-1]
    keys = ["{%s}:%d" % (tag, i) for i in range(7)]
    for k in keys:
        r.set(k, "x")
    assert r.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot) == 7
    got = r.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100)
    assert sorted(got) == sorted(keys)
    assert len(r.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 3)) == 3
    assert r.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 0) == []
    # a node that is not the slot's primary answers as for an empty slot
    # (it may hold a backup copy, which is not its to show)
    r0 = cl3.client(0, decode=True)
    assert r0.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot) == 0
    assert r0.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 10) == []
    c = cl3.nodes[1].resp()
    assert c.err("CLUSTER", "COUNTKEYSINSLOT", "16384") == "ERR Invalid slot"
    assert c.err("CLUSTER", "COUNTKEYSINSLOT", "x") == "ERR value is not an integer or out of range"
    assert c.err("CLUSTER", "GETKEYSINSLOT", "1", "-1") == "ERR Invalid slot or number of keys"
    assert c.err("CLUSTER", "KEYSLOT") == "ERR wrong number of arguments for 'cluster|keyslot' command"
    assert c.err("CLUSTER", "NOPE") == "ERR unknown subcommand 'NOPE'. Try CLUSTER HELP."
    assert c.ok("CLUSTER", "HELP")[0].startswith("CLUSTER <subcommand>")


def test_db_commands_refused_and_flush_own_shards(cl3):
    owner = owner_map(cl3)
    c = cl3.nodes[0].resp()
    assert c.err("SELECT", "1") == "ERR SELECT is not allowed in cluster mode"
    assert c.call("SELECT", "0") == "OK"
    assert c.err("SWAPDB", "0", "1") == "ERR SWAPDB is not allowed in cluster mode"
    here = key_for_slot(next(s for s in range(NSLOTS) if owner[s] == 0))
    assert c.err("MOVE", here, "1") == "ERR MOVE is not allowed in cluster mode"
    assert c.err("COPY", here, here + "x", "DB", "1") == \
        "ERR Copying to another database is not allowed in cluster mode"
    rc = cl3.cluster_client()
    keys = slot_keys(3000)
    for k in keys:
        rc.set(k, "v")
    before = [cl3.client(i).dbsize() for i in range(3)]
    assert sum(before) == 3000
    assert cl3.client(0).flushall() is True
    assert [cl3.client(i).dbsize() for i in range(3)] == [0, before[1], before[2]]
    info = cl3.nodes[0].info()
    assert info["cluster"]["cluster_enabled"] == "1"
    assert info["server"]["redis_mode"] == "cluster"


def test_standalone_has_no_cluster(server_factory):
    srv = server_factory()
    c = srv.resp()
    assert c.err("CLUSTER", "INFO") == "ERR This instance has cluster support disabled"
    assert c.err("CLUSTER", "SLOTS") == "ERR This instance has cluster support disabled"
    assert c.err("ASKING") == "ERR This instance has cluster support disabled"
    assert c.call("SELECT", "1") == "OK"
    assert srv.info("cluster")["cluster"]["cluster_enabled"] == "0"


def test_node_restart_keeps_data(cl3):
    owner = owner_map(cl3)
    rc = cl3.cluster_client(decode=True)
    keys = slot_keys(600)
    for k in keys:
        rc.set(k, k)
    cl3.kill9(2)
    cl3.restart(2)
    r2 = cl3.client(2, decode=True)
    # a restarted primary first checks its shards against their replicas
    # (-TRYAGAIN meanwhile, src/repl/reconcile.h), then serves them
    assert wait_for(lambda: r2.info("rowan").get("shards_reconciling") == 0, timeout=20.0), \
        r2.info("rowan").get("shards_reconciling")
    mine = [k for k in keys if owner[key_slot(k)] == 2]
    assert mine and r2.mget(mine[:1]) == mine[:1]
    assert r2.dbsize() == len(mine)
    assert all(r2.get(k) == k for k in mine)
