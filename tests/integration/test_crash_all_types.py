"""kill -9 over every type (Rowan-only): the acknowledged-effect checker of
test_types_durability.py (ModelClient, crash_rounds: clients that own their
keys keep an exact model of their acknowledged state, an in-flight command
may or may not have happened) extended to streams with consumer groups,
HyperLogLogs, geo sets and bitmaps, mixed with the other types.

- Streams: XADD (explicit IDs), XDEL, XTRIM, XGROUP CREATE, XREADGROUP,
  XACK, XCLAIM and XAUTOCLAIM. The model is exact: the entries and their
  fields, the last generated ID, entries-added, and per group the
  last-delivered ID and the pending entries (ID, owner, delivery count).
  Delivery times are the clock's and are not modelled.
- HyperLogLog: the model is the set of elements added; the key must hold
  the registers of a fresh HLL given exactly those elements (built on the
  recovered server in a scratch key; test_random_diff.py checks Rowan's
  HLLs against Redis's), compared register by register.
- Geo: GEOADD/ZREM, with the 52-bit geohash score computed here.
- Bitmaps: SETBIT and BITFIELD SET over strings, exact bytes.

Several connections (request/reply and one pipelining 8 deep) run the
load; the server is killed at random moments, restarted on the same pool,
and every key is checked. The same load runs once against a 3-node
cluster (replication factor 3), killing the node that owns the keys."""
import random
import threading
import time

import pytest

from conftest import RespClient, RespError, describe_rc, key_slot
from test_types_durability import (Gen, ModelClient, Op, check_no_stray_keys,
                                   check_recovery_clean, crash_rounds, eq, possible_states,
                                   read_state, require, resolve, show)

pytestmark = pytest.mark.rowan_only("durability of acknowledged writes of every type across kill -9")

GEO_LAT, GEO_LON = 85.05112878, 180.0


def geo_score(lon, lat):
    """Redis's 52-bit geohash of (lon, lat), as GEOADD stores it."""
    la = int((lat + GEO_LAT) / (2 * GEO_LAT) * (1 << 26))
    lo = int((lon + GEO_LON) / (2 * GEO_LON) * (1 << 26))
    bits = 0
    for i in range(26):
        bits |= ((la >> i) & 1) << (2 * i)
        bits |= ((lo >> i) & 1) << (2 * i + 1)
    return float(bits)


def sid(t):
    return b"%d-%d" % t


def parse_sid(b):
    ms, seq = b.split(b"-")
    return (int(ms), int(seq))


# A stream's state: ("stream", (entries, last_id, added, groups)) with
# entries a tuple of (id, fields) by id, groups a frozenset of
# (name, last-delivered id, frozenset of pending (id, owner, count)).
def ST(st):
    if st is None:
        return [], (0, 0), 0, {}
    entries, last, added, groups = st[1]
    return list(entries), last, added, {g: (gl, dict((i, (o, n)) for i, o, n in pel))
                                         for g, gl, pel in groups}


def pack_stream(entries, last, added, groups):
    gs = frozenset((g, gl, frozenset((i, o, n) for i, (o, n) in pel.items()))
                   for g, (gl, pel) in groups.items())
    return ("stream", (tuple(entries), last, added, gs))


def entries_reply(entries):
    return [[sid(i), list(f)] for i, f in entries]


