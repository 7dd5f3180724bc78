#!/usr/bin/python3
"""chaos.py: faults under machine pressure against a 3-node k=3 cluster,
with every kind of client at once, each checked.

    ROWAN_SERVER=build/asan/rowan-server tests/soak/chaos.py --mode managed \\
        --seconds 300 --pool-size 128mb --pressure

The cluster (static, or managed by its own ZooKeeper) runs these clients,
each routed by slot (test_failover.Router), each with its own checks:

- checker: SET/GET of unique values on a few keys (test_failover.Checker:
  no acknowledged write lost, no read of a value that later vanished);
- mset: pipelines of MSET (200 keys, 1-4 KB values) + MGET on one hash tag:
  an MGET shows one MSET whole, never older than the last acknowledged one;
  the final values are the last acknowledged round or a later unknown one;
- blpop: RPUSH by a producer, BLPOP by a consumer on one list: an item whose
  push was acknowledged is popped once or still in the list at the end; an
  item whose pop was answered is never in the list again;
- xread: XADD by a producer, XREAD BLOCK by a consumer: every acknowledged
  or read id is in the stream at the end, ids read are increasing;
- multi: MULTI INCR a INCR b EXEC: a == b at the end, between the
  acknowledged and the sent count;
- pubsub: a subscriber and a publisher: PING in subscribed mode is answered.

No request may go unanswered for longer than --stuck seconds (a reply
held for durability waits replication-timeout at most; a paused node is
paused for a few seconds). The faults, one at a time with the cluster
healthy again between them: kill -9 a node (and restart it, often with its
pool wiped), SIGSTOP a node for 0.5-4 s. At the end: every check above,
the replicas' digests agree, no sanitizer report in any node's log, and
each node's anonymous memory is reported.

--pressure runs two busy loops and a loop of synchronous 200 MB dd writes
beside it all. The exit status is 1 if any check failed."""
import argparse
import os
import random
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

from conftest import (Cluster, ConnectionClosed, RawConn, RespClient, RespError,  # noqa: E402
                      encode_command, key_slot, stop_process, wait_for)
import test_failover as tf  # noqa: E402
from resp_soak import anon_kb  # noqa: E402

CONN_ERRORS = (OSError, ConnectionClosed)
NOT_RUN = tf.NOT_RUN + ("NOREPLICAS Not enough good replicas",)


# --------------------------------------------------------------------------
# pressure and cluster state
# --------------------------------------------------------------------------
class Pressure:
    def __init__(self, tmpdir):
        self.procs = []
        self.tmpdir = tmpdir

    def start(self):
        for _ in range(2):
            self.procs.append(subprocess.Popen(["sh", "-c", "while :; do :; done"],
                                               start_new_session=True))
        path = os.path.join(self.tmpdir, "chaos-dd")
        self.procs.append(subprocess.Popen(
            ["sh", "-c", "while :; do dd if=/dev/zero of=%s bs=1M count=200 oflag=dsync "
             "2>/dev/null; rm -f %s; done" % (path, path)], start_new_session=True))

    def stop(self):
        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
        try:
            os.unlink(os.path.join(self.tmpdir, "chaos-dd"))
        except OSError:
            pass


def peer_states(nd):
    f = tf.rowan(nd)
    return {k: v.split(",")[0].split("=")[1] for k, v in f.items()
            if k.startswith("repl_peer_") and "=" in v}


MANAGED_HEALTHY = tf.wait_healthy


def wait_whole(cl, managed, timeout=120.0):
    if managed:
        return MANAGED_HEALTHY(cl, n=3, timeout=timeout)

    def live():
        try:
            return all(set(peer_states(nd).values()) == {"live"} and len(peer_states(nd)) == 2
                       and tf.rowan(nd).get("shards_reconciling") == "0" for nd in cl.nodes)
        except (CONN_ERRORS + (AssertionError,)):
            return False
    assert wait_for(live, timeout=timeout, interval=0.1), "static cluster not whole after %.0f s" % timeout


# --------------------------------------------------------------------------
# clients
# --------------------------------------------------------------------------
class Chaos:
    """What every client shares: the cluster, problems, the stuck bound."""

    def __init__(self, cl, stuck):
        self.cl = cl
        self.stuck = stuck
        self.problems = []
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.slowest = {}

    def problem(self, what):
        with self.lock:
            self.problems.append(what)
        print("chaos: %s PROBLEM: %s" % (time.strftime("%H:%M:%S"), what), flush=True)

    def timed(self, name, t0):
        dt = time.monotonic() - t0
        with self.lock:
            if dt > self.slowest.get(name, (0,))[0]:
                self.slowest[name] = (dt, time.strftime("%H:%M:%S"))
        if dt > self.stuck:
            self.problem("%s: one request went %.1f s without an answer" % (name, dt))


