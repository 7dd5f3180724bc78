"""Durability (Rowan-only): kill -9 under concurrent load never loses an
acknowledged write, never shows garbage or resurrects an overwritten value,
MSET is all-or-nothing, a value another connection has read survives a crash,
and a full pool refuses writes cleanly while reads keep working.

The crash tests also hold for redis-server with appendonly yes + appendfsync
always; ROWAN_TEST_REDIS_AOF=1 with --target=redis runs them there, which
checks the checker itself."""
import os
import random
import threading
import time

import pytest
import redis

from conftest import RawConn, RespError, encode_command, describe_rc, wait_for

pytestmark = pytest.mark.rowan_only("durability of acknowledged writes across kill -9")

CONN_ERRORS = (redis.ConnectionError, redis.TimeoutError, ConnectionError, OSError)


# --------------------------------------------------------------------------
# values that carry their own identity: writer, sequence number, key
# --------------------------------------------------------------------------
def make_value(writer, seq, key):
    head = "%s:%d:" % (writer, seq)
    fill = ("%s/%d|" % (key, seq)) * 60
    return (head + fill[: (seq * 37) % 300]).encode()


def parse_value(raw, key):
    """-> (writer, seq) if raw is exactly a value make_value produced for
    this key, else raises AssertionError (garbage)."""
    try:
        text = raw.decode()
        writer, seq, _ = text.split(":", 2)
        seq = int(seq)
    except (UnicodeDecodeError, ValueError):
        raise AssertionError("garbage in %s: %r" % (key, raw[:120]))
    if make_value(writer, seq, key) != raw:
        raise AssertionError("garbage in %s: %r (not what writer %s wrote at seq %d)" %
                             (key, raw[:120], writer, seq))
    return writer, seq


class KeyState:
    """What the test knows about one key."""
    __slots__ = ("baseline", "attempted", "acked", "observed")

    def __init__(self):
        self.baseline = None     # seq seen after the last restart (durable), None = absent
        self.attempted = set()   # seqs sent since the last verification
        self.acked = None        # highest seq acknowledged since the last verification
        self.observed = None     # highest seq any reader saw since the last verification

    def lower_bound(self):
        vals = [v for v in (self.baseline, self.acked, self.observed) if v is not None]
        return max(vals) if vals else None

    def check(self, seq, what):
        """seq: the seq found after a restart (None = key absent)."""
        lb = self.lower_bound()
        if seq is None:
            assert lb is None, "%s lost: absent after restart, but seq %s was %s" % (
                what, lb, "acknowledged" if lb in (self.acked, self.baseline) else "read")
        else:
            allowed = set(self.attempted)
            if self.baseline is not None:
                allowed.add(self.baseline)
            assert seq in allowed, "%s holds seq %d, which was never written since the last " \
                                   "restart (baseline %s, attempted %s)" % (
                                       what, seq, self.baseline, sorted(self.attempted)[-5:])
            assert lb is None or seq >= lb, \
                "%s went back to seq %d; acknowledged %s, read %s, durable before %s" % (
                    what, seq, self.acked, self.observed, self.baseline)
        self.baseline = seq
        self.attempted = set()
        self.acked = None
        self.observed = None


class CounterState:
    def __init__(self):
        self.baseline = 0
        self.attempted = 0
        self.acked = None
        self.observed = None

    def check(self, value, what):
        lo = max(v for v in (self.baseline, self.acked, self.observed) if v is not None)
        hi = self.baseline + self.attempted
        assert lo <= value <= hi, "%s = %d after restart; must lie in [%d, %d] (acked %s, " \
                                  "read %s, before %d, INCRs sent %d)" % (
                                      what, value, lo, hi, self.acked, self.observed,
                                      self.baseline, self.attempted)
        self.baseline = value
        self.attempted = 0
        self.acked = None
        self.observed = None


