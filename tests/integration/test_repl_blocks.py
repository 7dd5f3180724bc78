"""Multi-block entries over TCP (replication-msg-max; src/repl/tcp_blocks.c,
the framing and reassembly of src/repl/vblock.c that the verbs transport
uses for entries larger than one SEND, Rowan-KV 4.2.2), through real
rowan-server processes: 3 nodes, k=3, every node's replication messages
capped at 4096 bytes, so every entry over 4 KB travels as blocks.

- Values from 100 bytes to 20 MB (single SETs, HSET of large fields,
  MULTI batches) are acknowledged, read back, and every replica's shard
  digests agree with the primary's; INFO's block counters prove the blocks
  carried them (a cap that split nothing fails the test).
- kill -9 of a backup, then of a primary, in the middle of a load of large
  values: no acknowledged write is lost (each key holds its last
  acknowledged value, or a later one whose reply was lost), the replicas
  converge, and the restarted nodes took their catch-up as blocks.
- DEBUG REPL-BLOCK-FAULT damages, drops or repeats one block: the backup
  closes the link (its log says why, repl_block_errors counts it), lands
  nothing of the entry, the link's recovery brings it back in step, the
  write is acknowledged and the copies converge.
- replication-mode rpc: the backups' workers reassemble the same blocks.
- Over TLS (tls-replication), including the catch-up of a wiped node.
- A peer played from the wire formats (test_repl_input's handshake): a
  node without a cap of its own takes blocks from any hello that declares
  one, in any order, and refuses a cap out of range, blocks without a cap,
  messages over the cap, damaged blocks, a whole entry while blocks are
  missing and blocks out of step, landing nothing of such an entry.
- The cap is checked when configured: 0 or 1024..4mb, startup only."""
import hashlib
import os
import re
import shutil
import struct
import subprocess
import threading
import time

import pytest

from conftest import DEFAULT_BINARY, RespClient, RespError
from test_bigvalues import value
from test_repl_input import (closed_by_peer, config_digest, crc32c, handshake, hello, log_text,
                             recv_exact, rowan_info, set_entry)
from test_replication import (CONN_ERRORS, Router, owner_map, tag_on, wait_all_live,
                              wait_digests_agree)
from test_tls_nodes import certs, tls_opts  # noqa: F401 (certs: a fixture)

pytestmark = pytest.mark.rowan_only("Rowan's replication transport")

MB = 1 << 20
CAP = 4096
PAYLOAD = CAP - 64        # a block's payload bytes (vblock.h: 64-byte header)
OPTS = {"replication-msg-max": CAP, "pool-size": "512mb", "replication-timeout": 10000,
        "workers": 2, "enable-debug-command": "yes"}


def sha(b):
    return hashlib.sha1(b).hexdigest() if b is not None else None


def blocks(node):
    f = node.info("rowan")["rowan"]
    return {k: int(f[k]) for k in ("repl_blocks_sent", "repl_blocks_received",
                                   "repl_block_entries_sent", "repl_block_entries_received",
                                   "repl_block_errors", "repl_link_failures", "repl_msg_max",
                                   "digest_corrupt", "digest_diverged")}


def all_blocks(cl):
    return [blocks(nd) for nd in cl.nodes]


@pytest.fixture
def cl3b(cluster_factory):
    cl = cluster_factory(3, 3, options=OPTS)
    wait_all_live(cl)
    return cl


