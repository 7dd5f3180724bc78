"""GEO commands compared reply for reply with a real redis-server
(differential.py): GEOADD (NX/XX/CH), GEOPOS, GEODIST (units), GEOHASH,
GEOSEARCH / GEOSEARCHSTORE (FROMMEMBER/FROMLONLAT, BYRADIUS/BYBOX,
ASC/DESC, COUNT [ANY], WITH*, STOREDIST), GEORADIUS / GEORADIUSBYMEMBER
(and _RO, STORE/STOREDIST). A geo key is a sorted set with 52-bit geohash
scores, so ZRANGE ... WITHSCORES must match Redis exactly, and so must the
order of unsorted search results (the cell order). Random workloads cover
the poles, the antimeridian and huge radii. Then (Rowan only) geo keys
survive kill -9 and a restart."""
import random

import pytest

from conftest import RespError
from differential import both, call, fresh_ref


@pytest.fixture
def ref(ref_srv):
    return fresh_ref(ref_srv)


def same_zset(c, ref, key):
    """Members and scores equal; scores compared as numbers (Redis 7.0
    prints non-integer scores with %.17g, Rowan like 7.2: shortest)."""
    got, want = c.call("ZRANGE", key, 0, -1, "WITHSCORES"), ref.call("ZRANGE", key, 0, -1, "WITHSCORES")
    assert got[0::2] == want[0::2]
    assert [float(x) for x in got[1::2]] == [float(x) for x in want[1::2]]
    return got


SICILY = [13.361389, 38.115556, "Palermo", 15.087269, 37.502669, "Catania",
          13.583333, 37.316667, "Agrigento", 12.758489, 38.788135, "edge1",
          17.241510, 38.222825, "edge2"]


def test_add_pos_dist_hash(c, ref):
    assert both(c, ref, "GEOADD", "Sicily", *SICILY) == 5
    same_zset(c, ref, "Sicily")
    both(c, ref, "GEOADD", "Sicily", "XX", "CH", 13.361389, 38.115556, "Palermo", 1, 1, "new")
    both(c, ref, "GEOADD", "Sicily", "NX", "CH", 13.4, 38.1, "Palermo", 1, 1, "new")
    both(c, ref, "GEOADD", "Sicily", "CH", 13.4, 38.1, "Palermo", 1, 1, "new")
    both(c, ref, "GEOADD", "Sicily", -180, -85.05112878, "corner", 180, 85.05112878, "corner2")
    same_zset(c, ref, "Sicily")
    both(c, ref, "GEOPOS", "Sicily", "Palermo", "Catania", "nope", "corner", "corner2")
    both(c, ref, "GEOPOS", "nokey", "a", "b")
    both(c, ref, "GEOHASH", "Sicily", "Palermo", "Catania", "nope", "corner", "corner2")
    both(c, ref, "GEOHASH", "nokey", "a")
    for unit in ([], ["m"], ["KM"], ["mi"], ["ft"]):
        both(c, ref, "GEODIST", "Sicily", "Palermo", "Catania", *unit)
        both(c, ref, "GEODIST", "Sicily", "Palermo", "corner2", *unit)
    both(c, ref, "GEODIST", "Sicily", "Palermo", "nope")
    both(c, ref, "GEODIST", "nokey", "a", "b")
    both(c, ref, "GEODIST", "Sicily", "Palermo", "Catania", "yd")
    both(c, ref, "GEODIST", "Sicily", "Palermo", "Catania", "km", "x")
    # a plain zset's scores decode too, even negative, huge or infinite ones
    both(c, ref, "ZADD", "z", 0, "zero", 1.5, "frac", 4503599627370495, "max52", -1, "neg",
         1e300, "big", -1e300, "nbig", "inf", "pinf", "-inf", "ninf", -0.5, "nhalf",
         9.3e18, "b63", 1.9e19, "b64", 4503599627370496, "b52", -9.3e18, "nb63")
    members = ["zero", "frac", "max52", "neg", "big", "nbig", "pinf", "ninf", "nhalf",
               "b63", "b64", "b52", "nb63"]
    both(c, ref, "GEOPOS", "z", *members)
    both(c, ref, "GEOHASH", "z", *members)
    both(c, ref, "GEODIST", "z", "neg", "big")
    for lon, lat in ((0, 0), (179, 85), (179, -85), (-179, -85), (-179, 85)):
        both(c, ref, "GEOSEARCH", "z", "FROMLONLAT", lon, lat, "BYRADIUS", 30000, "km",
             "WITHHASH", "WITHCOORD", "WITHDIST")
    both(c, ref, "GEOSEARCH", "z", "FROMMEMBER", "b63", "BYBOX", 30000, 30000, "km", "WITHHASH")


