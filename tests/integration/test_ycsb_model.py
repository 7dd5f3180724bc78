"""YCSB's Redis data model (YCSB's RedisClient), checked against a local
model of the records.

  insert  HMSET key field0 v0 ... field9 v9, then ZADD _indices hash(key) key
          (hash = Java's String.hashCode, as YCSB uses)
  read    HGETALL key, or HMGET key f...
  update  HMSET key fieldN v (one field)
  scan    ZRANGEBYSCORE _indices hash(start) +inf LIMIT 0 n, then HGETALL
          of every key it returned

Runs against Rowan and (--target=redis) redis-server. The kill -9 test is
Rowan-only (and redis with appendfsync always, ROWAN_TEST_REDIS_AOF=1).
The last test runs utils/rowan-bench --model ycsb-redis against the server
and checks it reports no errors and leaves the records YCSB would.

On Rowan, until hashes and sorted sets answer (not "ERR unknown command"),
these tests skip with the missing commands named."""
import bisect
import json
import os
import random
import subprocess
import threading
import time

import pytest

from conftest import ConnectionClosed, RespClient, RespError, encode_command

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BENCH = os.environ.get("ROWAN_BENCH") or os.path.join(REPO, "utils", "rowan-bench")
INDEX = b"_indices"
NFIELDS = 10
FIELDS = [b"field%d" % i for i in range(NFIELDS)]
CONN_ERRORS = (ConnectionClosed, ConnectionError, OSError)


def java_hash(s):
    """Java's String.hashCode of an ASCII string: YCSB's index score."""
    h = 0
    for ch in s:
        h = (31 * h + ch) & 0xFFFFFFFF
    return h - (1 << 32) if h >= (1 << 31) else h