def test_values_100b_to_20mb_travel_as_blocks(cl3b):
    cl = cl3b
    owner = owner_map(cl)
    before = all_blocks(cl)
    assert all(b["repl_msg_max"] == CAP for b in before)
    r = Router(cl, owner)
    vals, big = {}, 0
    sizes = [100, 1000, 3900, 4100, 10000, 100000, MB, 3 * MB, 5 * MB, 20 * MB]
    for i, n in enumerate(sizes):
        k = "blk:%d" % n
        vals[k] = value(n, 10 + i)
        assert r.call(k, "SET", k, vals[k])[1] == "OK", k
        big += n if n > CAP else 0
    # a hash with large fields and a small one
    h = {b"f1": value(2 * MB, 40), b"f2": b"small", b"f3": value(6 * MB, 41)}
    args = ["HSET", "blk:h"]
    for f, v in h.items():
        args += [f, v]
    assert r.call("blk:h", *args)[1] == 3
    big += 8 * MB
    # MULTI batches on one node (a hash tag): several entries, each over the cap
    tag = tag_on(owner, 1, "m")
    c = RespClient(cl.nodes[1].port)
    batch = {"{%s}:%d" % (tag, j): value(50000 * (j + 1) ** 2, 60 + j) for j in range(5)}
    assert c.call("MULTI") == "OK"
    for k, v in batch.items():
        assert c.call("SET", k, v) == "QUEUED"
    assert c.call("EXEC") == ["OK"] * len(batch)
    # a second batch mixing a large SET, a large HSET field and small writes
    assert c.call("MULTI") == "OK"
    for cmd in (("SET", "{%s}:x" % tag, value(3 * MB, 70)), ("INCR", "{%s}:n" % tag),
                ("HSET", "{%s}:h" % tag, "big", value(MB, 71)), ("SET", "{%s}:s" % tag, "v")):
        assert c.call(*cmd) == "QUEUED"
    assert c.call("EXEC") == ["OK", 1, 1, "OK"]
    c.close()
    vals.update(batch)
    big += sum(len(v) for v in batch.values()) + 4 * MB
    for k, v in vals.items():
        got = r.call(k, "GET", k)[1]
        assert sha(got) == sha(v), k
    assert sha(r.call("blk:h", "HGET", "blk:h", "f3")[1]) == sha(h[b"f3"])
    r.close()
    wait_digests_agree(cl)
    after = all_blocks(cl)
    d = [{k: a[k] - b[k] for k in a} for a, b in zip(after, before)]
    sent = sum(x["repl_blocks_sent"] for x in d)
    received = sum(x["repl_blocks_received"] for x in d)
    # every large byte went to two backups, in blocks of PAYLOAD bytes
    assert received >= 2 * big // PAYLOAD, (received, big, d)
    assert sent == received, d
    assert sum(x["repl_block_entries_sent"] for x in d) == \
        sum(x["repl_block_entries_received"] for x in d) > 2 * len(vals)
    for i, x in enumerate(after):
        assert x["repl_block_errors"] == 0 and x["repl_link_failures"] == 0, (i, x)
        assert x["digest_corrupt"] == 0 and x["digest_diverged"] == 0, (i, x)
    # every node was primary of some of them: each sent and received blocks
    assert all(x["repl_blocks_sent"] > 0 and x["repl_blocks_received"] > 0 for x in d), d


class BigWriter(threading.Thread):
    """SETs of values from 100 bytes to 20 MB on its own keys, one at a
    time. Per key the model keeps the values the key may hold: an
    acknowledged SET leaves only its value; a SET whose outcome is unknown
    (connection lost, -NOREPLICAS...) adds its value to the candidates."""

    SIZES = [100, 3000, 5000, 60000, 700000, 2 * MB, 5 * MB]

    def __init__(self, tid, cl, owner, seed):
        super().__init__(daemon=True)
        self.tid = tid
        self.router = Router(cl, owner)
        self.keys = ["bw%d:%d" % (tid, j) for j in range(6)]
        self.cands = {k: {None} for k in self.keys}
        self.blobs = {n: value(n, seed * 10 + i) for i, n in enumerate(self.SIZES + [20 * MB])}
        self.seed = seed
        self.log = []             # (t0, t1, ok)
        self.errors = []          # error replies (outcome unknown)
        self.stop = threading.Event()
        self.exc = None

    def run(self):
        import random
        rng = random.Random(self.seed)
        seq = 0
        try:
            while not self.stop.is_set():
                seq += 1
                k = rng.choice(self.keys)
                n = 20 * MB if seq % 40 == 7 else rng.choice(self.SIZES)
                v = b"%d|%d|" % (self.tid, seq) + self.blobs[n][32:]
                t0 = time.monotonic()
                try:
                    rep = self.router.call(k, "SET", k, v)[1]
                except CONN_ERRORS:
                    rep = None
                    time.sleep(0.05)
                ok = rep == "OK"
                if ok:
                    self.cands[k] = {sha(v)}
                else:
                    self.cands[k].add(sha(v))
                    if isinstance(rep, RespError):
                        self.errors.append(rep.msg)
                self.log.append((t0, time.monotonic(), ok))
        except BaseException as e:   # reported by the test
            self.exc = e
        finally:
            self.router.close()

    def acks(self, since=0.0):
        return sum(1 for t0, _, ok in list(self.log) if ok and t0 >= since)