class Writer(threading.Thread):
    """One connection doing SET / INCR / MSET in a loop until the server dies."""
    NKEYS = 40
    NPAIRS = 6

    def __init__(self, wid, port, seq_start, stats):
        super().__init__(daemon=True)
        self.wid = wid
        self.port = port
        self.seq = seq_start
        self.stats = stats
        self.keys = ["d:w%d:k%d" % (wid, i) for i in range(self.NKEYS)]
        self.pairs = [("d:w%d:ma%d" % (wid, j), "d:w%d:mb%d" % (wid, j)) for j in range(self.NPAIRS)]
        self.ctr = "d:w%d:ctr" % wid
        self.state = {k: KeyState() for k in self.keys}
        self.pstate = [KeyState() for _ in self.pairs]
        self.cstate = CounterState()
        self.error = None
        self.stop = threading.Event()

    def run(self):
        try:
            cl = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=15,
                             socket_connect_timeout=5)
            step = 0
            while not self.stop.is_set():
                step += 1
                self.seq += 1
                kind = step % 4
                if kind in (0, 1):
                    k = self.keys[(step * 7) % self.NKEYS]
                    st = self.state[k]
                    st.attempted.add(self.seq)
                    ok = cl.set(k, make_value("w%d" % self.wid, self.seq, k))
                    assert ok is True, "SET %s answered %r" % (k, ok)
                    st.acked = self.seq
                elif kind == 2:
                    self.cstate.attempted += 1
                    v = cl.incr(self.ctr)
                    self.cstate.acked = v
                else:
                    j = (step // 4) % self.NPAIRS
                    a, b = self.pairs[j]
                    st = self.pstate[j]
                    st.attempted.add(self.seq)
                    ok = cl.mset({a: make_value("w%d" % self.wid, self.seq, a),
                                  b: make_value("w%d" % self.wid, self.seq, b)})
                    assert ok is True, "MSET answered %r" % (ok,)
                    st.acked = self.seq
                self.stats["acks"] += 1
        except CONN_ERRORS:
            return          # the server went away: the in-flight op stays "attempted"
        except BaseException as e:   # a wrong reply: the test must fail
            self.error = e

    def verify(self, c):
        vals = c.call("MGET", *self.keys)
        assert isinstance(vals, list), vals
        for k, raw in zip(self.keys, vals):
            seq = None
            if raw is not None:
                w, seq = parse_value(raw, k)
                assert w == "w%d" % self.wid, "%s holds writer %s's value" % (k, w)
            self.state[k].check(seq, k)
        for (a, b), st in zip(self.pairs, self.pstate):
            va, vb = c.call("MGET", a, b)
            if va is None or vb is None:
                assert va is None and vb is None, \
                    "MSET torn: %s=%r %s=%r" % (a, va and va[:40], b, vb and vb[:40])
                st.check(None, "MSET pair %s/%s" % (a, b))
                continue
            wa, sa = parse_value(va, a)
            wb, sb = parse_value(vb, b)
            assert sa == sb, "MSET torn after restart: %s from seq %d, %s from seq %d" % (a, sa, b, sb)
            st.check(sa, "MSET pair %s/%s" % (a, b))
        v = c.call("GET", self.ctr)
        self.cstate.check(int(v) if v is not None else 0, self.ctr)


class PipeWriter(threading.Thread):
    """Pipelines 25 SETs to distinct keys at a time."""
    NKEYS = 200
    BATCH = 25

    def __init__(self, port, seq_start, stats):
        super().__init__(daemon=True)
        self.port = port
        self.seq = seq_start
        self.stats = stats
        self.keys = ["d:p:k%d" % i for i in range(self.NKEYS)]
        self.state = {k: KeyState() for k in self.keys}
        self.error = None
        self.stop = threading.Event()
        self.pos = 0

    def run(self):
        try:
            cl = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=15,
                             socket_connect_timeout=5)
            while not self.stop.is_set():
                p = cl.pipeline(transaction=False)
                batch = []
                for _ in range(self.BATCH):
                    self.seq += 1
                    k = self.keys[self.pos % self.NKEYS]
                    self.pos += 1
                    self.state[k].attempted.add(self.seq)
                    p.set(k, make_value("p", self.seq, k))
                    batch.append((k, self.seq))
                res = p.execute()
                assert res == [True] * self.BATCH, res
                for k, s in batch:
                    self.state[k].acked = s
                self.stats["acks"] += self.BATCH
        except CONN_ERRORS:
            return
        except BaseException as e:
            self.error = e

    def verify(self, c):
        vals = c.call("MGET", *self.keys)
        for k, raw in zip(self.keys, vals):
            seq = None
            if raw is not None:
                w, seq = parse_value(raw, k)
                assert w == "p", "%s holds writer %s's value" % (k, w)
            self.state[k].check(seq, k)