class Conn:
    """A connection to the primary of one slot, re-routed on errors. The
    socket timeout is well past the stuck bound, so a request that is
    never answered shows up as such."""

    def __init__(self, ch, key):
        self.ch = ch
        self.slot = key_slot(key)
        self.c = None
        self.port = None

    def primary(self):
        m = tf.slot_map(self.ch.cl)
        return m[self.slot] if m else None

    def get(self):
        if self.c is None:
            self.port = self.primary()
            if self.port is None:
                raise ConnectionClosed("no slot map")
            self.c = RawConn(self.port, timeout=self.ch.stuck + 30)
        return self.c

    def drop(self):
        if self.c is not None:
            self.c.close()
        self.c = None

    def pipeline(self, name, cmds):
        """Send cmds at once, read every reply. Returns the replies, or
        None if the connection failed (outcomes unknown)."""
        t0 = time.monotonic()
        try:
            c = self.get()
            c.send(b"".join(encode_command(*a) for a in cmds))
            reps = [c.read_reply() for _ in cmds]
        except CONN_ERRORS:
            self.drop()
            self.ch.timed(name, t0)
            return None
        self.ch.timed(name, t0)
        if any(isinstance(r, RespError) and r.msg.startswith(("MOVED", "CLUSTERDOWN", "TRYAGAIN"))
               for r in reps):
            self.drop()
        return reps


def not_run(rep):
    return isinstance(rep, RespError) and rep.msg.startswith(NOT_RUN)


def final_read(ch, name, key, label, cmd):
    """cmd's array reply (a final check), asked up to 100 times 0.2 s apart;
    None, with the problem reported, if it never comes."""
    c = Conn(ch, key)
    try:
        for _ in range(100):
            reps = c.pipeline(label, [cmd])
            if reps and isinstance(reps[0], list):
                return reps[0]
            time.sleep(0.2)
    finally:
        c.drop()
    ch.problem("%s: final %s never answered" % (name, cmd[0]))
    return None


class Worker(threading.Thread):
    def __init__(self, ch, name, seed):
        super().__init__(daemon=True, name=name)
        self.ch, self.rng = ch, random.Random(seed)
        self.error = None

    def run(self):
        try:
            while not self.ch.stop.is_set():
                if self.one() is False:
                    time.sleep(0.05)
        except BaseException as e:  # noqa: BLE001 (reported)
            import traceback
            self.error = "%s: %r\n%s" % (self.name, e, traceback.format_exc())
            self.ch.problem(self.error)