def test_add_errors(c, ref):
    both(c, ref, "SET", "s", "x")
    for args in (("NX", "XX", 1, 1, "a"), (1, 1), (1, 100, "a"), (181, 0, "a"),
                 ("x", 1, "a"), (1, "nan", "a"), (1, 1, "a", 200, 0, "b"),
                 ("NX", "CH", "CH"), ("GT", 1, 1, "a"), (1, 85.06, "a"), (1, 1, "a", 2)):
        assert isinstance(both(c, ref, "GEOADD", "g", *args), RespError)
    both(c, ref, "EXISTS", "g")
    both(c, ref, "GEOADD", "s", 1, 1, "a")
    both(c, ref, "GEOPOS", "s", "a")
    both(c, ref, "GEOHASH", "s", "a")
    both(c, ref, "GEODIST", "s", "a", "b")
    both(c, ref, "GEOSEARCH", "s", "FROMLONLAT", 1, 1, "BYRADIUS", 1, "km")
    both(c, ref, "GEORADIUS", "s", 1, 1, 1, "km")


def test_search_options_and_errors(c, ref):
    both(c, ref, "GEOADD", "Sicily", *SICILY)
    cases = [
        ("GEORADIUS", "Sicily", 15, 37, 200, "km"),
        ("GEORADIUS", "Sicily", 15, 37, 200, "km", "WITHDIST", "WITHCOORD", "WITHHASH"),
        ("GEORADIUS", "Sicily", 15, 37, 200, "km", "DESC", "WITHDIST"),
        ("GEORADIUS", "Sicily", 15, 37, 200, "km", "COUNT", 2),
        ("GEORADIUS", "Sicily", 15, 37, 200, "km", "COUNT", 2, "ANY"),
        ("GEORADIUS", "Sicily", 15, 37, 200, "km", "ANY"),
        ("GEORADIUS", "Sicily", 15, 37, 200, "km", "COUNT", 0),
        ("GEORADIUS", "Sicily", 15, 37, -1, "km"),
        ("GEORADIUS", "Sicily", 15, 37, "x", "km"),
        ("GEORADIUS", "Sicily", 15, 37, 1, "kmh"),
        ("GEORADIUS", "Sicily", 15, 37, 200, "km", "STORE", "d", "WITHDIST"),
        ("GEORADIUS", "Sicily", 15, 37, 200, "km", "bogus"),
        ("GEORADIUS_RO", "Sicily", 15, 37, 200, "km", "STORE", "d"),
        ("GEORADIUS_RO", "Sicily", 15, 37, 200, "km", "ASC"),
        ("GEORADIUSBYMEMBER", "Sicily", "Agrigento", 100, "km"),
        ("GEORADIUSBYMEMBER", "Sicily", "Agrigento", 300, "km", "WITHDIST", "ASC"),
        ("GEORADIUSBYMEMBER", "Sicily", "nope", 100, "km"),
        ("GEORADIUSBYMEMBER", "nokey", "nope", 100, "km"),
        ("GEORADIUSBYMEMBER_RO", "Sicily", "Agrigento", 100, "km", "WITHHASH"),
        ("GEOSEARCH", "Sicily", "FROMLONLAT", 15, 37, "BYRADIUS", 200, "km", "ASC"),
        ("GEOSEARCH", "Sicily", "FROMMEMBER", "Palermo", "BYBOX", 400, 400, "km", "ASC",
         "WITHCOORD", "WITHDIST", "WITHHASH"),
        ("GEOSEARCH", "Sicily", "FROMMEMBER", "Palermo", "BYBOX", 400, 100, "km"),
        ("GEOSEARCH", "Sicily", "FROMMEMBER", "Palermo", "BYRADIUS", 200, "mi", "DESC", "COUNT", 3),
        ("GEOSEARCH", "Sicily", "FROMMEMBER", "Palermo"),
        ("GEOSEARCH", "Sicily", "BYRADIUS", 200, "km"),
        ("GEOSEARCH", "Sicily", "FROMMEMBER", "Palermo", "FROMLONLAT", 1, 2, "BYRADIUS", 2, "km"),
        ("GEOSEARCH", "Sicily", "FROMMEMBER", "Palermo", "BYRADIUS", 2, "km", "BYBOX", 1, 1, "km"),
        ("GEOSEARCH", "Sicily", "FROMMEMBER", "Palermo", "BYRADIUS", 200, "km", "STORE", "x"),
        ("GEOSEARCH", "Sicily", "FROMMEMBER", "Palermo", "BYRADIUS", 200, "km", "STOREDIST"),
        ("GEOSEARCH", "Sicily", "FROMMEMBER", "nope", "BYRADIUS", 200, "km"),
        ("GEOSEARCH", "nokey", "FROMMEMBER", "nope", "BYRADIUS", 200, "km"),
        ("GEOSEARCH", "Sicily", "FROMLONLAT", 15, 37, "BYBOX", 400, -1, "km"),
        ("GEOSEARCH", "Sicily", "FROMLONLAT", 15, 37, "BYBOX", "x", 1, "km"),
        ("GEOSEARCH", "Sicily", "FROMLONLAT", 15, 37, "BYBOX", 1, "y", "km"),
        ("GEOSEARCH", "Sicily", "FROMLONLAT", 15, 97, "BYBOX", 1, 1, "km"),
        ("GEOSEARCH", "Sicily", "FROMLONLAT", 15, 37, "BYRADIUS", 200),
        ("GEOSEARCHSTORE", "d", "Sicily", "FROMLONLAT", 15, 37, "BYBOX", 400, 400, "km", "WITHDIST"),
    ]
    for args in cases:
        both(c, ref, *args)


