"""The acknowledged-write checker for crash cycles (kill -9 and power loss),
shared by test_powerloss.py and the soak (tests/soak/run.py).

Writers run against a real server until it is cut; then the server is
restarted (on the same pool, or on the power-loss shim's durable image) and
every writer's keys are read back and compared with its model.

Each Writer owns its keys and a connection and sends one operation at a
time, drawn from SET, DEL, INCR, HSET, LPUSH, MSET and MULTI/EXEC
transactions mixing them. Its model is the state its acknowledged
operations produced; at most one operation is in flight when the server is
cut. After the restart the writer's whole state (every key, counter, hash
field and list element) must equal the model, or the model with the
in-flight operation applied entirely: so an acknowledged write that went
missing, a value that was never written, an older value, a torn MSET or a
half-applied transaction all fail the check. Replies are checked as they
come too (INCR's value, LPUSH's length, HSET's count, EXEC's replies).

A PipeWriter keeps BATCH SETs to distinct keys in flight at a time; after
the restart each of its keys holds its last acknowledged value or the one
in flight.

verify() returns the acknowledged writes it checked, a list of problems
(empty when all is well) and how many acknowledged writes were lost or
wrong (keys, hash fields, list elements, counter increments), so that the
soak can count them; tests assert there are no problems."""
import copy
import os
import random
import shutil
import socket
import threading
import time

from conftest import ConnectionClosed, RawConn, encode_command

CONN_ERRORS = (ConnectionError, ConnectionClosed, OSError, socket.timeout, EOFError)


def stamp(tid, seq, what):
    """A value that names its writer, sequence number and key."""
    return b"%s|w%d|s%d|" % (what.encode(), tid, seq) + b"x" * (seq * 7 % 120)


