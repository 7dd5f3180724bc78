"""Replication guarantees (Rowan-only): 3 nodes, k=3, started by
utils/rowan-cluster (cluster_factory). Every node is the primary of some
shards and a backup of all the others (src/repl/repl.h, src/repl/digest.h).

- A write is acknowledged only once it is persisted on every replica: under
  concurrent mixed load, once the load stops every node's ROWAN DIGEST
  agrees for every shard, and an exact model of acknowledged state matches
  what the primaries read back.
- A backup that is down (kill -9) makes writes to the shards it backs up
  fail with -NOREPLICAS after replication-timeout; none is acknowledged
  while it is down. Restarted, it is caught up and counts again: writes
  succeed, digests agree, nothing acknowledged is lost.
- A primary killed with kill -9 under load recovers from its t-log and
  b-log: nothing acknowledged is lost, and the replicas converge again.
- "Not before": while a backup is SIGSTOPped, a write's reply is held (and a
  read of the new value on another connection too); SIGCONT releases it.
- A node with a different configuration is refused by its peers' control
  threads and never counts as a replica.
- Single node: a write's reply (also each of two pipelined writes) waits for
  the local flush, checked by delaying every fdatasync with strace.

The load model: every key belongs to one writer thread, so each key's
history is sequential. For each key the model keeps the set of states it
may be in: an acknowledged write moves every candidate forward and keeps
only the candidates whose predicted reply is the reply that came back; a
write that failed (-NOREPLICAS, connection lost) has an unknown outcome, so
both the old and the new states stay candidates. A key then gets a DEL soon,
which collapses its candidates again."""
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

import pytest

from conftest import (NSLOTS, ConnectionClosed, RawConn, RespClient, RespError, encode_command,
                      key_slot, stop_process, wait_for)

pytestmark = pytest.mark.rowan_only("Rowan-KV replication in a Rowan cluster")

CONVERGE_TIMEOUT = 40.0       # digests agreeing after load stops (a liveness bound)
LIVE_TIMEOUT = 30.0           # a restarted node counted as live again
REPL_TIMEOUT_MS = 1500
BASE_OPTS = {"replication-timeout": REPL_TIMEOUT_MS, "pool-size": "128mb", "workers": 2}
LONG_TTL = 100000             # seconds: EXPIREs the test never outlives


# --------------------------------------------------------------------------
# slots and routing
# --------------------------------------------------------------------------


def owner_map(cl):
    """slot -> index of the node CLUSTER SLOTS names as its primary."""
    c = RespClient(cl.nodes[0].port)
    try:
        slots = c.call("CLUSTER", "SLOTS")
    finally:
        c.close()
    assert isinstance(slots, list), slots
    ports = [nd.port for nd in cl.nodes]
    owner = [None] * NSLOTS
    for entry in slots:
        for s in range(entry[0], entry[1] + 1):
            owner[s] = ports.index(entry[2][1])
    assert None not in owner
    return owner


def tag_on(owner, node, prefix):
    """A hash tag whose slot node is the primary of."""
    return next("%s%d" % (prefix, j) for j in range(1000000)
                if owner[key_slot("%s%d" % (prefix, j))] == node)


CONN_ERRORS = (OSError, ConnectionClosed)     # socket.timeout is an OSError


class Router:
    """One RespClient per node (connected lazily), commands routed by slot;
    a -MOVED updates the map and is retried (it was not executed)."""

    def __init__(self, cl, owner):
        self.cl = cl
        self.owner = owner
        self.conns = {}
        self.born = {}                  # node -> when its connection was made
        self.last_born = 0.0            # of the connection the last call used

    def node_of(self, key):
        return self.owner[key_slot(key)]

    def conn(self, i):
        c = self.conns.get(i)
        if c is None:
            self.born[i] = time.monotonic()
            c = RespClient(self.cl.nodes[i].port)
            self.conns[i] = c
        return c

    def drop(self, i):
        c = self.conns.pop(i, None)
        if c is not None:
            c.close()

    def call(self, key, *args):
        """(node, reply); raises CONN_ERRORS (the connection is dropped)."""
        for _ in range(3):
            i = self.node_of(key)
            self.last_born = 0.0
            try:
                cn = self.conn(i)
                self.last_born = self.born[i]
                rep = cn.call(*args)
            except CONN_ERRORS:
                self.drop(i)
                raise
            if isinstance(rep, RespError) and rep.msg.startswith("MOVED "):
                slot, addr = rep.msg.split()[1:3]
                port = int(addr.rsplit(":", 1)[1])
                self.owner[int(slot)] = [nd.port for nd in self.cl.nodes].index(port)
                continue
            return i, rep
        raise AssertionError("%r: MOVED three times" % (args,))

    def close(self):
        for i in list(self.conns):
            self.drop(i)