class Reader(threading.Thread):
    """Reads writers' keys on its own connections; what it sees must survive."""

    def __init__(self, port, writers, pipe):
        super().__init__(daemon=True)
        self.port = port
        self.writers = writers
        self.pipe = pipe
        self.error = None
        self.stop = threading.Event()
        self.reads = 0

    def _see(self, st, seq):
        if st.observed is None or seq > st.observed:
            st.observed = seq

    def run(self):
        rng = random.Random(7)
        try:
            cl = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=15,
                             socket_connect_timeout=5)
            while not self.stop.is_set():
                w = rng.choice(self.writers)
                ks = rng.sample(w.keys, 8)
                for k, raw in zip(ks, cl.mget(ks)):
                    if raw is not None:
                        _, seq = parse_value(raw, k)
                        self._see(w.state[k], seq)
                j = rng.randrange(len(w.pairs))
                va, vb = cl.mget(w.pairs[j])
                if va is not None or vb is not None:
                    assert va is not None and vb is not None, "MSET pair read torn"
                    sa = parse_value(va, w.pairs[j][0])[1]
                    sb = parse_value(vb, w.pairs[j][1])[1]
                    assert sa == sb, "MSET pair read torn: seq %d vs %d" % (sa, sb)
                    self._see(w.pstate[j], sa)
                v = cl.get(w.ctr)
                if v is not None:
                    cs = w.cstate
                    if cs.observed is None or int(v) > cs.observed:
                        cs.observed = int(v)
                k = rng.choice(self.pipe.keys)
                raw = cl.get(k)
                if raw is not None:
                    self._see(self.pipe.state[k], parse_value(raw, k)[1])
                self.reads += 1
        except CONN_ERRORS:
            return
        except BaseException as e:
            self.error = e


@pytest.mark.redis_aof_ok
def test_crash_under_concurrent_load(server_factory):
    srv = server_factory()
    rng = random.Random(4242)
    nwriters = 4
    writers_state = None
    kills = 4
    for rnd in range(kills):
        stats = {"acks": 0}
        if writers_state is None:
            writers = [Writer(i, srv.port, 0, stats) for i in range(nwriters)]
            pipe = PipeWriter(srv.port, 0, stats)
        else:
            # new threads, same key state and increasing seqs
            old_w, old_p = writers_state
            writers = []
            for ow in old_w:
                w = Writer(ow.wid, srv.port, ow.seq, stats)
                w.state, w.pstate, w.cstate = ow.state, ow.pstate, ow.cstate
                writers.append(w)
            pipe = PipeWriter(srv.port, old_p.seq, stats)
            pipe.state, pipe.pos = old_p.state, old_p.pos
        reader = Reader(srv.port, writers, pipe)
        threads = writers + [pipe, reader]
        for t in threads:
            t.start()
        target = rng.randrange(1500, 4000)
        deadline = time.monotonic() + 40
        while stats["acks"] < target and time.monotonic() < deadline:
            if any(t.error for t in threads) or not any(t.is_alive() for t in writers):
                break
            time.sleep(0.01)
        errors = [t.error for t in threads if t.error]
        assert not errors, "round %d: a client got a wrong reply: %r" % (rnd, errors[0])
        assert srv.alive(), "server died by itself (%s) in round %d" % (
            describe_rc(srv.proc.returncode), rnd)
        assert stats["acks"] >= target, \
            "round %d: only %d writes acknowledged in 40 s (server stuck?)" % (rnd, stats["acks"])
        srv.kill9()                      # mid-load: every writer has a request in flight
        for t in threads:
            t.stop.set()
        for t in threads:
            t.join(30)
            assert not t.is_alive(), "client thread stuck after kill -9"
        errors = [t.error for t in threads if t.error]
        assert not errors, "round %d: a client got a wrong reply: %r" % (rnd, errors[0])
        srv.start()
        c = srv.resp()
        for w in writers:
            w.verify(c)
        pipe.verify(c)
        c.close()
        writers_state = (writers, pipe)
    # a last clean restart changes nothing
    srv.stop()
    srv.start()
    c = srv.resp()
    for w in writers_state[0]:
        w.verify(c)
    writers_state[1].verify(c)


@pytest.mark.redis_aof_ok
def test_value_read_elsewhere_survives_kill9(server_factory):
    srv = server_factory()
    a = srv.resp()
    b = srv.resp()
    assert a.call("SET", "seen", "by-b") == "OK"
    assert b.call("GET", "seen") == b"by-b"
    # and a value B reads while A's pipelined writes are still in flight
    writer = RawConn(srv.port)
    n = 3000
    writer.send(b"".join(encode_command("SET", "hot", make_value("h", i, "hot"))
                         for i in range(1, n + 1)))
    seen = None
    for _ in range(20000):
        raw = b.call("GET", "hot")
        if raw is not None:
            seen = parse_value(raw, "hot")[1]
            break
    assert seen is not None, "never saw any of the pipelined writes"
    srv.kill9()
    srv.start()
    c = srv.resp()
    assert c.call("GET", "seen") == b"by-b"
    raw = c.call("GET", "hot")
    assert raw is not None, "B read seq %d of 'hot', and after kill -9 the key is gone" % seen
    after = parse_value(raw, "hot")[1]
    assert after >= seen, "B read seq %d of 'hot'; after kill -9 it holds %d" % (seen, after)