class Writer(threading.Thread):
    NSTR = 6

    def __init__(self, tid, port, seed, seq=0):
        super().__init__(daemon=True)
        self.tid, self.port = tid, port
        self.rng = random.Random(seed)
        self.seq = seq
        p = "ack:{w%d}:" % tid   # one hash slot: MSET and MULTI stay legal in a cluster
        self.strs = [p + "s%d" % i for i in range(self.NSTR)]
        self.ctr, self.hash, self.list = p + "ctr", p + "h", p + "l"
        self.state = {"s": {k: None for k in self.strs}, "ctr": 0, "h": {}, "l": []}
        self.inflight = None
        self.acked = 0           # acknowledged write commands since the last verify
        self.error = None
        self.stop = threading.Event()

    # ---- operations: (commands, apply(state) -> expected replies) ----
    def _next(self, kind=None):
        self.seq += 1
        s, rng = self.seq, self.rng
        kind = kind or rng.choice(["set", "set", "del", "incr", "hset", "lpush", "mset", "multi"])
        if kind == "set":
            k = rng.choice(self.strs)
            return [("SET", k, stamp(self.tid, s, k))]
        if kind == "del":
            k = rng.choice(self.strs + [self.hash, self.list] if rng.random() < 0.3 else self.strs)
            return [("DEL", k)]
        if kind == "incr":
            return [("INCR", self.ctr)]
        if kind == "hset":
            f = "f%d" % rng.randrange(8)
            return [("HSET", self.hash, f, stamp(self.tid, s, f))]
        if kind == "lpush":
            return [("LPUSH", self.list, stamp(self.tid, s, "e"))]
        if kind == "mset":
            a, b = rng.sample(self.strs, 2)
            return [("MSET", a, stamp(self.tid, s, a), b, stamp(self.tid, s, b))]
        subs = []
        for kd in rng.sample(["set", "incr", "hset", "lpush", "del"], 3):
            subs += self._next(kd)
        return [("MULTI",)] + subs + [("EXEC",)]

    def _apply1(self, st, cmd):
        """Apply one command to st; returns its expected reply."""
        name = cmd[0]
        if name == "SET":
            st["s"][cmd[1]] = cmd[2]
            return "OK"
        if name == "MSET":
            for i in range(1, len(cmd), 2):
                st["s"][cmd[i]] = cmd[i + 1]
            return "OK"
        if name == "DEL":
            k = cmd[1]
            if k == self.hash:
                had, st["h"] = bool(st["h"]), {}
            elif k == self.list:
                had, st["l"] = bool(st["l"]), []
            else:
                had, st["s"][k] = st["s"][k] is not None, None
            return int(had)
        if name == "INCR":
            st["ctr"] += 1
            return st["ctr"]
        if name == "HSET":
            new = cmd[2] not in st["h"]
            st["h"][cmd[2]] = cmd[3]
            return int(new)
        if name == "LPUSH":
            st["l"].insert(0, cmd[2])
            return len(st["l"])
        raise AssertionError(cmd)

    def apply(self, st, op):
        """st after op, and the replies op must get."""
        st = copy.deepcopy(st)
        if op[0][0] != "MULTI":
            return st, [self._apply1(st, c) for c in op]
        subs = [self._apply1(st, c) for c in op[1:-1]]
        return st, ["OK"] + ["QUEUED"] * len(subs) + [subs]

    def run(self):
        try:
            cn = RawConn(self.port, timeout=20)
        except CONN_ERRORS:
            return
        try:
            while not self.stop.is_set():
                op = self._next()
                after, want = self.apply(self.state, op)
                self.inflight = op
                cn.send(b"".join(encode_command(*c) for c in op))
                got = [cn.read_reply() for _ in op]
                if got != want:
                    raise AssertionError("writer %d: %r answered %r, expected %r" % (
                        self.tid, [c[0] for c in op], got, want))
                self.state, self.inflight = after, None
                self.acked += sum(1 for c in op if c[0] not in ("MULTI", "EXEC"))
        except CONN_ERRORS:
            pass                 # the server went away: the op stays in flight
        except Exception as e:   # a wrong reply
            self.error = e
        finally:
            cn.close()

    def observe(self, c):
        vals = c.call("MGET", *self.strs)
        ctr = c.call("GET", self.ctr)
        h = c.call("HGETALL", self.hash)
        lst = c.call("LRANGE", self.list, 0, -1)
        if not isinstance(vals, list) or not isinstance(h, list) or not isinstance(lst, list):
            raise AssertionError("reading writer %d: %r %r %r" % (self.tid, vals, h, lst))
        return {"s": dict(zip(self.strs, vals)), "ctr": int(ctr) if ctr is not None else 0,
                "h": dict(zip(h[0::2], [v for v in h[1::2]])) if h else {},
                "l": lst}

    def verify(self, c):
        """Compare the server's state with the model; returns problems."""
        got = self.observe(c)
        got["h"] = {k.decode(): v for k, v in got["h"].items()}
        ok = [self.state]
        if self.inflight:
            ok.append(self.apply(self.state, self.inflight)[0])
        problems, lost = [], 0
        if got not in ok:
            lost = min(count_diff(want, got) for want in ok)
            problems.append("writer %d: state after restart matches neither the acknowledged "
                            "state nor it plus the in-flight %r:\n%s" % (
                                self.tid, [x[0] for x in self.inflight or []],
                                describe_diff(self.state, got)))
        self.state, self.inflight = got, None
        checked, self.acked = self.acked, 0
        return checked, problems, lost


def describe_diff(want, got):
    out = []
    for k in sorted(set(want["s"]) | set(got["s"])):
        if want["s"].get(k) != got["s"].get(k):
            out.append("  %s: acknowledged %r, found %r" % (k, short(want["s"].get(k)),
                                                             short(got["s"].get(k))))
    if want["ctr"] != got["ctr"]:
        out.append("  counter: acknowledged %d, found %d" % (want["ctr"], got["ctr"]))
    if want["h"] != got["h"]:
        out.append("  hash: acknowledged %r, found %r" % (
            {k: short(v) for k, v in want["h"].items()}, {k: short(v) for k, v in got["h"].items()}))
    if want["l"] != got["l"]:
        out.append("  list: acknowledged %d elements %r..., found %d %r..." % (
            len(want["l"]), [short(x) for x in want["l"][:3]], len(got["l"]),
            [short(x) for x in got["l"][:3]]))
    return "\n".join(out) or "  (in-flight operation applied only in part)"