def _wait_acks(writers, n, since=0.0, timeout=60.0):
    end = time.monotonic() + timeout
    while sum(w.acks(since) for w in writers) < n:
        for w in writers:
            assert w.exc is None, w.exc
        assert time.monotonic() < end, "only %d large SETs acknowledged in %.0f s" % (
            sum(w.acks(since) for w in writers), timeout)
        time.sleep(0.05)


def test_kill9_backup_and_primary_under_large_value_load(cluster_factory):
    cl = cluster_factory(3, 3, options=dict(OPTS, **{"replication-timeout": 1500}))
    wait_all_live(cl)
    owner = owner_map(cl)
    writers = [BigWriter(i, cl, owner, 500 + i) for i in range(3)]
    for w in writers:
        w.start()
    _wait_acks(writers, 20)
    # a backup (of every shard it is not primary of) dies in the middle of the load
    cl.kill9(2)
    time.sleep(1.5)
    cl.restart(2)
    t_live = wait_all_live(cl)
    _wait_acks(writers, 15, since=t_live)
    # then a primary
    cl.kill9(0)
    time.sleep(1.0)
    cl.restart(0)
    t_live = wait_all_live(cl)
    _wait_acks(writers, 15, since=t_live)
    for w in writers:
        w.stop.set()
    for w in writers:
        w.join(120)
        assert not w.is_alive(), "writer stuck"
        assert w.exc is None, w.exc
    errs = {e.split()[0] for w in writers for e in w.errors}
    assert errs <= {"NOREPLICAS", "LOADING", "CLUSTERDOWN", "TRYAGAIN"}, \
        [e for w in writers for e in w.errors][:5]
    wait_digests_agree(cl)
    r = Router(cl, owner)
    checked = 0
    for w in writers:
        for k, cands in w.cands.items():
            got = sha(r.call(k, "GET", k)[1])
            assert got in cands, "%s holds %s; its acknowledged history allows %s" % (
                k, got, cands)
            checked += len(cands) == 1 and None not in cands
    r.close()
    assert checked >= 6, "too few keys with a definite acknowledged value: %d" % checked
    st = all_blocks(cl)
    for i, x in enumerate(st):
        assert x["repl_block_errors"] == 0, (i, x)
        assert x["digest_corrupt"] == 0 and x["digest_diverged"] == 0, (i, x)
    # the restarted nodes' counters started over: they were caught up, and
    # replicated since, through blocks
    for i in (0, 2):
        assert st[i]["repl_blocks_received"] > 0 and st[i]["repl_blocks_sent"] > 0, (i, st[i])
    print("large SETs: %d acknowledged, %d not; %d keys definite; blocks: %r" % (
        sum(w.acks() for w in writers), sum(1 for w in writers for e in w.log if not e[2]),
        checked, st))


@pytest.mark.parametrize("fault,why", [
    ("corrupt", "checksum mismatch"),
    ("drop", "while message|were due"),
    ("dup", "duplicate block"),
])
def test_damaged_block_closes_the_link_and_copies_converge(cl3b, fault, why):
    cl = cl3b
    owner = owner_map(cl)
    tag = tag_on(owner, 0, "f")
    k = "{%s}:v" % tag
    r = Router(cl, owner)
    assert r.call(k, "SET", k, value(200000, 1))[1] == "OK"
    wait_digests_agree(cl)
    before = all_blocks(cl)
    for nd in cl.nodes:
        nd.mark_log()
    c = RespClient(cl.nodes[0].port)
    assert c.call("DEBUG", "REPL-BLOCK-FAULT", fault) == "OK"
    c.close()
    # 6 MB: two chunk entries and the entry that commits them (bigval.h),
    # so a dropped block shows when the next entry's blocks come
    v = value(6 * MB, 2)
    assert r.call(k, "SET", k, v)[1] == "OK"
    assert sha(r.call(k, "GET", k)[1]) == sha(v)
    wait_all_live(cl)
    wait_digests_agree(cl)
    # the same key again, on the recovered links
    v2 = value(5 * MB, 3)
    assert r.call(k, "SET", k, v2)[1] == "OK"
    r.close()
    wait_digests_agree(cl)
    after = all_blocks(cl)
    errors = [a["repl_block_errors"] - b["repl_block_errors"] for a, b in zip(after, before)]
    assert errors[0] == 0 and sum(errors) == 1, (errors, after)
    assert after[0]["repl_link_failures"] > before[0]["repl_link_failures"], after[0]
    hit = [i for i in (1, 2) if errors[i]][0]
    log = cl.nodes[hit].log_since_mark()
    assert re.search(r"Replication link from node \d+ sender \d+ closed: .*(%s)" % why, log), \
        log[-2000:]
    for i, x in enumerate(after):
        assert x["digest_corrupt"] == 0 and x["digest_diverged"] == 0, (i, x)