@pytest.mark.redis_aof_ok
def test_acknowledged_deletes_and_expiry_survive_kill9(server_factory):
    srv = server_factory()
    c = srv.resp()
    for i in range(200):
        c.ok("SET", "del:%d" % i, "v%d" % i)
    assert c.call("DEL", *["del:%d" % i for i in range(0, 200, 2)]) == 100
    c.ok("SET", "ttl", "x", "EX", 5000)
    c.ok("SET", "short", "x", "PX", 300)
    c.ok("SET", "persisted", "x", "EX", 5000)
    assert c.call("PERSIST", "persisted") == 1
    c.ok("SET", "renamed", "r")
    c.ok("RENAME", "renamed", "renamed2")
    c.ok("SELECT", 7)
    c.ok("SET", "db7", "seven")
    c.ok("SELECT", 0)
    assert c.call("INCRBY", "ctr", 41) == 41
    assert c.call("APPEND", "ap", "abc") == 3
    assert c.call("SETRANGE", "ap", 1, "X") == 3
    srv.kill9()
    time.sleep(0.4)          # let "short" expire while the server is down
    srv.start()
    c = srv.resp()
    vals = c.call("MGET", *["del:%d" % i for i in range(200)])
    assert vals == [None if i % 2 == 0 else b"v%d" % i for i in range(200)]
    assert 4900 < c.call("TTL", "ttl") <= 5000
    assert c.call("GET", "short") is None
    assert c.call("TTL", "persisted") == -1
    assert c.call("MGET", "renamed", "renamed2") == [None, b"r"]
    assert c.call("GET", "ctr") == b"41"
    assert c.call("GET", "ap") == b"aXc"
    c.ok("SELECT", 7)
    assert c.call("GET", "db7") == b"seven"


@pytest.mark.redis_aof_ok
def test_flush_and_swapdb_survive_kill9(server_factory):
    srv = server_factory()
    c = srv.resp()
    c.ok("MSET", "a", "1", "b", "2")
    c.ok("SELECT", 1)
    c.ok("SET", "one", "1")
    c.ok("SELECT", 2)
    c.ok("SET", "two", "2")
    c.ok("FLUSHDB")
    c.ok("SET", "two-after", "2")
    c.ok("SWAPDB", 0, 1)
    srv.kill9()
    srv.start()
    c = srv.resp()
    assert c.call("MGET", "a", "b", "one") == [None, None, b"1"]
    c.ok("SELECT", 1)
    assert c.call("MGET", "a", "b", "one") == [b"1", b"2", None]
    c.ok("SELECT", 2)
    assert c.call("KEYS", "*") == [b"two-after"]
    c.ok("FLUSHALL")
    srv.kill9()
    srv.start()
    c = srv.resp()
    for db in range(3):
        c.ok("SELECT", db)
        assert c.call("DBSIZE") == 0


