"""rowan-bench against real servers.

The driver's numbers are only worth something if it does what it reports.
These tests run it for short, count-bound runs against a real redis-server
and a real rowan-server (each started here on a free port in a temp dir and
stopped afterwards) and check its reported operation and command counts
against the servers' own INFO commandstats (after CONFIG RESETSTAT), plus
the data it leaves behind, the open loop's rate, the --wait mode, the
cluster routing (a three-node redis cluster: CLUSTER SLOTS, -MOVED, counts
summed over the nodes) and its handling of bad options.

The rowan-server part uses $ROWAN_SERVER (default /work/main/src/rowan-server)
and is skipped only when that binary does not exist. The driver is
$ROWAN_BENCH (default utils/rowan-bench in this repository).

Fixtures are private to this file (names prefixed bench_) so they never
collide with conftest.py's.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import pytest
import redis

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BENCH = os.environ.get("ROWAN_BENCH") or os.path.join(REPO, "utils", "rowan-bench")
ROWAN = os.environ.get("ROWAN_SERVER") or "/work/main/src/rowan-server"
START_TIMEOUT = 10.0
RUN_TIMEOUT = 90


def _bindable(port):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def _free_port(cluster=False):
    """A free port; for a cluster node also with port+10000 free (its bus)
    and, as Redis requires, at most 55535."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if not cluster or (port <= 55535 and _bindable(port + 10000)):
            return port


