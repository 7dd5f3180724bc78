"""Values larger than one 4 MiB log segment (src/store/bigval.c): strings and
collection elements, stored as chunk entries committed by a final entry.

Every test runs a real rowan-server (pools sized for the values) and talks
to it with redis-py or the raw RESP client; values are compared by SHA-1.
Covered: SET/GET of 5, 40 and 200 MB; GETRANGE, STRLEN, APPEND (growing a
small value past 4 MiB), SETRANGE, EXPIRE; restart and kill -9 recovery;
kill -9 while a large value is being written (the key is then exactly the
old or the new value, and the server says it ignored the cut-short pieces);
hash, set, list and sorted-set elements of 5-10 MB, and a compaction
snapshot holding them; a crash in the compaction snapshot an HSET of a
large field writes after its own entry (the field keeps its new value);
the cleaner relocating chunks under churn; a value larger than the pool's
free room refused with -OOM and nothing lost; replication to a backup and a
backup's catch-up after kill -9 (shard digests agree); and the string,
hash and list commands on large values differentially against
redis-server; MIGRATE of large values between two servers."""
import hashlib
import os
import re
import random
import socket
import time

import pytest
import redis

from conftest import ConnectionClosed, RespError, wait_for
from test_replication import digests, peer_states

pytestmark = pytest.mark.rowan_only("values stored across log segments")

MB = 1 << 20
E_NO_ROOM = ("OOM command not allowed when the storage pool is full: the value needs more "
             "log space than the pool has free")


def sha(b):
    return hashlib.sha1(b).hexdigest()


def value(n, seed):
    """n pseudo-random bytes (cheap to build, different per seed)."""
    rnd = random.Random(seed)
    block = rnd.randbytes(MB)
    out = bytearray()
    while len(out) < n:
        out += block
        block = block[7:] + block[:7]
    return bytes(out[:n])


def until_room(write, what):
    """Run write() until the pool takes it: while the cleaner is making
    room a write is refused with -OOM, which says retry (up to 30 s). The
    refusal is raised (redis-py) or returned (conftest's RespClient, an
    EXEC's reply)."""
    for _ in range(600):
        try:
            rep = write()
            if not (isinstance(rep, RespError) and rep.msg.startswith("OOM")):
                return rep
        except redis.ResponseError as e:
            assert str(e).startswith("OOM"), e
        time.sleep(0.05)
    pytest.fail("%s never got room" % what)


def client(srv):
    return srv.client(socket_timeout=120)


def rowan_info(r):
    return r.info("rowan")


def test_set_get_5_40_200_mb(server_factory):
    srv = server_factory({"pool-size": "1gb"})
    r = client(srv)
    for n, seed in ((5 * MB, 1), (40 * MB, 2), (200 * MB, 3)):
        v = value(n, seed)
        assert r.set("big", v) is True
        got = r.get("big")
        assert len(got) == n and sha(got) == sha(v), n
        assert r.strlen("big") == n
        assert r.getrange("big", n - 10, n - 1) == v[-10:]
        assert r.getrange("big", 4 * MB - 5, 4 * MB + 5) == v[4 * MB - 5:4 * MB + 6]
        del v, got
    assert r.type("big") == b"string"
    assert r.exists("big") == 1
    assert r.dbsize() == 1
    assert r.delete("big") == 1
    assert r.get("big") is None