# --------------------------------------------------------------------------
# the model
# --------------------------------------------------------------------------
# A key's state: None (absent) or (kind, value, has_ttl) with kind
#   's' string (bytes), 'c' counter (int), 'h' hash (frozenset of (f, v)),
#   'l' list (tuple), 'z' zset (frozenset of (member, score)), 'S' set
#   (frozenset).
# An op is (name, args for the server, fn(state) -> (new state, reply),
# overwrites: its new state does not depend on the old one).
KINDS = ("s0", "s1", "c", "h", "l", "z", "S")
ANY = "ANY"                # candidates lost track of (counted, not checked)
MAX_CANDIDATES = 64


def _ttl(st):
    return st[2] if st is not None else False


def op_set(key, v, ex):
    args = ("SET", key, v) + (("EX", LONG_TTL) if ex else ())
    return ("SET", args, lambda st: (("s", v, ex), "OK"), True)


def op_mset(k1, v1, k2, v2):
    return ("MSET", ("MSET", k1, v1, k2, v2), None, True)


def op_del(key):
    return ("DEL", ("DEL", key), lambda st: (None, 0 if st is None else 1), True)


def op_expire(key):
    def fn(st):
        if st is None:
            return None, 0
        return (st[0], st[1], True), 1
    return ("EXPIRE", ("EXPIRE", key, LONG_TTL), fn, False)


def op_incr(key):
    def fn(st):
        n = (st[1] if st is not None else 0) + 1
        return ("c", n, _ttl(st)), n
    return ("INCR", ("INCR", key), fn, False)


def op_hset(key, f, v):
    def fn(st):
        d = dict(st[1]) if st is not None else {}
        new = f not in d
        d[f] = v
        return ("h", frozenset(d.items()), _ttl(st)), int(new)
    return ("HSET", ("HSET", key, f, v), fn, False)


def op_rpush(key, e):
    def fn(st):
        l = (st[1] if st is not None else ()) + (e,)
        return ("l", l, _ttl(st)), len(l)
    return ("RPUSH", ("RPUSH", key, e), fn, False)


def op_zadd(key, m, score):
    def fn(st):
        d = dict(st[1]) if st is not None else {}
        new = m not in d
        d[m] = float(score)
        return ("z", frozenset(d.items()), _ttl(st)), int(new)
    return ("ZADD", ("ZADD", key, score, m), fn, False)


def op_sadd(key, m):
    def fn(st):
        s = set(st[1]) if st is not None else set()
        new = m not in s
        s.add(m)
        return ("S", frozenset(s), _ttl(st)), int(new)
    return ("SADD", ("SADD", key, m), fn, False)


def kind_of(key):
    return key.rsplit(":", 1)[1]


class Model:
    """key -> frozenset of candidate states, or ANY. One writer per key."""

    def __init__(self):
        self.c = {}
        self.violations = []

    def cands(self, key):
        return self.c.get(key, frozenset([None]))

    def acked(self, key, fn, reply, overwrites, what):
        cur = self.cands(key)
        if cur is ANY:
            if overwrites:                  # SET, MSET, DEL: the new state is known
                self.c[key] = frozenset([fn(None)[0]])
            return
        nxt, seen = set(), []
        for st in cur:
            ns, want = fn(st)
            seen.append(want)
            if want == reply:
                nxt.add(ns)
        if not nxt:
            self.violations.append("%s: acknowledged reply %r, but from the possible states "
                                   "%s the reply would be %r" % (what, reply, _short(cur), seen))
            self.c[key] = ANY
            return
        self.c[key] = frozenset(nxt)

    def unknown(self, key, fn):
        """The op may or may not have happened."""
        cur = self.cands(key)
        if cur is ANY:
            return
        nxt = set(cur)
        for st in cur:
            nxt.add(fn(st)[0])
        self.c[key] = ANY if len(nxt) > MAX_CANDIDATES else frozenset(nxt)

    def definite(self, key, state):
        self.c[key] = frozenset([state])


def _short(x, n=300):
    s = repr(x)
    return s if len(s) <= n else s[:n] + "..."


READ_CMDS = {
    "s0": lambda k: ("GET", k), "s1": lambda k: ("GET", k), "c": lambda k: ("GET", k),
    "h": lambda k: ("HGETALL", k), "l": lambda k: ("LRANGE", k, 0, -1),
    "z": lambda k: ("ZRANGE", k, 0, -1, "WITHSCORES"), "S": lambda k: ("SMEMBERS", k),
}


