"""Durability of the Redis data types (Rowan-only): hashes, lists, sets,
sorted sets and strings under kill -9 with concurrent clients and a reader,
EXEC all-or-nothing across a crash, two-key moves (SMOVE, LMOVE, RENAME of a
hash) all-or-nothing, blocking pops, collection expiry, long collection
histories (compacted into snapshot entries, src/store/object.h) and the cleaner
relocating collection entries in a small pool.

Every client owns its keys, so the test keeps an exact model of what each
key holds after the last acknowledged command. After a kill -9 and a restart
on the same directory, a key must hold that model state, or the state after
some prefix of the commands that were still in flight on its connection (a
sequential client has at most one; SPOP/LPOP/ZPOPMIN in flight count with
every result they could have had), never anything else.

Commands a server does not implement yet ("ERR unknown command") make the
tests that need them skip at run time, with the commands named.

The crash tests also hold for redis-server with appendonly yes +
appendfsync always: ROWAN_TEST_REDIS_AOF=1 with --target=redis runs them
there, which checks the checker itself."""
import random
import threading
import time

import pytest

from conftest import (ConnectionClosed, RespClient, RespError, describe_rc,
                      encode_command)

pytestmark = pytest.mark.rowan_only("durability of acknowledged collection writes across kill -9")

CONN_ERRORS = (ConnectionClosed, ConnectionError, OSError)
ROUND_DEADLINE = 40.0


# --------------------------------------------------------------------------
# which commands the server has
# --------------------------------------------------------------------------
PROBE_KEY = "__types_probe__"
PROBES = {
    "hash": [("HSET", PROBE_KEY, "f", "1", "g", "2"), ("HINCRBY", PROBE_KEY, "n", "2"),
             ("HDEL", PROBE_KEY, "f"), ("HGETALL", PROBE_KEY)],
    "list": [("RPUSH", PROBE_KEY, "a", "b", "c"), ("LPUSH", PROBE_KEY, "z"),
             ("LSET", PROBE_KEY, "0", "y"), ("LTRIM", PROBE_KEY, "0", "2"),
             ("LPOP", PROBE_KEY), ("LRANGE", PROBE_KEY, "0", "-1")],
    "set": [("SADD", PROBE_KEY, "a", "b"), ("SREM", PROBE_KEY, "a"), ("SPOP", PROBE_KEY),
            ("SMEMBERS", PROBE_KEY)],
    "zset": [("ZADD", PROBE_KEY, "1", "a", "2", "b"), ("ZINCRBY", PROBE_KEY, "1", "a"),
             ("ZREM", PROBE_KEY, "b"), ("ZPOPMIN", PROBE_KEY),
             ("ZRANGE", PROBE_KEY, "0", "-1", "WITHSCORES"), ("ZREMRANGEBYRANK", PROBE_KEY, "0", "0")],
    "multi": [("MULTI",), ("SET", PROBE_KEY, "1"), ("EXEC",)],
    "moves": [("SADD", PROBE_KEY, "a"), ("SMOVE", PROBE_KEY, PROBE_KEY + "2", "a"),
              ("RPUSH", PROBE_KEY, "a"), ("LMOVE", PROBE_KEY, PROBE_KEY + "3", "LEFT", "RIGHT")],
    "blocking": [("BLPOP", PROBE_KEY, "0.01"), ("BLMOVE", PROBE_KEY, PROBE_KEY + "2", "LEFT",
                                                   "RIGHT", "0.01")],
}


def missing_commands(port, groups):
    """Names of the commands of `groups` the server answers with
    'ERR unknown command' (probed on a scratch key, deleted afterwards)."""
    c = RespClient(port)
    missing = []
    try:
        for g in groups:
            c.call("DEL", PROBE_KEY)
            for cmd in PROBES[g]:
                rep = c.call(*cmd)
                if isinstance(rep, RespError) and "unknown command" in rep.msg.lower():
                    missing.append(cmd[0])
            c.call("DEL", PROBE_KEY, PROBE_KEY + "2", PROBE_KEY + "3")
    finally:
        c.close()
    return missing


def require(srv, *groups):
    missing = missing_commands(srv.port, groups)
    if missing:
        pytest.skip("%s server does not implement %s yet (ERR unknown command)" %
                    (srv.target, ", ".join(sorted(set(missing)))))


# --------------------------------------------------------------------------
# canonical states: None (absent) or (type, immutable contents)
# --------------------------------------------------------------------------
def H(st):
    return dict(st[1]) if st else {}


def L(st):
    return list(st[1]) if st else []


def S(st):
    return set(st[1]) if st else set()


def Z(st):
    return dict(st[1]) if st else {}


def pack_hash(d):
    return ("hash", frozenset(d.items())) if d else None


def pack_list(l):
    return ("list", tuple(l)) if l else None


def pack_set(s):
    return ("set", frozenset(s)) if s else None


def pack_zset(d):
    return ("zset", frozenset(d.items())) if d else None


def show(st, limit=12):
    if st is None:
        return "absent"
    kind, data = st
    if kind == "string":
        return "string %r" % data[:60]
    if kind == "list":
        items = list(data)
    elif kind == "zset":
        items = sorted(data, key=lambda p: (p[1], p[0]))
    else:
        items = sorted(data)
    more = " ...(%d in all)" % len(items) if len(items) > limit else ""

    def cut(x):
        if isinstance(x, tuple):
            return tuple(cut(y) for y in x)
        return x[:30] + b"..." if isinstance(x, bytes) and len(x) > 30 else x
    return "%s %r%s" % (kind, [cut(x) for x in items[:limit]], more)


def zmin(d):
    return min(d.items(), key=lambda p: (p[1], p[0]))


def ltrim(l, start, stop):
    n = len(l)
    if start < 0:
        start += n
    if stop < 0:
        stop += n
    if start < 0:
        start = 0
    if start > stop or start >= n:
        return []
    if stop >= n:
        stop = n - 1
    return l[start:stop + 1]


def is_score(rep, want):
    try:
        return isinstance(rep, bytes) and float(rep) == want
    except ValueError:
        return False


# --------------------------------------------------------------------------
# operations: args, and outcomes(state) -> [(new state, reply predicate, what)]
# --------------------------------------------------------------------------
class Op:
    __slots__ = ("key", "args", "outcomes")

    def __init__(self, key, args, outcomes):
        self.key = key
        self.args = args
        self.outcomes = outcomes

    def __repr__(self):
        shown = [a if len(a) <= 24 else a[:20] + b"..." for a in
                 (x if isinstance(x, bytes) else str(x).encode() for x in self.args)]
        return " ".join(x.decode("utf-8", "replace") for x in shown)