def test_string_commands_on_a_large_value(server_factory):
    srv = server_factory({"pool-size": "256mb"})
    r = client(srv)
    model = bytearray(value(3 * MB, 10))
    r.set("s", bytes(model))
    # APPEND grows a one-entry value past a segment
    for i in range(3):
        part = value(MB + 12345, 20 + i)
        assert r.append("s", part) == len(model) + len(part)
        model += part
    assert r.strlen("s") == len(model)
    assert sha(r.get("s")) == sha(bytes(model))
    # SETRANGE inside, across a chunk boundary, and past the end
    for off in (5, 1 * MB - 3, len(model) + 100):
        piece = b"HELLO-%d" % off
        assert r.setrange("s", off, piece) == max(len(model), off + len(piece))
        if off > len(model):
            model += b"\0" * (off - len(model))
        model[off:off + len(piece)] = piece
    assert sha(r.get("s")) == sha(bytes(model))
    for a, b in ((0, 99), (MB - 10, MB + 10), (-20, -1), (len(model) - 5, len(model) + 50)):
        assert r.getrange("s", a, b) == bytes(model)[a:b + 1 if b != -1 else None], (a, b)
    # expiry on a large value, kept by APPEND, survives a restart
    assert r.expire("s", 1000) is True
    r.append("s", b"!")
    model += b"!"
    assert 0 < r.ttl("s") <= 1000
    # DUMP / RESTORE (what MIGRATE sends) of a large value
    payload = r.dump("s")
    assert r.restore("s2", 0, payload) == b"OK"
    assert sha(r.get("s2")) == sha(bytes(model))
    assert r.delete("s2") == 1
    # RENAME logs its two keys in one group entry, the value in pieces
    # before it (test_bigbatch.py)
    assert r.rename("s", "s3") is True
    assert r.rename("s3", "s") is True
    assert r.exists("s3") == 0 and r.strlen("s") == len(model)
    # a large value replaced by a small one and the other way round
    r.set("t", value(6 * MB, 30))
    r.set("t", b"small")
    assert r.get("t") == b"small"
    r.set("t", value(6 * MB, 31))
    srv.restart()
    r = client(srv)
    assert sha(r.get("s")) == sha(bytes(model))
    assert 0 < r.ttl("s") <= 1000
    assert sha(r.get("t")) == sha(value(6 * MB, 31))


def test_restart_and_kill9_recover_large_values(server_factory):
    srv = server_factory({"pool-size": "512mb"})
    r = client(srv)
    vals = {"a": value(9 * MB, 40), "b": value(33 * MB, 41), "c": value(4 * MB + 7, 42)}
    for k, v in vals.items():
        r.set(k, v)
    r.set("small", b"x")
    srv.kill9()
    srv.start()
    r = client(srv)
    for k, v in vals.items():
        assert sha(r.get(k)) == sha(v), k
    assert r.get("small") == b"x"
    inf = rowan_info(r)
    assert int(inf["recovery_corrupt_entries"]) == 0, inf
    srv.stop()
    srv.start()
    r = client(srv)
    for k, v in vals.items():
        assert sha(r.get(k)) == sha(v), k


def _send(port, *args):
    """Send one command without waiting for its reply."""
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args))
    return s


def _acked(s):
    s.setblocking(False)
    try:
        return s.recv(16)[:1] in (b"+", b":")
    except OSError:
        return False
    finally:
        s.close()


@pytest.mark.parametrize("kind", ["string", "hash"])
def test_kill9_in_the_middle_of_a_large_write(server_factory, kind):
    """The key (a string, or a hash field) is the old value or the new one,
    never a mix; an acknowledged write is the new one. First a crash that
    certainly cuts a run short (DEBUG CHUNK-CRASH: the server kills itself
    with SIGKILL after writing 3 of its chunks): the old value stays and
    recovery says it ignored the pieces; then kills at moments that move
    around the write."""
    srv = server_factory({"pool-size": "512mb"})
    r = client(srv)
    old = value(24 * MB, 50)

    def write(v):
        if kind == "string":
            return _send(srv.port, b"SET", b"k", v)
        return _send(srv.port, b"HSET", b"k", b"f", v)

    def read(r):
        return r.get("k") if kind == "string" else r.hget("k", "f")
    _acked(write(old))
    assert wait_for(lambda: read(r) == old, timeout=20)
    # 1. a run certainly cut short
    assert r.execute_command("DEBUG", "CHUNK-CRASH", 3) in (True, b"OK")
    new = value(24 * MB, 51)
    s = write(new)
    assert wait_for(lambda: srv.proc.poll() is not None, timeout=20), "DEBUG CHUNK-CRASH did not fire"
    assert not _acked(s), "the write was acknowledged although the server died in it"
    srv.start()
    r = client(srv)
    assert sha(read(r)) == sha(old), "a run cut short changed the value"
    log = srv.log_text(since_start=True)
    assert re.search(r"\d+ pieces of a large value whose final entry was never written", log), log[-2000:]
    assert r.execute_command("DEBUG", "RELOAD") in (True, b"OK")
    assert int(rowan_info(r)["recovery_corrupt_entries"]) == 0
    # 2. kills at moments around the write
    delay = 0.0
    for attempt in range(8):
        new = value(24 * MB, 100 + attempt)
        s = write(new)
        time.sleep(delay)
        acked = _acked(s)
        srv.kill9()
        srv.start()
        r = client(srv)
        got = read(r)
        assert sha(got) in (sha(old), sha(new)), "torn value after kill -9 (attempt %d)" % attempt
        if acked:
            assert sha(got) == sha(new), "an acknowledged write was lost"
        assert int(rowan_info(r)["recovery_corrupt_entries"]) == 0
        old = got
        delay = (attempt % 4) * 0.01
    # the server goes on writing large values after all that
    v = value(10 * MB, 99)
    _acked(write(v))
    assert wait_for(lambda: read(r) == v, timeout=20)