def observed_state(key, val, pttl):
    kind = kind_of(key)
    if isinstance(val, RespError) or isinstance(pttl, RespError):
        raise AssertionError("reading %s failed: %r %r" % (key, val, pttl))
    if pttl == -2:
        empty = val is None or val == []
        assert empty, "%s: PTTL says absent but the read returned %r" % (key, val)
        return None
    ttl = pttl > 0
    if kind in ("s0", "s1"):
        return ("s", val, ttl)
    if kind == "c":
        return ("c", int(val), ttl)
    if kind == "h":
        return ("h", frozenset(zip(val[0::2], val[1::2])), ttl)
    if kind == "l":
        return ("l", tuple(val), ttl)
    if kind == "z":
        return ("z", frozenset((m, float(s)) for m, s in zip(val[0::2], val[1::2])), ttl)
    if kind == "S":
        return ("S", frozenset(val), ttl)
    raise AssertionError(kind)


def read_states(cl, owner, keys):
    """{key: observed state}, read from each key's primary, pipelined."""
    by_node = {}
    for k in keys:
        by_node.setdefault(owner[key_slot(k)], []).append(k)
    out = {}
    for i, ks in by_node.items():
        c = RespClient(cl.nodes[i].port)
        try:
            for start in range(0, len(ks), 300):
                chunk = ks[start:start + 300]
                c.send(b"".join(encode_command(*READ_CMDS[kind_of(k)](k)) +
                                encode_command("PTTL", k) for k in chunk))
                for k in chunk:
                    val = c.read_reply()
                    pttl = c.read_reply()
                    out[k] = observed_state(k, val, pttl)
        finally:
            c.close()
    return out


def check_model(cl, owner, model, keys=None):
    """Mismatches between the model and the primaries' reads; the count of
    keys checked with a definite or candidate state, and of ANY keys."""
    keys = sorted(model.c) if keys is None else keys
    got = read_states(cl, owner, keys)
    bad, checked, anys = [], 0, 0
    for k in keys:
        cands = model.cands(k)
        if cands is ANY:
            anys += 1
            continue
        checked += 1
        if got[k] not in cands:
            bad.append("%s (primary node%d): holds %s, acknowledged history allows only %s" %
                       (k, owner[key_slot(k)], _short(got[k], 200), _short(cands)))
    return bad, checked, anys


def assert_checker_detects_loss(cl, owner, model):
    """The checker itself: a model in which one key with a definite,
    present state expects something else must report a mismatch."""
    for k in sorted(model.c):
        cands = model.c[k]
        if cands is not ANY and len(cands) == 1 and next(iter(cands)) is not None:
            fake = Model()
            fake.c[k] = frozenset([None])             # "the acknowledged write got lost"
            bad, checked, _ = check_model(cl, owner, fake, [k])
            assert checked == 1 and bad, "the checker does not notice a lost key %s" % k
            st = next(iter(cands))
            fake.c[k] = frozenset([(st[0], st[1], not st[2])])   # a lost EXPIRE / PERSIST
            bad, _, _ = check_model(cl, owner, fake, [k])
            assert bad, "the checker does not notice a changed TTL on %s" % k
            return
    raise AssertionError("no key with a definite present state to check the checker with")