class MsetWorker(Worker):
    NKEYS = 200

    def __init__(self, ch, name, seed):
        super().__init__(ch, name, seed)
        self.tag = "{%s}" % name
        self.keys = ["%s:m%d" % (self.tag, i) for i in range(self.NKEYS)]
        self.conn = Conn(ch, self.keys[0])
        self.round = 0
        self.acked = 0        # last acknowledged round
        self.sent = set()     # rounds sent (maybe applied)
        self.checked = 0

    def value(self, rnd, i):
        return b"r%d-%d-" % (rnd, i) + b"v" * (1000 + (rnd * 7919 + i) % 3000)

    @staticmethod
    def round_of(v):
        return int(v.split(b"-", 1)[0][1:])

    def one(self):
        cmds, rounds = [], []
        for _ in range(self.rng.randint(1, 4)):
            self.round += 1
            rounds.append(self.round)
            self.sent.add(self.round)
            args = ["MSET"]
            for i, k in enumerate(self.keys):
                args += [k, self.value(self.round, i)]
            cmds.append(args)
            cmds.append(["MGET"] + self.keys)
        floor = self.acked
        reps = self.conn.pipeline("mset", cmds)
        if reps is None:
            return False
        ok = True
        for j, rnd in enumerate(rounds):
            r1, r2 = reps[2 * j], reps[2 * j + 1]
            if r1 == "OK":
                self.acked = max(self.acked, rnd)
                floor = max(floor, rnd)
            elif not isinstance(r1, RespError):
                self.ch.problem("%s: MSET answered %r" % (self.name, r1))
            else:
                ok = False
            if isinstance(r2, list):
                self.check_mget(r2, floor, rnd)
            else:
                ok = False
        return ok

    def check_mget(self, vals, floor, upto):
        if all(v is None for v in vals) and floor == 0:
            return
        rs = {None if v is None else self.round_of(v) for v in vals}
        if rs == {None}:
            self.ch.problem("%s: MGET (port %s) saw none of the keys; round %d was acknowledged "
                            "before it" % (self.name, self.conn.port, floor))
            return
        if len(rs) != 1 or None in rs:
            self.ch.problem("%s: MGET saw a mix of MSETs: rounds %s" % (self.name, sorted(
                rs, key=lambda x: -1 if x is None else x)[:6]))
            return
        rnd = rs.pop()
        if rnd < floor or rnd > upto or rnd not in self.sent:
            self.ch.problem("%s: MGET saw round %d; acknowledged before it: %d, sent up to %d" % (
                self.name, rnd, floor, upto))
        for i, v in enumerate(vals):
            if v != self.value(rnd, i):
                self.ch.problem("%s: key %d of round %d has the wrong bytes (%d long)" % (
                    self.name, i, rnd, len(v)))
                break
        self.checked += 1

    def verify(self):
        for _ in range(100):
            reps = self.conn.pipeline("mset-final", [["MGET"] + self.keys])
            if reps and isinstance(reps[0], list):
                self.check_mget(reps[0], self.acked, self.round)
                return "%s: %d rounds acknowledged of %d, %d MGETs checked" % (
                    self.name, self.acked, self.round, self.checked)
            time.sleep(0.2)
        self.ch.problem("%s: final MGET never answered" % self.name)


class ListWorkers:
    """A producer and a consumer on one list."""

    def __init__(self, ch, name, seed):
        self.ch, self.name = ch, name
        self.key = "{%s}:q" % name
        self.n = 0
        self.pushed_ok, self.pushed_maybe = set(), set()
        self.popped = {}            # item -> times
        self.lost_pops = 0          # BLPOPs whose answer was lost
        outer = self

        class Producer(Worker):
            def one(self):
                outer.n += 1
                item = b"i%d" % outer.n
                outer.pushed_maybe.add(item)
                reps = outer.pconn.pipeline("rpush", [["RPUSH", outer.key, item]])
                if reps is None:
                    return False
                if isinstance(reps[0], int):
                    outer.pushed_ok.add(item)
                    time.sleep(0.005)
                    return True
                if not_run(reps[0]):
                    outer.pushed_maybe.discard(item)
                return False

        class Consumer(Worker):
            def one(self):
                reps = outer.cconn.pipeline("blpop", [["BLPOP", outer.key, self.rng.choice("01")]])
                if reps is None:
                    outer.lost_pops += 1
                    return False
                r = reps[0]
                if isinstance(r, list):
                    outer.popped[r[1]] = outer.popped.get(r[1], 0) + 1
                    if outer.popped[r[1]] > 1:
                        outer.ch.problem("%s: %r popped twice" % (outer.name, r[1]))
                    return True
                if r is None:
                    return True
                if not not_run(r):
                    outer.lost_pops += 1
                return False

        self.pconn = Conn(ch, self.key)
        self.cconn = Conn(ch, self.key)
        self.threads = [Producer(ch, name + "-push", seed), Consumer(ch, name + "-pop", seed + 1)]

    def verify(self):
        left = final_read(self.ch, self.name, self.key, "list-final", ["LRANGE", self.key, "0", "-1"])
        if left is None:
            return
        back = set(left) & set(self.popped)
        if back:
            self.ch.problem("%s: %d items whose pop was answered are in the list again: %s" % (
                self.name, len(back), sorted(back)[:5]))
        missing = self.pushed_ok - set(left) - set(self.popped)
        if len(missing) > self.lost_pops:
            self.ch.problem("%s: %d acknowledged pushes neither popped nor in the list (%d pops "
                            "lost their answer): %s" % (self.name, len(missing), self.lost_pops,
                                                        sorted(missing)[:5]))
        strange = set(left) - self.pushed_maybe
        if strange:
            self.ch.problem("%s: items never pushed in the list: %s" % (self.name, sorted(strange)[:5]))
        return "%s: %d pushes acknowledged, %d popped, %d left, %d pops lost" % (
            self.name, len(self.pushed_ok), len(self.popped), len(left), self.lost_pops)


