"""Operations (issue 10, items 10-13): what an operator trips over first.

- a second server on a used port (client or replication) fails with
  redis-server's "Address already in use" lines and exit status 1, whatever
  its dir, before it creates a pool;
- daemonize / pidfile / supervised (systemd readiness through a real
  NOTIFY_SOCKET datagram socket);
- --help / -h, a bad bind address, the pool-size minimum, "Can't create
  dir" with its reason, a new pool's size and zeroes;
- -LOADING while a large pool is recovered, INFO loading fields, connections
  made during loading served afterwards, SIGTERM during loading; the replies
  are compared with a loading redis-server's.

Every server is a real process; the daemonized ones are found by their
pidfile and stopped with SIGTERM."""
import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time

import pytest
import redis

from conftest import (SANITIZER_MARKERS, RespClient, RespError, Server, _PidProcess,
                      encode_command, free_port, parse_info, wait_for)

pytestmark = pytest.mark.rowan_only("rowan-server's process management and startup")

BINARY = os.environ.get("ROWAN_SERVER", "/work/main/src/rowan-server")
RUN_TIMEOUT = 60
LOADING = RespError("LOADING Redis is loading the dataset in memory")
SEG = 4 << 20


def run(argv, env=None, timeout=RUN_TIMEOUT):
    r = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout,
                       stdin=subprocess.DEVNULL)
    for m in SANITIZER_MARKERS:       # a sanitizer build's report fails the test
        assert m not in r.stdout + r.stderr, r.stdout + r.stderr
    return r


def rowan_argv(port, d, *extra):
    return [BINARY, "--port", str(port), "--bind", "127.0.0.1", "--dir", d,
            "--pool-size", "64mb", "--workers", "2"] + list(extra)


def listen_lines(addr, port):
    return ("Could not create server TCP listening socket %s:%d: bind: Address already in use"
            % (addr, port), "Failed listening on port %d (tcp), aborting." % port)


@pytest.fixture
def tmp(request):
    d = tempfile.mkdtemp(prefix="rowan-ops-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def redis_second_start_output(port, d):
    """What redis-server itself prints when its port is taken."""
    r = run(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", d,
             "--save", ""])
    return r.returncode, r.stdout + r.stderr


# ------------------------------------------------------------ item 10: port in use
@pytest.mark.parametrize("same_dir", [False, True])
def test_second_server_on_the_same_port_fails(server_factory, tmp, same_dir):
    first = server_factory()
    first.client().set("k", "first")
    d = first.dir if same_dir else os.path.join(tmp, "second")
    pool_before = os.path.getsize(first.pool_path)
    r = run(rowan_argv(first.port, d))
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    for line in listen_lines("127.0.0.1", first.port):
        assert line in out
    assert "Ready to accept" not in out
    if not same_dir:
        assert not os.path.exists(d), "the pool must not be created before the port is bound"
    assert os.path.getsize(first.pool_path) == pool_before
    # every new connection still reaches the first server's data set
    for _ in range(20):
        assert redis.Redis(port=first.port).get("k") == b"first"
    # redis-server prints the same line in the same situation
    rc, rout = redis_second_start_output(first.port, tmp)
    assert rc == 1
    assert listen_lines("127.0.0.1", first.port)[0] in rout


def test_port_taken_by_another_process_of_any_kind(tmp):
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    try:
        r = run(rowan_argv(port, os.path.join(tmp, "d")))
    finally:
        holder.close()
    assert r.returncode == 1
    assert listen_lines("127.0.0.1", port)[0] in r.stdout + r.stderr


def cluster_conf(path, port, repl_port, name="n0"):
    with open(path, "w") as f:
        f.write("cluster-node %s 127.0.0.1 %d %d\ncluster-self %s\nreplicas 1\n" %
                (name, port, repl_port, name))
    return path


def test_second_server_on_the_same_replication_port_fails(tmp):
    repl_port = free_port()
    first = Server("rowan", binary=BINARY)
    conf = cluster_conf(os.path.join(tmp, "a.conf"), first.port, repl_port)
    first.argv = lambda: [BINARY, conf] + rowan_argv(first.port, first.dir)[1:]
    try:
        first.start()
        first.client().set("{a}k", "v")   # a 1-node cluster serves every slot
        # a second node: another client port, another dir, the same replication port
        port2 = free_port()
        d2 = os.path.join(tmp, "second")
        conf2 = cluster_conf(os.path.join(tmp, "b.conf"), port2, repl_port)
        r = run([BINARY, conf2] + rowan_argv(port2, d2)[1:])
        out = r.stdout + r.stderr
        assert r.returncode == 1, out
        assert ("Could not create replication TCP listening socket 127.0.0.1:%d: bind: "
                "Address already in use" % repl_port) in out
        assert not os.path.exists(d2)
        assert first.client().get("{a}k") == b"v"
    finally:
        first.cleanup()