# --------------------------------------------------------------------------
# load
# --------------------------------------------------------------------------
class Writer(threading.Thread):
    """Mixed writes on its own keys: groups {w<id>g<n>} of seven keys (two
    strings, a counter, a hash, a list, a zset, a set) in one slot each."""
    NGROUPS = 24

    def __init__(self, wid, cl, owner, model, seed, log):
        super().__init__(daemon=True)
        self.wid = wid
        self.router = Router(cl, list(owner))
        self.model = model
        self.rng = random.Random(seed)
        # list of (t0, t1, status, opname, reply, node, when the connection was made)
        self.log = log
        self.stop = threading.Event()
        self.error = None
        self.seq = 0
        self.groups = ["{w%dg%d}" % (wid, g) for g in range(self.NGROUPS)]
        self.resets = []                    # keys with an unknown outcome: DEL them soon
        self.unexpected = []

    def keys(self):
        return ["%s:%s" % (g, k) for g in self.groups for k in KINDS]

    def next_op(self):
        rng = self.rng
        if self.resets and rng.random() < 0.5:
            k = self.resets.pop(rng.randrange(len(self.resets)))
            return [k], op_del(k)
        self.seq += 1
        v = b"w%d-%d" % (self.wid, self.seq)
        g = rng.choice(self.groups)
        r = rng.random()
        if r < 0.16:
            k = g + ":" + rng.choice(("s0", "s1"))
            return [k], op_set(k, v, rng.random() < 0.2)
        if r < 0.26:
            k1, k2 = g + ":s0", g + ":s1"
            return [k1, k2], op_mset(k1, v + b"a", k2, v + b"b")
        if r < 0.36:
            k = g + ":c"
            return [k], op_incr(k)
        if r < 0.48:
            k = g + ":h"
            return [k], op_hset(k, b"f%d" % rng.randrange(6), v)
        if r < 0.60:
            k = g + ":l"
            return [k], op_rpush(k, v)
        if r < 0.72:
            k = g + ":z"
            return [k], op_zadd(k, b"m%d" % rng.randrange(8), self.seq)
        if r < 0.82:
            k = g + ":S"
            return [k], op_sadd(k, b"m%d" % rng.randrange(10))
        if r < 0.92:
            k = g + ":" + rng.choice(KINDS)
            return [k], op_expire(k)
        k = g + ":" + rng.choice(KINDS)
        return [k], op_del(k)

    def run(self):
        try:
            while not self.stop.is_set():
                self.one()
        except BaseException as e:  # a wrong reply or a checker bug: the test must fail
            self.error = e
        finally:
            self.router.close()

    def one(self):
        keys, (name, args, fn, overwrites) = self.next_op()
        t0 = time.monotonic()
        node = self.router.node_of(keys[0])
        try:
            node, rep = self.router.call(keys[0], *args)
            if isinstance(rep, RespError):
                # NOREPLICAS: a replica did not persist it in time (outcome
                # unknown); TRYAGAIN: a restarted primary still checks the
                # shard against its replicas; LOADING: it is still recovering
                # its pool (neither ran; unknown is safe).
                status = "fail" if rep.msg.startswith(("NOREPLICAS", "TRYAGAIN", "LOADING")) \
                    else "error"
            else:
                status = "ok"
        except CONN_ERRORS as e:
            rep, status = e, "fail"
        t1 = time.monotonic()
        self.log.append((t0, t1, status, name, rep, node, self.router.last_born))
        if status == "error":
            self.unexpected.append("%r -> %r" % (args, rep))
            status = "fail"                 # outcome unknown for the model too
        if name == "MSET":
            for k, v in ((args[1], args[2]), (args[3], args[4])):
                f = (lambda v: lambda st: (("s", v, False), "OK"))(v)
                if status == "ok":
                    self.model.acked(k, f, rep, True, "MSET %s" % k)
                else:
                    self.model.unknown(k, f)
                    self.resets.append(k)
        elif status == "ok":
            self.model.acked(keys[0], fn, rep, overwrites, "%s %s" % (name, keys[0]))
        else:
            self.model.unknown(keys[0], fn)
            self.resets.append(keys[0])
        if status == "fail" and isinstance(rep, Exception):
            time.sleep(0.05)                # a dead node: do not spin on connect()


class Load:
    def __init__(self, cl, owner, nwriters, seed):
        self.model = Model()
        self.log = []
        self.writers = [Writer(i, cl, owner, self.model, seed * 100 + i, self.log)
                        for i in range(nwriters)]

    def start(self):
        for w in self.writers:
            w.start()

    def stop(self):
        for w in self.writers:
            w.stop.set()
        for w in self.writers:
            w.join(30)
            assert not w.is_alive(), "writer thread stuck"
        self.check_threads()

    def check_threads(self):
        errs = [w.error for w in self.writers if w.error]
        if errs:
            raise errs[0]

    def acks(self, since=0.0):
        return sum(1 for e in list(self.log) if e[2] == "ok" and e[0] >= since)

    def wait_acks(self, n, since=0.0, timeout=30.0):
        deadline = time.monotonic() + timeout
        while self.acks(since) < n and time.monotonic() < deadline:
            self.check_threads()
            time.sleep(0.02)
        assert self.acks(since) >= n, "only %d writes acknowledged in %.0f s (want %d)" % (
            self.acks(since), timeout, n)

    def keys(self):
        return [k for w in self.writers for k in w.keys()]


# --------------------------------------------------------------------------
# cluster state
# --------------------------------------------------------------------------
def digests(node):
    c = RespClient(node.port)
    try:
        rep = c.call("ROWAN", "DIGEST")
    finally:
        c.close()
    if isinstance(rep, RespError):
        return rep
    return {sid: (d, n) for sid, d, n in rep}


def wait_digests_agree(cl, timeout=CONVERGE_TIMEOUT):
    """Poll until every node reports the same digest and key count for every
    shard (and the same shard list); returns that digest map."""
    deadline = time.monotonic() + timeout
    while True:
        ds = [digests(nd) for nd in cl.nodes]
        if not any(isinstance(d, RespError) for d in ds) and ds[0] == ds[1] == ds[2]:
            return ds[0]
        if time.monotonic() > deadline:
            break
        time.sleep(0.1)
    lines = []
    if any(isinstance(d, RespError) for d in ds):
        lines.append("ROWAN DIGEST errors: %r" % ds)
    else:
        for sid in sorted(set(ds[0]) | set(ds[1]) | set(ds[2])):
            row = [d.get(sid) for d in ds]
            if not row[0] == row[1] == row[2]:
                lines.append("shard %d: %s" % (sid, row))
    for nd in cl.nodes:
        f = nd.info("rowan")["rowan"]
        lines.append("%s: %s" % (nd.name, {k: f.get(k) for k in (
            "repl_peers_live", "digest_pending", "digest_lag_bytes", "durable_lag_max",
            "repl_catchups", "repl_timeouts")}))
    raise AssertionError("digests still differ %.0f s after the load stopped:\n%s" % (
        timeout, "\n".join(lines[:40])))