def test_large_collection_elements(server_factory):
    """Hash fields, set and sorted-set members and list elements of 5-10 MB:
    written, overwritten, compacted into a snapshot larger than a segment,
    recovered after kill -9, deleted."""
    srv = server_factory({"pool-size": "512mb"})
    r = client(srv)
    f1, f2 = value(10 * MB, 300), value(9 * MB, 301)
    m, e1, e2, zm = value(6 * MB, 302), value(7 * MB, 303), value(5 * MB, 304), value(5 * MB, 305)
    assert r.hset("h", mapping={"f": f1, "g": b"small"}) == 2
    assert r.hset("h", "f", f2) == 0
    assert r.sadd("s", m, b"a") == 2
    assert r.rpush("l", b"x", e1, b"y") == 3
    assert r.lset("l", 1, e2) is True
    assert r.zadd("z", {zm: 1.5, b"m": 2}) == 2
    # enough small effects that the hash is compacted: its snapshot holds
    # the 9 MB field, so it is itself written in pieces
    for i in range(100):
        r.hset("h", "n%d" % i, i)

    def check(r):
        assert r.hlen("h") == 102 and r.hstrlen("h", "f") == len(f2)
        assert sha(r.hget("h", "f")) == sha(f2) and r.hget("h", "n99") == b"99"
        assert r.sismember("s", m) and r.scard("s") == 2
        assert [sha(x) for x in r.lrange("l", 0, -1)] == [sha(b"x"), sha(e2), sha(b"y")]
        assert r.zscore("z", zm) == 1.5 and r.zrange("z", 0, 0) == [zm]
    check(r)
    # DEBUG RELOAD replays the log (chunks joined) and compares with memory
    assert r.execute_command("DEBUG", "RELOAD") in (True, b"OK")
    srv.kill9()
    srv.start()
    r = client(srv)
    check(r)
    assert int(rowan_info(r)["recovery_corrupt_entries"]) == 0
    assert r.hdel("h", "f") == 1 and r.srem("s", m) == 1 and r.lrem("l", 0, e2) == 1
    srv.restart()
    r = client(srv)
    assert r.hexists("h", "f") == 0 and r.hlen("h") == 101
    assert r.smembers("s") == {b"a"} and r.lrange("l", 0, -1) == [b"x", b"y"]
    assert int(rowan_info(r)["recovery_corrupt_entries"]) == 0