class AllGen(Gen):
    """Gen with streams, HyperLogLogs, geo sets and bitmaps."""

    GROUPS = (b"g1", b"g2")
    CONSUMERS = (b"alice", b"bob", b"carol")
    PLACES = [(13.361389, 38.115556), (15.087269, 37.502669), (2.349014, 48.864716),
              (-73.985428, 40.748817), (151.2093, -33.8688), (-179.5, -84.9), (0.0, 0.0)]

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.ms = 0

    # ---- streams ----
    def op_stream(self, key, st):
        rng = self.rng
        entries, last, added, groups = ST(st)
        x = rng.random()
        if st is None or x < 0.35:
            self.ms = max(self.ms, last[0]) + rng.randint(1, 3)
            nid = (self.ms, rng.randint(0, 2))
            fields = (b"f", self.val()) if rng.random() < 0.7 else (b"f", self.val(), b"g", b"%d" % self.ms)

            def out(s, nid=nid, fields=fields):
                e, l, a, g = ST(s)
                if nid <= l:
                    return [(s, lambda r: isinstance(r, RespError), "XADD refused")]
                e.append((nid, fields))
                return [(pack_stream(e, nid, a + 1, g), eq(sid(nid)), "XADD")]
            return Op(key, ["XADD", key, sid(nid)] + list(fields), out)
        g = rng.choice(self.GROUPS)
        c = rng.choice(self.CONSUMERS)
        if x < 0.42:
            start = rng.choice([b"0", b"$"])

            def out(s, g=g, start=start):
                e, l, a, gs = ST(s)
                if g in gs:
                    return [(s, lambda r: isinstance(r, RespError) and "BUSYGROUP" in r.msg,
                             "XGROUP CREATE (exists)")]
                gs[g] = ((0, 0) if start == b"0" else l, {})
                return [(pack_stream(e, l, a, gs), eq("OK"), "XGROUP CREATE")]
            return Op(key, ["XGROUP", "CREATE", key, g, start], out)
        if x < 0.62:
            count = rng.choice((1, 2, 5))

            def out(s, g=g, c=c, count=count):
                e, l, a, gs = ST(s)
                if g not in gs:
                    return [(s, lambda r: isinstance(r, RespError) and "NOGROUP" in r.msg,
                             "XREADGROUP (no group)")]
                gl, pel = gs[g]
                new = [x for x in e if x[0] > gl][:count]
                if not new:
                    return [(s, eq(None), "XREADGROUP (nothing)")]
                for i, _ in new:
                    pel[i] = (c, 1)
                gs[g] = (new[-1][0], pel)
                return [(pack_stream(e, l, a, gs), eq([[key.encode(), entries_reply(new)]]),
                         "XREADGROUP")]
            return Op(key, ["XREADGROUP", "GROUP", g, c, "COUNT", count, "STREAMS", key, ">"], out)
        # IDs to act on: pending or stored ones, and one that never was
        pend = sorted({i for _, (_, p) in groups.items() for i in p})
        pool = pend + [i for i, _ in entries[-6:]] + [(self.ms + 100, 0)]
        ids = sorted(set(rng.choice(pool) for _ in range(rng.choice((1, 2)))))
        if x < 0.75:
            def out(s, g=g, ids=ids):
                e, l, a, gs = ST(s)
                if g not in gs:
                    return [(s, eq(0), "XACK (no group)")]
                pel = gs[g][1]
                n = sum(1 for i in ids if pel.pop(i, None) is not None)
                return [(pack_stream(e, l, a, gs), eq(n), "XACK")]
            return Op(key, ["XACK", key, g] + [sid(i) for i in ids], out)
        if x < 0.83:
            def out(s, ids=ids):
                e, l, a, gs = ST(s)
                keep = [x for x in e if x[0] not in ids]
                return [(pack_stream(keep, l, a, gs), eq(len(e) - len(keep)), "XDEL")]
            return Op(key, ["XDEL", key] + [sid(i) for i in ids], out)
        if x < 0.88:
            n = rng.randint(3, 12)

            def out(s, n=n):
                e, l, a, gs = ST(s)
                cut = max(0, len(e) - n)
                return [(pack_stream(e[cut:], l, a, gs), eq(cut), "XTRIM")]
            return Op(key, ["XTRIM", key, "MAXLEN", n], out)
        if x < 0.95:
            # XCLAIM of pending entries that still exist (min-idle 0)
            def out(s, g=g, c=c, ids=ids):
                e, l, a, gs = ST(s)
                if g not in gs:
                    return [(s, lambda r: isinstance(r, RespError) and "NOGROUP" in r.msg,
                             "XCLAIM (no group)")]
                pel = gs[g][1]
                stored = dict(e)
                got = []
                for i in ids:
                    if i in pel and i in stored:
                        pel[i] = (c, pel[i][1] + 1)
                        got.append((i, stored[i]))
                    elif i in pel:
                        del pel[i]      # Redis 7.0 drops a deleted entry it is asked to claim
                return [(pack_stream(e, l, a, gs), eq(entries_reply(got)), "XCLAIM")]
            return Op(key, ["XCLAIM", key, g, c, 0] + [sid(i) for i in ids], out)

        def out(s, g=g, c=c):
            e, l, a, gs = ST(s)
            if g not in gs:
                return [(s, lambda r: isinstance(r, RespError) and "NOGROUP" in r.msg,
                         "XAUTOCLAIM (no group)")]
            pel = gs[g][1]
            stored = dict(e)
            got, gone = [], []
            for i in sorted(pel):
                if i in stored:
                    pel[i] = (c, pel[i][1] + 1)
                    got.append((i, stored[i]))
                else:
                    del pel[i]
                    gone.append(sid(i))
            return [(pack_stream(e, l, a, gs), eq([b"0-0", entries_reply(got), gone]), "XAUTOCLAIM")]
        return Op(key, ["XAUTOCLAIM", key, g, c, 0, "0-0", "COUNT", 100], out)

    # ---- HyperLogLog: the model is the element set ----
    def op_hll(self, key, st):
        els = [b"e%d" % self.rng.randrange(3000) for _ in range(self.rng.choice((1, 3, 10)))]

        def out(s, els=els):
            have = s[1] if s else frozenset()
            new = have | frozenset(els)
            if s is None:
                pred = eq(1)
            elif new == have:
                pred = eq(0)
            else:
                pred = lambda r: r in (0, 1)
            return [(("hll", new), pred, "PFADD")]
        return Op(key, ["PFADD", key] + els, out)

    # ---- geo: a sorted set of geohash scores ----
    def op_geo(self, key, st):
        rng = self.rng
        m = b"p%d" % rng.randrange(12)
        if rng.random() < 0.8:
            lon, lat = rng.choice(self.PLACES)
            lon += rng.randrange(100) / 1000.0
            sc = geo_score(lon, lat)

            def out(s, m=m, sc=sc):
                d = dict(s[1]) if s else {}
                n = 0 if m in d else 1
                d[m] = sc
                return [(("zset", frozenset(d.items())), eq(n), "GEOADD")]
            return Op(key, ["GEOADD", key, repr(lon), repr(lat), m], out)

        def out(s, m=m):
            d = dict(s[1]) if s else {}
            n = 1 if d.pop(m, None) is not None else 0
            return [(("zset", frozenset(d.items())) if d else None, eq(n), "ZREM")]
        return Op(key, ["ZREM", key, m], out)

    # ---- bitmaps: strings edited bit by bit ----
    def op_bitmap(self, key, st):
        rng = self.rng
        if rng.random() < 0.7:
            off, bit = rng.randrange(400), rng.randrange(2)

            def out(s, off=off, bit=bit):
                b = bytearray(s[1] if s else b"")
                if len(b) <= off // 8:
                    b += bytes(off // 8 + 1 - len(b))
                old = (b[off // 8] >> (7 - off % 8)) & 1
                if bit:
                    b[off // 8] |= 1 << (7 - off % 8)
                else:
                    b[off // 8] &= ~(1 << (7 - off % 8)) & 255
                return [(("string", bytes(b)), eq(old), "SETBIT")]
            return Op(key, ["SETBIT", key, off, bit], out)
        i, v = rng.randrange(40), rng.randrange(256)

        def out(s, i=i, v=v):
            b = bytearray(s[1] if s else b"")
            if len(b) <= i:
                b += bytes(i + 1 - len(b))
            old = b[i]
            b[i] = v
            return [(("string", bytes(b)), eq([old]), "BITFIELD")]
        return Op(key, ["BITFIELD", key, "SET", "u8", "#%d" % i, v], out)


def read_stream(c, key):
    if c.call("TYPE", key) != "stream":
        return read_state(c, key)
    entries = tuple((parse_sid(i), tuple(f)) for i, f in c.call("XRANGE", key, "-", "+"))
    info = c.call("XINFO", "STREAM", key)
    info = dict(zip(info[0::2], info[1::2]))
    groups = {}
    for g in c.call("XINFO", "GROUPS", key):
        g = dict(zip(g[0::2], g[1::2]))
        pel = {parse_sid(i): (o, n) for i, o, _, n in
               c.call("XPENDING", key, g[b"name"], "-", "+", 100000)}
        groups[g[b"name"]] = (parse_sid(g[b"last-delivered-id"]), pel)
    return pack_stream(entries, parse_sid(info[b"last-generated-id"]), info[b"entries-added"], groups)


def show_any(st):
    if st and st[0] in ("stream", "hll"):
        return repr(st)[:600]
    return show(st)


class AllClient(ModelClient):
    """A ModelClient over every type. verify reads streams whole and
    compares an HLL with a fresh one of the model's elements."""

    def __init__(self, cid, kinds, per_kind, seed, depth=1, tag=""):
        super().__init__(cid, kinds, per_kind, seed, depth)
        self.gen = AllGen(self.rng, b"c%d" % cid)
        self.gen.nondet = depth == 1
        if tag:   # one hash slot for all of this client's keys
            self.keys = ["{%s}%s" % (tag, k) for k in self.keys]
            self.kind_of = {"{%s}%s" % (tag, k): v for k, v in self.kind_of.items()}
            self.model = {k: None for k in self.keys}
            self.hist = {k: [None] for k in self.keys}
            self.observed = {k: [] for k in self.keys}

    def hll_regs(self, c, key, elements=None):
        """The registers of key's HLL (read from a copy: PFDEBUG GETREG
        makes its key dense), or of a fresh HLL of elements. Registers, not
        bytes: a sparse HLL's bytes can depend on the order of its adds."""
        tmp = key + ":__regs"
        if elements is None:
            if c.call("COPY", key, tmp, "REPLACE") != 1:
                return None
        else:
            c.call("DEL", tmp)
            assert c.call("PFADD", tmp, *sorted(elements)) == 1
        regs = c.call("PFDEBUG", "GETREG", tmp)
        c.call("DEL", tmp)
        assert isinstance(regs, list) and len(regs) == 16384, regs
        return tuple(regs)

    def verify(self, c, why):
        for k in self.keys:
            mine = [op for op in self.inflight if op.key == k]
            allowed = possible_states(self.model[k], mine)
            got = read_stream(c, k)
            if self.kind_of[k] == "hll":
                assert got is None or got[0] == "string", "%s: %s holds %s" % (why, k, show_any(got))
                regs = got and self.hll_regs(c, k)
                by_regs = {s and self.hll_regs(c, k, s[1]): s for s in allowed}
                ok = regs in by_regs
                new = by_regs.get(regs)
            else:
                ok = got in allowed
                new = got
            if not ok:
                raise AssertionError("%s: %s holds %s\n  acknowledged state: %s\n  in flight: %s" %
                                     (why, k, show_any(got), show_any(self.model[k]), mine or "nothing"))
            self.model[k] = new
            self.hist[k] = [new]
        self.inflight = []


KINDS = ["stream", "stream", "hll", "geo", "bitmap", "string", "hash", "list", "set", "zset"]


def make_clients(n, tag=lambda i: ""):
    kinds = list(dict.fromkeys(KINDS))
    clients = [AllClient(i, kinds, 2, seed=7000 + i, tag=tag(i)) for i in range(n)]
    clients.append(AllClient(n, kinds, 2, seed=7999, depth=8, tag=tag(n)))
    return clients


def check_coverage(clients):
    """The run built real state of every kind: stream groups with pending
    entries among them."""
    kinds = {cl.kind_of[k] for cl in clients for k in cl.keys if cl.model[k]}
    assert set(KINDS) <= kinds, "nothing of %s at the end" % (set(KINDS) - kinds)
    pending = sum(len(p) for cl in clients for k in cl.keys
                  if cl.kind_of[k] == "stream" and cl.model[k]
                  for _, _, p in cl.model[k][1][3])
    assert pending > 0, "no stream had pending entries at the end"


def test_crash_every_type(server_factory):
    """Four request/reply clients and one pipelining 8 deep, every type,
    six kill -9s at random moments, then a clean restart."""
    srv = server_factory()
    clients = make_clients(4)
    crash_rounds(srv, clients, kills=6, seed=13, min_acks=(1500, 5000))
    c = srv.resp()
    check_no_stray_keys(c, clients)
    check_coverage(clients)
    assert sum(x.acks for x in clients) >= 1600


def run_load(port, clients, acks):
    threads = [threading.Thread(target=cl.run, args=(port,), daemon=True) for cl in clients]
    for cl in clients:
        cl.stop = threading.Event()
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30
    while sum(cl.acks for cl in clients) < acks and time.monotonic() < deadline:
        time.sleep(0.01)
    for cl in clients:
        cl.stop.set()
    for t in threads:
        t.join(10)
    assert not [cl.error for cl in clients if cl.error]


def ack_one(c, k, st):
    """XACK one pending entry of the stream's first group that has one
    (False: none has)."""
    for g, _, pel in sorted(st[1][3]):
        if pel:
            assert c.call("XACK", k, g, sid(min(pel)[0])) == 1
            return True
    return False


TAMPER = {
    # one lost or extra effect of each kind, as a bad recovery could cause
    "stream-entry": lambda c, k, st: c.call("XADD", k, "999999-0", "x", "y"),
    "stream-pel": ack_one,
    "hll": lambda c, k, st: c.call("PFADD", k, *[b"new%d" % i for i in range(50)]),
    "geo": lambda c, k, st: c.call("GEOADD", k, "1", "1", "newplace"),
    "bitmap": lambda c, k, st: c.call("SETBIT", k, 5000, 1),
}


@pytest.mark.parametrize("kind", sorted(TAMPER))
def test_checker_sees_a_changed_effect(server_factory, kind):
    """The checker is not blind: after a load, one effect changed behind the
    clients' back (an entry acked, an element added...) fails verify."""
    srv = server_factory()
    clients = make_clients(2)
    run_load(srv.port, clients, 3000)
    c = srv.resp()
    for cl in clients:
        cl.verify(c, "after the load")
    for cl in clients:
        for k in cl.keys:
            if cl.kind_of[k] == kind.split("-")[0] and cl.model[k] and \
                    TAMPER[kind](c, k, cl.model[k]) is not False:
                with pytest.raises(AssertionError, match="holds"):
                    cl.verify(c, "after tampering")
                return
    pytest.fail("no %s key to change" % kind)


def test_crash_every_type_cluster(cluster_factory):
    """The same load on a 3-node cluster (replication factor 3), every
    client's keys on node 0 (one hash tag each): node 0 is killed -9 under
    the load twice and restarted; every acknowledged effect is then on it,
    and all three replicas hold the same data (ROWAN DIGEST)."""
    from test_replication import BASE_OPTS, owner_map, tag_on, wait_all_live, wait_digests_agree
    cl = cluster_factory(3, 3, options=BASE_OPTS)
    wait_all_live(cl)
    owner = owner_map(cl)
    victim = 0
    clients = make_clients(3, tag=lambda i: tag_on(owner, victim, "c%d_" % i))
    rng = random.Random(17)
    port = cl.nodes[victim].port
    for rnd in range(2):
        base = sum(x.acks for x in clients)
        want = rng.randrange(800, 2500)
        threads = [threading.Thread(target=x.run, args=(port,), daemon=True) for x in clients]
        for x in clients:
            x.stop = threading.Event()
        for t in threads:
            t.start()
        deadline = time.monotonic() + 60
        while sum(x.acks for x in clients) - base < want and time.monotonic() < deadline:
            assert not any(x.error for x in clients), [x.error for x in clients if x.error][0]
            time.sleep(0.01)
        assert sum(x.acks for x in clients) - base >= want, "round %d: the load stalled" % rnd
        cl.kill9(victim)
        for x in clients:
            x.stop.set()
        for t in threads:
            t.join(30)
            assert not t.is_alive(), "client thread stuck after kill -9"
        assert not [x.error for x in clients if x.error]
        cl.restart(victim)
        wait_all_live(cl)
        assert int(cl.nodes[victim].info("rowan")["rowan"]["recovered_entries"]) > 0
        c = RespClient(port)
        for x in clients:
            x.verify(c, "cluster, after kill -9 #%d of node %d" % (rnd + 1, victim))
        c.close()
        wait_digests_agree(cl)
    check_coverage(clients)
    assert sum(x.acks for x in clients) >= 1600