class StreamWorkers:
    def __init__(self, ch, name, seed):
        self.ch, self.name = ch, name
        self.key = "{%s}:s" % name
        self.acked, self.seen = [], []
        self.n = 0
        outer = self

        class Producer(Worker):
            def one(self):
                outer.n += 1
                reps = outer.pconn.pipeline("xadd", [["XADD", outer.key, "*", "n", str(outer.n)]])
                if reps and isinstance(reps[0], bytes):
                    outer.acked.append(reps[0])
                    time.sleep(0.005)
                    return True
                return False

        class Consumer(Worker):
            def one(self):
                last = outer.seen[-1] if outer.seen else b"0-0"
                reps = outer.cconn.pipeline("xread", [["XREAD", "COUNT", "100", "BLOCK", self.rng.choice(["0", "1000"]),
                                                       "STREAMS", outer.key, last]])
                if reps is None:
                    return False
                r = reps[0]
                if isinstance(r, list):
                    for eid, _ in r[0][1]:
                        if outer.seen and sid(eid) <= sid(outer.seen[-1]):
                            outer.ch.problem("%s: XREAD went back: %r after %r" % (
                                outer.name, eid, outer.seen[-1]))
                        outer.seen.append(eid)
                    return True
                return r is None

        self.pconn = Conn(ch, self.key)
        self.cconn = Conn(ch, self.key)
        self.threads = [Producer(ch, name + "-xadd", seed), Consumer(ch, name + "-xread", seed + 1)]

    def verify(self):
        entries = final_read(self.ch, self.name, self.key, "stream-final", ["XRANGE", self.key, "-", "+"])
        if entries is None:
            return
        final = {e[0] for e in entries}
        lost = [e for e in self.acked if e not in final]
        if lost:
            self.ch.problem("%s: %d acknowledged XADDs lost: %s" % (self.name, len(lost), lost[:5]))
        gone = [e for e in self.seen if e not in final]
        if gone:
            self.ch.problem("%s: %d entries XREAD saw are gone: %s" % (self.name, len(gone), gone[:5]))
        return "%s: %d XADDs acknowledged, %d read, %d in the stream" % (
            self.name, len(self.acked), len(self.seen), len(final))


def sid(eid):
    a, b = eid.split(b"-")
    return int(a), int(b)


class MultiWorker(Worker):
    def __init__(self, ch, name, seed):
        super().__init__(ch, name, seed)
        self.ka, self.kb = "{%s}:a" % name, "{%s}:b" % name
        self.conn = Conn(ch, self.ka)
        self.ok = self.sent = 0

    def one(self):
        self.sent += 1
        reps = self.conn.pipeline("multi", [["MULTI"], ["INCR", self.ka], ["INCR", self.kb],
                                            ["EXEC"]])
        if reps is None:
            return False
        ex = reps[3]
        if isinstance(ex, list) and len(ex) == 2 and all(isinstance(x, int) for x in ex):
            self.ok += 1
            if ex[0] != ex[1]:
                self.ch.problem("%s: EXEC answered %r" % (self.name, ex))
            return True
        if any(not_run(r) for r in reps):
            self.sent -= 1
        return False

    def verify(self):
        c = Conn(self.ch, self.ka)
        for _ in range(100):
            reps = c.pipeline("multi-final", [["MGET", self.ka, self.kb]])
            if reps and isinstance(reps[0], list):
                a, b = (int(x or 0) for x in reps[0])
                if a != b or not self.ok <= a <= self.sent:
                    self.ch.problem("%s: a=%d b=%d, acknowledged %d, sent %d" % (
                        self.name, a, b, self.ok, self.sent))
                c.drop()
                return "%s: %d transactions acknowledged, counters at %d" % (self.name, self.ok, a)
            time.sleep(0.2)
        c.drop()
        self.ch.problem("%s: final MGET never answered" % self.name)