def test_cleaner_relocates_chunks_under_churn(server_factory):
    """Random overwrites of 8 large values (each about 5.2 MB, so runs of
    chunks straddle segments; half strings, half a hash field) write a
    112 MB pool three times: the cleaner must copy live chunks out of
    segments shared with dead ones, and the hashes' histories are
    compacted. Every value read back, before and after kill -9, is exact."""
    srv = server_factory({"pool-size": "112mb"})
    r = client(srv)
    rnd = random.Random(7)
    model = {}
    for i in range(64):
        n = rnd.randrange(8) if i >= 8 else i
        k = "v%d" % n
        v = value(5 * MB + 200 * 1024 + i, 1000 + i)
        if n % 2:   # odd keys: a hash with a large field
            until_room(lambda: r.hset(k, mapping={"f": v, "n": i}), "churn write")
        else:
            until_room(lambda: r.set(k, v), "churn write")
        model[k] = v
    inf = rowan_info(r)
    assert int(inf["clean_segments"]) > 0, inf
    assert int(inf["clean_bytes_copied"]) > 0, inf
    _check_churn(r, model)
    srv.kill9()
    srv.start()
    r = client(srv)
    _check_churn(r, model)
    assert int(rowan_info(r)["recovery_corrupt_entries"]) == 0


def _check_churn(r, model):
    for k, v in model.items():
        got = r.hget(k, "f") if int(k[1:]) % 2 else r.get(k)
        assert got is not None and sha(got) == sha(v), k