class BenchServer:
    """One server process on a free port in its own temp dir."""

    def __init__(self, kind, argv_fn, env=None, cluster=False):
        self.kind = kind
        self.dir = tempfile.mkdtemp(prefix="rowan-bench-it-")
        self.port = _free_port(cluster)
        self.argv = argv_fn(self.port, self.dir)
        self.log = open(os.path.join(self.dir, "out.log"), "wb")
        self.proc = subprocess.Popen(self.argv, stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, cwd=self.dir,
                                     env=dict(os.environ, **(env or {})))
        try:
            self._wait_ready()
        except BaseException:
            self.stop()     # never leave a process or a temp dir behind
            raise

    def _wait_ready(self):
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("%s exited early:\n%s" % (self.kind, self.log_tail()))
            try:
                if self.client().ping():
                    return
            except redis.RedisError:
                time.sleep(0.05)
        raise RuntimeError("%s did not answer PING:\n%s" % (self.kind, self.log_tail()))

    def client(self):
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=10,
                           decode_responses=True)

    def log_tail(self, n=40):
        try:
            with open(os.path.join(self.dir, "out.log"), "rb") as f:
                return "\n".join(f.read().decode("utf-8", "replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    def stop(self):
        if self.dir is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir = None


def _redis_argv(extra=()):
    def argv(port, d):
        return ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", d,
                "--save", "", "--appendonly", "no"] + list(extra)
    return argv


def _rowan_argv(port, d):
    return [ROWAN, "--port", str(port), "--dir", d, "--pool-size", "256mb", "--workers", "2"]


def _start(kind):
    if kind == "redis":
        return BenchServer("redis", _redis_argv())
    if not os.path.exists(ROWAN):
        pytest.skip("no rowan-server binary at %s yet (build it with make, or set "
                    "ROWAN_SERVER)" % ROWAN)
    return BenchServer("rowan", _rowan_argv)


@pytest.fixture
def bench_redis():
    srv = _start("redis")
    yield srv
    srv.stop()


@pytest.fixture(params=["redis", "rowan"])
def bench_server(request):
    srv = _start(request.param)
    yield srv
    srv.stop()


@pytest.fixture(scope="module", autouse=True)
def bench_binary():
    if not os.access(BENCH, os.X_OK):
        pytest.fail("no rowan-bench at %s: build it with make (or set ROWAN_BENCH)" % BENCH)


def bench(port, *args, expect_rc=0):
    """Run rowan-bench with --json and return the parsed report."""
    cmd = [BENCH, "--port", str(port), "--json", "--quiet"] + [str(a) for a in args]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert p.returncode == expect_rc, "%s -> rc %d\nstdout:\n%s\nstderr:\n%s" % (
        " ".join(cmd), p.returncode, p.stdout, p.stderr)
    return json.loads(p.stdout)


def commandstats(port):
    """{command: calls} from INFO commandstats (subcommands as 'cluster|slots')."""
    info = redis.Redis(host="127.0.0.1", port=port, socket_timeout=10).info("commandstats")
    return {k[len("cmdstat_"):]: v["calls"] for k, v in info.items()
            if k.startswith("cmdstat_")}


def add_counts(total, report):
    for cmd, n in report["commands"].items():
        total[cmd] = total.get(cmd, 0) + n


def assert_counts_match(reported, stats, cmds):
    for cmd in cmds:
        assert reported.get(cmd, 0) == stats.get(cmd, 0), \
            "%s: rowan-bench reported %d, the server counted %d (all: %r vs %r)" % (
                cmd, reported.get(cmd, 0), stats.get(cmd, 0), reported, stats)


# --------------------------------------------------------------------------
# kv model: both servers
# --------------------------------------------------------------------------
def test_kv_counts_match_commandstats(bench_server):
    """Load, then YCSB A, B, C and F: every reported command count equals the
    server's commandstats, and every operation completed without error."""
    port = bench_server.port
    c = bench_server.client()
    c.execute_command("CONFIG", "RESETSTAT")
    total = {}
    rep = bench(port, "--workload", "load", "--records", 2000, "--connections", 8,
                "--pipeline", 4)
    assert rep["ops"] == 2000 and rep["failed"] == 0, rep
    assert rep["commands"] == {"set": 2000}
    assert rep["operations"]["INSERT"]["count"] == 2000
    add_counts(total, rep)
    assert c.dbsize() == 2000
    for wl in ("a", "b", "c", "f"):
        rep = bench(port, "--workload", wl, "--records", 2000, "--operations", 3000,
                    "--connections", 8, "--pipeline", 4, "--seed", 7)
        assert rep["ops"] == 3000, (wl, rep)
        assert rep["failed"] == 0 and rep["errors"] == {}, (wl, rep)
        add_counts(total, rep)
    # Reads: A, B, C and F's reads and RMW's read step; writes: updates + RMW.
    assert total["get"] > 3000 * 2 and total["set"] > 2000
    assert_counts_match(total, commandstats(port), ("get", "set"))


def test_kv_values_follow_the_distribution(bench_redis):
    """Loaded values average the ZippyDB mean; fixed sizes are exact."""
    port = bench_redis.port
    c = bench_redis.client()
    bench(port, "--workload", "load", "--records", 4000, "--value-size", "zippydb")
    pipe = c.pipeline(transaction=False)
    for k in c.scan_iter(count=1000):
        pipe.strlen(k)
    sizes = pipe.execute()
    assert len(sizes) == 4000
    mean = sum(sizes) / len(sizes)
    assert abs(mean - 90.8) < 90.8 * 0.1, mean
    assert min(sizes) >= 1
    c.flushall()
    rep = bench(port, "--workload", "load", "--records", 300, "--value-size", 64,
                "--key-size", 16)
    assert rep["value_size"] == {"dist": "64", "mean": 64.0}
    keys = list(c.scan_iter(count=1000))
    assert len(keys) == 300 and all(len(k) == 16 and k.startswith("user") for k in keys)
    assert {c.strlen(k) for k in keys} == {64}


# --------------------------------------------------------------------------
# ycsb-redis model, WAIT, threads, duration, open loop: redis-server
# --------------------------------------------------------------------------
def test_ycsb_redis_model(bench_redis):
    """YCSB's Redis data model: HMSET + ZADD _indices per record, HGETALL
    reads, ZRANGEBYSCORE + HGETALL scans, inserts during D and E."""
    port = bench_redis.port
    c = bench_redis.client()
    c.execute_command("CONFIG", "RESETSTAT")
    total = {}
    rep = bench(port, "--workload", "load", "--records", 1000, "--model", "ycsb-redis",
                "--fields", 5, "--value-size", 100)
    assert rep["commands"] == {"hmset": 1000, "zadd": 1000}, rep
    add_counts(total, rep)
    assert c.zcard("_indices") == 1000
    inserts = []
    for wl in ("a", "d", "e", "f"):
        rep = bench(port, "--workload", wl, "--records", 1000, "--model", "ycsb-redis",
                    "--fields", 5, "--value-size", 100, "--operations", 1000,
                    "--scan-length", 20,
                    "--connections", 4, "--pipeline", 2)
        assert rep["ops"] == 1000 and rep["failed"] == 0, (wl, rep)
        inserts.append(rep["operations"].get("INSERT", {}).get("count", 0))
        add_counts(total, rep)
    # Every run inserts from key number --records on, as YCSB's insertstart.
    assert max(inserts) > 0 and c.zcard("_indices") == 1000 + max(inserts)
    assert total["zrangebyscore"] > 0
    assert_counts_match(total, commandstats(port),
                        ("hmset", "zadd", "hgetall", "zrangebyscore"))
    # A loaded record: every field, the drawn size split over them.
    rec = c.hgetall(next(k for k in c.scan_iter(match="user*")))
    assert sorted(rec) == ["field%d" % i for i in range(5)]
    assert sum(len(v) for v in rec.values()) == 100


def test_custom_mix_and_read_one_field(bench_redis):
    port = bench_redis.port
    bench(port, "--workload", "load", "--records", 500, "--model", "ycsb-redis")
    bench_redis.client().execute_command("CONFIG", "RESETSTAT")
    rep = bench(port, "--workload", "custom", "--mix", "read=2,update=1,rmw=1",
                "--records", 500, "--model", "ycsb-redis", "--read-all-fields", "no",
                "--operations", 2000, "--distribution", "uniform")
    assert rep["distribution"] == "uniform"
    assert set(rep["mix"]) == {"READ", "UPDATE", "RMW"}
    assert rep["failed"] == 0 and "hgetall" not in rep["commands"]
    assert_counts_match(rep["commands"], commandstats(port), ("hmget", "hmset"))


def test_wait_after_writes_and_threads(bench_redis):
    port = bench_redis.port
    bench(port, "--workload", "load", "--records", 500)
    bench_redis.client().execute_command("CONFIG", "RESETSTAT")
    rep = bench(port, "--workload", "a", "--records", 500, "--operations", 2000,
                "--wait", 0, "--threads", 2, "--connections", 6, "--pipeline", 3)
    assert rep["ops"] == 2000 and rep["threads"] == 2 and rep["wait"] == 0
    assert rep["failed"] == 0, rep
    # Every SET is followed by a WAIT on its connection.
    assert rep["commands"]["wait"] == rep["commands"]["set"]
    assert_counts_match(rep["commands"], commandstats(port), ("get", "set", "wait"))


def test_duration_run_and_progress(bench_redis):
    port = bench_redis.port
    bench(port, "--workload", "load", "--records", 100)
    rep = bench(port, "--workload", "c", "--records", 100, "--duration", 1.5,
                "--connections", 2)
    assert 1.4 <= rep["runtime_s"] < 5, rep["runtime_s"]
    assert rep["ops"] > 100
    p = subprocess.run([BENCH, "--port", str(port), "--workload", "c", "--records", "100",
                        "--duration", "2.2", "--progress", "--connections", "2"],
                       capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert p.returncode == 0
    lines = [ln for ln in p.stderr.splitlines() if "ops/s now" in ln]
    assert len(lines) >= 2, p.stderr
    assert "p99.9" in p.stdout and "READ" in p.stdout


def test_open_loop_holds_the_rate(bench_redis):
    port = bench_redis.port
    rep = bench(port, "--workload", "b", "--records", 200, "--rate", 2000,
                "--duration", 1.5, "--connections", 4)
    assert rep["mode"] == "open" and rep["target_rate"] == 2000
    # Every intended send in the 1.5 s is either made or reported missed (a
    # starved machine may leave a backlog at the end); none is invented.
    due = 2000 * 1.5
    assert due * 0.98 <= rep["ops"] + rep["missed"] <= due + 2, rep
    assert rep["ops"] >= due * 0.5, rep
    assert rep["send_lag"]["count"] == rep["ops"]


def test_latencies_are_ordered(bench_redis):
    rep = bench(bench_redis.port, "--workload", "a", "--records", 200,
                "--operations", 3000)
    for name, op in rep["operations"].items():
        v = [op[k] for k in ("p50_us", "p90_us", "p99_us", "p999_us", "max_us")]
        assert v == sorted(v) and v[0] > 0, (name, op)
        assert op["count"] > 0


# --------------------------------------------------------------------------
# cluster: three redis-server nodes
# --------------------------------------------------------------------------
@pytest.fixture
def bench_cluster():
    nodes = []
    try:
        for _ in range(3):
            nodes.append(BenchServer("redis", _redis_argv(
                ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]),
                cluster=True))
        # Assign a third of the slots to each node, then introduce them.
        third = 16384 // 3
        ranges = [(0, third - 1), (third, 2 * third - 1), (2 * third, 16383)]
        for srv, (lo, hi) in zip(nodes, ranges):
            srv.client().execute_command("CLUSTER", "ADDSLOTSRANGE", lo, hi)
        for srv in nodes[1:]:
            nodes[0].client().execute_command("CLUSTER", "MEET", "127.0.0.1", srv.port)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if all("cluster_state:ok" in str(n.client().execute_command("CLUSTER", "INFO"))
                   for n in nodes):
                break
            time.sleep(0.1)
        else:
            pytest.fail("the test cluster did not reach cluster_state:ok")
        yield nodes
    finally:
        for n in nodes:
            n.stop()


def test_cluster_routing(bench_cluster):
    """CLUSTER SLOTS routing: each node gets only its keys (no redirects),
    and the counts summed over the nodes equal the reported ones. Then, told
    the seed is standalone, the driver still completes by following -MOVED."""
    nodes = bench_cluster
    for n in nodes:
        n.client().execute_command("CONFIG", "RESETSTAT")
    total = {}
    rep = bench(nodes[1].port, "--workload", "load", "--records", 1500)
    assert rep["target"]["cluster"] is True and rep["target"]["nodes"] == 3
    assert rep["redirects"] == {"moved": 0, "ask": 0} and rep["failed"] == 0
    add_counts(total, rep)
    rep = bench(nodes[0].port, "--workload", "a", "--records", 1500, "--operations", 3000,
                "--pipeline", 4)
    assert rep["redirects"]["moved"] == 0 and rep["failed"] == 0
    add_counts(total, rep)
    rep = bench(nodes[2].port, "--cluster", "no", "--workload", "c", "--records", 1500,
                "--operations", 2000)
    assert rep["redirects"]["moved"] > 0 and rep["failed"] == 0, rep
    add_counts(total, rep)
    summed = {}
    for n in nodes:
        for cmd, calls in commandstats(n.port).items():
            summed[cmd] = summed.get(cmd, 0) + calls
        assert n.client().dbsize() > 0
    assert sum(n.client().dbsize() for n in nodes) == 1500
    assert_counts_match(total, summed, ("get", "set"))


# --------------------------------------------------------------------------
# the command line
# --------------------------------------------------------------------------
@pytest.mark.parametrize("args,msg", [
    (["--workload", "x"], "unknown workload"),
    (["--workload", "e"], "ycsb-redis"),
    (["--workload", "custom"], "--mix"),
    (["--workload", "a", "--value-size", "gigantic"], "value size"),
    (["--workload", "a", "--zipf-constant", "1.5"], "zipf"),
    (["--workload", "a", "--threads", "4", "--connections", "2"], "threads"),
    (["--records", "10"], "--workload"),
])
def test_bad_options(args, msg):
    p = subprocess.run([BENCH] + args, capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and msg in p.stderr, (p.returncode, p.stderr)


def test_unreachable_server():
    p = subprocess.run([BENCH, "--port", str(_free_port()), "--workload", "c"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "cannot connect" in p.stderr, p.stderr
