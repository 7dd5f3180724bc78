"""Damaged pool files (Rowan-only).

Known keys are written, the server is stopped (SIGTERM or kill -9), the pool
file (<dir>/rowan.pool) is damaged, and the server is restarted. Whatever the
damage, no GET may ever return a value that was never written, nor an older
value than the one acknowledged, without the loss having been accepted:

- damage to acknowledged entries (anywhere, including the newest entry of a
  key and the last entry of a log, and a truncated file) makes a standalone
  server refuse to start, naming the damage and rowan-check-pool. The tool
  reports it (exit 1) and changes nothing unless --fix is confirmed; after
  --fix the server starts, every intact key holds its value, the damaged
  keys are nil or their older value, and the log and INFO
  (recovery_accepted_losses) report the accepted loss at every start;
- a torn tail (bytes after the durable end of a log: a write in flight at a
  crash, never acknowledged) is dropped, logged and counted
  (recovery_dropped_bytes), and the server starts;
- a truncated file that lost nothing acknowledged is salvaged;
- a cluster node starts on damage and marks the shards that lost entries
  (INFO damaged_shards), to be fetched from their replicas;
- a broken superblock is refused cleanly, never a crash."""
import os
import re
import subprocess

import pytest

from conftest import (ServerStartError, Server, _register, describe_rc, encode_command, free_port,
                      key_slot, RawConn)

pytestmark = pytest.mark.rowan_only("damage to Rowan's pool file")

NKEYS = 300
VICTIM = 150
SEG = 4 << 20
HDR = 40          # log entry header size (src/store/log.h)


def key(i):
    return b"ck:%05d" % i


def value(i):
    body = bytes((i * 13 + j * 7) % 94 + 33 for j in range(180))
    return b"VAL<%05d>" % i + body + b"<END%05d>" % i


def write_keys(srv):
    cn = RawConn(srv.port)
    for i in range(NKEYS):          # one at a time: every SET acknowledged
        assert cn.call("SET", key(i), value(i)) == "OK", i
    cn.close()