def fnv64(n):
    """YCSB's Utils.fnvhash64 of a key number (its key names)."""
    h = 0xCBF29CE484222325
    for _ in range(8):
        octet = n & 0xFF
        n >>= 8
        h ^= octet
        h = (h * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return abs(h - (1 << 64) if h >= (1 << 63) else h)


def key_name(n):
    return b"user%d" % fnv64(n)


def probe(port):
    """Commands of the model the server does not know yet."""
    c = RespClient(port)
    missing = []
    try:
        for cmd in (("HMSET", "__ycsb_probe__", "f", "v"), ("HGETALL", "__ycsb_probe__"),
                    ("HMGET", "__ycsb_probe__", "f"), ("ZADD", "__ycsb_probe_z__", "1", "m"),
                    ("ZRANGEBYSCORE", "__ycsb_probe_z__", "0", "+inf", "LIMIT", "0", "1")):
            rep = c.call(*cmd)
            if isinstance(rep, RespError) and "unknown command" in rep.msg.lower():
                missing.append(cmd[0])
        c.call("DEL", "__ycsb_probe__", "__ycsb_probe_z__")
    finally:
        c.close()
    return missing


def require_model(srv):
    missing = probe(srv.port)
    if missing:
        pytest.skip("%s server does not implement %s yet (ERR unknown command)" %
                    (srv.target, ", ".join(missing)))


class Records:
    """The model: records and the index sorted by (score, key), as a
    sorted set orders equal scores by member."""

    def __init__(self):
        self.rec = {}
        self.index = []            # sorted [(score, key)]
        self.history = {}          # (key, field) -> every value ever written
        self.lock = threading.Lock()

    def intend(self, key, values):
        """Values are entered in the history before they are sent, so that
        a concurrent reader never sees a value the history lacks."""
        with self.lock:
            for f, v in values.items():
                self.history.setdefault((key, f), set()).add(v)

    def insert(self, key, values):
        self.intend(key, values)
        with self.lock:
            self.rec[key] = dict(values)

    def index_add(self, key):
        with self.lock:
            bisect.insort(self.index, (java_hash(key), key))

    def update(self, key, field, value):
        with self.lock:
            self.rec[key][field] = value

    def scan(self, start_key, n):
        with self.lock:
            i = bisect.bisect_left(self.index, (java_hash(start_key), b""))
            return [k for _, k in self.index[i:i + n]]


class Ycsb:
    """One client of the model over one connection (exact replies)."""

    def __init__(self, port, model, rng, tag):
        self.c = RespClient(port)
        self.m = model
        self.rng = rng
        self.tag = tag
        self.seq = 0
        self.pending = None        # (key, field, value) of the update being sent

    def value(self):
        self.seq += 1
        head = b"%s.%d." % (self.tag, self.seq)
        return head + bytes(self.rng.choice(b"abcdefghijklmnopqrstuvwxyz0123456789")
                            for _ in range(100 - len(head)))

    def insert(self, key):
        vals = {f: self.value() for f in FIELDS}
        self.m.intend(key, vals)
        args = ["HMSET", key]
        for f in FIELDS:
            args += [f, vals[f]]
        rep = self.c.call(*args)
        assert rep == "OK", "HMSET %s -> %r" % (key, rep)
        self.m.insert(key, vals)
        rep = self.c.call("ZADD", INDEX, java_hash(key), key)
        assert rep == 1, "ZADD _indices %d %s -> %r" % (java_hash(key), key, rep)
        self.m.index_add(key)

    def load(self, keys, batch=100):
        for i in range(0, len(keys), batch):
            part = keys[i:i + batch]
            out = []
            vals = {}
            for k in part:
                vals[k] = {f: self.value() for f in FIELDS}
                self.m.intend(k, vals[k])
                args = ["HMSET", k]
                for f in FIELDS:
                    args += [f, vals[k][f]]
                out.append(encode_command(*args))
                out.append(encode_command("ZADD", INDEX, java_hash(k), k))
            self.c.send(b"".join(out))
            for k in part:
                rep = self.c.read_reply()
                assert rep == "OK", "HMSET %s -> %r" % (k, rep)
                self.m.insert(k, vals[k])
                rep = self.c.read_reply()
                assert rep == 1, "ZADD _indices %s -> %r" % (k, rep)
                self.m.index_add(k)

    def read_all(self, key, exact=True):
        rep = self.c.call("HGETALL", key)
        assert isinstance(rep, list) and len(rep) % 2 == 0, "HGETALL %s -> %r" % (key, rep)
        got = dict(zip(rep[0::2], rep[1::2]))
        if exact:
            want = self.m.rec.get(key, {})
            assert got == want, "HGETALL %s: got %r..., expected %r..." % (
                key, sorted(got.items())[:2], sorted(want.items())[:2])
        return got

    def read_some(self, key):
        fields = self.rng.sample(FIELDS, self.rng.randint(1, 3))
        if self.rng.random() < 0.2:
            fields.append(b"nosuchfield")
        rep = self.c.call("HMGET", key, *fields)
        want = [self.m.rec.get(key, {}).get(f) for f in fields]
        assert rep == want, "HMGET %s %r -> %r, expected %r" % (key, fields, rep, want)

    def update(self, key):
        f = self.rng.choice(FIELDS)
        v = self.value()
        self.m.intend(key, {f: v})
        self.pending = (key, f, v)
        rep = self.c.call("HMSET", key, f, v)
        assert rep == "OK", "HMSET %s %s -> %r" % (key, f, rep)
        self.m.update(key, f, v)
        self.pending = None

    def scan_keys(self, start_key, n):
        rep = self.c.call("ZRANGEBYSCORE", INDEX, java_hash(start_key), "+inf", "LIMIT", 0, n)
        assert isinstance(rep, list), "ZRANGEBYSCORE -> %r" % (rep,)
        return rep

    def scan(self, start_key, n):
        keys = self.scan_keys(start_key, n)
        want = self.m.scan(start_key, n)
        assert keys == want, "scan from %s (score %d) LIMIT %d: got %r, expected %r" % (
            start_key, java_hash(start_key), n, keys[:5], want[:5])
        # YCSB sends the HGETALLs of a scan all at once
        self.c.send(b"".join(encode_command("HGETALL", k) for k in keys))
        for k in keys:
            rep = self.c.read_reply()
            got = dict(zip(rep[0::2], rep[1::2]))
            assert got == self.m.rec[k], "scan's HGETALL %s differs from the model" % k


# --------------------------------------------------------------------------
def test_ycsb_model_single_client(server_factory):
    """Load 400 records, then 3000 random reads (HGETALL/HMGET, also of
    missing keys), one-field updates, inserts and scans; every reply must
    match the model, and so must the whole database at the end."""
    srv = server_factory()
    require_model(srv)
    m = Records()
    rng = random.Random(2024)
    y = Ycsb(srv.port, m, rng, b"s")
    nrec = 400
    y.load([key_name(i) for i in range(nrec)])
    nxt = nrec
    for _ in range(3000):
        x = rng.random()
        key = key_name(rng.randrange(nxt))
        if x < 0.25:
            y.read_all(key)
        elif x < 0.35:
            y.read_some(key)
        elif x < 0.40:
            y.read_all(key_name(10 ** 6 + rng.randrange(1000)))     # missing: empty
        elif x < 0.70:
            y.update(key)
        elif x < 0.80:
            y.insert(key_name(nxt))
            nxt += 1
        else:
            y.scan(key, rng.randint(1, 50))
    # a scan from the lowest score returns the whole index in order; past the
    # highest, nothing
    assert y.scan_keys(min(m.rec, key=java_hash), nxt + 10) == [k for _, k in m.index]
    assert y.c.call("ZRANGEBYSCORE", INDEX, "(%d" % m.index[-1][0], "+inf") == []
    check_database(y.c, m)


def check_database(c, m):
    assert c.call("DBSIZE") == len(m.rec) + 1
    assert c.call("ZCARD", INDEX) == len(m.index) == len(m.rec)
    rep = c.call("ZRANGE", INDEX, 0, -1, "WITHSCORES")
    got = [(int(float(s)), k) for k, s in zip(rep[0::2], rep[1::2])]
    assert got == m.index, "the index differs from the model"
    keys = sorted(m.rec)
    c.send(b"".join(encode_command("HGETALL", k) for k in keys))
    for k in keys:
        rep = c.read_reply()
        assert dict(zip(rep[0::2], rep[1::2])) == m.rec[k], "record %s differs" % k


class Worker(threading.Thread):
    """Reads, updates and inserts its own records; scans everybody's."""

    def __init__(self, wid, port, m, owned, steps, scan_check):
        super().__init__(daemon=True)
        self.wid = wid
        self.y = Ycsb(port, m, random.Random(wid), b"w%d" % wid)
        self.owned = owned
        self.steps = steps
        self.scan_check = scan_check
        self.error = None
        self.stop = threading.Event()
        self.done = 0
        self.inflight = None

    def run(self):
        y = self.y
        rng = y.rng
        try:
            for i in range(self.steps):
                if self.stop.is_set():
                    return
                x = rng.random()
                key = rng.choice(self.owned)
                if x < 0.3:
                    y.read_all(key)
                elif x < 0.7:
                    self.inflight = ("update", key)
                    y.update(key)
                elif x < 0.8:
                    key = key_name(10 ** 7 * (self.wid + 1) + i)
                    self.inflight = ("insert", key)
                    y.insert(key)
                    self.owned.append(key)
                elif self.scan_check:
                    self.scan_check(y, key_name(rng.randrange(10 ** 6)), rng.randint(1, 40))
                self.inflight = None
                self.done += 1
        except CONN_ERRORS:
            return
        except BaseException as e:
            self.error = e


def test_ycsb_model_concurrent_clients(server_factory):
    """Four clients at once: each reads, updates and inserts its own
    records (exact), and scans all of them. A scan must come back in
    (score, key) order, hold only keys that were inserted, skip none that
    existed before the phase began, and every record it reads must hold
    values that were written to it. Then the whole database is exact."""
    srv = server_factory()
    require_model(srv)
    m = Records()
    loader = Ycsb(srv.port, m, random.Random(1), b"l")
    nrec = 600
    keys = [key_name(i) for i in range(nrec)]
    loader.load(keys)
    before = list(m.index)

    def scan_check(y, start, n):
        got = y.scan_keys(start, n)
        sc = java_hash(start)
        pairs = [(java_hash(k), k) for k in got]
        assert pairs == sorted(pairs), "scan not in (score, key) order: %r" % got[:6]
        assert all(p[0] >= sc for p in pairs), "scan returned a score below its start"
        assert len(got) <= n
        with m.lock:
            unknown = [k for k in got if k not in m.rec]
        # an insert's ZADD is sent only after its HMSET was acknowledged
        assert not unknown, "scan returned keys never inserted: %r" % unknown[:3]
        # every record that existed before, between start and the last
        # returned key (or everything from start when short), is there
        lo = bisect.bisect_left(before, (sc, b""))
        if len(got) < n:
            hi = len(before)
        else:
            hi = bisect.bisect_right(before, pairs[-1]) if pairs else lo
        missing = set(k for _, k in before[lo:hi]) - set(got)
        assert not missing, "scan skipped existing records %r" % sorted(missing)[:3]
        y.c.send(b"".join(encode_command("HGETALL", k) for k in got))
        for k in got:
            rep = y.c.read_reply()
            rec = dict(zip(rep[0::2], rep[1::2]))
            assert sorted(rec) == FIELDS, "record %s has fields %r" % (k, sorted(rec))
            with m.lock:
                for f, v in rec.items():
                    assert v in m.history.get((k, f), ()), \
                        "record %s field %s holds a value nobody wrote: %r" % (k, f, v[:30])

    workers = [Worker(w, srv.port, m, keys[w::4], 700, scan_check) for w in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
        assert not w.is_alive(), "worker %d stuck" % w.wid
    errors = [w.error for w in workers if w.error]
    assert not errors, "a client got a wrong reply: %r" % errors[0]
    assert all(w.done == 700 for w in workers)
    check_database(loader.c, m)


@pytest.mark.rowan_only("durability of the YCSB records across kill -9")
@pytest.mark.redis_aof_ok
def test_ycsb_records_survive_kill9(server_factory):
    """Updates and inserts from three clients, kill -9 mid-load: every
    record is its acknowledged state (or has the in-flight update), every
    acknowledged insert is in the index, and nothing else is."""
    srv = server_factory()
    require_model(srv)
    m = Records()
    loader = Ycsb(srv.port, m, random.Random(1), b"l")
    keys = [key_name(i) for i in range(300)]
    loader.load(keys)
    loader.c.close()
    for rnd in range(3):
        workers = [Worker(w + 10 * rnd, srv.port, m, keys[w::3], 10 ** 6, None)
                   for w in range(3)]
        for w in workers:
            w.start()
        deadline = time.monotonic() + 40
        want = 300 + 200 * rnd
        while sum(w.done for w in workers) < want and time.monotonic() < deadline:
            if any(w.error for w in workers):
                break
            time.sleep(0.01)
        assert not [w.error for w in workers if w.error], [w.error for w in workers]
        assert sum(w.done for w in workers) >= want, "load stalled"
        srv.kill9()
        for w in workers:
            w.stop.set()
        for w in workers:
            w.join(30)
        assert not [w.error for w in workers if w.error], [w.error for w in workers]
        srv.start()
        c = srv.resp()
        inflight = {w.inflight[1]: (w.inflight[0], w.y.pending) for w in workers if w.inflight}
        rep = c.call("ZRANGE", INDEX, 0, -1, "WITHSCORES")
        got_index = [(int(float(s)), k) for k, s in zip(rep[0::2], rep[1::2])]
        assert all(s == java_hash(k) for s, k in got_index), "index scores wrong"
        extra = set(k for _, k in got_index) - set(k for _, k in m.index)
        lost = set(k for _, k in m.index) - set(k for _, k in got_index)
        assert not lost, "acknowledged inserts missing from the index: %r" % sorted(lost)[:3]
        assert all(inflight.get(k, ("",))[0] == "insert" for k in extra), \
            "index holds keys never inserted: %r" % sorted(extra)[:3]
        for k in extra:          # the in-flight insert's ZADD landed
            m.index_add(k)
        for k in sorted(set(m.rec) | set(inflight)):
            rep = c.call("HGETALL", k)
            got = dict(zip(rep[0::2], rep[1::2]))
            want_rec = m.rec.get(k)
            if got == (want_rec or {}):
                continue
            what, pending = inflight.get(k, (None, None))
            assert what is not None, "record %s differs from its acknowledged state: %r" % (
                k, sorted(got.items())[:2])
            if what == "update":
                assert pending and pending[0] == k
                after = dict(want_rec)
                after[pending[1]] = pending[2]
                assert got == after, \
                    "record %s: neither the acknowledged state nor the in-flight update" % k
                m.rec[k] = got
            else:
                assert want_rec is None, "acknowledged insert %s differs" % k
                assert sorted(got) == FIELDS and all(
                    v in m.history[(k, f)] for f, v in got.items()), \
                    "in-flight insert %s left a record nobody wrote: %r" % (k, sorted(got))
                m.insert(k, got)
                owner = next(w for w in workers if w.inflight and w.inflight[1] == k)
                owner.owned.append(k)   # (indexed or not: its ZADD may be lost)
        keys = sorted(set(keys) | set(k for w in workers for k in w.owned))
        # the next round owns the same records (and the acknowledged inserts)
        keys = [k for k in keys if k in m.rec]
        c.close()
    c = srv.resp()
    assert c.call("ZCARD", INDEX) == len(m.index)


# --------------------------------------------------------------------------
def run_bench(port, *args):
    cmd = [BENCH, "--port", str(port), "--json", "--quiet"] + [str(a) for a in args]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, "%s exited %d: %s" % (" ".join(cmd), p.returncode, p.stderr[-2000:])
    return json.loads(p.stdout)


def test_rowan_bench_ycsb_redis_model(server_factory):
    """utils/rowan-bench --model ycsb-redis: load, then workloads a and e,
    count-bound; no errors, no failed operations, and the data it leaves is
    YCSB's: an index entry per record, scored by hash(key), 10 fields."""
    if not os.access(BENCH, os.X_OK):
        pytest.fail("no rowan-bench at %s: build it with make (or set ROWAN_BENCH)" % BENCH)
    srv = server_factory()
    require_model(srv)
    nrec = 2000
    rep = run_bench(srv.port, "--workload", "load", "--records", nrec, "--model", "ycsb-redis",
                    "--value-size", 200, "--connections", 8)
    assert rep["ops"] == nrec and rep["failed"] == 0 and not rep["errors"], rep
    assert rep["commands"] == {"hmset": nrec, "zadd": nrec}, rep["commands"]
    inserts = 0
    for wl in ("a", "e"):
        rep = run_bench(srv.port, "--workload", wl, "--records", nrec, "--model", "ycsb-redis",
                        "--value-size", 200, "--operations", 3000, "--connections", 8,
                        "--pipeline", 2, "--scan-length", 20)
        assert rep["ops"] == 3000 and rep["failed"] == 0 and not rep["errors"], (wl, rep)
        inserts = max(inserts, rep["operations"].get("INSERT", {}).get("count", 0))
        if wl == "e":
            assert rep["commands"].get("zrangebyscore", 0) > 0, rep["commands"]
    c = srv.resp()
    assert c.call("ZCARD", INDEX) == nrec + inserts
    rep = c.call("ZRANGE", INDEX, 0, -1, "WITHSCORES")
    members = rep[0::2]
    assert len(members) == nrec + inserts
    for k, s in zip(members, rep[1::2]):
        assert int(float(s)) == java_hash(k), "%s indexed with score %s" % (k, s)
    assert c.call("DBSIZE") == nrec + inserts + 1
    for k in random.Random(5).sample(members, 50):
        rec = c.call("HGETALL", k)
        fields = sorted(rec[0::2])
        assert fields == sorted(b"field%d" % i for i in range(10)), (k, fields)
        assert sum(len(v) for v in rec[1::2]) == 200