def peer_states(node):
    f = node.info("rowan")["rowan"]
    return {k[len("repl_peer_"):]: v.split(",")[0].split("=")[1]
            for k, v in f.items() if k.startswith("repl_peer_")}


def wait_all_live(cl, timeout=LIVE_TIMEOUT):
    """Every node reports every peer live and serves every shard it is
    primary of (none still being reconciled after a restart)."""
    def all_live():
        try:
            return all(set(peer_states(nd).values()) == {"live"} and len(peer_states(nd)) == 2
                       and nd.info("rowan")["rowan"].get("shards_reconciling") == "0"
                       for nd in cl.nodes)
        except (OSError, AssertionError, ConnectionClosed):
            return False
    ok = wait_for(all_live, timeout=timeout, interval=0.05)
    assert ok, "not every replication peer is live after %.0f s: %s" % (
        timeout, [(nd.name, peer_states(nd)) for nd in cl.nodes if nd.alive()])
    return time.monotonic()


def stale(e, t_restart):
    """A log entry that failed on a connection made before the restart: to
    the killed process (it never reached the new one)."""
    return isinstance(e[4], Exception) and e[6] < t_restart


@pytest.fixture
def cl3(cluster_factory):
    cl = cluster_factory(3, 3, options=BASE_OPTS)
    wait_all_live(cl)
    return cl


# --------------------------------------------------------------------------
# 1. concurrent load: every acknowledged write is on every replica
# --------------------------------------------------------------------------
def test_concurrent_load_replicas_converge(cl3):
    cl = cl3
    owner = owner_map(cl)
    load = Load(cl, owner, nwriters=4, seed=1)
    # a redis-py RedisCluster client too, pipelined SETs on its own keys,
    # and short-lived keys that expire on their primaries meanwhile
    rc = cl.cluster_client()
    rc_keys = ["{rc%d}:s0" % i for i in range(200)]
    stop = threading.Event()
    rc_err = []

    def rc_writer():
        try:
            n = 0
            while not stop.is_set():
                p = rc.pipeline()
                batch = []
                for _ in range(20):
                    n += 1
                    k = rc_keys[n % len(rc_keys)]
                    v = b"rc-%d" % n
                    p.set(k, v)
                    batch.append((k, v))
                p.set("{eph%d}" % n, "x", px=random.randrange(100, 400))
                res = p.execute()
                assert res == [True] * 21, res
                for k, v in batch:
                    load.model.definite(k, ("s", v, False))
        except BaseException as e:
            rc_err.append(e)

    t = threading.Thread(target=rc_writer, daemon=True)
    load.start()
    t.start()
    load.wait_acks(2500, timeout=60)
    load.stop()
    stop.set()
    t.join(30)
    assert not rc_err, "RedisCluster writer: %r" % rc_err[0]
    assert not t.is_alive()
    failed = [e for e in load.log if e[2] != "ok"]
    assert not failed, "with every node up, writes failed: %r" % failed[:5]
    assert not load.model.violations, load.model.violations[:5]
    for w in load.writers:
        assert not w.unexpected, w.unexpected[:5]
    # every replica converges to the primaries' contents
    dg = wait_digests_agree(cl)
    assert sum(n for _, n in dg.values()) > 500, dg
    all_keys = sorted(set(load.keys()) | set(rc_keys))
    bad, checked, anys = check_model(cl, owner, load.model, all_keys)
    assert anys == 0 and checked == len(all_keys) > 800
    assert not bad, "%d keys differ from the acknowledged history:\n%s" % (
        len(bad), "\n".join(bad[:10]))
    assert_checker_detects_loss(cl, owner, load.model)
    ops = {e[3] for e in load.log}
    assert ops >= {"SET", "MSET", "INCR", "HSET", "RPUSH", "ZADD", "SADD", "EXPIRE", "DEL"}, ops


# --------------------------------------------------------------------------
# 2. kill -9 a backup under load
# --------------------------------------------------------------------------
def _outage_probe(cl, owner, dead):
    """Pipelined SETs to every live primary right after the kill: each must
    be refused with -NOREPLICAS (every shard has the dead node as a backup)."""
    bad = []
    for i, nd in enumerate(cl.nodes):
        if i == dead:
            continue
        tag = tag_on(owner, i, "p")
        c = RawConn(nd.port)
        c.send(b"".join(encode_command("SET", "{%s}:probe%d" % (tag, j), "x") for j in range(20)))
        for j in range(20):
            rep = c.read_reply()
            if not (isinstance(rep, RespError) and rep.msg.startswith("NOREPLICAS")):
                bad.append("node%d SET {%s}:probe%d -> %r" % (i, tag, j, rep))
        c.close()
    return bad