def test_store(c, ref):
    both(c, ref, "GEOADD", "Sicily", *SICILY)
    for args in (("GEORADIUS", "Sicily", 15, 37, 200, "km", "STORE", "d1"),
                 ("GEORADIUS", "Sicily", 15, 37, 200, "km", "STOREDIST", "d2", "COUNT", 2),
                 ("GEORADIUSBYMEMBER", "Sicily", "Palermo", 500, "km", "STORE", "other", "STORE", "d3"),
                 ("GEOSEARCHSTORE", "d4", "Sicily", "FROMLONLAT", 15, 37, "BYBOX", 400, 400, "km"),
                 ("GEOSEARCHSTORE", "d5", "Sicily", "FROMLONLAT", 15, 37, "BYBOX", 400, 400, "km",
                  "STOREDIST", "DESC", "COUNT", 2),
                 ("GEOSEARCHSTORE", "Sicily", "Sicily", "FROMMEMBER", "Palermo", "BYRADIUS", 100, "km")):
        both(c, ref, *args)
    for k in ("d1", "d2", "d3", "d4", "d5", "other", "Sicily"):
        both(c, ref, "EXISTS", k)
        same_zset(c, ref, k)
        both(c, ref, "OBJECT", "ENCODING", k)
    # an empty result (or a missing source) deletes the destination
    both(c, ref, "SET", "d1", "x", "EX", 100)
    both(c, ref, "GEORADIUS", "Sicily", 0, 0, 1, "km", "STORE", "d1")
    both(c, ref, "EXISTS", "d1")
    both(c, ref, "SET", "d4", "x")
    both(c, ref, "GEOSEARCHSTORE", "d4", "nokey", "FROMLONLAT", 0, 0, "BYRADIUS", 1, "km")
    both(c, ref, "EXISTS", "d4")


def random_point(rnd):
    kind = rnd.random()
    if kind < 0.15:
        return rnd.uniform(-180, 180), rnd.choice([-1, 1]) * rnd.uniform(80, 85.05)
    if kind < 0.3:
        return rnd.choice([-1, 1]) * rnd.uniform(175, 180), rnd.uniform(-60, 60)
    return rnd.uniform(-10, 10), rnd.uniform(40, 50)


@pytest.mark.parametrize("seed", [1, 2])
def test_random_searches(c, ref, seed):
    rnd = random.Random(seed)
    pts = []
    for i in range(400):
        lon, lat = random_point(rnd)
        pts += ["%.6f" % lon, "%.6f" % lat, "m%d" % i]
    both(c, ref, "GEOADD", "g", *pts)
    same_zset(c, ref, "g")
    for _ in range(250):
        if rnd.random() < 0.5:
            frm = ["FROMMEMBER", "m%d" % rnd.randint(0, 450)]
        else:
            lon, lat = random_point(rnd)
            frm = ["FROMLONLAT", "%.6f" % lon, "%.6f" % lat]
        unit = rnd.choice(["m", "km", "mi", "ft"])
        size = rnd.choice([1, 50, 500, 3000, 20000]) * (1000 if unit == "m" else 1)
        if rnd.random() < 0.5:
            by = ["BYRADIUS", size, unit]
        else:
            by = ["BYBOX", size, rnd.choice([size, size / 3.0]), unit]
        opts = []
        if rnd.random() < 0.4:
            opts.append(rnd.choice(["ASC", "DESC"]))
        if rnd.random() < 0.3:
            opts += ["COUNT", rnd.randint(1, 20)]
            if rnd.random() < 0.3:
                opts.append("ANY")
        for w in ("WITHDIST", "WITHCOORD", "WITHHASH"):
            if rnd.random() < 0.3:
                opts.append(w)
        both(c, ref, "GEOSEARCH", "g", *(frm + by + opts))
        if frm[0] == "FROMLONLAT" and by[0] == "BYRADIUS":
            both(c, ref, "GEORADIUS_RO", "g", frm[1], frm[2], by[1], by[2], *opts)