def test_rpc_mode_backups_reassemble_blocks(cluster_factory):
    """replication-mode rpc: the backups' workers take the links
    (rpc_backup.c) and reassemble blocks with the same code; a damaged
    block closes a link there too, and the copies converge."""
    cl = cluster_factory(3, 3, options=dict(OPTS, **{"replication-mode": "rpc"}))
    wait_all_live(cl)
    owner = owner_map(cl)
    r = Router(cl, owner)
    vals = {"rpc:%d" % n: value(n, n % 97) for n in (100, 5000, 300000, 5 * MB, 20 * MB)}
    for k, v in vals.items():
        assert r.call(k, "SET", k, v)[1] == "OK", k
    wait_digests_agree(cl)
    mid = all_blocks(cl)
    assert sum(x["repl_block_entries_received"] for x in mid) >= 2 * 8, mid
    tag = tag_on(owner, 1, "r")
    c = RespClient(cl.nodes[1].port)
    assert c.call("DEBUG", "REPL-BLOCK-FAULT", "corrupt") == "OK"
    c.close()
    k = "{%s}:big" % tag
    vals[k] = value(2 * MB, 5)
    assert r.call(k, "SET", k, vals[k])[1] == "OK"
    wait_all_live(cl)
    wait_digests_agree(cl)
    for k, v in vals.items():
        assert sha(r.call(k, "GET", k)[1]) == sha(v), k
    r.close()
    after = all_blocks(cl)
    assert sum(a["repl_block_errors"] for a in after) == 1, after
    for nd in cl.nodes:
        f = nd.info("rowan")["rowan"]
        assert f["replication_mode"] == "rpc" and f["blog_messages"] == "0", f


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")
def test_blocks_over_tls_and_a_backup_catch_up(cluster_factory, certs):  # noqa: F811
    """tls-replication: the blocks go through TLS records (worker links, and
    the catch-up stream that refills a node whose pool was wiped)."""
    cl = cluster_factory(3, 3, options=tls_opts(certs, **OPTS))
    wait_all_live(cl)
    owner = owner_map(cl)
    r = Router(cl, owner)
    vals = {"tls:%d" % n: value(n, n % 89) for n in (100, 50000, 5 * MB, 20 * MB)}
    for k, v in vals.items():
        assert r.call(k, "SET", k, v)[1] == "OK", k
    wait_digests_agree(cl)
    cl.kill9(2)
    os.unlink(os.path.join(cl.nodes[2].dir, "rowan.pool"))
    cl.restart(2)
    wait_all_live(cl)
    wait_digests_agree(cl)
    for k, v in vals.items():
        assert sha(r.call(k, "GET", k)[1]) == sha(v), k
    r.close()
    st = all_blocks(cl)
    # node2 got its copies back (the 20 MB and 5 MB values among them) as blocks
    assert st[2]["repl_blocks_received"] >= (25 * MB) // PAYLOAD, st[2]
    assert all(x["repl_block_errors"] == 0 for x in st), st
    assert "over TLS with certificates" in cl.nodes[2].log_text(since_start=True)


def block(entry, msg, seq, msg_max, damage=False):
    """Block seq of entry (unpadded bytes, message msg on its link), as
    src/repl/vblock.c lays it out for messages of msg_max bytes."""
    p = msg_max - 64
    cnt = (len(entry) + p - 1) // p
    payload = entry[seq * p:(seq + 1) * p]
    hdr = b"\0" + b"B" + entry[6:16] + struct.pack("<QIIII", msg, len(entry), cnt, seq,
                                                     len(payload)) + b"\0" * 24
    body = hdr + payload
    crc = crc32c(body) ^ (1 if damage else 0)
    return struct.pack("<I", crc) + body


def capped_hello(digest, msg_max):
    return hello(1, digest) + struct.pack("<II", msg_max, 0)


def acked(s, n):
    """Read acks until the count n arrives (False if the link closed first)."""
    while True:
        try:
            a = struct.unpack("<Q", recv_exact(s, 8))[0]
        except (ConnectionError, OSError):
            return False
        if a >= n:
            return a == n