def test_kill9_backup_under_load(cl3):
    cl = cl3
    owner = owner_map(cl)
    dead = 2
    load = Load(cl, owner, nwriters=6, seed=2)
    load.start()
    load.wait_acks(600)
    t_kill0 = time.monotonic()
    cl.kill9(dead)
    t_kill = time.monotonic()
    acked_before = load.acks()
    assert acked_before >= 600
    probe_bad = _outage_probe(cl, owner, dead)
    time.sleep(2.5)                  # the outage: every write is held, then fails
    load.check_threads()
    t_restart = time.monotonic()
    cl.restart(dead)
    t_live = wait_all_live(cl)
    load.wait_acks(300, since=t_live)
    load.stop()

    assert not probe_bad, "during the outage, writes were not refused:\n" + "\n".join(probe_bad)
    # no write sent after the kill was acknowledged before the node came back
    # (DEL/EXPIRE answering 0, and SADD of a member already there, changed
    # nothing: they are answered like reads of durable state)
    log = list(load.log)
    during = [e for e in log if e[0] > t_kill and e[1] < t_restart]
    wrong = [e for e in during
             if e[2] == "ok" and not (e[3] in ("DEL", "EXPIRE", "SADD") and e[4] == 0)]
    assert not wrong, "acknowledged while backup node%d was dead: %r" % (dead, wrong[:5])
    refused = [e for e in during if e[2] == "fail" and isinstance(e[4], RespError)]
    assert len(refused) >= 6, "too few writes held and refused during the outage: %d" % len(refused)
    for e in refused:
        assert e[4].msg.startswith("NOREPLICAS"), e
        # held for about replication-timeout, not failed at once
        assert e[1] - e[0] >= REPL_TIMEOUT_MS / 1000.0 * 0.9, e
    # writes to the dead node's own shards failed to connect
    assert any(e[5] == dead and not isinstance(e[4], RespError) for e in during)
    # once the peers report it live, writes succeed again
    after = [e for e in log if e[0] > t_live]
    failed_after = [e for e in after if e[2] != "ok" and not stale(e, t_restart)]
    assert not failed_after, "writes failed after node%d was live again: %r" % (
        dead, failed_after[:5])
    assert len(after) >= 300
    assert not load.model.violations, load.model.violations[:5]
    unexpected = [u for w in load.writers for u in w.unexpected]
    assert not unexpected, unexpected[:5]
    for i in range(3):
        if i != dead:
            f = cl.nodes[i].info("rowan")["rowan"]
            assert int(f["repl_catchups"]) >= 3, f["repl_catchups"]   # 2 at start + node2's
            assert int(f["repl_timeouts"]) > 0
    dg = wait_digests_agree(cl)
    assert sum(n for _, n in dg.values()) > 300
    bad, checked, anys = check_model(cl, owner, load.model, load.keys())
    assert not bad, "%d keys lost or wrong after the backup's outage:\n%s" % (
        len(bad), "\n".join(bad[:10]))
    assert checked >= 0.95 * len(load.keys()), (checked, anys)
    assert_checker_detects_loss(cl, owner, load.model)
    print("kill -9 backup: %d acked before the kill, %d refused during %.1f s, %d after; "
          "kill took %.2f s" % (acked_before, len(refused), t_restart - t_kill,
                                load.acks(t_live), t_kill - t_kill0))


# --------------------------------------------------------------------------
# 3. kill -9 a primary under load
# --------------------------------------------------------------------------
def test_kill9_primary_under_load(cl3):
    cl = cl3
    owner = owner_map(cl)
    victim = 0
    load = Load(cl, owner, nwriters=6, seed=3)
    load.start()
    load.wait_acks(800)
    mine_acked = sum(1 for e in list(load.log) if e[2] == "ok" and e[5] == victim)
    assert mine_acked >= 100, "too few acknowledged writes on node%d's shards: %d" % (
        victim, mine_acked)
    cl.kill9(victim)
    t_kill = time.monotonic()
    time.sleep(1.0)
    t_restart = time.monotonic()
    cl.restart(victim)
    t_live = wait_all_live(cl)
    load.wait_acks(300, since=t_live)
    load.stop()
    log = list(load.log)
    during = [e for e in log if e[0] > t_kill and e[1] < t_restart]
    wrong = [e for e in during if e[2] == "ok" and not (e[3] in ("DEL", "EXPIRE") and e[4] == 0)]
    assert not wrong, "acknowledged while node%d was dead: %r" % (victim, wrong[:5])
    failed_after = [e for e in log if e[0] > t_live and e[2] != "ok" and not stale(e, t_restart)]
    assert not failed_after, failed_after[:5]
    assert not load.model.violations, load.model.violations[:5]
    unexpected = [u for w in load.writers for u in w.unexpected]
    assert not unexpected, unexpected[:5]
    f = cl.nodes[victim].info("rowan")["rowan"]
    assert int(f["recovered_entries"]) > 0, f["recovered_entries"]
    # every acknowledged key of the restarted primary reads back from it
    victim_keys = [k for k in load.keys() if owner[key_slot(k)] == victim]
    bad, checked, _ = check_model(cl, owner, load.model, victim_keys)
    assert not bad, "%d keys of the restarted primary lost or wrong:\n%s" % (
        len(bad), "\n".join(bad[:10]))
    assert checked > 100
    dg = wait_digests_agree(cl)
    assert sum(n for _, n in dg.values()) > 300
    bad, checked, anys = check_model(cl, owner, load.model, load.keys())
    assert not bad, "%d keys lost or wrong after the primary's crash:\n%s" % (
        len(bad), "\n".join(bad[:10]))
    assert checked >= 0.95 * len(load.keys()), (checked, anys)
    assert_checker_detects_loss(cl, owner, load.model)