# ------------------------------------------------------------ item 11: daemonize
def read_pid(path):
    with open(path) as f:
        return int(f.read().strip())


def stop_daemon(pid):
    """SIGTERM and wait for the process to be gone (it is not our child)."""
    p = _PidProcess(pid)
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(30)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait(10)


def test_daemonize_pidfile_and_sigterm(tmp):
    port = free_port()
    pidfile = os.path.join(tmp, "rowan.pid")
    log = os.path.join(tmp, "rowan.log")
    r = run(rowan_argv(port, os.path.join(tmp, "d"), "--daemonize", "yes",
                       "--pidfile", pidfile, "--logfile", log))
    assert r.returncode == 0, r.stdout + r.stderr
    # the parent returned: the pidfile is there and the port answers already
    pid = read_pid(pidfile)
    try:
        assert pid != os.getpid()
        assert os.readlink("/proc/%d/fd/1" % pid) == "/dev/null"
        assert os.readlink("/proc/%d/fd/0" % pid) == "/dev/null"
        cl = redis.Redis(port=port, decode_responses=True)
        assert wait_for(lambda: cl.info("persistence")["loading"] == 0)
        assert cl.ping() is True
        assert cl.info("server")["process_id"] == pid
        assert cl.config_get("daemonize") == {"daemonize": "yes"}
        # its own session: not killed with the terminal's process group
        assert os.getsid(pid) == pid
        cl.set("k", "v")
        cl.close()
    finally:
        stop_daemon(pid)
    assert not os.path.exists(pidfile)
    with open(log) as f:
        text = f.read()
    assert "Received SIGTERM scheduling shutdown..." in text
    assert "Removing the pid file." in text
    assert "bye bye" in text


def test_daemonized_startup_error_is_the_exit_status(server_factory, tmp):
    first = server_factory()
    pidfile = os.path.join(tmp, "second.pid")
    r = run(rowan_argv(first.port, os.path.join(tmp, "d"), "--daemonize", "yes",
                       "--pidfile", pidfile))
    assert r.returncode == 1
    assert listen_lines("127.0.0.1", first.port)[0] in r.stdout + r.stderr
    assert not os.path.exists(pidfile)


def test_pidfile_without_daemonize(server_factory, tmp):
    pidfile = os.path.join(tmp, "fg.pid")
    srv = server_factory(extra={"pidfile": pidfile})
    assert read_pid(pidfile) == srv.proc.pid
    assert srv.stop() == (0, False)
    assert not os.path.exists(pidfile)


