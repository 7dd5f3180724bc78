"""A full pool (Rowan-only, issue 10 item 9): space freed by deletions
becomes writable again through the cleaner, and INFO says why a write is
refused.

Each test fills a small pool until writes are refused for good (the refusal
text says the pool holds only live data), checks what INFO reports then,
deletes data and polls until a 100 KB SET is accepted. The polls have a
generous deadline: a liveness bound, never a timing assertion. Several
fill/delete cycles run per test, and what survived is checked exactly,
also after kill -9.
"""
import time

import pytest

from conftest import RespError, wait_for

pytestmark = pytest.mark.rowan_only("the storage pool and its cleaner")

VALUE = 100 * 1024
LIVENESS = 10.0          # seconds a freed pool may take to accept a write again
FULL_TEXT = "OOM command not allowed when the storage pool is full"


def value(tag, i, size=VALUE):
    head = b"%s:%d:" % (tag.encode(), i)
    return head + bytes((i * 7 + j) % 251 for j in range(256)) * ((size - len(head)) // 256) \
        + b"." * ((size - len(head)) % 256)


def rowan_info(srv):
    return srv.info("rowan")["rowan"]


def is_oom(rep):
    return isinstance(rep, RespError) and rep.msg.startswith(FULL_TEXT)


def fill_until_full(srv, c, write, what):
    """Call write(i) until the pool refuses for good: the refusal says live
    data fills it and INFO agrees. Earlier refusals (the cleaner still
    reclaiming) are retried. Returns the indexes written and the last
    refusal's text."""
    written = []
    deadline = time.monotonic() + 60
    i = 0
    while time.monotonic() < deadline:
        rep = write(i)
        if not isinstance(rep, RespError):
            written.append(i)
            i += 1
            continue
        assert is_oom(rep), "%s: a full pool must refuse with -OOM, got %r" % (what, rep.msg)
        if "live data" in rep.msg:
            inf = rowan_info(srv)
            if inf["clean_state"] == "full":
                return written, rep.msg, inf
        else:
            assert "reclaiming" in rep.msg, rep.msg
        time.sleep(0.02)
    raise AssertionError("%s: the pool never settled as full (%d written, INFO %r)"
                         % (what, len(written), rowan_info(srv)))


def check_full_info(inf, refused_before):
    """INFO while writes are refused for good says why."""
    assert int(inf["oom_refused"]) > refused_before, inf
    assert inf["oom_last_reason"] == "live_data", inf
    assert inf["clean_state"] == "full", inf
    free, reserve = int(inf["pool_segments_free"]), int(inf["pool_reserve_segments"])
    assert reserve > 0
    # A write needing a fresh segment is refused while the free ones are the
    # reserve; nothing reclaimable adds up to a segment.
    assert free <= reserve, inf
    assert int(inf["pool_reclaimable_bytes"]) < int(inf["pool_segment_size"]), inf


def wait_writable(c, key, val):
    """A 100 KB SET must be accepted within LIVENESS seconds; every refusal
    meanwhile is a clean -OOM."""
    deadline = time.monotonic() + LIVENESS
    refusals = []
    while True:
        rep = c.call("SET", key, val)
        if rep == "OK":
            return refusals
        assert is_oom(rep), rep
        refusals.append(rep.msg)
        if time.monotonic() > deadline:
            raise AssertionError("freed space not writable after %.0f s: %d refusals, last %r"
                                 % (LIVENESS, len(refusals), refusals[-1]))
        time.sleep(0.02)


def check_cleaner_settles(srv):
    """Reclaiming ends: with no writes coming in, the cleaner stops copying
    (it must not churn segments forever, e.g. cleaning its own output)."""
    last = [None]

    def settled():
        inf = rowan_info(srv)
        now = (inf["clean_state"], inf["clean_segments"])
        ok = inf["clean_state"] != "reclaiming" and now == last[0]
        last[0] = now
        return ok or None
    if not wait_for(settled, timeout=LIVENESS, interval=0.3):
        raise AssertionError("the cleaner keeps copying: %r" % rowan_info(srv))


def delete(c, keys):
    for k in range(0, len(keys), 50):
        part = keys[k:k + 50]
        assert c.call("DEL", *part) == len(part)


def check_model(c, model):
    for k, v in model.items():
        assert c.call("GET", k) == v, "%s lost or changed" % k


@pytest.mark.parametrize("pool,pick", [("64mb", "oldest"), ("64mb", "newest"),
                                       ("64mb", "every_fifth"), ("32mb", "all_but_tenth")])
def test_freed_space_is_writable_again(server_factory, pool, pick):
    """Fill, delete keys, then a 100 KB SET succeeds; five cycles, then
    kill -9. Deleted: the oldest three quarters; the newest three quarters
    (partly in segments still being written); every fifth key, which leaves
    every segment above clean-threshold; all but every tenth key of a 32 MB
    pool, where the reserve leaves writes two segments and the freed bytes
    sit mostly in segments being written."""
    srv = server_factory(extra={"pool-size": pool})
    c = srv.resp()
    model = {}
    for cycle in range(5):
        refused_before = int(rowan_info(srv)["oom_refused"])
        keys = []

        def write(i):
            k, v = "c%d:%d" % (cycle, i), value("c%d" % cycle, i)
            rep = c.call("SET", k, v)
            if rep == "OK":
                model[k] = v
                keys.append(k)
            return rep

        written, msg, inf = fill_until_full(srv, c, write, "cycle %d" % cycle)
        assert written, "cycle %d: nothing fit (the pool never became writable again)" % cycle
        assert "delete keys or use a larger pool-size" in msg, msg
        check_full_info(inf, refused_before)
        # reads and DEL keep working on a full pool
        assert c.call("GET", keys[0]) == model[keys[0]]
        everything = sorted(model)
        if pick == "oldest":
            gone = everything[: len(everything) * 3 // 4]
        elif pick == "newest":             # model keeps write order
            gone = list(model)[len(model) // 4:]
        elif pick == "every_fifth":
            gone = list(model)[::5]
        else:
            gone = [k for n, k in enumerate(model) if n % 10]
        delete(c, gone)
        for k in gone:
            del model[k]
        probe_key, probe = "probe:%d" % cycle, value("probe", cycle)
        wait_writable(c, probe_key, probe)
        model[probe_key] = probe
        inf = rowan_info(srv)
        check_cleaner_settles(srv)
        check_model(c, model)
    srv.kill9()
    srv.start()
    c = srv.resp()
    check_model(c, model)
    assert c.call("DBSIZE") == len(model)


def test_freed_collections_are_writable_again(server_factory):
    """The same with collections: hashes, sets, lists and sorted sets of
    8 KB members fill the pool; deleting most of them makes room for a
    100 KB SET and for collection writes again; three cycles, then kill -9."""
    srv = server_factory(extra={"pool-size": "64mb"})
    c = srv.resp()
    model = {}          # key -> (type, contents)
    strings = {}
    member = lambda i, j: b"m%d:%d:" % (i, j) + bytes([97 + i % 26]) * 8000

    def read(k, kind):
        if kind == "hash":
            flat = c.call("HGETALL", k)
            return dict(zip(flat[::2], flat[1::2]))
        if kind == "set":
            return set(c.call("SMEMBERS", k))
        if kind == "list":
            return c.call("LRANGE", k, 0, -1)
        return c.call("ZRANGE", k, 0, -1, "WITHSCORES")

    def check():
        for k, (kind, want) in model.items():
            got = read(k, kind)
            if kind == "zset":
                want = [x for m, s in sorted(want.items(), key=lambda t: (t[1], t[0]))
                        for x in (m, b"%d" % s)]
            assert got == want, "%s (%s) lost or changed" % (k, kind)
        check_model(c, strings)

    for cycle in range(3):
        refused_before = int(rowan_info(srv)["oom_refused"])
        kinds = ["hash", "set", "list", "zset"]

        def write(i):
            kind = kinds[i % 4]
            k = "%s:%d:%d" % (kind, cycle, i // 40)
            j = i % 40
            m = member(i, j)
            if kind == "hash":
                rep = c.call("HSET", k, b"f%d" % j, m)
            elif kind == "set":
                rep = c.call("SADD", k, m)
            elif kind == "list":
                rep = c.call("RPUSH", k, m)
            else:
                rep = c.call("ZADD", k, j, m)
            if not isinstance(rep, RespError):
                cur = model.setdefault(k, (kind, {} if kind in ("hash", "zset") else
                                           set() if kind == "set" else []))[1]
                if kind == "hash":
                    cur[b"f%d" % j] = m
                elif kind == "set":
                    cur.add(m)
                elif kind == "list":
                    cur.append(m)
                else:
                    cur[m] = j
            return rep

        written, msg, inf = fill_until_full(srv, c, write, "cycle %d" % cycle)
        assert written, "cycle %d: nothing fit" % cycle
        check_full_info(inf, refused_before)
        gone = [k for n, k in enumerate(sorted(model)) if n % 5]
        delete(c, gone)
        for k in gone:
            del model[k]
        wait_writable(c, "probe:%d" % cycle, value("probe", cycle))
        strings["probe:%d" % cycle] = value("probe", cycle)
        rep = c.call("HSET", "after:%d" % cycle, "f", member(0, 0))
        assert rep == 1, rep
        model["after:%d" % cycle] = ("hash", {b"f": member(0, 0)})
        check_cleaner_settles(srv)
        check()
    srv.kill9()
    srv.start()
    c = srv.resp()
    check()
    assert c.call("DBSIZE") == len(model) + len(strings)