def count_diff(want, got):
    """How many acknowledged writes a state differs by (at least 1)."""
    n = sum(want["s"].get(k) != got["s"].get(k) for k in set(want["s"]) | set(got["s"]))
    n += abs(want["ctr"] - got["ctr"])
    n += sum(want["h"].get(f) != got["h"].get(f) for f in set(want["h"]) | set(got["h"]))
    n += len(set(want["l"]) ^ set(got["l"]))
    return max(n, 1)


def short(v):
    return v if v is None or len(v) < 24 else v[:24] + b"..."


class PipeWriter(threading.Thread):
    """BATCH pipelined SETs to distinct keys at a time."""
    NKEYS, BATCH = 120, 20

    def __init__(self, port, seed, seq=0):
        super().__init__(daemon=True)
        self.port, self.seq = port, seq
        self.rng = random.Random(seed)
        self.keys = ["ack:p:%d" % i for i in range(self.NKEYS)]
        self.state = {k: None for k in self.keys}
        self.inflight = {}
        self.pos = 0
        self.acked = 0
        self.error = None
        self.stop = threading.Event()

    def run(self):
        try:
            cn = RawConn(self.port, timeout=20)
        except CONN_ERRORS:
            return
        try:
            while not self.stop.is_set():
                batch = []
                for _ in range(self.BATCH):
                    self.seq += 1
                    k = self.keys[self.pos % self.NKEYS]
                    self.pos += 1
                    batch.append((k, stamp(99, self.seq, k)))
                self.inflight = dict(batch)
                cn.send(b"".join(encode_command("SET", k, v) for k, v in batch))
                for k, v in batch:
                    rep = cn.read_reply()
                    if rep != "OK":
                        raise AssertionError("pipelined SET %s answered %r" % (k, rep))
                    self.state[k] = v
                    del self.inflight[k]
                    self.acked += 1
        except CONN_ERRORS:
            pass
        except Exception as e:
            self.error = e
        finally:
            cn.close()

    def verify(self, c):
        got = dict(zip(self.keys, c.call("MGET", *self.keys)))
        problems = []
        for k in self.keys:
            ok = [self.state[k]] + ([self.inflight[k]] if k in self.inflight else [])
            if got[k] not in ok:
                problems.append("%s: acknowledged %r, found %r" % (k, short(self.state[k]),
                                                                     short(got[k])))
        self.state, self.inflight = got, {}
        checked, self.acked = self.acked, 0
        return checked, problems, len(problems)


