"""maxmemory and eviction (src/store/evict.c) on a real rowan-server: INFO memory
fields, noeviction's -OOM (compared with redis-server), every eviction
policy, approximate LRU/LFU quality, OBJECT FREQ/IDLETIME, and evictions
being ordinary logged deletes: they survive kill -9 and reach replicas."""
import time

import pytest

from conftest import RespClient, RespError, Server, key_slot

OOM = "OOM command not allowed when used memory > 'maxmemory'."
VALUE = b"x" * 1000


def info_num(cl, section, field):
    text = cl.call("INFO", section).decode()
    for line in text.split("\r\n"):
        if line.startswith(field + ":"):
            return line.split(":", 1)[1]
    raise AssertionError("no %s in INFO %s" % (field, section))


def used(cl):
    return int(info_num(cl, "memory", "used_memory"))


def limit_to(cl, headroom, policy):
    """maxmemory = what is used now + headroom bytes."""
    mm = used(cl) + headroom
    assert cl.call("CONFIG", "SET", "maxmemory", str(mm), "maxmemory-policy", policy) == "OK"
    return mm


def fill(cl, prefix, n, ttl=None):
    for i in range(n):
        args = ["SET", "%s%d" % (prefix, i), VALUE]
        if ttl:
            args += ["EX", str(ttl + i)]
        rep = cl.call(*args)
        assert rep == "OK", rep


def keys_with(cl, prefix, n):
    return {i for i in range(n) if cl.call("EXISTS", "%s%d" % (prefix, i)) == 1}


@pytest.fixture
def srv(server_factory, target):
    if target != "rowan":
        pytest.skip("Rowan's eviction (redis-server's is the reference only for errors)")
    return server_factory()


def test_info_memory_fields(srv):
    cl = srv.resp()
    assert cl.call("CONFIG", "SET", "maxmemory", "100mb", "maxmemory-policy", "allkeys-lru") == "OK"
    mem = srv.info("memory")["memory"]
    assert mem["maxmemory"] == str(100 * 1024 * 1024)
    assert mem["maxmemory_human"] == "100.00M"
    assert mem["maxmemory_policy"] == "allkeys-lru"
    for f in ("used_memory", "used_memory_human", "used_memory_dataset", "mem_fragmentation_ratio"):
        assert f in mem
    before = int(mem["used_memory_dataset"])
    fill(cl, "d", 100)
    after = int(srv.info("memory")["memory"]["used_memory_dataset"])
    assert after - before >= 100 * 1000
    cl.call("FLUSHALL")
    assert int(srv.info("memory")["memory"]["used_memory_dataset"]) < after


def oom_script(cl):
    out = [cl.call("SET", "a", "1")]
    assert cl.call("CONFIG", "SET", "maxmemory", "1") == "OK"
    out += [cl.call("SET", "b", "2"), cl.call("GET", "a"), cl.call("INCR", "a"),
            cl.call("DEL", "a"), cl.call("MULTI"), cl.call("SET", "c", "3"), cl.call("GET", "c"),
            cl.call("EXEC"), cl.call("MULTI"), cl.call("GET", "c"), cl.call("DISCARD")]
    assert cl.call("CONFIG", "SET", "maxmemory", "0") == "OK"
    out.append(cl.call("SET", "b", "2"))
    return [str(x) for x in out]


def test_noeviction_oom_matches_redis(server_factory, target):
    if target != "rowan":
        pytest.skip("compares rowan with redis-server")
    rowan = server_factory()
    redis = Server("redis")
    redis.start()
    try:
        a, b = oom_script(rowan.resp()), oom_script(redis.resp())
    finally:
        redis.cleanup()
    assert a == b
    assert a[1] == OOM


@pytest.mark.parametrize("policy", ["allkeys-random", "allkeys-lru", "allkeys-lfu"])
def test_allkeys_policies_evict(srv, policy):
    cl = srv.resp()
    mm = limit_to(cl, 2 * 1024 * 1024, policy)
    fill(cl, "k", 6000)           # ~6 MB of values against 2 MB of headroom
    # Every command evicts while over the limit: lift it to count.
    assert cl.call("CONFIG", "SET", "maxmemory", "0") == "OK"
    evicted = int(info_num(cl, "stats", "evicted_keys"))
    n = cl.call("DBSIZE")
    assert evicted > 0 and n + evicted == 6000
    assert n < 3000
    assert used(cl) <= mm + 256 * 1024   # the heap moves a little between samples


@pytest.mark.parametrize("policy", ["volatile-random", "volatile-lru", "volatile-lfu",
                                    "volatile-ttl"])
def test_volatile_policies_keep_persistent_keys(srv, policy):
    cl = srv.resp()
    fill(cl, "p", 500)                # no expiry: never evicted
    mm = limit_to(cl, 2 * 1024 * 1024, policy)
    fill(cl, "v", 4000, ttl=100000)
    assert keys_with(cl, "p", 500) == set(range(500))
    assert int(info_num(cl, "stats", "evicted_keys")) > 0
    assert used(cl) <= mm + 256 * 1024
    if policy == "volatile-ttl":
        # the nearest expiries (the first keys written) went first
        left = keys_with(cl, "v", 4000)
        assert sum(1 for i in left if i < 2000) < sum(1 for i in left if i >= 2000)
    # Only persistent keys left to evict: writes are refused.
    for i in range(4000):
        cl.call("DEL", "v%d" % i)
    rep = None
    for i in range(4000):
        rep = cl.call("SET", "q%d" % i, VALUE)
        if isinstance(rep, RespError):
            break
    assert str(rep) == OOM
    assert keys_with(cl, "p", 500) == set(range(500))