@pytest.mark.rowan_only("durability across kill -9")
def test_geo_survives_kill9(server_factory):
    srv = server_factory()
    c = srv.resp()
    rnd = random.Random(11)
    pts = []
    for i in range(300):
        lon, lat = random_point(rnd)
        pts += ["%.6f" % lon, "%.6f" % lat, "p%d" % i]
    c.call("GEOADD", "g", *pts)
    c.call("GEOADD", "g", "XX", "CH", 1, 1, "p1", 2, 2, "p2")
    c.call("GEOSEARCHSTORE", "near", "g", "FROMLONLAT", 0, 45, "BYRADIUS", 800, "km", "STOREDIST")
    c.call("GEORADIUS", "g", 0, 45, 500, "km", "STORE", "near2")
    want = {k: c.call("ZRANGE", k, 0, -1, "WITHSCORES") for k in ("g", "near", "near2")}
    search = c.call("GEOSEARCH", "g", "FROMMEMBER", "p7", "BYBOX", 2000, 2000, "km", "WITHDIST")
    srv.kill9()
    srv.start()
    c = srv.resp()
    assert {k: c.call("ZRANGE", k, 0, -1, "WITHSCORES") for k in want} == want
    assert c.call("GEOSEARCH", "g", "FROMMEMBER", "p7", "BYBOX", 2000, 2000, "km", "WITHDIST") == search


def test_georadius_store_other_shards_and_multi(c, ref):
    """STORE names a key outside the command's key range: whatever shard it
    lands in (above or below the source's), alone or in a transaction."""
    both(c, ref, "GEOADD", "Sicily", *SICILY)
    for i in range(40):
        both(c, ref, "GEORADIUS", "Sicily", 15, 37, 200, "km", "STORE", "dst%d" % i)
        both(c, ref, "GEORADIUSBYMEMBER", "Sicily", "Palermo", 100, "km", "STOREDIST", "sd%d" % i)
    for i in range(0, 40, 7):
        same_zset(c, ref, "dst%d" % i)
        same_zset(c, ref, "sd%d" % i)
    for cl in (c, ref):
        assert cl.call("MULTI") == "OK"
        for i in range(10):
            assert cl.call("GEORADIUS", "Sicily", 15, 37, 300, "km", "STORE", "m%d" % i) == "QUEUED"
        assert cl.call("GEOADD", "Sicily", 15, 37, "new") == "QUEUED"
        assert cl.call("GEORADIUS", "Sicily", 15, 37, 300, "km", "STOREDIST", "m10") == "QUEUED"
    both(c, ref, "EXEC")
    for i in range(11):
        same_zset(c, ref, "m%d" % i)


@pytest.mark.rowan_only("Rowan's replication (cluster_factory)")
def test_replicas_hold_the_same_hll_geo_bitmaps(cluster_factory):
    """3 nodes, k=3: after HLL, GEO and bitmap writes every node's digest of
    every shard agrees (the backups applied the same effects), and a GEO
    STORE to another slot is refused with CROSSSLOT."""
    from conftest import key_slot
    from test_replication import owner_map, wait_digests_agree
    cl = cluster_factory(3, 3)
    owner = owner_map(cl)
    node = cl.nodes[owner[key_slot("t")]]
    c = node.resp()
    c.call("PFADD", "{t}h1", *["a%d" % i for i in range(100)])
    c.call("PFADD", "{t}h2", *["b%d" % i for i in range(3000)])
    c.call("PFCOUNT", "{t}h2")
    assert c.call("PFMERGE", "{t}h3", "{t}h1", "{t}h2") == "OK"
    c.call("BITFIELD", "{t}bf", "SET", "i16", "#3", -300, "INCRBY", "u5", 100, 7)
    c.call("BITOP", "XOR", "{t}bx", "{t}bf", "{t}h1")
    c.call("GEOADD", "{t}g", *SICILY)
    c.call("GEORADIUS", "{t}g", 15, 37, 200, "km", "STORE", "{t}gs")
    c.call("GEOSEARCHSTORE", "{t}gs2", "{t}g", "FROMLONLAT", 15, 37, "BYRADIUS", 200, "km",
           "STOREDIST")
    assert c.call("GEORADIUS", "{t}g", 15, 37, 200, "km", "STORE", "{other}x") == \
        RespError("CROSSSLOT Keys in request don't hash to the same slot")
    assert c.call("EXISTS", "{t}h3", "{t}bx", "{t}gs", "{t}gs2") == 4
    wait_digests_agree(cl)