# --------------------------------------------------------------------------
# 4. "not before": a held reply does not leave while a backup is stopped
# --------------------------------------------------------------------------
def test_reply_held_while_backup_stopped(cluster_factory):
    cl = cluster_factory(3, 3, options=dict(BASE_OPTS, **{"replication-timeout": 60000}))
    wait_all_live(cl)
    owner = owner_map(cl)
    prim, stopped = 0, 2
    tag = tag_on(owner, prim, "h")
    key, key2 = "{%s}:held" % tag, "{%s}:held2" % tag
    port = cl.nodes[prim].port
    used = RawConn(port)                  # a connection with earlier traffic
    b = RawConn(port)
    assert used.call("SET", key, "old") == "OK"
    assert used.call("SET", key2, "old2") == "OK"
    assert b.call("GET", key) == b"old"
    fresh = RawConn(port)                 # and one whose first command is the SET
    pid = cl.nodes[stopped].pid
    stop_process(pid)
    try:
        fresh.send_command("SET", key, "new")
        used.send_command("SET", key2, "new2")
        time.sleep(0.2)                   # the SETs are executed (not yet durable)
        b.send_command("GET", key)
        early = {}
        for name, cn, wait in (("SET on a new connection", fresh, 1.0),
                               ("SET on a used connection", used, 0.1),
                               ("GET of the new value", b, 0.1)):
            cn.sock.settimeout(wait)
            try:
                early[name] = cn.read_reply()
            except socket.timeout:
                pass
        assert "SET on a new connection" not in early and "SET on a used connection" not in \
            early, "answered while backup node%d was stopped: %r" % (stopped, early)
        assert early.get("GET of the new value", b"old") == b"old", \
            "GET returned %r while the SET was not on every replica" % (early,)
    finally:
        os.kill(pid, signal.SIGCONT)
    for cn in (fresh, used, b):
        cn.sock.settimeout(30)
    t0 = time.monotonic()
    assert fresh.read_reply() == "OK"
    assert used.read_reply() == "OK"
    if "GET of the new value" not in early:
        assert b.read_reply() in (b"old", b"new")
    assert time.monotonic() - t0 < 25
    assert b.call("MGET", key, key2) == [b"new", b"new2"]
    wait_digests_agree(cl)


# --------------------------------------------------------------------------
# 5. a node with a different configuration never counts as a replica
# --------------------------------------------------------------------------
def test_different_configuration_is_refused(cluster_factory):
    cl = cluster_factory(3, 3, options=BASE_OPTS)
    wait_all_live(cl)
    odd = cl.nodes[2]
    odd.stop()
    os.unlink(odd.pool_path)              # a fresh pool for the other shard count
    with open(odd.conf, "a") as f:
        f.write("shards 32\n")
    for nd in cl.nodes[:2]:
        nd.mark_log()
    odd.start()
    msg = "stale or different configuration"
    ok = wait_for(lambda: all(msg in nd.log_since_mark() for nd in cl.nodes[:2]) and
                  msg in odd.log_text(since_start=True), timeout=15)
    assert ok, "no refusal logged: %s" % [(nd.name, nd.log_since_mark()[-500:])
                                         for nd in cl.nodes[:2]]
    for nd in cl.nodes[:2]:
        assert peer_states(nd)["node2"] != "live", peer_states(nd)
    assert set(peer_states(odd).values()) <= {"down", "syncing"}, peer_states(odd)
    # and writes to the good nodes' shards (node2 backs all of them) fail
    owner = owner_map(cl)
    tag = tag_on(owner, 0, "d")
    c = RespClient(cl.nodes[0].port)
    rep = c.call("SET", "{%s}:x" % tag, "v")
    c.close()
    assert isinstance(rep, RespError) and rep.msg.startswith("NOREPLICAS"), rep
    for nd in cl.nodes[:2]:
        assert peer_states(nd)["node2"] != "live", peer_states(nd)