class Load:
    """nwriters Writers and a PipeWriter against one server, across cuts."""

    def __init__(self, port, nwriters=4, seed=1):
        self.rng = random.Random(seed)
        self.writers = [Writer(i, port, self.rng.random()) for i in range(nwriters)]
        self.pipe = PipeWriter(port, self.rng.random())

    def threads(self):
        return self.writers + [self.pipe]

    def start(self, port):
        """Fresh threads (a thread runs once) that carry the models on."""
        fresh = []
        for w in self.writers:
            n = Writer(w.tid, port, self.rng.random(), w.seq)
            n.state, n.acked = w.state, w.acked
            fresh.append(n)
        p = PipeWriter(port, self.rng.random(), self.pipe.seq)
        p.state, p.pos, p.acked = self.pipe.state, self.pipe.pos, self.pipe.acked
        self.writers, self.pipe = fresh, p
        for t in self.threads():
            t.start()

    def acked(self):
        return sum(t.acked for t in self.threads())

    def run_until(self, acks, seconds, alive):
        """Let the load run until `acks` writes were acknowledged or
        `seconds` passed (or a writer failed, or alive() went false)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and self.acked() < acks and alive():
            if any(t.error for t in self.threads()):
                break
            time.sleep(0.005)

    def halt(self):
        """After the cut: stop and join every thread; wrong replies raise."""
        for t in self.threads():
            t.stop.set()
        for t in self.threads():
            t.join(30)
            if t.is_alive():
                raise AssertionError("a writer is stuck after the cut")
        errors = [t.error for t in self.threads() if t.error]
        if errors:
            raise AssertionError("a writer got a wrong reply: %r" % errors[0])

    def verify(self, port):
        """Read everything back: (acknowledged writes checked, problems,
        acknowledged writes lost or wrong)."""
        c = RawConn(port)
        try:
            checked, problems, lost = 0, [], 0
            for t in self.threads():
                n, p, bad = t.verify(c)
                checked += n
                problems += p
                lost += bad
            return checked, problems, lost
        finally:
            c.close()


# --------------------------------------------------------------------------
# cycles: run the load, cut the server, restart, check
# --------------------------------------------------------------------------
def shim_path():
    """The power-loss shim of the build under test (next to $ROWAN_SERVER)."""
    server = os.path.realpath(os.environ.get("ROWAN_SERVER", "/work/main/src/rowan-server"))
    path = os.environ.get("ROWAN_SHIM") or os.path.join(os.path.dirname(server), "tests",
                                                        "powerloss-shim.so")
    if not os.path.exists(path):
        raise AssertionError("no power-loss shim at %s (run make)" % path)
    return path


def shim_env(srv, image, writeback=0.0, fault=None, sync_delay_ms=0):
    env = dict(os.environ, LD_PRELOAD=shim_path(), ROWAN_SHIM_POOL=srv.pool_path,
               ROWAN_SHIM_IMAGE=image)
    if writeback:
        env["ROWAN_SHIM_WRITEBACK"] = str(writeback)
    if sync_delay_ms:
        env["ROWAN_SHIM_SYNC_DELAY_MS"] = str(sync_delay_ms)
    if fault:
        env["ROWAN_SHIM_FAULT"] = fault
    # an ASan build wants its runtime first among the loaded libraries
    env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0"
    return env


def cut_and_check(srv, load, acks, seconds, cut, restart):
    """Run the load until `acks` acknowledged writes (or `seconds`), cut
    (kill -9), restart() and check. Returns (checked, problems, lost) as
    Load.verify."""
    load.start(srv.port)
    load.run_until(acks, seconds, srv.alive)
    if not srv.alive():
        load.halt()
        return 0, ["the server died under load:\n" + srv.log_tail(30)], 0
    cut()
    load.halt()
    restart()
    checked, problems, lost = load.verify(srv.port)
    f = srv.info("rowan")["rowan"]
    if int(f["recovery_corrupt_entries"]) or int(f["damaged_shards"]):
        problems.append("a crash left damage in the pool: %s" % {
            k: f[k] for k in ("recovery_corrupt_entries", "damaged_shards")})
    srv.stop()
    return checked, problems, lost


def pick_acks(rng, acks):
    """How many acknowledged writes before the cut: given, or at random a
    cut right after the start (while the cleaner reclaims what the last run
    left) or one under way."""
    return rng.randrange(*(acks or rng.choice([(1, 60), (300, 3000)])))


def kill9_cycle(srv, load, rng, acks=None, seconds=10):
    """kill -9 under load; restart on the same pool (the page cache kept
    everything written)."""
    srv.start()
    return cut_and_check(srv, load, pick_acks(rng, acks), seconds, srv.kill9, srv.start)


def powerloss_cycle(srv, load, rng, acks=None, seconds=10, writeback=None, fault=None,
                    sync_delay_ms=None):
    """Power loss under load: the server runs under the shim; after the
    kill -9 it restarts from the shim's durable image, i.e. from exactly the
    bytes completed flushes covered (plus, with writeback, torn pieces of
    what was never flushed)."""
    image = os.path.join(srv.dir, "durable.image")
    if writeback is None:
        writeback = rng.choice([0, 0, 0.02, 0.2])
    if sync_delay_ms is None:   # now and then a slow device
        sync_delay_ms = rng.choice([0, 0, 0, 20])
    srv.env = shim_env(srv, image, writeback, fault, sync_delay_ms)
    try:
        srv.start()
    finally:
        srv.env = None

    def restart():
        shutil.copyfile(image, srv.pool_path)   # the power came back
        os.unlink(image)
        srv.start()

    return cut_and_check(srv, load, pick_acks(rng, acks), seconds, srv.kill9, restart)