def test_receiver_takes_blocks_from_any_capped_hello(cluster_factory):
    """A peer played from the wire formats alone (test_repl_input's
    handshake): node0 has no cap of its own and still takes blocks from a
    sender whose hello declares one, in any order, acking each entry once;
    it refuses a cap out of range, blocks without a cap, messages over the
    cap, a damaged block and a whole entry while blocks are missing."""
    cl = cluster_factory(3, 3)
    target = cl.nodes[0]
    nshards = int(cl.client(0).config_get("shards")["shards"])
    digest = config_digest(cl.nodes, nshards, 3)
    mm = 1024
    ent = set_entry(5, 7, b"blk", os.urandom(3000))[:40 + 3 + 3000]   # unpadded
    nblk = (len(ent) + mm - 65) // (mm - 64)
    assert nblk == 4
    errors0 = int(rowan_info(target)["repl_block_errors"])
    # a cap out of range: refused at the hello
    s, _, _, _ = handshake(target, capped_hello(digest, 100))
    assert closed_by_peer(s)
    # no cap declared: a block closes the link
    s, _, _, _ = handshake(target, hello(1, digest))
    assert recv_exact(s, 8) == b"\0" * 8
    s.sendall(block(ent, 1, 0, mm))
    assert closed_by_peer(s)
    # a cap: entries as blocks, in order and reversed, then a whole one
    s, _, _, _ = handshake(target, capped_hello(digest, mm))
    assert recv_exact(s, 8) == b"\0" * 8
    s.sendall(b"".join(block(ent, 1, i, mm) for i in range(nblk - 1)))
    s.sendall(block(ent, 1, nblk - 1, mm))
    assert acked(s, 1)
    s.sendall(b"".join(block(ent, 2, i, mm) for i in reversed(range(nblk))))
    assert acked(s, 2)
    s.sendall(set_entry(5, 8, b"small", b"v"))
    assert acked(s, 3)
    # a damaged block closes it
    s.sendall(block(ent, 4, 0, mm) + block(ent, 4, 1, mm, damage=True))
    assert closed_by_peer(s)
    # a whole message over the cap
    s, _, _, _ = handshake(target, capped_hello(digest, mm))
    assert recv_exact(s, 8) == b"\0" * 8
    s.sendall(set_entry(5, 9, b"blk", b"x" * 3000))
    assert closed_by_peer(s)
    # a whole entry while a block is missing: the partial entry never lands
    s, _, _, _ = handshake(target, capped_hello(digest, mm))
    assert recv_exact(s, 8) == b"\0" * 8
    s.sendall(b"".join(block(ent, 1, i, mm) for i in (0, 1, 3)) + set_entry(5, 9, b"k", b"v"))
    assert not acked(s, 1)
    # a block of a message out of step
    s, _, _, _ = handshake(target, capped_hello(digest, mm))
    assert recv_exact(s, 8) == b"\0" * 8
    s.sendall(block(ent, 2, 0, mm))
    assert closed_by_peer(s)
    log = log_text(target)
    for why in ("declares a message cap of 100 bytes", "declared no message cap",
                "checksum mismatch", "whose messages are at most 1024",
                "where block(s) of message 1 were due", "message 1 was due"):
        assert why in log, why
    assert int(rowan_info(target)["repl_block_errors"]) - errors0 == 5
    # the node still replicates
    rc = cl.cluster_client()
    assert rc.set("after", value(100000, 9))
    wait_digests_agree(cl)


def test_the_cap_is_checked(server_factory, tmp_path):
    binary = os.environ.get("ROWAN_SERVER", DEFAULT_BINARY)
    for bad, msg in (("100", "must be 0 or between 1024 and 4194304"),
                     ("5mb", "between 0 and 4194304"), ("x", "memory value")):
        p = subprocess.run([binary, "--replication-msg-max", bad, "--dir", str(tmp_path)],
                           capture_output=True, text=True, timeout=30)
        assert p.returncode != 0 and msg in p.stdout + p.stderr, (bad, p.stdout, p.stderr)
    srv = server_factory({"replication-msg-max": "64kb"})
    c = srv.resp()
    assert c.call("CONFIG", "GET", "replication-msg-max") == [b"replication-msg-max", b"65536"]
    err = c.call("CONFIG", "SET", "replication-msg-max", "8192")
    assert isinstance(err, RespError) and "can't set immutable config" in err.msg, err
    c.close()