class PubSubWorker(Worker):
    """A subscriber on a node that pings in subscribed mode; a publisher
    beside it. Messages are not durable; the subscriber must stay live."""

    def __init__(self, ch, name, seed):
        super().__init__(ch, name, seed)
        self.sub = None
        self.pings = 0

    def one(self):
        nodes = tf.alive_nodes(self.ch.cl)
        if not nodes:
            return False
        t0 = time.monotonic()
        try:
            if self.sub is None:
                self.sub = RawConn(self.rng.choice(nodes).port, timeout=self.ch.stuck + 30)
                self.sub.send_command("SUBSCRIBE", "chaos")
                self.sub.read_reply()
            self.sub.send_command("PING")
            while True:
                r = self.sub.read_reply()
                if isinstance(r, list) and r and r[0] in (b"pong", "pong"):
                    break
            self.pings += 1
        except CONN_ERRORS:
            if self.sub is not None:
                self.sub.close()
            self.sub = None
            self.ch.timed("subscribe-ping", t0)
            return False
        self.ch.timed("subscribe-ping", t0)
        try:
            p = RespClient(self.rng.choice(nodes).port, timeout=5)
            p.call("PUBLISH", "chaos", "m")
            p.close()
        except CONN_ERRORS:
            pass
        time.sleep(0.1)
        return True

    def verify(self):
        return "%s: %d pings answered while subscribed" % (self.name, self.pings)


# --------------------------------------------------------------------------
# faults
# --------------------------------------------------------------------------
def fault(cl, managed, rng, kinds, log):
    i = rng.randrange(3)
    nd = cl.nodes[i]
    kind = rng.choice(kinds)
    log("fault: %s node%d" % (kind, i))
    if kind == "rekill":
        # a second fault while the first node is still catching up: kill
        # and wipe node i, restart it, and right after its start kill
        # another node (or i again)
        cl.kill9(i)
        time.sleep(rng.uniform(0.05, 0.5))
        for name in os.listdir(nd.dir):
            if name.endswith(".pool"):
                os.unlink(os.path.join(nd.dir, name))
        cl.restart(i)
        time.sleep(rng.uniform(0.0, 1.0))
        j = rng.randrange(3)
        log("fault: and kill node%d" % j)
        cl.kill9(j)
        time.sleep(rng.uniform(0.05, 0.5))
        cl.restart(j)
    elif kind == "pause2":
        others = [x for x in cl.nodes if x is not nd]
        for x in others:
            stop_process(x.pid)
            x.stopped = True
        time.sleep(rng.uniform(0.3, 2.0))
        for x in others:
            os.kill(x.pid, signal.SIGCONT)
            x.stopped = False
    elif kind == "pause":
        stop_process(nd.pid)
        nd.stopped = True
        time.sleep(rng.uniform(0.5, 4.0))
        os.kill(nd.pid, signal.SIGCONT)
        nd.stopped = False
    else:
        cl.kill9(i)
        time.sleep(rng.uniform(0.05, 1.0))
        if kind == "wipe":
            for name in os.listdir(nd.dir):
                if name.endswith(".pool"):
                    os.unlink(os.path.join(nd.dir, name))
        cl.restart(i)
    return kind