def test_value_larger_than_the_pool_is_refused(server_factory, raw):
    srv = server_factory()      # 64 MB pool
    r = client(srv)
    small = value(5 * MB, 80)
    r.set("k", small)
    r.set("other", b"o")
    with pytest.raises(redis.ResponseError) as ei:
        r.set("k", value(100 * MB, 81))
    assert str(ei.value) == E_NO_ROOM
    assert sha(r.get("k")) == sha(small)
    # refused at the header: the body is never buffered
    c = srv.resp()
    c.send(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$%d\r\n" % (300 * MB))
    assert c.read_reply() == RespError(E_NO_ROOM)
    c.send(b"x" * (300 * MB) + b"\r\n")
    assert c.call("PING") == "PONG"
    # APPEND and SETRANGE past the room are refused before building anything
    with pytest.raises(redis.ResponseError) as ei:
        r.setrange("k", 200 * MB, b"x")
    assert str(ei.value) == E_NO_ROOM
    assert rowan_info(r)["oom_last_reason"] == "no_room"
    assert sha(r.get("k")) == sha(small) and r.get("other") == b"o"
    # a large value inside MULTI the pool has no room for: refused, nothing
    # applied
    p = r.pipeline(transaction=True)
    p.set("other", b"new").set("k", value(100 * MB, 82))
    with pytest.raises(redis.RedisError):
        p.execute()
    assert r.get("other") == b"o" and sha(r.get("k")) == sha(small)
    srv.kill9()
    srv.start()
    r = client(srv)
    assert sha(r.get("k")) == sha(small) and r.get("other") == b"o"


def _wait_live(cl, timeout=60.0):
    n = len(cl.nodes)

    def all_live():
        try:
            return all(set(peer_states(nd).values()) == {"live"} and
                       len(peer_states(nd)) == n - 1 and
                       nd.info("rowan")["rowan"].get("shards_reconciling") == "0"
                       for nd in cl.nodes)
        except (OSError, AssertionError, ConnectionClosed, redis.RedisError):
            return False
    assert wait_for(all_live, timeout=timeout, interval=0.1), "peers not live again"


def _wait_digests_agree(cl, timeout=90.0):
    """Every node has the same digest and key count for every shard."""
    end = time.monotonic() + timeout
    while True:
        ds = [digests(nd) for nd in cl.nodes]
        if not any(isinstance(d, RespError) for d in ds) and all(d == ds[0] for d in ds):
            return ds[0]
        if time.monotonic() > end:
            pytest.fail("replicas disagree: %r" % [d if isinstance(d, RespError) else
                        sorted(s for s in d if d.get(s) != ds[0].get(s))[:10] for d in ds])
        time.sleep(0.3)


def _check(rc, vals):
    for k, v in vals.items():
        got = rc.get(k)
        assert got is not None and sha(got) == sha(v), k


def test_cluster_replicates_and_catches_up_large_values(cluster_factory):
    """2 nodes, each the backup of the other. Large values replicate (shard
    digests, which hash the value bytes, agree); a backup killed and
    restarted catches up on large values written meanwhile (delta
    catch-up); a node whose pool is wiped gets them all back from its peer
    (whole-shard re-sync)."""
    cl = cluster_factory(2, 2, options={"pool-size": "512mb", "replication-timeout": 1500})
    _wait_live(cl)
    rc = cl.cluster_client(socket_timeout=120)
    vals = {"big%d" % i: value((5 + 6 * i) * MB, 90 + i) for i in range(4)}
    vals["small"] = b"s"
    for k, v in vals.items():
        assert rc.set(k, v) is True
    _check(rc, vals)
    hval = value(6 * MB, 150)
    rc.hset("hbig", mapping={"f": hval, "g": b"1"})
    rc.rpush("lbig", b"a", hval[::-1])
    d = _wait_digests_agree(cl)
    assert sum(x[1] for x in d.values()) == len(vals) + 2
    # kill -9 one node, restart it; then overwrite large values
    cl.kill9(1)
    cl.restart(1)
    _wait_live(cl)
    rc = cl.cluster_client(socket_timeout=120)
    for i, k in enumerate(["big0", "big1", "big4"]):
        vals[k] = value((7 + i) * MB, 200 + i)
        rc.set(k, vals[k])
    _wait_digests_agree(cl)
    _check(rc, vals)
    # wipe a node's pool: everything it holds comes back from the other
    cl.kill9(1)
    os.unlink(os.path.join(cl.nodes[1].dir, "rowan.pool"))
    cl.restart(1)
    _wait_live(cl)
    d = _wait_digests_agree(cl)
    assert sum(x[1] for x in d.values()) == len(vals) + 2
    rc = cl.cluster_client(socket_timeout=120)
    _check(rc, vals)
    assert sha(rc.hget("hbig", "f")) == sha(hval)
    assert sha(rc.lindex("lbig", 1)) == sha(hval[::-1])
    for nd in cl.nodes:
        f = nd.info("rowan")["rowan"]
        assert f["digest_diverged"] == "0" and f["shards_lost"] == "0", (nd.name, f)


def test_large_values_differential_against_redis(server_factory):
    """The same seeded commands on large values against redis-server:
    replies (whole values included) compared one by one."""
    import shutil
    from conftest import Server
    from differential import both
    if not shutil.which("redis-server"):
        pytest.skip("redis-server not installed")
    c = server_factory({"pool-size": "512mb"}).resp()
    ref_srv = Server("redis")
    ref_srv.start()
    try:
        ref = ref_srv.resp()
        rnd = random.Random(2024)
        base = value(5 * MB, 500)
        both(c, ref, "SET", "s", base)
        both(c, ref, "HSET", "h", "f", base[:4 * MB + 999], "g", "1")
        both(c, ref, "RPUSH", "l", "a", base[7:], "b")
        for i in range(60):
            n = both(c, ref, "STRLEN", "s")
            op = rnd.randrange(8)
            if op == 0:
                both(c, ref, "APPEND", "s", value(rnd.randrange(1, 600 * 1024), i))
            elif op == 1:
                both(c, ref, "SETRANGE", "s", rnd.randrange(n + 10), b"<%d>" % i)
            elif op == 2:
                a = rnd.randrange(-n, n)
                both(c, ref, "GETRANGE", "s", a, a + rnd.randrange(2 * MB))
            elif op == 3:
                both(c, ref, "HSET", "h", "f", value(4 * MB + rnd.randrange(MB), 600 + i))
            elif op == 4:
                both(c, ref, "HSTRLEN", "h", "f")
                both(c, ref, "HGET", "h", "f")
            elif op == 5:
                both(c, ref, "LSET", "l", 1, value(4 * MB + i, 700 + i))
                both(c, ref, "LRANGE", "l", 0, -1)
            elif op == 6:
                both(c, ref, "SETBIT", "s", 8 * (n + rnd.randrange(1000)), 1)
                both(c, ref, "BITCOUNT", "s")
            else:
                both(c, ref, "GETRANGE", "s", -100, -1)
        both(c, ref, "GET", "s")
        both(c, ref, "HMGET", "h", "f", "g")   # HGETALL's order is the hashtable's
    finally:
        ref_srv.cleanup()


def test_migrate_moves_a_large_value(server_factory):
    """MIGRATE (DUMP on the source, RESTORE on the target) of a large
    string and of a hash with a large field, between two servers."""
    a = server_factory({"pool-size": "256mb"})
    b = server_factory({"pool-size": "256mb"})
    ra, rb = client(a), client(b)
    v = value(20 * MB, 800)
    ra.set("big", v)
    ra.hset("h", mapping={"f": v[::-1], "g": b"1"})
    for k in ("big", "h"):
        assert ra.execute_command("MIGRATE", "127.0.0.1", b.port, k, 0, 60000) in (True, b"OK")
    assert ra.exists("big", "h") == 0
    assert sha(rb.get("big")) == sha(v)
    assert sha(rb.hget("h", "f")) == sha(v[::-1]) and rb.hget("h", "g") == b"1"
    b.kill9()
    b.start()
    rb = client(b)
    assert sha(rb.get("big")) == sha(v) and sha(rb.hget("h", "f")) == sha(v[::-1])


def test_hash_with_one_large_field_is_written_once(server_factory):
    """HSET creating a hash with a 40 MB field logs the field once (about
    ten 4 MiB segments), not its entry and then at once a snapshot of the
    same bytes (twenty)."""
    srv = server_factory({"pool-size": "256mb"})
    r = client(srv)
    before = int(rowan_info(r)["pool_segments_free"])
    v = value(40 * MB, 61)
    assert r.hset("h", "f", v) == 1
    used = before - int(rowan_info(r)["pool_segments_free"])
    assert used <= (40 * MB) // (4 * MB) + 2, used
    assert sha(r.hget("h", "f")) == sha(v)
    srv.kill9()
    srv.start()
    assert sha(client(srv).hget("h", "f")) == sha(v)


def test_compaction_snapshot_cut_short_keeps_the_new_value(server_factory):
    """Overwriting a large field of a hash leaves a dead copy in its
    history, so the HSET's entry is followed at once by a compaction
    snapshot of the hash (db.c, maybe_compact), in pieces too. A crash in
    the snapshot's run leaves pieces no final entry claims, yet the HSET
    itself is complete: the field has its new value and recovery says the
    pieces belonged to a write or a compaction snapshot, not that the key
    kept its previous value. The field's size makes each HSET's own entry
    exactly 20 chunks and the snapshot 21; DEBUG CHUNK-CRASH n fires after
    the n-th chunk of one write, before the entry that commits them, so 21
    fires in the snapshot only. The first HSET alone takes no snapshot: a
    history of one entry has nothing dead to drop."""
    chunk = (4 * MB) // 4 - 64          # bigval_chunk_len for a 1-byte key
    v0 = value(20 * chunk - 12, 59)
    v = value(20 * chunk - 12, 60)
    srv = server_factory({"pool-size": "256mb"})
    r = client(srv)
    assert r.hset("k", "f", v0) == 1
    assert r.execute_command("DEBUG", "CHUNK-CRASH", 21) in (True, b"OK")
    s = _send(srv.port, b"HSET", b"k", b"f", v)
    assert wait_for(lambda: srv.proc.poll() is not None, timeout=30), "DEBUG CHUNK-CRASH did not fire"
    assert not _acked(s)
    srv.start()
    r = client(srv)
    assert sha(r.hget("k", "f")) == sha(v)
    log = srv.log_text(since_start=True)
    assert re.search(r"21 pieces of a large value whose final entry was never written \(a write, "
                     r"or a compaction snapshot", log), log[-2000:]
    assert r.execute_command("DEBUG", "RELOAD") in (True, b"OK")
    assert int(rowan_info(r)["recovery_corrupt_entries"]) == 0