class NotifySocket:
    """A unix datagram socket standing in for systemd's NOTIFY_SOCKET."""

    def __init__(self, d):
        self.path = os.path.join(d, "notify.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.sock.settimeout(30)
        self.msgs = []

    def until(self, want):
        while True:
            m = self.sock.recv(4096).decode()
            self.msgs.append(m)
            if want in m.split("\n"):
                return m

    def close(self):
        self.sock.close()


@pytest.mark.parametrize("mode", ["systemd", "auto"])
def test_supervised_systemd_notifies(tmp, mode):
    ns = NotifySocket(tmp)
    port = free_port()
    env = dict(os.environ, NOTIFY_SOCKET=ns.path)
    env.pop("UPSTART_JOB", None)
    # daemonize yes is ignored under supervision (Type=notify: no fork)
    proc = subprocess.Popen(rowan_argv(port, os.path.join(tmp, "d"), "--supervised", mode,
                                       "--daemonize", "yes"),
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        ns.until("READY=1")
        assert ns.msgs[0] == "STATUS=Rowan is loading...\n"
        assert "STATUS=Ready to accept connections\n" in ns.msgs
        cl = redis.Redis(port=port)
        assert cl.ping() is True       # READY=1 came once the server serves
        info = cl.info("server")
        assert info["process_supervised"] == "systemd"
        assert info["process_id"] == proc.pid
        cl.close()
        proc.send_signal(signal.SIGTERM)
        ns.until("STOPPING=1")
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        ns.close()


def test_supervised_systemd_without_notify_socket(tmp):
    port = free_port()
    env = dict(os.environ)
    env.pop("NOTIFY_SOCKET", None)
    srv = subprocess.Popen(rowan_argv(port, os.path.join(tmp, "d"), "--supervised", "systemd",
                                      "--logfile", os.path.join(tmp, "log")),
                           env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        cl = redis.Redis(port=port)
        assert wait_for(lambda: _ping(cl), timeout=20)
        assert cl.info("server")["process_supervised"] == "no"
        cl.close()
    finally:
        srv.send_signal(signal.SIGTERM)
        assert srv.wait(30) == 0
    with open(os.path.join(tmp, "log")) as f:
        assert "systemd supervision error: NOTIFY_SOCKET not found!" in f.read()


def _ping(cl):
    try:
        return cl.ping()
    except redis.exceptions.RedisError:
        return False


# ------------------------------------------------------------ item 12: usage, startup
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help(flag):
    r = run([BINARY, flag])
    assert r.returncode == 0
    lines = r.stdout.splitlines()
    assert lines[0] == "Usage: ./rowan-server [/path/to/rowan.conf] [options]"
    assert "       ./rowan-server -h or --help" in lines
    assert "Examples:" in lines
    assert any(l.strip().startswith("./rowan-server --port 7777") for l in lines)
    # laid out like redis-server's usage
    red = run(["redis-server", flag])
    rlines = (red.stdout + red.stderr).splitlines()
    assert rlines[0].startswith("Usage: ./redis-server [/path/to/redis.conf] [options]")
    assert "Examples:" in rlines


@pytest.mark.parametrize("addr,reason", [
    ("1.2.3.999", "Name or service not known"),
    ("192.0.2.1", "bind: Cannot assign requested address"),
])
def test_bad_bind_refused_before_the_pool(tmp, addr, reason):
    port = free_port()
    d = os.path.join(tmp, "d")
    r = run([BINARY, "--port", str(port), "--bind", addr, "--dir", d])
    out = r.stdout + r.stderr
    line = "Could not create server TCP listening socket %s:%d: %s" % (addr, port, reason)
    assert r.returncode == 1, out
    assert line in out
    assert "Failed listening on port %d (tcp), aborting." % port in out
    assert not os.path.exists(d)
    red = run(["redis-server", "--port", str(port), "--bind", addr, "--dir", tmp, "--save", ""])
    assert red.returncode == 1
    assert line in red.stdout + red.stderr


def test_optional_bind_address_is_skipped(server_factory):
    srv = server_factory(extra={"bind": "127.0.0.1 -192.0.2.1"})
    assert srv.client().ping() is True
    assert ("Could not create server TCP listening socket 192.0.2.1:%d: bind: Cannot assign "
            "requested address" % srv.port) in srv.log_text()


MB = 1024 * 1024


def min_pool(workers):
    """db_min_pool_size: a header segment, the reserve (3 + workers) and a
    t-log head per worker, in 4 MiB segments."""
    return (1 + 3 + workers + workers) * SEG


@pytest.mark.parametrize("workers", [1, 2])
def test_pool_size_minimum_is_one_rule(server_factory, tmp, workers):
    need = min_pool(workers)
    d = os.path.join(tmp, "small")
    argv = rowan_argv(free_port(), d, "--workers", str(workers))
    r = run(argv + ["--pool-size", str(need - 1)])
    assert r.returncode == 1
    assert ("pool-size %d is too small: with %d workers a pool needs at least %d bytes (%dmb)"
            % (need - 1, workers, need, need // MB)) in r.stdout + r.stderr
    assert not os.path.exists(d)
    # at the minimum: every worker can write (keys spread over all shards)
    srv = server_factory(extra={"pool-size": "%dmb" % (need // MB), "workers": workers})
    info = srv.info("rowan")["rowan"]
    assert int(info["pool_size"]) == need
    cls = [srv.client() for _ in range(8)]   # connections go to the workers in turn
    for i, cl in enumerate(cls):
        for j in range(50):
            cl.set("k%d:%d" % (i, j), "v" * 1000)
    assert cls[0].dbsize() == 8 * 50
    srv.stop()
    # the same pool with more workers than it has room for is refused
    srv.extra["workers"] = workers + 1
    srv.start(wait=False)
    assert srv.proc.wait(30) == 1
    assert ("has %d bytes: with %d workers a pool needs at least %d bytes"
            % (need, workers + 1, min_pool(workers + 1))) in srv.log_text(since_start=True)


def test_cant_create_dir_says_why(tmp):
    f = os.path.join(tmp, "file")
    open(f, "w").close()
    for d, why in ((os.path.join(f, "sub"), "Not a directory"), (f, "Not a directory")):
        r = run(rowan_argv(free_port(), d))
        assert r.returncode == 1
        assert "Can't create dir '%s': %s" % (d, why) in r.stdout + r.stderr


def test_new_pool_size_and_zeroes(server_factory):
    srv = server_factory(extra={"pool-size": "96mb"})
    cl = srv.client()
    for i in range(2000):
        cl.set("k%d" % i, os.urandom(100))
    srv.stop()
    path = srv.pool_path
    st = os.stat(path)
    assert st.st_size == 96 * 1024 * 1024
    # every block is reserved: a write can never meet ENOSPC later
    assert st.st_blocks * 512 >= st.st_size
    with open(path, "rb") as f:
        sb = f.read(64)
        data_off, nsegs = struct.unpack_from("<QI", sb, 24)
        f.seek(4096)
        meta = f.read(16 * nsegs)
        states = [meta[16 * i] for i in range(nsegs)]
        assert 0 < states.count(0) < nsegs      # some segments used, most free
        zero = bytes(SEG)
        for i, st_ in enumerate(states):
            if st_ == 0:
                f.seek(data_off + i * SEG)
                assert f.read(SEG) == zero, "free segment %d is not all zero" % i
    srv.start()
    assert srv.client().dbsize() == 2000


# ------------------------------------------------------------ item 13: loading
NKEYS = 4000000
BATCH = 1000
# Recovering NKEYS keys takes seconds on a quiet machine, and was seen to take
# over 30 on a loaded one: a start that waits for it waits this long.
RECOVERY_TIMEOUT = 180


def value_of(i):
    return b"v%015d" % i


@pytest.fixture(scope="module")
def big_pool():
    """A 512 MB pool holding NKEYS strings (MSET batches), built once: its
    recovery takes long enough for a client to meet it."""
    d = tempfile.mkdtemp(prefix="rowan-ops-big-")
    srv = Server("rowan", extra={"pool-size": "512mb"}, dir=d, binary=BINARY)
    srv.own_dir = False
    srv.start()
    cl = srv.client()
    pipe = cl.pipeline(transaction=False)
    for i in range(0, NKEYS, BATCH):
        pipe.mset({b"key:%d" % j: value_of(j) for j in range(i, i + BATCH)})
        if (i // BATCH) % 50 == 49:
            pipe.execute()
    pipe.execute()
    assert cl.dbsize() == NKEYS
    srv.stop()
    yield srv
    srv.cleanup()
    shutil.rmtree(d, ignore_errors=True)


def connect_early(port, timeout=30):
    deadline = time.monotonic() + timeout
    while True:
        try:
            return RespClient(port)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.005)


# (command, reply) while loading; the replies are redis-server's (see
# test_loading_replies_match_redis), except WATCH (see LOADING_ONLY_ROWAN).
LOADING_SCRIPT = [
    ("PING",), ("ECHO", "hi"), ("GET", "key:1"), ("SET", "a", "b"), ("DBSIZE",),
    ("SCAN", "0"), ("RANDOMKEY",), ("KEYS", "*"),
    ("MULTI",), ("GET", "key:1"), ("EXEC",),
    ("MULTI",), ("TIME",), ("EXEC",),
    ("SELECT", "1"), ("SELECT", "0"), ("CLIENT", "SETNAME", "early"),
    ("CONFIG", "GET", "databases"), ("FOOBAR",), ("GET",),
    ("PUBLISH", "ch", "m"),
]


def play(c, script):
    out = []
    for cmd in script:
        rep = c.call(*cmd)
        if cmd == ("TIME",) or (cmd[0] == "EXEC" and isinstance(rep, list)):
            rep = "(time)" if cmd == ("TIME",) else len(rep)   # values differ per run
        out.append(rep)
    return out


def test_loading_answers_and_then_serves(big_pool):
    srv = big_pool
    srv.mark_log()
    srv.start(wait=False)
    try:
        c = connect_early(srv.port)
        replies = play(c, LOADING_SCRIPT)
        assert replies[0] == LOADING                    # PING, as in Redis
        assert replies[1] == b"hi"
        assert replies[2:8] == [LOADING] * 6
        assert replies[8:11] == ["OK", LOADING, RespError(
            "EXECABORT Transaction discarded because of previous errors.")]
        assert c.call("WATCH", "key:1") == LOADING      # see LOADING_ONLY_ROWAN
        assert c.call("ROWAN", "DIGEST") == LOADING
        assert c.call("ROWAN", "VERSION") != LOADING
        info = parse_info(c.call("INFO"))
        p = info["persistence"]
        assert p["loading"] == "1"
        total, loaded = int(p["loading_total_bytes"]), int(p["loading_loaded_bytes"])
        assert total > 100 * 1024 * 1024 and 0 <= loaded <= total
        assert 0.0 <= float(p["loading_loaded_perc"]) <= 100.0
        assert int(p["loading_eta_seconds"]) >= 0
        assert abs(int(p["loading_start_time"]) - time.time()) < 600
        assert info["keyspace"] == {}                   # no partial keyspace
        # a second connection made during loading
        c2 = RespClient(srv.port)
        assert c2.call("GET", "key:7") == LOADING
        # loading ends when recovery is done; the same connections go on
        assert wait_for(lambda: parse_info(c.call("INFO", "persistence"))
                        ["persistence"]["loading"] == "0", timeout=120)
        assert c.call("CLIENT", "GETNAME") == b"early"
        assert c.call("DBSIZE") == NKEYS
        assert c.call("GET", "key:1") == value_of(1)
        assert c2.call("GET", "key:7") == value_of(7)
        assert c.call("PING") == "PONG"
        assert "loading_total_bytes" not in parse_info(c.call("INFO", "persistence"))["_all"]
        c.close()
        c2.close()
        log = srv.log_since_mark()
        assert "Recovery: loading " in log
        secs = float(srv.info("rowan")["rowan"]["recovery_seconds"])
        if secs > 1.5:      # progress is logged once a second
            assert "% loaded (" in log
    finally:
        srv.stop()


def test_pipelined_batches_during_loading(big_pool):
    """Pipelined batches while recovery builds the indexes (without shard
    locks): the edge's cache hints for their keys (prefetch.c) must not
    look at the indexes then. Every command gets -LOADING, then the same
    batches are served."""
    srv = big_pool
    srv.start(wait=False)
    try:
        c = connect_early(srv.port)
        batch = b"".join(encode_command("GET", "key:%d" % (i * 7919 % NKEYS)) for i in range(32))
        batches = 0
        while True:
            c.sock.sendall(batch)
            got = [c.read_reply() for _ in range(32)]
            batches += 1
            if got[0] != LOADING:
                break
            assert got == [LOADING] * 32
        assert batches > 1, "recovery was over before the first batch"
        assert wait_for(lambda: parse_info(c.call("INFO", "persistence"))
                        ["persistence"]["loading"] == "0", timeout=120)
        c.sock.sendall(batch)
        assert [c.read_reply() for _ in range(32)] == \
            [value_of(i * 7919 % NKEYS) for i in range(32)]
        c.close()
    finally:
        srv.stop()


def test_sigterm_during_loading(big_pool):
    srv = big_pool
    srv.mark_log()
    srv.start(wait=False)
    c = connect_early(srv.port)
    assert c.call("GET", "key:1") == LOADING
    c.close()
    rc, killed = srv.stop()
    assert (rc, killed) == (0, False)
    log = srv.log_since_mark()
    if "Recovery interrupted" not in log:
        # recovery won the race with the signal: then it was served normally
        assert "Ready to accept connections" in log
    # the pool is intact either way
    try:
        srv.start(timeout=RECOVERY_TIMEOUT)
        assert srv.client().dbsize() == NKEYS
    finally:
        srv.stop()


LOADING_ONLY_ROWAN = """WATCH reads a key's version, which recovery is still
building: Rowan refuses it while loading, Redis (single-threaded) allows it."""


def test_loading_replies_match_redis(big_pool, tmp):
    """The same script against redis-server while it loads an RDB of
    NKEYS keys, and against Rowan while it recovers its pool."""
    port = free_port()
    base = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", tmp,
            "--save", "", "--appendonly", "no", "--logfile", os.path.join(tmp, "redis.log")]
    red = subprocess.Popen(base + ["--enable-debug-command", "yes"])
    try:
        cl = redis.Redis(port=port)
        assert wait_for(lambda: _ping(cl), timeout=20)
        cl.execute_command("DEBUG", "POPULATE", NKEYS, "key", 16)
        cl.save()
        cl.close()
        red.send_signal(signal.SIGTERM)
        red.wait(30)
        red = subprocess.Popen(base)
        c = connect_early(port)
        want = play(c, LOADING_SCRIPT)
        still = parse_info(c.call("INFO", "persistence"))["persistence"]["loading"]
        c.close()
    finally:
        red.send_signal(signal.SIGTERM)
        red.wait(60)
    assert still == "1", "redis-server finished loading during the script: no comparison"
    srv = big_pool
    srv.start(wait=False)
    try:
        c = connect_early(srv.port)
        got = play(c, LOADING_SCRIPT)
        assert parse_info(c.call("INFO", "persistence"))["persistence"]["loading"] == "1"
        c.close()
    finally:
        srv.stop()
    assert got == want