def eq(v):
    return lambda r: r == v


class Gen:
    """Random operations on one key kind, from a seeded rng. Unique values
    (client tag + sequence number) make every write identifiable."""

    def __init__(self, rng, tag, nfields=10, nmembers=24, vsize=0, maxlen=40, wild=0.08):
        self.rng = rng
        self.tag = tag
        self.seq = 0
        self.nfields = nfields
        self.nmembers = nmembers
        self.vsize = vsize
        self.maxlen = maxlen
        self.wild = wild          # share of LTRIMs with random bounds
        # SPOP's result is random: a run of them in flight has too many
        # possible outcomes to enumerate, so pipelined batches go without
        self.nondet = True

    def val(self):
        self.seq += 1
        v = b"%s.%d" % (self.tag, self.seq)
        if self.vsize > len(v):
            v += b"." * (self.vsize - len(v))
        return v

    def op(self, kind, key, st):
        return getattr(self, "op_" + kind)(key, st)

    # ---- strings ----
    def op_string(self, key, st):
        rng = self.rng
        if st is None or rng.random() < 0.6:
            v = self.val()
            return Op(key, ["SET", key, v], lambda s, v=v: [(("string", v), eq("OK"), "SET")])
        suffix = b"+" + self.val()

        def out(s, suffix=suffix):
            nv = (s[1] if s else b"") + suffix
            return [(("string", nv), eq(len(nv)), "APPEND")]
        return Op(key, ["APPEND", key, suffix], out)

    # ---- hashes: f* fields hold strings, n* fields counters ----
    def op_hash(self, key, st):
        rng = self.rng
        x = rng.random()
        if x < 0.45:
            fields = rng.sample(range(self.nfields), rng.choice((1, 1, 2, 3)))
            pairs = [(b"f%d" % f, self.val()) for f in fields]

            def out(s, pairs=pairs):
                d = H(s)
                new = sum(1 for f, _ in pairs if f not in d)
                d.update(pairs)
                return [(pack_hash(d), eq(new), "HSET")]
            return Op(key, ["HSET", key] + [x for p in pairs for x in p], out)
        if x < 0.75:
            f = b"n%d" % rng.randrange(4)
            delta = rng.randint(-1000, 1000)

            def out(s, f=f, delta=delta):
                d = H(s)
                nv = int(d.get(f, b"0")) + delta
                d[f] = b"%d" % nv
                return [(pack_hash(d), eq(nv), "HINCRBY")]
            return Op(key, ["HINCRBY", key, f, delta], out)
        fields = [b"f%d" % rng.randrange(self.nfields) for _ in range(rng.choice((1, 2)))]
        if rng.random() < 0.3:
            fields.append(b"n%d" % rng.randrange(4))
        fields = list(dict.fromkeys(fields))

        def out(s, fields=fields):
            d = H(s)
            n = sum(1 for f in fields if d.pop(f, None) is not None)
            return [(pack_hash(d), eq(n), "HDEL")]
        return Op(key, ["HDEL", key] + fields, out)

    # ---- lists ----
    def op_list(self, key, st):
        rng = self.rng
        n = len(L(st))
        x = rng.random()
        if n > self.maxlen:
            x = 0.85          # keep lists bounded: trim
        if x < 0.25 or (n == 0 and x >= 0.5):
            vals = [self.val() for _ in range(rng.choice((1, 1, 2)))]

            def out(s, vals=vals):
                l = L(s)
                for v in vals:
                    l.insert(0, v)
                return [(pack_list(l), eq(len(l)), "LPUSH")]
            return Op(key, ["LPUSH", key] + vals, out)
        if x < 0.5:
            v = self.val()

            def out(s, v=v):
                l = L(s) + [v]
                return [(pack_list(l), eq(len(l)), "RPUSH")]
            return Op(key, ["RPUSH", key, v], out)
        if x < 0.68:
            def out(s):
                l = L(s)
                if not l:
                    return [(None, eq(None), "LPOP of an empty list")]
                head = l.pop(0)
                return [(pack_list(l), eq(head), "LPOP")]
            return Op(key, ["LPOP", key], out)
        if x < 0.83:
            idx = rng.randrange(-n, n)
            v = self.val()

            def out(s, idx=idx, v=v):
                l = L(s)
                if not l:
                    return [(None, lambda r: isinstance(r, RespError), "LSET on a missing key")]
                if not -len(l) <= idx < len(l):
                    return [(s, lambda r: isinstance(r, RespError), "LSET out of range")]
                l[idx] = v
                return [(pack_list(l), eq("OK"), "LSET")]
            return Op(key, ["LSET", key, idx, v], out)
        if n > self.maxlen:
            keep = rng.randint(self.maxlen // 3, self.maxlen // 2)
            start = rng.randint(0, n - keep)
            a, b = (start, start + keep - 1) if rng.random() < 0.5 else \
                (start - n, start + keep - 1 - n)
        else:
            y = rng.random()
            if y < 0.5:       # drop up to two from each end
                a, b = rng.randint(0, 2), -1 - rng.randint(0, 2)
            elif y < 1 - self.wild:
                a, b = rng.randint(0, 2), rng.randint(n - 3, n + 3)
            else:
                a, b = rng.randint(-4, 3), rng.randint(-3, n + 2)

        def out(s, a=a, b=b):
            l = ltrim(L(s), a, b)
            return [(pack_list(l), eq("OK"), "LTRIM")]
        return Op(key, ["LTRIM", key, a, b], out)

    # ---- sets ----
    def member(self):
        return b"m%d" % self.rng.randrange(self.nmembers)

    def op_set(self, key, st):
        rng = self.rng
        x = rng.random()
        if x < 0.5:
            ms = list(dict.fromkeys(self.member() for _ in range(rng.choice((1, 2, 3)))))
            if self.vsize:
                ms = [m + b":" + self.val() for m in ms]

            def out(s, ms=ms):
                cur = S(s)
                n = sum(1 for m in ms if m not in cur)
                cur.update(ms)
                return [(pack_set(cur), eq(n), "SADD")]
            return Op(key, ["SADD", key] + ms, out)
        if x < 0.75 or not self.nondet:
            cur = sorted(S(st))
            ms = list(dict.fromkeys(self.member() for _ in range(rng.choice((1, 2)))))
            if cur and rng.random() < 0.7:
                ms.append(rng.choice(cur))
            ms = list(dict.fromkeys(ms))

            def out(s, ms=ms):
                cur = S(s)
                n = sum(1 for m in ms if m in cur)
                cur.difference_update(ms)
                return [(pack_set(cur), eq(n), "SREM")]
            return Op(key, ["SREM", key] + ms, out)

        def out(s):
            cur = S(s)
            if not cur:
                return [(None, eq(None), "SPOP of an empty set")]
            return [(pack_set(cur - {m}), eq(m), "SPOP") for m in sorted(cur)]
        return Op(key, ["SPOP", key], out)

    # ---- sorted sets: scores are halves, so every sum is exact ----
    def op_zset(self, key, st):
        rng = self.rng
        x = rng.random()
        if x < 0.35:
            pairs = {}
            for _ in range(rng.choice((1, 1, 2, 3))):
                m = self.member()
                if self.vsize:
                    m += b":" + self.val()
                pairs[m] = rng.randint(-40, 40) / 2
            args = []
            for m, sc in pairs.items():
                args += [repr(sc), m]

            def out(s, pairs=pairs):
                d = Z(s)
                n = sum(1 for m in pairs if m not in d)
                d.update(pairs)
                return [(pack_zset(d), eq(n), "ZADD")]
            return Op(key, ["ZADD", key] + args, out)
        if x < 0.65:
            m = self.member()
            cur = sorted(Z(st))
            if cur and rng.random() < 0.6:
                m = rng.choice(cur)
            inc = rng.randint(-10, 10) / 2

            def out(s, m=m, inc=inc):
                d = Z(s)
                d[m] = d.get(m, 0.0) + inc
                return [(pack_zset(d), lambda r, w=d[m]: is_score(r, w), "ZINCRBY")]
            return Op(key, ["ZINCRBY", key, repr(inc), m], out)
        if x < 0.8:
            cur = sorted(Z(st))
            ms = [self.member()]
            if cur:
                ms.append(rng.choice(cur))
            ms = list(dict.fromkeys(ms))

            def out(s, ms=ms):
                d = Z(s)
                n = sum(1 for m in ms if d.pop(m, None) is not None)
                return [(pack_zset(d), eq(n), "ZREM")]
            return Op(key, ["ZREM", key] + ms, out)

        def out(s):
            d = Z(s)
            if not d:
                return [(None, eq([]), "ZPOPMIN of an empty zset")]
            m, sc = zmin(d)
            del d[m]
            return [(pack_zset(d), lambda r, m=m, sc=sc: isinstance(r, list) and len(r) == 2
                     and r[0] == m and is_score(r[1], sc), "ZPOPMIN")]
        return Op(key, ["ZPOPMIN", key], out)


def resolve(op, st, rep):
    """The state after op, given its reply; raises AssertionError when no
    possible outcome of op on st gives that reply."""
    outs = op.outcomes(st)
    for new, pred, _ in outs:
        if pred(rep):
            return new
    raise AssertionError("%s answered %r; expected %s on %s" %
                         (op, rep, " or ".join(sorted(set(w for _, _, w in outs))), show(st)))


def possible_states(st, inflight):
    """States a key may hold after a crash: st, or st after any prefix of
    the in-flight ops (each with every outcome it could have had)."""
    allowed = {st}
    frontier = {st}
    for op in inflight:
        nxt = set()
        for s in frontier:
            for new, _, _ in op.outcomes(s):
                nxt.add(new)
        allowed |= nxt
        frontier = nxt
    return allowed


def read_state(c, key):
    t = c.call("TYPE", key)
    if t == "none":
        return None
    if t == "string":
        return ("string", c.call("GET", key))
    if t == "hash":
        rep = c.call("HGETALL", key)
        assert isinstance(rep, list) and len(rep) % 2 == 0, "HGETALL %s -> %r" % (key, rep)
        d = dict(zip(rep[0::2], rep[1::2]))
        assert len(d) == len(rep) // 2, "HGETALL %s repeats a field: %r" % (key, rep)
        return ("hash", frozenset(d.items()))
    if t == "list":
        rep = c.call("LRANGE", key, 0, -1)
        assert isinstance(rep, list), "LRANGE %s -> %r" % (key, rep)
        return ("list", tuple(rep))
    if t == "set":
        rep = c.call("SMEMBERS", key)
        assert isinstance(rep, list) and len(set(rep)) == len(rep), "SMEMBERS %s -> %r" % (key, rep)
        return ("set", frozenset(rep))
    if t == "zset":
        rep = c.call("ZRANGE", key, 0, -1, "WITHSCORES")
        assert isinstance(rep, list) and len(rep) % 2 == 0, "ZRANGE %s -> %r" % (key, rep)
        pairs = [(m, float(s)) for m, s in zip(rep[0::2], rep[1::2])]
        order = sorted(pairs, key=lambda p: (p[1], p[0]))
        assert pairs == order, "ZRANGE %s is not in (score, member) order: %r" % (key, pairs[:20])
        assert len(dict(pairs)) == len(pairs), "ZRANGE %s repeats a member" % key
        return ("zset", frozenset(pairs))
    raise AssertionError("TYPE %s answered %r" % (key, t))


# --------------------------------------------------------------------------
# clients that own their keys
# --------------------------------------------------------------------------
class ModelClient:
    """One connection; sends `depth` ops at a time (1 = request/reply) on
    its own keys, checks each reply against the model and keeps the model
    of acknowledged state. Ops whose reply never came stay in `inflight`."""

    def __init__(self, cid, kinds, per_kind, seed, depth=1, **genkw):
        self.cid = cid
        self.rng = random.Random(seed)
        self.gen = Gen(self.rng, b"c%d" % cid, **genkw)
        self.gen.nondet = depth == 1
        self.depth = depth
        self.keys = []
        self.kind_of = {}
        for kind in kinds:
            for i in range(per_kind):
                k = "t:c%d:%s%d" % (cid, kind, i)
                self.keys.append(k)
                self.kind_of[k] = kind
        self.model = {k: None for k in self.keys}
        self.hist = {k: [None] for k in self.keys}    # acknowledged states since verify
        self.observed = {k: [] for k in self.keys}    # states a Reader saw since verify
        self.inflight = []
        self.acks = 0
        self.error = None
        self.stop = threading.Event()

    def batch(self):
        """Next `depth` ops, each generated against the state the ops before
        it in the batch would leave (their first outcome)."""
        pred = {}
        ops = []
        for _ in range(self.depth):
            k = self.rng.choice(self.keys)
            st = pred.get(k, self.model[k])
            op = self.gen.op(self.kind_of[k], k, st)
            pred[k] = op.outcomes(st)[0][0]
            ops.append(op)
        return ops

    def run(self, port):
        try:
            cn = RespClient(port)
            while not self.stop.is_set():
                ops = self.batch()
                self.inflight = list(ops)
                cn.send(b"".join(encode_command(*op.args) for op in ops))
                for op in ops:
                    rep = cn.read_reply()
                    self.model[op.key] = resolve(op, self.model[op.key], rep)
                    self.hist[op.key].append(self.model[op.key])
                    self.inflight.pop(0)
                    self.acks += 1
        except CONN_ERRORS:
            return                  # the server went away: inflight stays
        except BaseException as e:  # a wrong reply: the test fails
            self.error = e

    def verify(self, c, why):
        """Compare the server with the model; then the server's state is the
        new model (an in-flight op either happened or not, for good)."""
        for k in self.keys:
            mine = [op for op in self.inflight if op.key == k]
            allowed = possible_states(self.model[k], mine)
            got = read_state(c, k)
            if got not in allowed:
                raise AssertionError(
                    "%s: %s holds %s\n  acknowledged state: %s\n  in flight: %s" %
                    (why, k, show(got), show(self.model[k]), mine or "nothing"))
            # what another connection read must have been durable
            known = set(self.hist[k])
            for seen in self.observed[k]:
                if seen in known:
                    continue
                assert seen in allowed, "%s: a reader saw %s in %s, a state never written " \
                    "(acknowledged: %s)" % (why, show(seen), k, show(self.model[k]))
                assert self.depth == 1
                assert got == seen, "%s: a reader saw %s in %s (the in-flight %s), and " \
                    "after the crash it holds %s" % (why, show(seen), k, mine, show(got))
            self.model[k] = got
            self.hist[k] = [got]
            self.observed[k] = []
        self.inflight = []


def observe(cn, kind, key):
    """A key's state in one read command (its kind is known)."""
    if kind == "string":
        v = cn.call("GET", key)
        return None if v is None else ("string", v)
    if kind == "hash":
        rep = cn.call("HGETALL", key)
        return pack_hash(dict(zip(rep[0::2], rep[1::2])))
    if kind == "list":
        return pack_list(cn.call("LRANGE", key, 0, -1))
    if kind == "set":
        return pack_set(set(cn.call("SMEMBERS", key)))
    rep = cn.call("ZRANGE", key, 0, -1, "WITHSCORES")
    return pack_zset({m: float(sc) for m, sc in zip(rep[0::2], rep[1::2])})


class Reader:
    """Reads the keys of request/reply clients on its own connection and
    files what it saw with their owner (ModelClient.verify checks it)."""

    def __init__(self, clients, seed):
        self.clients = [cl for cl in clients if cl.depth == 1]
        self.rng = random.Random(seed)
        self.keys = []
        self.inflight = []
        self.acks = 0
        self.reads = 0
        self.error = None
        self.stop = threading.Event()

    def run(self, port):
        try:
            cn = RespClient(port)
            while not self.stop.is_set():
                cl = self.rng.choice(self.clients)
                k = self.rng.choice(cl.keys)
                cl.observed[k].append(observe(cn, cl.kind_of[k], k))
                self.reads += 1
        except CONN_ERRORS:
            return
        except BaseException as e:
            self.error = e

    def verify(self, c, why):
        pass


def check_no_stray_keys(c, clients, extra=()):
    known = set(extra)
    for cl in clients:
        known.update(k.encode() for k in cl.keys)
    keys = c.call("KEYS", "*")
    stray = sorted(set(keys) - known)
    assert not stray, "keys nobody wrote exist after restart: %r" % stray[:10]


def check_recovery_clean(srv):
    if srv.target == "rowan":
        inf = srv.info("rowan")["_all"]
        assert int(inf.get("recovery_corrupt_entries", "0")) == 0, \
            "kill -9 left corrupt entries in the middle of a log: %r" % inf


def crash_rounds(srv, clients, kills, seed, extra_check=None, min_acks=(1000, 3000)):
    """Run every client, kill -9 the server mid-load `kills` times, restart
    on the same dir and verify every key; then a clean restart."""
    rng = random.Random(seed)
    for rnd in range(kills):
        for cl in clients:
            cl.stop = threading.Event()
        threads = [threading.Thread(target=cl.run, args=(srv.port,), daemon=True)
                   for cl in clients]
        base = sum(cl.acks for cl in clients)
        want = rng.randrange(*min_acks)
        for t in threads:
            t.start()
        deadline = time.monotonic() + ROUND_DEADLINE
        while sum(cl.acks for cl in clients) - base < want and time.monotonic() < deadline:
            if any(cl.error for cl in clients) or not any(t.is_alive() for t in threads):
                break
            time.sleep(0.01)
        errors = [cl.error for cl in clients if cl.error]
        assert not errors, "round %d: wrong reply under load: %s" % (rnd, errors[0])
        assert srv.alive(), "server died by itself (%s) in round %d" % (
            describe_rc(srv.proc.returncode), rnd)
        done = sum(cl.acks for cl in clients) - base
        assert done >= want, "round %d: only %d of %d ops acknowledged in %.0f s (stuck?)" % (
            rnd, done, want, ROUND_DEADLINE)
        srv.kill9()
        for cl in clients:
            cl.stop.set()
        for t in threads:
            t.join(30)
            assert not t.is_alive(), "client thread stuck after kill -9"
        errors = [cl.error for cl in clients if cl.error]
        assert not errors, "round %d: wrong reply under load: %s" % (rnd, errors[0])
        srv.start()
        check_recovery_clean(srv)
        c = srv.resp()
        for cl in clients:
            cl.verify(c, "after kill -9 #%d" % (rnd + 1))
        if extra_check:
            extra_check(c, "after kill -9 #%d" % (rnd + 1))
        c.close()
    srv.stop()
    srv.start()
    c = srv.resp()
    for cl in clients:
        assert not cl.inflight
        cl.verify(c, "after a clean restart")
    if extra_check:
        extra_check(c, "after a clean restart")
    c.close()


# --------------------------------------------------------------------------
# 1. mixed load, kill -9 several times
# --------------------------------------------------------------------------
KIND_SETS = {
    "hash": ["hash"],
    "list": ["list"],
    "set": ["set"],
    "zset": ["zset"],
    "all": ["hash", "list", "set", "zset"],
}


@pytest.mark.redis_aof_ok
@pytest.mark.parametrize("kinds", list(KIND_SETS))
def test_crash_mixed_types(server_factory, kinds):
    """Concurrent clients (four request/reply, one pipelining 8 deep) run
    random HSET/HDEL/HINCRBY, LPUSH/RPUSH/LPOP/LSET/LTRIM, SADD/SREM/SPOP,
    ZADD/ZINCRBY/ZREM/ZPOPMIN and SET/APPEND on their own keys; kill -9
    mid-load, restart, every key must be its acknowledged state or that
    state after an in-flight op. A reader on its own connection reads the
    request/reply clients' keys: a state it saw must survive the crash."""
    types = KIND_SETS[kinds]
    srv = server_factory()
    require(srv, *types)
    per_kind = 3 if kinds == "all" else 5
    clients = [ModelClient(i, types + ["string"], per_kind, seed=1000 + i)
               for i in range(4)]
    clients.append(ModelClient(9, types + ["string"], per_kind, seed=1999, depth=8))
    reader = Reader(clients, seed=5)
    crash_rounds(srv, clients + [reader], kills=4 if kinds == "all" else 3,
                 seed=list(KIND_SETS).index(kinds))
    assert reader.reads > 100, "the reader hardly read (%d)" % reader.reads
    c = srv.resp()
    check_no_stray_keys(c, clients)
    # the run must have built real collections, not only empty keys
    kinds_seen = {cl.model[k][0] for cl in clients for k in cl.keys if cl.model[k]}
    assert set(types) <= kinds_seen, "no non-empty %s at the end" % (set(types) - kinds_seen)


# --------------------------------------------------------------------------
# 2. MULTI/EXEC is all or nothing across kill -9
# --------------------------------------------------------------------------
class TxClient:
    """Transaction n (1, 2, ...) sets every key of this client to a state
    that depends only on n; the server must hold the states of one n."""

    def __init__(self, tid, with_types):
        self.tid = tid
        self.with_types = with_types
        p = "tx%d:" % tid
        self.k = {x: p + x for x in ("str", "ctr", "log", "h", "l", "s", "z")}
        if not with_types:
            for x in ("h", "l", "s", "z"):
                del self.k[x]
        self.acked = 0
        self.inflight = None
        self.acks = 0
        self.error = None
        self.stop = threading.Event()

    @property
    def keys(self):
        return list(self.k.values())

    def commands(self, n):
        k = self.k
        cmds = [("SET", k["str"], "v%d" % n), ("INCR", k["ctr"]), ("APPEND", k["log"], "%d," % n)]
        replies = ["OK", n, len(self.expected_log(n))]
        if self.with_types:
            cmds += [("HSET", k["h"], "last", n, "f%d" % (n % 7), n),
                     ("RPUSH", k["l"], n), ("LTRIM", k["l"], -5, -1),
                     ("SADD", k["s"], n), ("SREM", k["s"], n - 4),
                     ("ZADD", k["z"], n, "m%d" % n), ("ZREMRANGEBYRANK", k["z"], 0, -6)]
            replies += [(1 if n == 1 else 0) + (1 if n <= 7 else 0), min(n - 1, 5) + 1, "OK",
                        1, 1 if n > 4 else 0, 1, 1 if n > 5 else 0]
        return cmds, replies

    def expected_log(self, n):
        return "".join("%d," % i for i in range(1, n + 1)).encode()

    def expected(self, n):
        """{key: state} after transactions 1..n."""
        k = self.k
        if n == 0:
            return {key: None for key in self.keys}
        e = {k["str"]: ("string", b"v%d" % n), k["ctr"]: ("string", b"%d" % n),
             k["log"]: ("string", self.expected_log(n))}
        if self.with_types:
            h = {b"last": b"%d" % n}
            for i in range(1, n + 1):
                h[b"f%d" % (i % 7)] = b"%d" % i
            e[k["h"]] = pack_hash(h)
            e[k["l"]] = pack_list([b"%d" % i for i in range(max(1, n - 4), n + 1)])
            e[k["s"]] = pack_set({b"%d" % i for i in range(max(1, n - 3), n + 1)})
            e[k["z"]] = pack_zset({b"m%d" % i: float(i) for i in range(max(1, n - 4), n + 1)})
        return e

    def run(self, port):
        try:
            cn = RespClient(port)
            while not self.stop.is_set():
                n = self.acked + 1
                cmds, replies = self.commands(n)
                self.inflight = n
                cn.send(encode_command("MULTI") + b"".join(encode_command(*c) for c in cmds) +
                        encode_command("EXEC"))
                rep = cn.read_reply()
                assert rep == "OK", "MULTI -> %r" % (rep,)
                for c in cmds:
                    rep = cn.read_reply()
                    assert rep == "QUEUED", "%r in MULTI -> %r" % (c, rep)
                rep = cn.read_reply()
                assert isinstance(rep, list) and len(rep) == len(cmds), "EXEC -> %r" % (rep,)
                for c, want, got in zip(cmds, replies, rep):
                    if want is not None:
                        assert got == want, "tx %d: %r in EXEC answered %r, expected %r" % (
                            n, c, got, want)
                self.acked = n
                self.inflight = None
                self.acks += 1
        except CONN_ERRORS:
            return
        except BaseException as e:
            self.error = e

    def verify(self, c, why):
        got = {key: read_state(c, key) for key in self.keys}
        ctr = got[self.k["ctr"]]
        n = int(ctr[1]) if ctr else 0
        hi = self.acked + (1 if self.inflight else 0)
        assert self.acked <= n <= hi, \
            "%s: tx client %d shows transaction %d; acknowledged %d, in flight %s" % (
                why, self.tid, n, self.acked, self.inflight)
        want = self.expected(n)
        for key in self.keys:
            assert got[key] == want[key], \
                "%s: EXEC torn: %s holds %s, but %s says transaction %d (%s expected)" % (
                    why, key, show(got[key]), self.k["ctr"], n, show(want[key]))
        self.acked = n
        self.inflight = None


@pytest.mark.redis_aof_ok
@pytest.mark.parametrize("with_types", [False, True], ids=["strings", "all-types"])
def test_exec_all_or_nothing_across_kill9(server_factory, with_types):
    """Three clients run MULTI / ~10 commands on 7 keys / EXEC in a loop
    (sent in one write), with mixed-type load beside them; after each kill
    -9 every key of a client must show the same transaction number, between
    the last acknowledged EXEC and the one in flight."""
    srv = server_factory()
    types = ["hash", "list", "set", "zset"] if with_types else []
    require(srv, "multi", *types)
    txs = [TxClient(i, with_types) for i in range(3)]
    load = ModelClient(8, types + ["string"], 3, seed=808, depth=8)
    crash_rounds(srv, txs + [load], kills=4, seed=77, min_acks=(400, 1200))
    assert all(t.acked > 0 for t in txs)


@pytest.mark.redis_aof_ok
def test_exec_with_error_inside_keeps_the_other_commands(server_factory):
    """A command failing inside EXEC (WRONGTYPE) does not undo the others,
    before or after kill -9; DISCARD leaves nothing behind."""
    srv = server_factory()
    require(srv, "multi", "hash")
    c = srv.resp()
    c.ok("SET", "plain", "x")
    assert c.call("MULTI") == "OK"
    assert c.call("HSET", "h", "a", "1") == "QUEUED"
    assert c.call("HSET", "plain", "a", "1") == "QUEUED"
    assert c.call("SET", "s", "after") == "QUEUED"
    rep = c.call("EXEC")
    assert isinstance(rep, list) and rep[0] == 1 and rep[2] == "OK", rep
    assert isinstance(rep[1], RespError) and rep[1].msg.startswith("WRONGTYPE"), rep
    assert c.call("MULTI") == "OK"
    assert c.call("HSET", "gone", "a", "1") == "QUEUED"
    assert c.call("DISCARD") == "OK"
    srv.kill9()
    srv.start()
    c = srv.resp()
    assert read_state(c, "h") == pack_hash({b"a": b"1"})
    assert c.call("GET", "s") == b"after"
    assert c.call("GET", "plain") == b"x"
    assert c.call("EXISTS", "gone") == 0


@pytest.mark.redis_aof_ok
def test_blocking_pops_are_durable(server_factory):
    """A BLPOP / BLMOVE served by another client's push is a write: once its
    reply arrived, the element is gone from the source (and in the
    destination) after kill -9."""
    srv = server_factory()
    require(srv, "list", "blocking")
    a = srv.resp()
    b = srv.resp()
    for i in range(40):
        a.send_command("BLPOP", "bq", 10)
        time.sleep(0.002 if i % 4 else 0.03)   # mostly blocked before the push
        assert b.call("RPUSH", "bq", "e%d" % i) == 1
        rep = a.read_reply()
        assert rep == [b"bq", b"e%d" % i], "BLPOP -> %r" % (rep,)
    moved = []
    for i in range(40):
        a.send_command("BLMOVE", "src", "dst", "LEFT", "RIGHT", 10)
        time.sleep(0.002 if i % 4 else 0.03)
        assert b.call("RPUSH", "src", "m%d" % i) == 1
        rep = a.read_reply()
        assert rep == b"m%d" % i, "BLMOVE -> %r" % (rep,)
        moved.append(b"m%d" % i)
    # one more BLPOP in flight when the server dies: nothing to pop
    a.send_command("BLPOP", "bq", 10)
    assert b.call("RPUSH", "other", "x") == 1
    srv.kill9()
    srv.start()
    c = srv.resp()
    assert c.call("EXISTS", "bq") == 0, "popped elements came back: %r" % c.call("LRANGE", "bq", 0, -1)
    assert c.call("EXISTS", "src") == 0, "moved elements are back in src: %r" % (
        c.call("LRANGE", "src", 0, -1),)
    assert c.call("LRANGE", "dst", 0, -1) == moved
    assert c.call("LRANGE", "other", 0, -1) == [b"x"]


class MoveClient:
    """Moves elements between its own pairs of keys: SMOVE between two sets,
    LMOVE between two lists, RENAME of a hash back and forth. Each move
    changes two keys; after a crash both must show the same side of it."""

    def __init__(self, mid, seed):
        self.rng = random.Random(seed)
        p = "mv%d:" % mid
        self.pairs = {"set": (p + "sA", p + "sB"), "list": (p + "lA", p + "lB"),
                      "hash": (p + "hA", p + "hB")}
        self.keys = [k for pr in self.pairs.values() for k in pr]
        a = {"set": pack_set({b"m%d" % i for i in range(20)}),
             "list": pack_list([b"e%d" % i for i in range(20)]),
             "hash": pack_hash({b"f%d" % i: b"v%d" % i for i in range(20)})}
        self.model = {}
        for kind, (ka, kb) in self.pairs.items():
            self.model[ka], self.model[kb] = a[kind], None
        self.inflight = None        # (kind, [(newA, newB), ...]) of the move in flight
        self.acks = 0
        self.error = None
        self.stop = threading.Event()
        self.created = False

    def create(self, cn):
        for kind, (ka, kb) in self.pairs.items():
            st = self.model[ka]
            if kind == "set":
                args = ["SADD", ka] + sorted(st[1])
            elif kind == "list":
                args = ["RPUSH", ka] + list(st[1])
            else:
                args = ["HSET", ka] + [x for p in sorted(st[1]) for x in p]
            rep = cn.call(*args)
            assert rep == 20, "%s -> %r" % (args[0], rep)
        self.created = True

    def move(self, kind):
        """-> (args, [(newA, newB, reply predicate)])"""
        ka, kb = self.pairs[kind]
        sa, sb = self.model[ka], self.model[kb]
        fwd = sb is None or (sa is not None and self.rng.random() < 0.5)
        src, dst = (ka, kb) if fwd else (kb, ka)
        ss, sd = (sa, sb) if fwd else (sb, sa)
        if kind == "set":
            m = self.rng.choice(sorted(ss[1]))
            nsrc, ndst = pack_set(S(ss) - {m}), pack_set(S(sd) | {m})
            args, pred = ["SMOVE", src, dst, m], eq(1)
        elif kind == "list":
            l = L(ss)
            e = l.pop()
            nsrc, ndst = pack_list(l), pack_list([e] + L(sd))
            args, pred = ["LMOVE", src, dst, "RIGHT", "LEFT"], eq(e)
        else:
            nsrc, ndst = None, ss
            args, pred = ["RENAME", src, dst], eq("OK")
        new = (nsrc, ndst) if fwd else (ndst, nsrc)
        return args, new, pred

    def run(self, port):
        try:
            cn = RespClient(port)
            if not self.created:
                self.create(cn)
            while not self.stop.is_set():
                kind = self.rng.choice(sorted(self.pairs))
                args, new, pred = self.move(kind)
                self.inflight = (kind, new)
                rep = cn.call(*args)
                assert pred(rep), "%r -> %r" % (args, rep)
                ka, kb = self.pairs[kind]
                self.model[ka], self.model[kb] = new
                self.inflight = None
                self.acks += 1
        except CONN_ERRORS:
            return
        except BaseException as e:
            self.error = e

    def verify(self, c, why):
        for kind, (ka, kb) in self.pairs.items():
            got = (read_state(c, ka), read_state(c, kb))
            allowed = [(self.model[ka], self.model[kb])]
            if self.inflight and self.inflight[0] == kind:
                allowed.append(self.inflight[1])
            assert got in allowed, "%s: %s torn: %s = %s, %s = %s; acknowledged: %s / %s%s" % (
                why, args_name(kind), ka, show(got[0]), kb, show(got[1]),
                show(self.model[ka]), show(self.model[kb]),
                "; in flight: %s / %s" % tuple(show(x) for x in self.inflight[1])
                if self.inflight and self.inflight[0] == kind else "")
            self.model[ka], self.model[kb] = got
        self.inflight = None


def args_name(kind):
    return {"set": "SMOVE", "list": "LMOVE", "hash": "RENAME"}[kind]


@pytest.mark.redis_aof_ok
def test_two_key_moves_are_atomic_across_kill9(server_factory):
    """SMOVE, LMOVE and RENAME of a hash change two keys at once; after each
    kill -9 every pair must show the move entirely or not at all (the
    elements are conserved: none lost, none doubled)."""
    srv = server_factory()
    require(srv, "hash", "list", "set", "moves")
    movers = [MoveClient(i, seed=300 + i) for i in range(4)]
    crash_rounds(srv, movers, kills=4, seed=31, min_acks=(500, 1500))


# --------------------------------------------------------------------------
# 3. long histories: many updates to one collection, then restarts
# --------------------------------------------------------------------------
def run_ops(c, model, ops):
    """Pipeline ops, check every reply against the model, update it."""
    c.send(b"".join(encode_command(*op.args) for op in ops))
    for op in ops:
        model[op.key] = resolve(op, model[op.key], c.read_reply())


def kill_mid_batch(srv, c, model, ops, nread):
    """Pipeline ops, take nread replies, kill -9 the server with the rest in
    flight (some may have been served already); returns the rest."""
    c.send(b"".join(encode_command(*op.args) for op in ops))
    for op in ops[:nread]:
        model[op.key] = resolve(op, model[op.key], c.read_reply())
    srv.kill9()
    return ops[nread:]


def check_after_crash(c, model, keys, inflight, why):
    """Every key: its acknowledged state, or after a prefix of its in-flight
    ops. The state found becomes the model."""
    for k in keys:
        mine = [op for op in inflight if op.key == k]
        got = read_state(c, k)
        if got not in possible_states(model[k], mine):
            raise AssertionError("%s: %s holds %s\n  acknowledged state: %s\n  in flight: "
                                 "%d ops%s" % (why, k, show(got), show(model[k]), len(mine),
                                               ", first %s" % mine[0] if mine else ""))
        model[k] = got


def predicted(gen, kind, key, st, n):
    gen.nondet = False
    ops = []
    for _ in range(n):
        op = gen.op(kind, key, st)
        st = op.outcomes(st)[0][0]
        ops.append(op)
    gen.nondet = True
    return ops


def drive(c, gen, kind, key, model, n, batch=200):
    done = 0
    while done < n:
        ops = []
        st = model[key]
        for _ in range(min(batch, n - done)):
            op = gen.op(kind, key, st)
            st = op.outcomes(st)[0][0]
            ops.append(op)
        run_ops(c, model, ops)
        done += len(ops)


LONG_GEN = {
    "hash": dict(nfields=150),
    "list": dict(maxlen=300, wild=0.0),
    "set": dict(nmembers=200),
    "zset": dict(nmembers=200),
}


@pytest.mark.redis_aof_ok
@pytest.mark.parametrize("kind", ["hash", "list", "set", "zset"])
def test_long_history_survives_restarts(server_factory, kind):
    """Thousands of updates to one collection (its history is compacted
    into snapshot entries over and over), kill -9 at varying points and a
    clean restart, each compared with the model; then DEL and re-create the
    key: nothing of the old history may come back."""
    srv = server_factory()
    require(srv, kind)
    gen = Gen(random.Random(55), b"L", **LONG_GEN[kind])
    key = "long:%s" % kind
    model = {key: None}
    c = srv.resp()
    rng = random.Random(11)
    for rnd, n in enumerate((3000, 1777, 2500, 401, 1234)):
        drive(c, gen, kind, key, model, n)
        assert model[key] is not None and len(model[key][1]) > 10, \
            "the workload left %s nearly empty: %s" % (key, show(model[key]))
        why = "after restart %d (%d updates in all)" % (rnd + 1, gen.seq)
        inflight = []
        if rnd % 2 == 0:      # kill -9 with up to 300 updates in flight
            ops = predicted(gen, kind, key, model[key], 300)
            inflight = kill_mid_batch(srv, c, model, ops, rng.randrange(0, 300))
        else:
            srv.stop()
        srv.start()
        check_recovery_clean(srv)
        c = srv.resp()
        check_after_crash(c, model, [key], inflight, why)
    # an expiry on the collection survives too
    assert c.call("EXPIRE", key, 100000) == 1
    assert c.call("DEL", key) == 1
    model[key] = None
    for i in range(200):            # a few ops, ending with the key present
        drive(c, gen, kind, key, model, 1, batch=1)
        if i >= 4 and model[key] is not None:
            break
    want = model[key]
    assert want is not None
    srv.kill9()
    srv.start()
    c = srv.resp()
    assert read_state(c, key) == want, "re-created %s after DEL: %s, expected %s" % (
        key, show(read_state(c, key)), show(want))
    assert c.call("TTL", key) == -1, "the deleted incarnation's EXPIRE came back"


@pytest.mark.redis_aof_ok
def test_collection_expiry_and_persist_survive_kill9(server_factory):
    srv = server_factory()
    require(srv, "hash")
    c = srv.resp()
    # each expiry is set early, then 300 more writes compact the history
    # into snapshots that must carry it
    for i in range(10):
        assert c.call("HSET", "exp", "f%d" % i, i) == 1
    assert c.call("EXPIRE", "exp", 100000) == 1
    assert c.call("HSET", "per", "a", "1") == 1
    assert c.call("EXPIRE", "per", 100000) == 1
    assert c.call("PERSIST", "per") == 1
    for i in range(10, 310):
        assert c.call("HSET", "exp", "f%d" % (i % 100), i) == (1 if i < 100 else 0)
        assert c.call("HINCRBY", "per", "n", 1) == i - 9
    assert c.call("HSET", "short", "a", "1") == 1
    assert c.call("PEXPIRE", "short", 300) == 1
    srv.kill9()
    time.sleep(0.4)
    srv.start()
    c = srv.resp()
    assert 99000 < c.call("TTL", "exp") <= 100000
    assert c.call("HLEN", "exp") == 100
    assert c.call("HGET", "exp", "f5") == b"305"
    assert c.call("TTL", "per") == -1
    assert c.call("HGET", "per", "n") == b"300"
    assert c.call("EXISTS", "short") == 0


# --------------------------------------------------------------------------
# 4. the cleaner relocates collection entries in a small pool
# --------------------------------------------------------------------------
class BigGen(Gen):
    """~1 KB per write, collections kept at a bounded size so that almost
    everything written becomes garbage the cleaner must reclaim."""

    def op(self, kind, key, st):
        rng = self.rng
        if kind == "hash":
            if rng.random() < 0.1:
                return self.op_hash(key, st)
            f = b"f%d" % rng.randrange(self.nfields)
            v = self.val()

            def out(s, f=f, v=v):
                d = H(s)
                new = 0 if f in d else 1
                d[f] = v
                return [(pack_hash(d), eq(new), "HSET")]
            return Op(key, ["HSET", key, f, v], out)
        if kind == "list":
            if len(L(st)) > self.maxlen:
                return self.op_list(key, st)
            v = self.val()
            if rng.random() < 0.5:
                return Op(key, ["RPUSH", key, v],
                          lambda s, v=v: [(pack_list(L(s) + [v]), eq(len(L(s)) + 1), "RPUSH")])
            return self.op_list(key, st)
        if kind == "set":
            cur = S(st)
            if len(cur) > self.nmembers and rng.random() < 0.5:
                m = rng.choice(sorted(cur))
                return Op(key, ["SREM", key, m],
                          lambda s, m=m: [(pack_set(S(s) - {m}), eq(1 if m in S(s) else 0), "SREM")])
            return self.op_set(key, st)
        if kind == "zset":
            cur = Z(st)
            if len(cur) > self.nmembers and rng.random() < 0.5:
                def out(s):
                    d = Z(s)
                    if not d:
                        return [(None, eq([]), "ZPOPMIN of an empty zset")]
                    m, sc = zmin(d)
                    del d[m]
                    return [(pack_zset(d), lambda r, m=m, sc=sc: isinstance(r, list) and
                             len(r) == 2 and r[0] == m and is_score(r[1], sc), "ZPOPMIN")]
                return Op(key, ["ZPOPMIN", key], out)
            return self.op_zset(key, st)
        raise AssertionError(kind)


@pytest.mark.redis_aof_ok
@pytest.mark.parametrize("kind", ["hash", "list", "set", "zset"])
def test_cleaner_relocates_collections(server_factory, kind):
    """A 64 MB pool, ~160 MB of ~1 KB collection writes (2.5x the pool): 64
    hot collections updated over and over (their old entries die), and
    among them a stream of cold collections written a few times and then
    left alone, so that every segment holds some live collection entries
    the cleaner must copy. No write may be refused; every collection must
    be exact after a kill -9 in the middle, at the end, and after a clean
    restart; on Rowan the cleaner must have copied live bytes."""
    srv = server_factory(extra={"pool-size": "64mb"})
    require(srv, kind)
    gen = BigGen(random.Random(99), b"C", nfields=16, nmembers=16, vsize=1000, maxlen=24)
    cold_gen = Gen(random.Random(98), b"K", vsize=1000)
    hot = ["cl:%s:%d" % (kind, i) for i in range(64)]
    cold = []
    model = {k: None for k in hot}
    rng = random.Random(3)
    c = srv.resp()
    total = 160 * 1024 * 1024
    written = cold_bytes = 0
    kill_at = total * 3 // 5
    killed = False

    def check_all(c, why):
        for k in hot + cold:
            got = read_state(c, k)
            assert got == model[k], "%s: %s holds %s, expected %s" % (
                why, k, show(got), show(model[k]))

    while written < total:
        ops = []
        pred = {}
        kill_now = not killed and written >= kill_at     # this batch goes in flight
        gen.nondet = cold_gen.nondet = not kill_now
        for i in range(430):
            if i % 14 == 13:                  # ~7% of the writes go to cold keys
                if not cold or rng.random() < 0.6:
                    k = "cold:%s:%d" % (kind, len(cold))
                    cold.append(k)
                    model[k] = None
                else:
                    k = rng.choice(cold[-200:])
                st = pred.get(k, model[k])
                op = cold_gen.op(kind, k, st)
                cold_bytes += sum(len(a) for a in op.args if isinstance(a, bytes)) + 64
            else:
                k = rng.choice(hot)
                st = pred.get(k, model[k])
                op = gen.op(kind, k, st)
            pred[k] = op.outcomes(st)[0][0]
            ops.append(op)
            written += sum(len(a) for a in op.args if isinstance(a, bytes)) + 64
        if kill_now:
            killed = True
            inflight = kill_mid_batch(srv, c, model, ops, rng.randrange(0, len(ops)))
            srv.start()
            check_recovery_clean(srv)
            c = srv.resp()
            check_after_crash(c, model, hot + cold, inflight,
                              "after kill -9 at %d MB written" % (written >> 20))
            continue
        run_ops(c, model, ops)
    if srv.target == "rowan":
        inf = srv.info("rowan")["_all"]
        assert int(inf["clean_segments"]) > 0 and int(inf["clean_bytes_copied"]) > 0, \
            "the cleaner never relocated anything (%d MB written, %d MB of it to cold " \
            "keys): %r" % (written >> 20, cold_bytes >> 20, {
                x: inf.get(x) for x in ("clean_segments", "clean_bytes_copied")})
    for how in ("kill -9", "clean restart"):
        if how == "kill -9":
            srv.kill9()
        else:
            srv.stop()
        srv.start()
        c = srv.resp()
        check_all(c, "after the load and a %s" % how)
    assert sum(1 for k in hot if model[k]) > 32, "most collections ended empty"
    assert sum(1 for k in cold if model[k]) > len(cold) // 3, "most cold keys ended empty"