# --------------------------------------------------------------------------
# 6. single node: the reply waits for the local flush (strace delays fdatasync)
# --------------------------------------------------------------------------
STRACE_DELAY_US = 2000000


def _strace_usable():
    exe = shutil.which("strace")
    if exe is None:
        return None, "strace is not installed (deps/install.sh installs it)"
    r = subprocess.run([exe, "-f", "-o", os.devnull, "/bin/true"], capture_output=True,
                       text=True, timeout=30)
    if r.returncode != 0:
        return None, "strace cannot trace here (ptrace not permitted?): %s" % r.stderr.strip()
    return exe, None


def _disk_dir():
    """A temp dir on a disk-backed filesystem (the flush must be real)."""
    with open("/proc/mounts") as f:
        mounts = [l.split() for l in f]
    for root in ("/var/tmp", tempfile.gettempdir(), os.path.dirname(os.path.abspath(__file__))):
        if not os.path.isdir(root) or not os.access(root, os.W_OK):
            continue
        real = os.path.realpath(root) + "/"
        fs = max((m for m in mounts if real.startswith(m[1].rstrip("/") + "/")),
                 key=lambda m: len(m[1]), default=None)
        if fs is not None and fs[2] in ("tmpfs", "ramfs"):
            continue
        return tempfile.mkdtemp(prefix="rowan-strace-", dir=root)
    pytest.skip("no disk-backed temp dir for the pool")


def test_reply_waits_for_local_flush(server_factory):
    exe, why = _strace_usable()
    if exe is None:
        pytest.skip(why)
    d = _disk_dir()
    srv = server_factory(extra={"workers": 2, "pool-size": "64mb"}, dir=d, start=False)
    srv.own_dir = True                   # removed at cleanup
    old_pmem = os.environ.pop("PMEM_IS_PMEM_FORCE", None)
    try:
        srv.start()
    finally:
        if old_pmem is not None:
            os.environ["PMEM_IS_PMEM_FORCE"] = old_pmem
    assert srv.info("rowan")["rowan"]["pool_is_pmem"] == "0"
    c = srv.resp()
    assert c.call("SET", "warm", "x") == "OK"
    trace = os.path.join(d, "strace.out")
    st = subprocess.Popen([exe, "-f", "-p", str(srv.proc.pid), "-o", trace,
                           "-e", "trace=fdatasync",
                           "-e", "inject=fdatasync:delay_enter=%d" % STRACE_DELAY_US],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        # attached to every thread of the server (the set may shrink: the
        # pool's zero-fill thread ends once its work is done)
        def traced():
            for tid in os.listdir("/proc/%d/task" % srv.proc.pid):
                try:
                    with open("/proc/%d/task/%s/status" % (srv.proc.pid, tid)) as f:
                        if not any(l.startswith("TracerPid:") and l.split()[1] != "0" for l in f):
                            return False
                except OSError:
                    pass   # gone meanwhile
            return True
        assert wait_for(traced, timeout=10), "strace did not attach: %s" % st.stderr.read1()
        time.sleep(0.3)
        conn = RawConn(srv.port)
        # one SET
        t0 = time.monotonic()
        assert conn.call("SET", "k1", "v1") == "OK"
        took = time.monotonic() - t0
        assert took >= 1.5, "SET answered after %.3f s, before the (2 s) fdatasync returned" % took
        # two pipelined SETs: neither reply leaves before its flush
        t0 = time.monotonic()
        conn.send(encode_command("SET", "k2", "v2") + encode_command("SET", "k3", "v3"))
        assert conn.read_reply() == "OK"
        t1 = time.monotonic() - t0
        assert conn.read_reply() == "OK"
        t2 = time.monotonic() - t0
        assert t1 >= 1.5, "first of two pipelined SETs answered after %.3f s" % t1
        assert t2 >= 1.5, "second of two pipelined SETs answered after %.3f s" % t2
        # and a read on another connection of a value not yet flushed waits too
        other = RawConn(srv.port)
        t0 = time.monotonic()
        conn.send_command("SET", "k4", "v4")
        time.sleep(0.05)
        got = other.call("GET", "k4")
        took = time.monotonic() - t0
        assert got is None or took >= 1.5, "GET saw %r after %.3f s" % (got, took)
        assert conn.read_reply() == "OK"
        other.close()
        conn.close()
    finally:
        st.send_signal(signal.SIGINT)     # detach; the server keeps running
        try:
            st.wait(30)
        except subprocess.TimeoutExpired:
            st.kill()
            st.wait()
    with open(trace) as f:
        assert "fdatasync(" in f.read(), "strace saw no fdatasync: is the flush elsewhere?"
    assert srv.alive()
    assert srv.resp().call("MGET", "k1", "k2", "k3", "k4") == [b"v1", b"v2", b"v3", b"v4"]