class Pool:
    """The pool file of a stopped server and where each key's entry lies."""

    def __init__(self, path):
        self.path = path
        with open(path, "rb") as f:
            self.data = f.read()
        self.size = len(self.data)
        self.where = {}                 # i -> offset of the key bytes (single copy only)
        self.copies = {i: 0 for i in range(NKEYS)}
        for m in re.finditer(rb"ck:(\d{5})", self.data):     # one pass over the file
            i = int(m.group(1))
            if i < NKEYS:
                self.copies[i] += 1
                self.where[i] = m.start()
        for i, n in self.copies.items():
            if n != 1:
                self.where.pop(i, None)
        assert self.where, "no key found in the pool file %s: are values stored there?" % path

    def entry_start(self, i):
        return self.where[i] - HDR

    def entry_end(self, i):
        off = self.data.find(b"<END%05d>" % i, self.where[i])
        assert off > 0
        return off + len(b"<END%05d>" % i)

    def patch(self, off, new):
        with open(self.path, "r+b") as f:
            f.seek(off)
            f.write(new)
            f.flush()
            os.fsync(f.fileno())

    def flip(self, off, n):
        self.patch(off, bytes(b ^ 0xFF for b in self.data[off:off + n]))

    def truncate(self, size):
        os.truncate(self.path, size)

    def intact_keys(self, lo, hi):
        """Keys whose entry the damage [lo, hi) cannot have touched: wholly
        before it, or in a segment the damage does not reach (recovery scans
        every segment on its own, DESIGN.md section 3)."""
        dmg = set(range(lo // SEG, (hi - 1) // SEG + 1))
        out = set()
        for i, off in self.where.items():
            start, end = off - HDR, self.entry_end(i)
            if end <= lo or (start // SEG not in dmg and (end - 1) // SEG not in dmg):
                out.add(i)
        return out


def stopped_server(server_factory, stop):
    srv = server_factory()
    write_keys(srv)
    if stop == "term":
        rc, killed = srv.stop()
        assert (rc, killed) == (0, False), "SIGTERM: %s" % describe_rc(rc)
    else:
        srv.kill9()
    path = srv.pool_path
    assert os.path.exists(path), "no pool file in %s: %s" % (srv.dir, os.listdir(srv.dir))
    return srv, Pool(path)


def check_values(srv, must_exist=(), must_be_nil=()):
    c = srv.resp()
    got = {}
    for start in range(0, NKEYS, 100):
        idx = list(range(start, min(NKEYS, start + 100)))
        vals = c.call("MGET", *[key(i) for i in idx])
        assert isinstance(vals, list), vals
        got.update(zip(idx, vals))
    wrong = [i for i, v in got.items() if v is not None and v != value(i)]
    assert not wrong, "WRONG VALUES after recovery (never written): %s = %r" % (
        key(wrong[0]), got[wrong[0]][:80])
    lost = sorted(i for i in must_exist if got[i] is None)
    assert not lost, "%d intact entries lost (e.g. %s); the damage was elsewhere" % (
        len(lost), key(lost[0]))
    back = [i for i in must_be_nil if got[i] is not None]
    assert not back, "damaged entry %s still served" % key(back[0])
    return got


def rowan_counters(srv):
    ro = srv.info("rowan")
    assert "rowan" in ro, "INFO lacks the # Rowan section"
    f = ro["rowan"]
    return int(f["recovery_dropped_bytes"]), int(f["recovery_corrupt_entries"])


def log_reports_damage(text):
    """True when some log line says that something was dropped or found
    corrupt. Statements of zero ("0 bytes of torn tail dropped", "0 corrupt
    regions", "no corrupt entries") do not count, so that a clean start's
    summary line cannot satisfy the check."""
    for line in text.splitlines():
        for m in re.finditer(r"corrupt|dropped", line, re.I):
            before = line[:m.start()]
            if re.search(r"(\b0|\bno)\s+([\w-]+\s+){0,4}$", before, re.I):
                continue
            return True
    return False


def assert_reported(srv):
    log = srv.log_text(since_start=True)
    assert log_reports_damage(log), \
        "the log does not say what recovery dropped or found corrupt:\n" + log[-3000:]
    dropped, corrupt = rowan_counters(srv)
    assert dropped > 0 or corrupt > 0, \
        "damage in written entries, but recovery_dropped_bytes=%d recovery_corrupt_entries=%d" % (
            dropped, corrupt)


# ---------------------------------------------------------------- refusal and rowan-check-pool
def check_pool_binary():
    """rowan-check-pool of the build under test: next to $ROWAN_SERVER."""
    server = os.path.realpath(os.environ.get("ROWAN_SERVER", "/work/main/src/rowan-server"))
    path = os.path.join(os.path.dirname(server), "rowan-check-pool")
    assert os.access(path, os.X_OK), "no rowan-check-pool next to %s (run make)" % server
    return path


def check_pool(path, fix=False, answer=None):
    argv = [check_pool_binary()] + (["--fix"] if fix else []) + [path]
    r = subprocess.run(argv, input=answer, capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout + r.stderr


def file_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def expect_refusal(srv, names=()):
    """The server must refuse to start (exit 1, not a crash), its log naming
    the damage, the strings in names (e.g. the damaged key) and the tool."""
    with pytest.raises(ServerStartError):
        srv.start()
    rc = srv.proc.wait(10)
    assert rc == 1, "refusing a damaged pool must be a clean exit 1, got %s" % describe_rc(rc)
    log = srv.log_text(since_start=True)
    assert "CORRUPTION" in log and "damaged" in log, log[-3000:]
    assert "rowan-check-pool --fix" in log, "the refusal does not point at the tool:\n" + log[-3000:]
    for n in names:
        assert n in log, "the refusal does not name %r:\n%s" % (n, log[-3000:])
    return log


def fix_with_tool(srv, names=()):
    """rowan-check-pool reports the damage (exit 1, naming `names`) and
    changes nothing; --fix answered 'n' or nothing aborts; answered 'y' it
    accepts the loss (exit 0), after which the check passes."""
    before = file_bytes(srv.pool_path)
    rc, out = check_pool(srv.pool_path)
    assert rc == 1 and "Damage 1:" in out and "--fix" in out, out
    for n in names:
        assert n in out, "rowan-check-pool does not name %r:\n%s" % (n, out)
    for answer in ("n\n", ""):
        rc, out = check_pool(srv.pool_path, fix=True, answer=answer)
        assert rc == 1 and "Continue? [y/N]" in out and "Aborting" in out, out
    assert file_bytes(srv.pool_path) == before, "the pool changed without a confirmed --fix"
    rc, out = check_pool(srv.pool_path, fix=True, answer="y\n")
    assert rc == 0 and "Successfully" in out, out
    rc, out = check_pool(srv.pool_path)
    assert rc == 0 and "is valid" in out and "Accepted loss" in out, out
    return out


def start_after_fix(srv, regions=1):
    """The server starts on the fixed pool and reports the accepted loss."""
    srv.start()
    f = srv.info("rowan")["rowan"]
    assert int(f["recovery_accepted_losses"]) >= regions, f
    assert int(f["recovery_accepted_loss_bytes"]) >= 64 * regions, f
    assert int(f["recovery_corrupt_entries"]) == 0, f
    log = srv.log_text(since_start=True)
    assert "accepted loss" in log, log[-3000:]


def refused_then_fixed(srv, names=()):
    expect_refusal(srv, names)
    fix_with_tool(srv, names)
    start_after_fix(srv)


def start_or_refuse(srv):
    """Start after damage that may make the pool unusable. Returns True when
    it started, False when it refused cleanly; fails on a crash or a hang."""
    try:
        srv.start()
        return True
    except ServerStartError as e:
        rc = srv.proc.poll()
        assert rc is not None, "server neither answered nor exited: %s" % e
        assert rc > 0, "server crashed on the damaged pool (%s)\n%s" % (
            describe_rc(rc), srv.log_text(since_start=True)[-3000:])
        log = srv.log_text(since_start=True)
        assert re.search(r"truncat|size|short|small|corrupt|magic|invalid|damaged", log, re.I), \
            "refused to start (%s) without a clear message:\n%s" % (describe_rc(rc), log[-3000:])
        return False


def keeps_working(srv, mb=5, allow_oom=False):
    """Writes after recovery (several MB, so new segments are used) work and
    read back; the process stays alive. allow_oom: a clean -OOM refusal ends
    the filling without failing."""
    cn = RawConn(srv.port)
    n = mb * 1024 // 3
    vals = [b"post:%d:" % i + b"p" * 3000 for i in range(n)]
    stored = 0
    for b0 in range(0, n, 500):
        idx = range(b0, min(n, b0 + 500))
        cn.send(b"".join(encode_command("SET", b"post:%d" % i, vals[i]) for i in idx))
        reps = [cn.read_reply() for _ in idx]
        for i, rep in zip(idx, reps):
            if rep == "OK" and stored == i:
                stored = i + 1
                continue
            ok_oom = allow_oom and getattr(rep, "msg", "").startswith("OOM")
            assert ok_oom, "write %d after recovery: %r" % (i, rep)
        if stored < idx[-1] + 1:
            break
    assert stored > 0, "no write accepted after recovery"
    for i in range(0, stored, 100):
        cn.send_command("MGET", *[b"post:%d" % j for j in range(i, min(stored, i + 100))])
        assert cn.read_reply() == vals[i:min(stored, i + 100)]
    cn.close()
    assert srv.alive(), "server died after recovery: %s" % describe_rc(srv.proc.returncode)
    return stored


STOPS = ["term", "kill9"]


# ---------------------------------------------------------------- sanity: no damage
@pytest.mark.parametrize("stop", STOPS)
def test_undamaged_restart(server_factory, stop):
    srv, pool = stopped_server(server_factory, stop)
    srv.start()
    check_values(srv, must_exist=range(NKEYS))
    assert rowan_counters(srv) == (0, 0)
    log = srv.log_text(since_start=True)
    assert not log_reports_damage(log), "an undamaged pool reported as damaged:\n" + log[-3000:]


# ---------------------------------------------------------------- (b) flipped bytes
@pytest.mark.parametrize("stop", STOPS)
@pytest.mark.parametrize("where", ["value", "header-crc", "header-len", "header-type"])
def test_flipped_bytes(server_factory, stop, where):
    srv, pool = stopped_server(server_factory, stop)
    assert VICTIM in pool.where, "victim key not found exactly once"
    start = pool.entry_start(VICTIM)
    if where == "value":
        off = pool.data.find(b"VAL<%05d>" % VICTIM, pool.where[VICTIM]) + 60
        pool.flip(off, 4)
    elif where == "header-crc":
        off = start
        pool.flip(off, 2)
    elif where == "header-len":
        off = start + 19                # high byte of klen: the key becomes huge
        pool.flip(off, 1)
    else:
        off = start + 4                 # the type byte
        pool.flip(off, 1)
    # the key is named wherever the damaged entry's header is still readable
    readable = where in ("value", "header-crc")
    refused_then_fixed(srv, names=[key(VICTIM).decode()] if readable else [])
    check_values(srv, must_exist=pool.intact_keys(start, pool.entry_end(VICTIM)),
                 must_be_nil=[VICTIM])
    keeps_working(srv)
    # the accepted loss is reported again at the next start
    srv.stop()
    start_after_fix(srv)


# ---------------------------------------------------------------- (c) zeroed range
@pytest.mark.parametrize("stop", STOPS)
def test_zeroed_range(server_factory, stop):
    srv, pool = stopped_server(server_factory, stop)
    assert VICTIM in pool.where
    lo = pool.entry_start(VICTIM) & ~63
    hi = lo + 8192
    assert any(pool.data[lo:hi]), "nothing written where the test zeroes"
    pool.patch(lo, b"\0" * (hi - lo))
    refused_then_fixed(srv)
    damaged = [i for i, off in pool.where.items() if lo <= off < hi]
    check_values(srv, must_exist=pool.intact_keys(lo, hi), must_be_nil=damaged)
    keeps_working(srv)


# ---------------------------------------------------------------- torn tail
@pytest.mark.parametrize("stop", STOPS)
def test_torn_tail_after_last_entry(server_factory, stop):
    """Garbage right after the last entry of a log (a torn write after the
    durable end: a normal crash) is dropped and reported, and the server
    starts; every real entry survives."""
    srv, pool = stopped_server(server_factory, stop)
    last = max(pool.where, key=lambda i: pool.where[i])
    end = (pool.entry_end(last) + 63) & ~63
    # skip whatever the server wrote after our last entry (e.g. at shutdown)
    limit = end + 65536
    while end < limit and any(pool.data[end:end + 64]):
        end += 64
    assert end < limit and not any(pool.data[end:end + 512]), \
        "no zeroed space after the last entry to place a torn tail"
    torn = bytes((j * 89 + 17) % 255 + 1 for j in range(200))
    pool.patch(end, torn)
    srv.start()
    check_values(srv, must_exist=pool.where.keys())
    assert_reported(srv)
    assert rowan_counters(srv)[1] == 0, "a torn tail is not damage"
    log = srv.log_text(since_start=True)
    assert "CORRUPTION" not in log, log[-3000:]
    keeps_working(srv)


# ---------------------------------------------------------------- the newest entry of a key
@pytest.mark.parametrize("stop", STOPS)
@pytest.mark.parametrize("how", ["flip", "zero"])
def test_damaged_newest_entry(server_factory, stop, how):
    """The newest entry of a key is the last entry of its log (where damage
    once passed for a torn tail and the older value was served): the server
    refuses to start, naming it, and never serves the older value; only
    after rowan-check-pool --fix does the older value come back, reported."""
    srv = server_factory()
    write_keys(srv)
    cn = RawConn(srv.port)
    assert cn.call("SET", "newest", b"OLDER-VALUE") == "OK"
    for i in range(20):
        assert cn.call("SET", "filler:%d" % i, b"f" * 100) == "OK"
    newest = b"NEWEST-VALUE-" + b"n" * 300
    assert cn.call("SET", "newest", newest) == "OK"
    cn.close()
    if stop == "term":
        assert srv.stop() == (0, False)
    else:
        srv.kill9()
    data = file_bytes(srv.pool_path)
    off = data.find(newest)
    assert off > 0 and data.find(newest, off + 1) < 0
    # it is the last entry of its log: only zeroes follow it
    assert not any(data[off + len(newest):off + len(newest) + 4096]), "not the last entry"
    with open(srv.pool_path, "r+b") as f:
        if how == "flip":
            f.seek(off + 50)
            f.write(bytes([data[off + 50] ^ 0x20]))
        else:   # the whole entry, header included, zeroed
            start = (off - HDR - len(b"newest")) & ~63
            f.seek(start)
            f.write(b"\0" * (off + len(newest) - start))
    refused_then_fixed(srv, names=['"newest"'] if how == "flip" else [])
    c = srv.resp()
    # accepted explicitly: now, and only now, the older value is back
    assert c.call("GET", "newest") == b"OLDER-VALUE"
    check_values(srv, must_exist=range(NKEYS))


# ---------------------------------------------------------------- cluster mode
class OneNodeCluster(Server):
    """A server configured as the only node of a cluster (k = 1)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.repl_port = free_port()

    def argv(self):
        return super().argv() + ["--cluster-node", "n1", "127.0.0.1", str(self.port),
                                 str(self.repl_port), "--cluster-self", "n1", "--replicas", "1"]


def test_cluster_node_starts_and_marks_damaged_shard(server_factory, request):
    """In a cluster the damaged shards can be fetched from their replicas: the
    node starts and marks exactly the shard that lost an entry."""
    srv = OneNodeCluster("rowan")
    _register(request, srv)
    try:
        srv.start()
        assert srv.info("cluster")["cluster"]["cluster_enabled"] == "1"
        assert int(srv.info("rowan")["rowan"]["damaged_shards"]) == 0
        cn = RawConn(srv.port)
        for i in range(50):
            k = "{c}%d" % i
            assert cn.call("SET", k, b"value-%d-" % i + b"v" * 100) == "OK"
        victim = b"VICTIM-VALUE-" + b"x" * 200
        assert cn.call("SET", "victim", victim) == "OK"
        for i in range(50, 80):
            assert cn.call("SET", "{c}%d" % i, b"value-%d-" % i + b"v" * 100) == "OK"
        cn.close()
        srv.kill9()
        data = file_bytes(srv.pool_path)
        off = data.find(victim)
        assert off > 0
        with open(srv.pool_path, "r+b") as f:
            f.seek(off + 20)
            f.write(bytes([data[off + 20] ^ 0x01]))
        srv.start()
        f = srv.info("rowan")["rowan"]
        assert int(f["damaged_shards"]) == 1, f
        assert int(f["recovery_corrupt_entries"]) == 1, f
        log = srv.log_text(since_start=True)
        assert "CORRUPTION" in log and '"victim"' in log, log[-3000:]
        nshards = int(f["shards"])
        shard = key_slot("victim") * nshards // 16384
        assert "shard %d " % shard in log, log[-3000:]
        c = srv.resp()
        assert c.call("GET", "{c}3") == b"value-3-" + b"v" * 100   # other shards intact
    finally:
        srv.cleanup()


# ---------------------------------------------------------------- (a) truncation
@pytest.mark.parametrize("stop", STOPS)
def test_truncate_unwritten_tail(server_factory, stop):
    srv, pool = stopped_server(server_factory, stop)
    last_data = max(pool.entry_end(i) for i in pool.where)
    new_size = pool.size - SEG
    assert new_size > last_data, "written data reaches into the last segment"
    pool.truncate(new_size)
    assert os.path.getsize(pool.path) < pool.size
    # nothing acknowledged lay past the cut: salvaged, not refused
    rc, out = check_pool(pool.path)
    assert rc == 0 and "truncated" in out, out
    srv.start()
    assert "truncated" in srv.log_text(since_start=True)
    assert os.path.getsize(pool.path) == pool.size, "the file's size was not restored"
    check_values(srv, must_exist=pool.where.keys())
    # fill the pool (up to a clean -OOM) so segments past the cut are used
    keeps_working(srv, mb=56, allow_oom=True)
    check_values(srv, must_exist=pool.where.keys())
    srv.kill9()
    srv.start()
    check_values(srv, must_exist=pool.where.keys())


@pytest.mark.parametrize("stop", STOPS)
def test_truncate_into_written_data(server_factory, stop):
    srv, pool = stopped_server(server_factory, stop)
    assert VICTIM in pool.where
    cut = pool.entry_start(VICTIM) + 100
    pool.truncate(cut)
    assert os.path.getsize(pool.path) == cut
    # the intact segments are salvaged the same way as other damage
    refused_then_fixed(srv, names=["truncated"])
    assert os.path.getsize(pool.path) == pool.size
    gone = [i for i in pool.where if pool.entry_end(i) > cut]
    check_values(srv, must_exist=[i for i in pool.where if pool.entry_end(i) <= cut],
                 must_be_nil=gone)
    keeps_working(srv)


# ---------------------------------------------------------------- superblock
@pytest.mark.parametrize("stop", STOPS)
def test_damaged_superblock(server_factory, stop):
    srv, pool = stopped_server(server_factory, stop)
    pool.flip(0, 8)                         # the magic
    if start_or_refuse(srv):
        check_values(srv)
        keeps_working(srv)