def sanitizer_reports(cl):
    out = []
    for nd in cl.nodes:
        for name in ("server.log", "stdout.log"):
            p = os.path.join(nd.dir, name)
            try:
                with open(p, errors="replace") as f:
                    text = f.read()
            except OSError:
                continue
            for pat in ("AddressSanitizer", "runtime error:", "LeakSanitizer", "Assertion",
                        "SIGSEGV", "SIGABRT", "panic"):
                if pat in text:
                    at = text.index(pat)
                    out.append("%s %s: %s" % (nd.name, name, text[max(0, at - 200):at + 1500]))
                    break
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=("managed", "static"), default="managed")
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--pool-size", default="128mb")
    ap.add_argument("--pressure", action="store_true")
    ap.add_argument("--stuck", type=float, default=30.0)
    ap.add_argument("--kinds", default="kill,wipe,pause")
    ap.add_argument("--gap", type=float, default=3.0, help="seconds of load between faults")
    ap.add_argument("--repl-timeout", type=int, default=3000)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    managed = args.mode == "managed"
    if not managed:     # the checker's final reads wait for health this way
        tf.wait_healthy = lambda cl, n=3, timeout=60.0: wait_whole(cl, False, timeout)
    t_start = time.monotonic()

    def log(msg):
        print("chaos %6.1f: %s" % (time.monotonic() - t_start, msg), flush=True)
    log("%s cluster, pool %s, seed %d, %s, server %s" % (
        args.mode, args.pool_size, args.seed, "pressure" if args.pressure else "no pressure",
        os.environ.get("ROWAN_SERVER")))
    opts = dict(tf.OPTS) if managed else {}
    opts.update({"pool-size": args.pool_size, "replication-timeout": args.repl_timeout})
    cl = Cluster(3, 3, options=opts, zookeeper=managed)
    log("cluster in %s" % cl.dir)
    pressure = Pressure(cl.dir)
    ch = Chaos(cl, args.stuck)
    rc = 1
    try:
        wait_whole(cl, managed)
        if args.pressure:
            pressure.start()
        checker = tf.Checker(cl, nclients=3, seed=args.seed % 100000, prefix="ck")
        msets = [MsetWorker(ch, "mset%d" % j, args.seed + j) for j in range(2)]
        lists = ListWorkers(ch, "list0", args.seed + 10)
        streams = StreamWorkers(ch, "stream0", args.seed + 20)
        multi = MultiWorker(ch, "multi0", args.seed + 30)
        pubsub = PubSubWorker(ch, "pubsub0", args.seed + 40)
        threads = msets + lists.threads + streams.threads + [multi, pubsub]
        checker.start()
        for t in threads:
            t.start()
        peak = {}
        faults = {}
        deadline = time.monotonic() + args.seconds
        while time.monotonic() < deadline:
            time.sleep(args.gap)
            for nd in cl.nodes:
                if nd.alive():
                    peak[nd.name] = max(peak.get(nd.name, 0), anon_kb(nd.proc.pid))
            k = fault(cl, managed, rng, args.kinds.split(","), log)
            faults[k] = faults.get(k, 0) + 1
            try:
                wait_whole(cl, managed, timeout=120.0)
            except AssertionError as e:
                ch.problem("after %s: %s" % (k, e))
                break
            log("whole again; acks %d; slowest %s" % (checker.acks(), {
                n: "%.1f" % v[0] for n, v in ch.slowest.items()}))
        log("stopping the clients")
        ch.stop.set()
        checker.stop()
        for t in (lists.threads[0], streams.threads[0]):
            t.join(args.stuck + 60)
        # the producers are done: one last element each, for a consumer
        # blocked with no timeout (BLPOP 0, XREAD BLOCK 0)
        lists.pushed_maybe.add(b"wake")
        for key, cmd in ((lists.key, ["RPUSH", lists.key, "wake"]),
                         (streams.key, ["XADD", streams.key, "*", "n", "wake"])):
            w = Conn(ch, key)
            for _ in range(50):
                reps = w.pipeline("wake", [cmd])
                if reps and not isinstance(reps[0], RespError):
                    break
                time.sleep(0.2)
            w.drop()
        for t in threads:
            t.join(args.stuck + 60)
            if t.is_alive():
                ch.problem("client %s stuck at the end" % t.name)
        wait_whole(cl, managed)
        checker.final_reads()
        bad = checker.violations()
        if bad:
            ch.problem("checker: %d violations:\n  %s" % (len(bad), "\n  ".join(bad[:10])))
        nacks = sum(1 for o in checker.hist if o[0] == "w" and o[5] == "ok")
        log("checker: %d acknowledged SETs" % nacks)
        for w in msets + [lists, streams, multi, pubsub]:
            s = w.verify()
            if s:
                log(s)
        try:
            tf.wait_digests_agree(cl.nodes, timeout=60.0)
        except AssertionError as e:
            ch.problem("digests: %s %s" % (e, [tf.digests(nd) for nd in cl.nodes]))
        for nd in cl.nodes:
            log("%s: anon rss now %d MB, peak seen %d MB" % (
                nd.name, anon_kb(nd.proc.pid) // 1024, peak.get(nd.name, 0) // 1024))
        log("faults: %s; slowest answers: %s" % (faults, {
            n: "%.1f s at %s" % v for n, v in ch.slowest.items()}))
        rc = 1 if ch.problems else 0
    except AssertionError as e:
        ch.problem("%s" % e)
    finally:
        pressure.stop()
        ch.stop.set()
        reps = sanitizer_reports(cl)
        for r in reps:
            ch.problem("sanitizer/crash report: %s" % r)
        if ch.problems:
            os.environ["ROWAN_TEST_KEEP"] = "1"
            log("FAILED, %d problems; cluster dir kept: %s" % (len(ch.problems), cl.dir))
            rc = 1
        try:
            cl.cleanup()
        except BaseException as e:  # noqa: BLE001
            log("cleanup: %r" % e)
    log("ok" if rc == 0 else "FAILED")
    return rc


if __name__ == "__main__":
    sys.exit(main())