# --------------------------------------------------------------------------
# the pool
# --------------------------------------------------------------------------
def big_value(i, size):
    head = b"big:%d:" % i
    return head + bytes((i * 31 + j) % 251 for j in range(256)) * ((size - len(head)) // 256) \
        + b"#" * ((size - len(head)) % 256)


def test_pool_full_refuses_writes_cleanly(server_factory):
    srv = server_factory(extra={"pool-size": "32mb"})
    c = srv.resp()
    size = 256 * 1024
    acked = {}
    oom = None
    for i in range(400):                      # 100 MB of attempts for a 32 MB pool
        v = big_value(i, size)
        rep = c.call("SET", "full:%d" % i, v)
        if rep == "OK":
            acked["full:%d" % i] = v
            continue
        assert isinstance(rep, RespError), "SET answered %r" % (rep,)
        assert rep.msg.startswith("OOM"), "a full pool must refuse with -OOM..., got %r" % rep.msg
        oom = rep.msg
        break
    assert oom is not None, "400 x 256 KB values fit in a 32 MB pool?"
    assert len(acked) > 0
    # further writes are refused the same way, the connection stays usable
    for j in range(5):
        rep = c.call("SET", "more:%d" % j, big_value(j, size))
        assert rep == "OK" or (isinstance(rep, RespError) and rep.msg.startswith("OOM")), rep
    assert c.call("PING") == "PONG"
    # reads keep working
    for k, v in acked.items():
        assert c.call("GET", k) == v, k
    assert c.call("EXISTS", *acked) == len(acked)
    # DEL still works on a full pool
    gone = sorted(acked)[: len(acked) // 2]
    assert c.call("DEL", *gone) == len(gone)
    for k in gone:
        del acked[k]
        assert c.call("GET", k) is None
    # later writes may or may not succeed (cleaner): either way, cleanly
    accepted = {}
    for j in range(20):
        v = big_value(1000 + j, size)
        rep = c.call("SET", "after:%d" % j, v)
        if rep == "OK":
            accepted["after:%d" % j] = v
        else:
            assert isinstance(rep, RespError) and rep.msg.startswith("OOM"), rep
    acked.update(accepted)
    assert srv.alive()
    # nothing acknowledged is lost across a crash
    srv.kill9()
    srv.start()
    c = srv.resp()
    for k, v in acked.items():
        assert c.call("GET", k) == v, "%s lost or changed after restart" % k
    for k in gone:
        assert c.call("GET", k) is None, "deleted %s came back after restart" % k
    assert c.call("PING") == "PONG"


def test_bounded_pool_under_overwrite(server_factory):
    """~300 MB of overwrites of 10,000 keys through a 64 MB pool: the cleaner
    must reclaim space so that no write is refused, and every key ends with
    its last value, also after kill -9."""
    srv = server_factory(extra={"pool-size": "64mb"})
    nkeys, vsize, rounds, batch = 10000, 1000, 30, 1000
    cn = RawConn(srv.port)

    def val(rnd, i):
        head = b"r%d:k%d:" % (rnd, i)
        return head + b"abcdefghij"[rnd % 10:rnd % 10 + 1] * (vsize - len(head))

    for rnd in range(rounds):
        for start in range(0, nkeys, batch):
            cmds = b"".join(encode_command("SET", "ow:%d" % i, val(rnd, i))
                            for i in range(start, start + batch))
            cn.send(cmds)
            for i in range(start, start + batch):
                rep = cn.read_reply()
                assert rep == "OK", "round %d (%d MB written), SET ow:%d -> %r" % (
                    rnd, (rnd * nkeys + i) * vsize >> 20, i, rep)
    cn.close()

    def check_all(c):
        for start in range(0, nkeys, batch):
            keys = ["ow:%d" % i for i in range(start, start + batch)]
            got = c.call("MGET", *keys)
            want = [val(rounds - 1, i) for i in range(start, start + batch)]
            if got != want:
                bad = [k for k, g, w in zip(keys, got, want) if g != w]
                raise AssertionError("%d keys wrong, e.g. %s = %r" % (
                    len(bad), bad[0], (got[keys.index(bad[0])] or b"")[:40]))

    c = srv.resp()
    check_all(c)
    assert c.call("DBSIZE") == nkeys
    # the space came from cleaning, not from a pool that grew
    assert os.path.getsize(srv.pool_path) <= 64 << 20, os.path.getsize(srv.pool_path)
    srv.kill9()
    srv.start()
    c = srv.resp()
    check_all(c)
    assert c.call("DBSIZE") == nkeys


def test_slow_device_standalone_says_so(server_factory):
    """A standalone server whose device does not complete a flush within
    replication-timeout answers the held write with an error that names the
    cause (-TIMEOUT, the device), never -NOREPLICAS: it has no replicas. The
    write is not reported as done, and once the flush completes it is there.
    The device is slowed by the power-loss shim (every flush takes 1.5 s)."""
    from ackcheck import shim_env
    srv = server_factory(extra={"replication-timeout": "300"}, start=False)
    srv.env = shim_env(srv, os.path.join(srv.dir, "durable.image"), sync_delay_ms=1500)
    try:
        srv.start()
    finally:
        srv.env = None
    r = redis.Redis(port=srv.port, socket_timeout=30)
    with pytest.raises(redis.exceptions.ResponseError) as ei:
        r.set("slow", "v")
    msg = str(ei.value)
    assert "NOREPLICAS" not in msg and "flush" in msg, msg
    # a read of it waits for the same flush (reads see durable data only)
    def there():
        try:
            return r.get("slow") == b"v"
        except redis.exceptions.ResponseError as e:
            assert "NOREPLICAS" not in str(e), e
            return False
    assert wait_for(there, timeout=20.0)
    r.close()