@pytest.mark.parametrize("policy", ["allkeys-lru", "allkeys-lfu"])
def test_recently_used_keys_survive(srv, policy):
    """Approximate LRU/LFU: keys read often and lately outlive the others.
    The policy is chosen before the reads: as in Redis, accesses are only
    counted (LFU) while an LFU policy is selected (evict.c)."""
    cl = srv.resp()
    assert cl.call("CONFIG", "SET", "maxmemory-samples", "10", "maxmemory-policy", policy) == "OK"
    fill(cl, "k", 2000)
    time.sleep(2.1)                   # the LRU clock counts seconds
    hot = range(0, 2000, 4)
    for _ in range(5):
        for i in hot:
            assert cl.call("GET", "k%d" % i) == VALUE
    limit_to(cl, -1000 * 1000, policy)     # about a thousand keys must go
    fill(cl, "new", 10)
    left = keys_with(cl, "k", 2000)
    hot_kept = sum(1 for i in hot if i in left) / len(hot)
    cold_kept = sum(1 for i in left if i % 4) / 1500
    assert hot_kept > 0.9, (hot_kept, cold_kept)
    assert cold_kept < 0.6, (hot_kept, cold_kept)


def test_object_freq_and_idletime(srv):
    cl = srv.resp()
    cl.call("SET", "k", "v")
    e = cl.call("OBJECT", "FREQ", "k")
    assert isinstance(e, RespError) and "An LFU maxmemory policy is not selected" in str(e)
    time.sleep(2.1)
    assert cl.call("OBJECT", "IDLETIME", "k") >= 2
    cl.call("GET", "k")
    assert cl.call("OBJECT", "IDLETIME", "k") <= 1
    assert cl.call("CONFIG", "SET", "maxmemory-policy", "allkeys-lfu") == "OK"
    cl.call("SET", "f", "v")
    assert cl.call("OBJECT", "FREQ", "f") == 5        # Redis's LFU_INIT_VAL
    for _ in range(100):
        cl.call("GET", "f")
    assert cl.call("OBJECT", "FREQ", "f") > 6
    e = cl.call("OBJECT", "IDLETIME", "f")
    assert isinstance(e, RespError) and "An LFU maxmemory policy is selected" in str(e)


def test_evictions_survive_kill9(srv):
    cl = srv.resp()
    limit_to(cl, 2 * 1024 * 1024, "allkeys-random")
    fill(cl, "k", 5000)
    left = keys_with(cl, "k", 5000)
    assert 0 < len(left) < 5000
    srv.kill9()
    srv.start()
    cl = srv.resp()
    assert keys_with(cl, "k", 5000) == left


def test_evictions_reach_replicas(cluster_factory):
    """A 2-node cluster, each shard on both: evicted keys are deleted on the
    backup too (every shard's digest agrees on both nodes)."""
    cl = cluster_factory(2, 2, options={"pool-size": "128mb", "workers": 2})
    a = RespClient(cl.nodes[0].port)
    slots = a.call("CLUSTER", "SLOTS")
    mine = {s for e in slots if e[2][1] == cl.nodes[0].port for s in range(e[0], e[1] + 1)}
    keys = [k for k in ("k%d" % i for i in range(20000)) if key_slot(k) in mine][:4000]
    limit_to(a, 2 * 1024 * 1024, "allkeys-random")
    for k in keys:
        assert a.call("SET", k, VALUE) == "OK"
    # no eviction after this point (the cron evicts too while memory is
    # above the limit), so what is left is what both copies must hold
    assert a.call("CONFIG", "SET", "maxmemory", "0") == "OK"
    assert int(info_num(a, "stats", "evicted_keys")) > 0
    left = sum(1 for k in keys if a.call("EXISTS", k) == 1)
    assert left < len(keys)

    def digests(nd):
        c = RespClient(nd.port)
        try:
            return {sid: (d, n) for sid, d, n in c.call("ROWAN", "DIGEST")}
        finally:
            c.close()

    deadline = time.monotonic() + 30
    while True:
        d0, d1 = digests(cl.nodes[0]), digests(cl.nodes[1])
        if d0 == d1:
            break
        assert time.monotonic() < deadline, "replicas differ after evictions"
        time.sleep(0.2)
    assert sum(n for _, n in d0.values()) == left
    a.close()


def test_evictions_raise_keyspace_events(srv):
    """Each eviction publishes `evicted` (class e), as Redis's do: one
    event per evicted key, on __keyevent@0__:evicted."""
    cl = srv.resp()
    sub = srv.resp()
    assert cl.call("CONFIG", "SET", "notify-keyspace-events", "Ee") == "OK"
    sub.call("SUBSCRIBE", "__keyevent@0__:evicted")
    limit_to(cl, 1024 * 1024, "allkeys-random")
    fill(cl, "ev", 3000)
    assert cl.call("CONFIG", "SET", "maxmemory", "0") == "OK"
    evicted = int(info_num(cl, "stats", "evicted_keys"))
    assert evicted > 0
    keys = set()
    sub.sock.settimeout(5.0)
    while len(keys) < evicted:
        msg = sub.read_reply()
        assert msg[0] == b"message" and msg[1] == b"__keyevent@0__:evicted", msg
        keys.add(msg[2])
    assert all(cl.call("EXISTS", k) == 0 for k in keys)
