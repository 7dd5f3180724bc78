"""Fixtures for Rowan's integration tests.

Every test talks to a real server process over loopback TCP:

* target "rowan" (default): the binary in $ROWAN_SERVER
  (default /work/main/src/rowan-server), started as
  ``rowan-server --port P --bind 127.0.0.1 --dir D --pool-size 64mb
  --workers 2 --logfile D/server.log [extra options]``;
* target "redis" (``--target=redis`` or ``ROWAN_TEST_TARGET=redis``): a real
  ``redis-server --save '' --appendonly no --port P --dir D ...``, so the
  command-semantics expectations can be checked against Redis itself.
  Tests marked ``rowan_only`` are skipped there with the reason.

Fixtures:
  target           "rowan" or "redis"
  server_factory   make(extra={...}, start=True) -> Server; private servers,
                   each in its own temp dir, stopped at teardown
  server           the shared server of the session (FLUSHALL'd per test
                   through the client fixtures); restarted if it died
  r / rr           redis.Redis on `server`, bytes / decoded replies
  c                RespClient on `server`: exact replies (str = simple string,
                   bytes = bulk, RespError = error reply with its full text)
  raw              factory: raw(port=None) -> RawConn (send bytes, read replies)
"""
import atexit
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest
import redis

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_BINARY = "/work/main/src/rowan-server"
# Options that only Rowan knows; dropped when the target is redis-server.
ROWAN_ONLY_OPTIONS = {"pool-size", "workers", "replicas", "zookeeper", "shards",
                      "clean-threshold", "pool-file"}
START_TIMEOUT = 10.0
STOP_TIMEOUT = 10.0
CLIENT_TIMEOUT = 15.0
# A sanitizer build (make asan / ubsan) prints its reports on the server's
# stderr (stdout.log) and exits with status 1 (23 for leaks, at exit), which
# alone fails no test, and cleanup() then deletes the log. So cleanup() scans
# the logs first and files what it finds here; _no_sanitizer_reports fails
# the test (the session's shared server: its own fixture, at session end).
SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "runtime error:", "LeakSanitizer")
_sanitizer_reports = []


def _route_ubsan_reports():
    """UBSan reports of EVERY process the tests start, not only of Servers:
    cluster nodes run from a config file, servers expected to refuse a
    configuration (exit 1, which is also how a -fno-sanitize-recover build
    stops), rowan-check-pool, librowan's test program... Each report goes
    to a file of its own (log_path, one per pid) in a directory that
    _fail_on_sanitizer_reports checks after every test; stack traces are on
    unless UBSAN_OPTIONS says otherwise (its options come later, so they
    win). Returns the directory, or None when UBSAN_OPTIONS already names
    a log_path (the caller looks there)."""
    opts = os.environ.get("UBSAN_OPTIONS", "")
    if "log_path=" in opts:
        return None
    d = tempfile.mkdtemp(prefix="rowan-ubsan-", dir=tmp_root())
    atexit.register(_remove_if_empty, d)   # a directory with reports stays
    os.environ["UBSAN_OPTIONS"] = "print_stacktrace=1:%s:log_path=%s" % (
        opts, os.path.join(d, "ubsan"))
    return d


def _remove_if_empty(d):
    try:
        os.rmdir(d)
    except OSError:
        pass


_ubsan_seen = set()


def _ubsan_file_reports():
    """Reports written to _UBSAN_DIR since the last call."""
    if not _UBSAN_DIR:
        return []
    found = []
    for name in sorted(os.listdir(_UBSAN_DIR)):
        path = os.path.join(_UBSAN_DIR, name)
        if path in _ubsan_seen:
            continue
        _ubsan_seen.add(path)
        try:
            with open(path, "rb") as f:
                text = f.read(8000).decode("utf-8", "replace")
        except OSError:
            continue
        found.append("UBSan report %s (process %s):\n%s" % (path, name.rsplit(".", 1)[-1], text))
    return found


# --------------------------------------------------------------------------
# pytest plumbing
# --------------------------------------------------------------------------
def pytest_addoption(parser):
    parser.addoption("--target", action="store", default=None,
                     choices=("rowan", "redis"),
                     help="server to test: rowan (default) or redis "
                          "(real redis-server; env ROWAN_TEST_TARGET)")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "rowan_only(reason): Rowan-specific behaviour (durability, "
        "pool, crash, corruption, # Rowan INFO); skipped with --target=redis")
    config.addinivalue_line(
        "markers", "redis_aof_ok: a rowan_only crash test that also holds for "
        "redis-server with appendonly yes + appendfsync always; run there when "
        "ROWAN_TEST_REDIS_AOF=1 (checks the checker itself)")
    config.addinivalue_line(
        "markers", "redis_min(version): needs redis-server >= version when the "
        "target is redis (the local reference may be older than Rowan's 7.2)")


def _target_of(config):
    t = config.getoption("--target") or os.environ.get("ROWAN_TEST_TARGET") or "rowan"
    if t not in ("rowan", "redis"):
        raise pytest.UsageError("ROWAN_TEST_TARGET must be rowan or redis, not %r" % t)
    return t


_redis_version_cache = []


def redis_server_version():
    if not _redis_version_cache:
        out = subprocess.run(["redis-server", "--version"], capture_output=True,
                             text=True).stdout
        v = "0.0.0"
        for tok in out.split():
            if tok.startswith("v="):
                v = tok[2:]
        _redis_version_cache.append(tuple(int(x) for x in v.split(".")[:3]))
    return _redis_version_cache[0]


def pytest_collection_modifyitems(config, items):
    target = _target_of(config)
    if target != "redis":
        return
    aof = os.environ.get("ROWAN_TEST_REDIS_AOF") == "1"
    for item in items:
        m = item.get_closest_marker("rowan_only")
        if m is not None and aof and item.get_closest_marker("redis_aof_ok") is not None:
            m = None   # crash tests also hold for redis-server with appendfsync always
        if m is not None:
            why = m.args[0] if m.args else m.kwargs.get("reason", "")
            item.add_marker(pytest.mark.skip(
                reason="Rowan-only (not a redis-server behaviour)%s" %
                       (": " + why if why else "")))
            continue
        m = item.get_closest_marker("redis_min")
        if m is not None:
            need = tuple(int(x) for x in m.args[0].split("."))
            if redis_server_version() < need:
                item.add_marker(pytest.mark.skip(
                    reason="reference redis-server %s is older than %s, which "
                           "this test's command needs" %
                           (".".join(map(str, redis_server_version())), m.args[0])))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    """Bound every test: a hung server must turn into a failure, not a hang."""
    limit = int(os.environ.get("ROWAN_TEST_TIMEOUT", "150"))

    def on_alarm(signum, frame):
        raise TimeoutError("test exceeded ROWAN_TEST_TIMEOUT=%ds" % limit)

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(limit)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """On failure, attach the tail of every server log the test used."""
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)
    if rep.failed:
        for srv in getattr(item, "_rowan_servers", []):
            try:
                rep.sections.append(("server log tail (%s, %s)" % (srv.target, srv.dir),
                                     srv.log_tail(80)))
            except Exception as e:  # never let the report itself fail
                rep.sections.append(("server log", "unreadable: %r" % e))


def _register(request, srv):
    node = request.node
    lst = getattr(node, "_rowan_servers", None)
    if lst is None:
        lst = []
        node._rowan_servers = lst
    if srv not in lst:
        lst.append(srv)


# --------------------------------------------------------------------------
# RESP: a small, strict parser shared by RespClient and RawConn
# --------------------------------------------------------------------------
class RespError(Exception):
    """An error reply; .msg is the full text after '-' (e.g. 'ERR syntax error')."""

    def __init__(self, msg):
        super().__init__(msg)
        self.msg = msg

    def __eq__(self, other):
        return isinstance(other, RespError) and other.msg == self.msg

    def __hash__(self):
        return hash(self.msg)

    def __repr__(self):
        return "RespError(%r)" % self.msg


class Push(list):
    """RESP3 push (>) reply."""


class RSet(list):
    """RESP3 set (~) reply, kept in wire order."""


class Verbatim(bytes):
    """RESP3 verbatim string (=); .fmt is its 3-letter format."""
    fmt = b""


class ConnectionClosed(Exception):
    pass


class RespReader:
    def __init__(self, sock):
        self.sock = sock
        self.buf = bytearray()

    def _fill(self):
        data = self.sock.recv(1 << 16)
        if not data:
            raise ConnectionClosed("server closed the connection")
        self.buf += data

    def _line(self):
        while True:
            i = self.buf.find(b"\r\n")
            if i >= 0:
                line = bytes(self.buf[:i])
                del self.buf[:i + 2]
                return line
            self._fill()

    def _exact(self, n):
        while len(self.buf) < n + 2:
            self._fill()
        data = bytes(self.buf[:n])
        if self.buf[n:n + 2] != b"\r\n":
            raise AssertionError("bulk not terminated by CRLF: %r" % bytes(self.buf[n:n + 2]))
        del self.buf[:n + 2]
        return data

    def read(self):
        line = self._line()
        if not line:
            raise AssertionError("empty reply line")
        t, rest = line[:1], line[1:]
        if t == b"+":
            return rest.decode("utf-8", "surrogateescape")
        if t == b"-":
            return RespError(rest.decode("utf-8", "surrogateescape"))
        if t == b":":
            return int(rest)
        if t == b"$":
            n = int(rest)
            return None if n < 0 else self._exact(n)
        if t == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        if t == b"_":
            return None
        if t == b"#":
            if rest not in (b"t", b"f"):
                raise AssertionError("bad RESP3 boolean %r" % rest)
            return rest == b"t"
        if t == b",":
            s = rest.decode()
            return float(s)
        if t == b"(":
            return int(rest)
        if t == b"!":
            return RespError(self._exact(int(rest)).decode("utf-8", "surrogateescape"))
        if t == b"=":
            data = self._exact(int(rest))
            v = Verbatim(data[4:])
            v.fmt = data[:3]
            return v
        if t == b"%":
            n = int(rest)
            d = {}
            for _ in range(n):
                k = self.read()
                d[_hashable(k)] = self.read()
            return d
        if t == b"~":
            return RSet(self.read() for _ in range(int(rest)))
        if t == b">":
            return Push(self.read() for _ in range(int(rest)))
        if t == b"|":
            for _ in range(int(rest)):
                self.read()
                self.read()
            return self.read()
        raise AssertionError("unknown RESP type byte in %r" % line[:40])


def _hashable(v):
    if isinstance(v, list):
        return tuple(_hashable(x) for x in v)
    return v


def encode_command(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, str):
            a = a.encode()
        elif isinstance(a, (int, float)) and not isinstance(a, bool):
            a = repr(a).encode() if isinstance(a, float) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class RawConn:
    """A plain TCP connection: send bytes, read parsed replies, see closes."""

    def __init__(self, port, host="127.0.0.1", timeout=CLIENT_TIMEOUT):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = RespReader(self.sock)

    def send(self, data):
        self.sock.sendall(data)

    def send_command(self, *args):
        self.sock.sendall(encode_command(*args))

    def read_reply(self):
        return self.reader.read()

    def call(self, *args):
        self.send_command(*args)
        return self.read_reply()

    def read_line(self):
        return self.reader._line()

    def wait_closed(self, timeout=10.0):
        """True when the server closes the connection (EOF or reset) within
        timeout; bytes that arrive meanwhile are discarded."""
        self.sock.settimeout(timeout)
        try:
            while True:
                data = self.sock.recv(1 << 16)
                if not data:
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False
        finally:
            self.sock.settimeout(CLIENT_TIMEOUT)

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


class RespClient(RawConn):
    """Exact-reply client: call(*args) returns str for simple strings, bytes
    for bulk strings, int, None, list, RespError (returned, not raised)."""

    def ok(self, *args):
        rep = self.call(*args)
        if isinstance(rep, RespError):
            raise AssertionError("%r -> error %r" % (args, rep.msg))
        return rep

    def err(self, *args):
        rep = self.call(*args)
        if not isinstance(rep, RespError):
            raise AssertionError("%r: expected an error reply, got %r" % (args, rep))
        return rep.msg


# --------------------------------------------------------------------------
# the server process
# --------------------------------------------------------------------------
def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tmp_root():
    return os.environ.get("ROWAN_TEST_TMPDIR") or None


_UBSAN_DIR = _route_ubsan_reports()


class ServerStartError(Exception):
    pass


class Server:
    """One server process on a fixed port and directory; can be stopped,
    kill -9'd and restarted on the same directory."""

    def __init__(self, target, extra=None, dir=None, port=None, binary=None):
        self.target = target
        self.own_dir = dir is None
        self.dir = dir or tempfile.mkdtemp(prefix="rowan-it-", dir=tmp_root())
        self.port = port or free_port()
        self.extra = dict(extra or {})
        self.binary = binary or (os.environ.get("ROWAN_SERVER", DEFAULT_BINARY)
                                 if target == "rowan" else shutil.which("redis-server")
                                 or "redis-server")
        self.logfile = os.path.join(self.dir, "server.log")
        self.outfile = os.path.join(self.dir, "stdout.log")
        self.env = None              # the process environment for the next start (None: ours)
        self.proc = None
        self.expected_exit = False   # set when we stop/kill it ourselves
        self.starts = 0
        self._start_marks = (0, 0)   # log sizes when the current process started
        self._marks = (0, 0)
        self.clients = []
        self._san_filed = ""         # sanitizer report cleanup() already filed
        self.pids = []               # of every process started (UBSan report files)

    # ---- command line ----
    def argv(self):
        if self.target == "rowan":
            opts = {"port": str(self.port), "bind": "127.0.0.1", "dir": self.dir,
                    "pool-size": "64mb", "workers": "2", "logfile": self.logfile,
                    "enable-debug-command": "yes"}   # as Redis's own test suite runs it
        else:
            opts = {"port": str(self.port), "bind": "127.0.0.1", "dir": self.dir,
                    "save": "", "appendonly": "no", "logfile": self.logfile,
                    "enable-debug-command": "yes"}
            if os.environ.get("ROWAN_TEST_REDIS_AOF") == "1":
                opts.update({"appendonly": "yes", "appendfsync": "always"})
        for k, v in self.extra.items():
            if self.target == "redis" and k in ROWAN_ONLY_OPTIONS:
                continue
            if v is None:
                opts.pop(k, None)
            else:
                opts[k] = str(v)
        argv = [self.binary]
        for k, v in opts.items():
            argv += ["--" + k] + v.split(" ") if k == "bind" else ["--" + k, v]
        return argv

    @property
    def pool_path(self):
        p = os.path.join(self.dir, self.extra.get("pool-file", "rowan.pool"))
        if not os.path.exists(p):
            cands = [f for f in os.listdir(self.dir) if f.endswith(".pool")]
            if len(cands) == 1:
                p = os.path.join(self.dir, cands[0])
        return p

    # ---- lifecycle ----
    def start(self, wait=True, timeout=START_TIMEOUT):
        if self.target == "rowan" and not os.access(self.binary, os.X_OK):
            raise ServerStartError("no executable rowan-server at %s (build it with "
                                   "`make`, or set ROWAN_SERVER)" % self.binary)
        assert self.proc is None or self.proc.poll() is not None, "already running"
        self._start_marks = self._marks_now()
        self.expected_exit = False
        out = open(self.outfile, "ab")
        try:
            self.proc = subprocess.Popen(self.argv(), stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, cwd=self.dir, env=self.env)
        finally:
            out.close()
        self.starts += 1
        self.pids.append(self.proc.pid)
        if wait:
            self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout=START_TIMEOUT):
        deadline = time.monotonic() + timeout
        last = "no answer"
        while time.monotonic() < deadline:
            rc = self.proc.poll()
            if rc is not None:
                raise ServerStartError("%s exited with %s before answering PING\n%s" %
                                       (self.target, describe_rc(rc), self.log_tail(40)))
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=2) as s:
                    s.sendall(b"*1\r\n$4\r\nPING\r\n")
                    s.settimeout(2)
                    data = s.recv(256)
                    if data.startswith(b"+PONG") or data.startswith(b"-NOAUTH"):
                        return
                    last = repr(data[:80])
            except OSError as e:
                last = str(e)
            time.sleep(0.05)
        raise ServerStartError("%s did not answer PING within %.0fs (last: %s)\n%s" %
                               (self.target, timeout, last, self.log_tail(40)))

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def died_unexpectedly(self):
        """Exit status if the process ended without us stopping it, else None."""
        if self.proc is None or self.expected_exit:
            return None
        return self.proc.poll()

    def _close_clients(self):
        _close_quietly(self.clients)
        self.clients = []

    def stop(self, timeout=STOP_TIMEOUT):
        """SIGTERM, then SIGKILL after timeout. Returns (returncode, killed)."""
        self._close_clients()
        if self.proc is None:
            return None, False
        if self.proc.poll() is not None:
            return self.proc.returncode, False
        self.expected_exit = True
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout), False
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(), True

    def kill9(self):
        self._close_clients()
        if self.proc is not None and self.proc.poll() is None:
            self.expected_exit = True
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        return self.proc.returncode if self.proc else None

    def wait_exit(self, timeout=STOP_TIMEOUT):
        """Wait for the process to exit on its own (e.g. after SHUTDOWN)."""
        self.expected_exit = True
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def restart(self, wait=True, timeout=START_TIMEOUT):
        if self.alive():
            self.stop()
        return self.start(wait=wait, timeout=timeout)

    def cleanup(self):
        if self.alive():
            self.stop()
        # After stop: leak reports are printed at exit. A dir with a report
        # is kept for a look at the pool and the full logs.
        report = self.sanitizer_report()
        if report and report != self._san_filed:
            _sanitizer_reports.append("%s server in %s (kept):\n%s" %
                                      (self.target, self.dir, report))
            self._san_filed = report
        if self.own_dir and not os.environ.get("ROWAN_TEST_KEEP") and not report:
            shutil.rmtree(self.dir, ignore_errors=True)

    # ---- logs ----
    def _read_logs(self):
        parts = []
        for f in (self.logfile, self.outfile):
            try:
                with open(f, "rb") as fh:
                    parts.append(fh.read())
            except OSError:
                parts.append(b"")
        return parts

    def _marks_now(self):
        return [len(p) for p in self._read_logs()]

    def log_text(self, since_start=False):
        """The server log plus its stdout/stderr. since_start: only what the
        current process wrote (the files are appended to across restarts)."""
        return self._join(self._start_marks if since_start else (0, 0))

    def mark_log(self):
        """Remember the logs' current end; log_since_mark() returns what
        was written after it."""
        self._marks = self._marks_now()

    def log_since_mark(self):
        return self._join(self._marks)

    def _join(self, marks):
        log, out = self._read_logs()
        log, out = log[marks[0]:], out[marks[1]:]
        text = log.decode("utf-8", "replace")
        if out.strip():
            text += "\n--- stdout/stderr ---\n" + out.decode("utf-8", "replace")
        return text

    def sanitizer_report(self):
        """Every server run in this dir so far: its output from the first
        sanitizer report on (at most 8000 characters), or ''."""
        text = self.log_text()
        for pid in self.pids:        # its processes' UBSan report files (claimed here)
            path = os.path.join(_UBSAN_DIR or "", "ubsan.%d" % pid)
            if _UBSAN_DIR and os.path.exists(path):
                _ubsan_seen.add(path)
                with open(path, "rb") as f:
                    text += "\n--- %s ---\n%s" % (path, f.read(8000).decode("utf-8", "replace"))
        hits = [i for i in (text.find(m) for m in SANITIZER_MARKERS) if i >= 0]
        if not hits:
            return ""
        start = text.rfind("\n", 0, min(hits)) + 1
        return text[start:start + 8000]

    def log_tail(self, n=60):
        lines = self.log_text().splitlines()
        return "\n".join(lines[-n:]) if lines else "(log is empty: %s)" % self.logfile

    # ---- clients ----
    def client(self, decode=False, **kw):
        kw.setdefault("socket_timeout", CLIENT_TIMEOUT)
        kw.setdefault("socket_connect_timeout", CLIENT_TIMEOUT)
        cl = redis.Redis(host="127.0.0.1", port=self.port, decode_responses=decode, **kw)
        self.clients.append(cl)
        return cl

    def resp(self, password=None):
        """A RespClient whose connection the server has already accepted and
        served once (a PING round trip; NOAUTH counts as served)."""
        cl = RespClient(self.port)
        if password is not None:
            rep = cl.call("AUTH", password)
            assert rep == "OK", rep
        else:
            cl.call("PING")
        self.clients.append(cl)
        return cl

    def info(self, section=None, password=None):
        cl = RespClient(self.port)
        try:
            if password is not None:
                cl.call("AUTH", password)
            rep = cl.call("INFO", section) if section else cl.call("INFO")
        finally:
            cl.close()
        if isinstance(rep, RespError):
            raise AssertionError("INFO failed: %s" % rep.msg)
        return parse_info(rep)


def _close_quietly(clients):
    for cl in clients:
        try:
            cl.close()
        except Exception:
            pass


def describe_rc(rc):
    if rc is None:
        return "still running"
    if rc < 0:
        try:
            return "signal %s" % signal.Signals(-rc).name
        except ValueError:
            return "signal %d" % -rc
    return "exit code %d" % rc


def parse_info(text):
    """INFO text -> {section_name_lower: {field: value}}, plus a flat
    '_all' dict. Values stay strings."""
    if isinstance(text, bytes):
        text = text.decode()
    sections = {}
    flat = {}
    cur = None
    for line in text.split("\r\n"):
        if not line:
            continue
        if line.startswith("#"):
            cur = line[1:].strip().lower()
            sections[cur] = {}
            continue
        if ":" not in line:
            raise AssertionError("INFO line without ':' %r" % line)
        k, v = line.split(":", 1)
        if cur is None:
            raise AssertionError("INFO field before any '# Section' header: %r" % line)
        sections[cur][k] = v
        flat[k] = v
    sections["_all"] = flat
    return sections


# --------------------------------------------------------------------------
# fixtures
# --------------------------------------------------------------------------
@pytest.fixture(scope="session")
def target(request):
    return _target_of(request.config)


@pytest.fixture
def server_factory(request, target):
    made = []

    def make(extra=None, start=True, dir=None, port=None):
        srv = Server(target, extra=extra, dir=dir, port=port)
        made.append(srv)
        _register(request, srv)
        if start:
            srv.start()
        return srv

    yield make
    _teardown_servers(made)


def _teardown_servers(servers, stop=None):
    """Stop (stop(), or each server's own cleanup) and clean up servers a
    test made; fail the test if one died by a signal while it ran. Sanitizer
    reports are filed by cleanup() (_no_sanitizer_reports fails on them)."""
    problems = []
    for srv in servers:
        rc = srv.died_unexpectedly()
        if rc is not None and rc < 0:
            problems.append("%s server in %s died by %s during the test\n%s" %
                            (srv.target, srv.dir, describe_rc(rc), srv.log_tail(40)))
    if stop is not None:
        stop()
    for srv in servers:
        srv.cleanup()
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


class _Shared:
    srv = None


@pytest.fixture(scope="session")
def _shared_server(target):
    holder = _Shared()
    yield holder
    if holder.srv is not None:
        holder.srv.cleanup()
    _fail_on_sanitizer_reports()


@pytest.fixture
def server(request, _shared_server, target):
    """The shared server for command-semantics tests. If a test crashes it,
    the test errors with the log tail and the next test gets a fresh one."""
    srv = _shared_server.srv
    if srv is None or not srv.alive():
        if srv is not None:
            srv.cleanup()
        srv = Server(target)
        _shared_server.srv = srv
        _register(request, srv)
        srv.start()
    _register(request, srv)
    yield srv
    srv._close_clients()
    rc = srv.died_unexpectedly()
    if rc is not None or srv.sanitizer_report():
        # cleanup() files the report; _no_sanitizer_reports fails the test.
        tail = srv.log_tail(40)
        srv.cleanup()
        _shared_server.srv = None
        if rc is not None:
            pytest.fail("shared %s server died during the test (%s)\n%s" %
                        (target, describe_rc(rc), tail), pytrace=False)


def _fail_on_sanitizer_reports():
    _sanitizer_reports.extend(_ubsan_file_reports())
    if _sanitizer_reports:
        found = "\n\n".join(_sanitizer_reports)
        del _sanitizer_reports[:]
        pytest.fail("sanitizer report in rowan-server output (or a UBSan report file):\n" + found,
                    pytrace=False)


@pytest.fixture(autouse=True)
def _no_sanitizer_reports():
    """Fail a test when a server it used printed a sanitizer report. Autouse
    fixtures are set up first, so this check runs after every other
    fixture's teardown (server_factory's cleanup, the shared server's)."""
    yield
    _fail_on_sanitizer_reports()


def _flushall(srv):
    cl = RespClient(srv.port)
    try:
        rep = cl.call("FLUSHALL")
        assert rep == "OK", "FLUSHALL before the test failed: %r" % (rep,)
    finally:
        cl.close()


@pytest.fixture
def r(server):
    _flushall(server)
    return server.client()


@pytest.fixture
def rr(server):
    _flushall(server)
    return server.client(decode=True)


@pytest.fixture
def c(server):
    _flushall(server)
    return server.resp()


@pytest.fixture(scope="module")
def ref_srv(target):
    """A redis-server (Debian's, the reference) shared by one module's
    differential tests; skipped when the tests already target redis."""
    if target == "redis":
        pytest.skip("differential test: already running against redis-server")
    srv = Server("redis")
    srv.start()
    yield srv
    _teardown_servers([srv])


@pytest.fixture(scope="module")
def pair():
    """[rowan-server, redis-server], shared by one module's differential
    tests."""
    made = [Server("rowan"), Server("redis")]
    for s in made:
        s.start()
    yield made
    _teardown_servers(made)


@pytest.fixture
def pair_conns(pair):
    """A fresh connection to each server of the pair, keyspace flushed."""
    made = [RespClient(s.port) for s in pair]
    for m in made:
        assert m.call("FLUSHALL") == "OK"
    yield made
    for m in made:
        m.close()


@pytest.fixture
def fresh_pair(server_factory, request):
    """(RespClient on a fresh rowan-server, RespClient on a fresh
    redis-server): one test's own pair, for tests that change server-wide
    state (scripts, functions, configuration)."""
    if not shutil.which("redis-server"):
        pytest.skip("redis-server not installed")
    rowan = server_factory()
    ref = Server("redis")
    ref.start()
    request.addfinalizer(ref.cleanup)
    return rowan.resp(), ref.resp()


@pytest.fixture
def raw(server):
    conns = []

    def make(port=None):
        cn = RawConn(port or server.port)
        conns.append(cn)
        return cn

    yield make
    for cn in conns:
        cn.close()


def stop_process(pid, timeout=10.0):
    """SIGSTOP pid and wait until every one of its threads is stopped.
    kill() returns before the stop takes effect: the group stop begins only
    when one of the process's threads is scheduled to take the signal, and
    until then its other threads run on (on a loaded 2-core machine, for
    milliseconds: long enough for a backup to receive, persist and ack a
    write sent after the kill)."""
    os.kill(pid, signal.SIGSTOP)
    task = "/proc/%d/task" % pid

    def all_stopped():
        try:
            for tid in os.listdir(task):
                with open("%s/%s/stat" % (task, tid)) as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
                if state not in ("T", "t"):
                    return False
            return True
        except FileNotFoundError:
            return True          # it exited: nothing of it runs
    assert wait_for(all_stopped, timeout=timeout, interval=0.001), "pid %d did not stop" % pid


def wait_for(pred, timeout=10.0, interval=0.05):
    """Poll pred() until it is truthy (returns its value) or timeout (returns
    the last value). A liveness bound, not a timing assertion."""
    deadline = time.monotonic() + timeout
    v = pred()
    while not v and time.monotonic() < deadline:
        time.sleep(interval)
        v = pred()
    return v


def request_failover(port, timeout=60.0):
    """CLUSTER FAILOVER on the node at port; returns its reply. A node that
    has just (re)started may not know the configuration manager yet (the
    election or its first watch is still under way) and says so; that
    answer is retried, any other is returned."""
    def ask():
        c = RespClient(port)
        try:
            rep = c.call("CLUSTER", "FAILOVER")
        finally:
            c.close()
        if isinstance(rep, RespError) and "no configuration manager is known" in rep.msg:
            return None
        return (rep,)
    got = wait_for(ask, timeout=timeout, interval=0.2)
    assert got, "node %d never learned its configuration manager" % port
    return got[0]


# --------------------------------------------------------------------------
# clusters (utils/rowan-cluster)
# --------------------------------------------------------------------------
REPO = os.path.dirname(os.path.dirname(HERE))
CLUSTER_SCRIPT = os.path.join(REPO, "utils", "rowan-cluster")


class _PidProcess:
    """Popen's poll/wait/send_signal for a process we did not fork (a node
    rowan-cluster started in the background). Its exit status is unknown:
    a death reports -1 (SIGHUP's number: 'died by a signal')."""

    def __init__(self, pid):
        self.pid = pid
        self.returncode = None

    def poll(self):
        if self.returncode is None:
            try:
                os.kill(self.pid, 0)
                # dead once a zombie whose other threads are gone too: the
                # leader turns Z first, and the process's sockets (its
                # listening ports) close only when its last thread exits
                with open("/proc/%d/stat" % self.pid) as f:
                    if (f.read().rsplit(")", 1)[1].split()[0] == "Z" and
                            len(os.listdir("/proc/%d/task" % self.pid)) <= 1):
                        raise ProcessLookupError
            except (ProcessLookupError, OSError):
                self.returncode = -1
        return self.returncode

    def wait(self, timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired("pid %d" % self.pid, timeout)
            time.sleep(0.02)
        return self.returncode

    def send_signal(self, sig):
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self):
        self.send_signal(signal.SIGKILL)


class ClusterNode(Server):
    """One node of a rowan-cluster cluster: started on its own rowan.conf
    (restart() runs it again from the fixture); logs, kill9, client... as
    Server."""

    def __init__(self, info, binary):
        super().__init__("rowan", dir=info["dir"], port=info["port"], binary=binary)
        self.own_dir = False          # the cluster's temp dir is removed as a whole
        self.name = info["name"]
        self.host = info["host"]
        self.conf = info["conf"]
        self.proc = _PidProcess(info["pid"])
        self.starts = 1

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    @property
    def log_path(self):
        return self.logfile

    def argv(self):
        return [self.binary, self.conf]


class Cluster:
    """N nodes started by utils/rowan-cluster in a fresh temp dir."""

    def __init__(self, n, k=None, base_port=None, options=None, zookeeper=False):
        self.dir = tempfile.mkdtemp(prefix="rowan-cluster-", dir=tmp_root())
        self.binary = os.environ.get("ROWAN_SERVER", DEFAULT_BINARY)
        self.base_port = base_port or free_base_port(n)
        argv = [sys.executable, CLUSTER_SCRIPT, "start", str(n)] + ([str(k)] if k else []) + [
            "--base-port", str(self.base_port), "--dir", self.dir, "--server", self.binary,
            "--pool-size", "64mb", "--workers", "2"] + (["--zookeeper"] if zookeeper else [])
        for name, val in (options or {}).items():
            argv += ["--opt", "%s=%s" % (name, val)]
        self.start_output = self.script(argv[2:], check=False)
        try:
            with open(os.path.join(self.dir, "cluster.json")) as f:
                self.state = json.load(f)
        except OSError:
            raise ServerStartError("rowan-cluster start wrote no cluster.json:\n%s%s" % (
                self.start_output.stdout, self.start_output.stderr))
        self.nodes = [ClusterNode(info, self.binary) for info in self.state["nodes"]]
        self._rc = []
        if self.start_output.returncode != 0:
            tails = "\n".join("--- %s\n%s" % (nd.name, nd.log_tail(30)) for nd in self.nodes)
            self.stop()
            raise ServerStartError("rowan-cluster start failed:\n%s%s\n%s" % (
                self.start_output.stdout, self.start_output.stderr, tails))

    def script(self, args, check=True):
        r = subprocess.run([sys.executable, CLUSTER_SCRIPT] + list(args), capture_output=True,
                           text=True, timeout=120)
        if check and r.returncode != 0:
            raise AssertionError("rowan-cluster %s: %s%s" % (" ".join(args), r.stdout, r.stderr))
        return r

    def status(self):
        return self.script(["status", "--dir", self.dir], check=False)

    def client(self, i, decode=False, **kw):
        return self.nodes[i].client(decode=decode, **kw)

    def cluster_client(self, decode=False, **kw):
        import redis.cluster
        kw.setdefault("socket_timeout", CLIENT_TIMEOUT)
        kw.setdefault("socket_connect_timeout", CLIENT_TIMEOUT)
        cl = redis.cluster.RedisCluster(host="127.0.0.1", port=self.nodes[0].port,
                                        decode_responses=decode, **kw)
        self._rc.append(cl)
        return cl

    def kill9(self, i):
        return self.nodes[i].kill9()

    def restart(self, i):
        return self.nodes[i].restart()

    def stop(self):
        _close_quietly(self._rc)
        self._rc = []
        for nd in self.nodes:
            nd._close_clients()
            nd.expected_exit = True
        self.script(["stop", "--dir", self.dir], check=False)
        for nd in self.nodes:
            nd.proc.wait(STOP_TIMEOUT)

    def cleanup(self):
        _teardown_servers(self.nodes, stop=self.stop)
        if not os.environ.get("ROWAN_TEST_KEEP") and not any(
                nd.sanitizer_report() for nd in self.nodes):
            shutil.rmtree(self.dir, ignore_errors=True)


def _ephemeral_low():
    """The lowest port the kernel hands out to outgoing connections."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_base_port(n):
    """A base port with base+i and base+i+10000 (replication) free for
    every node i. Below the kernel's ephemeral range when it leaves room:
    a port found free is only bound when its node starts (after ZooKeeper's
    start, a second or more later), and meanwhile any outgoing connection
    on the machine could be given a port of the ephemeral range (a cluster
    start failed with 'Address already in use' on its replication port)."""
    top = _ephemeral_low() - 10000 - n
    pick = random.SystemRandom()
    for _ in range(200):
        base = pick.randrange(10000, top) if top > 11000 else free_port()
        if base + n + 10000 > 65535:
            continue
        ok = True
        for p in list(range(base, base + n)) + list(range(base + 10000, base + 10000 + n)):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind(("127.0.0.1", p))
                except OSError:
                    ok = False
                    break
        if ok:
            return base
    raise ServerStartError("no free port range for %d nodes" % n)


@pytest.fixture
def cluster_factory(request, target):
    """make(n, k=None, options={...}, zookeeper=False) -> Cluster; stopped at
    teardown (its ZooKeeper too, for a managed one). Rowan only."""
    if target != "rowan":
        pytest.skip("clusters are Rowan's (utils/rowan-cluster)")
    made = []

    def make(n, k=None, options=None, zookeeper=False):
        cl = Cluster(n, k, options=options, zookeeper=zookeeper)
        made.append(cl)
        for nd in cl.nodes:
            _register(request, nd)
        return cl

    yield make
    errors = []
    for cl in made:
        try:
            cl.cleanup()
        except pytest.fail.Exception as e:
            errors.append(str(e))
    if errors:
        pytest.fail("\n".join(errors), pytrace=False)


# ---------------------------------------------------------------- hash slots
# Redis Cluster's key -> slot map (CRC16-XMODEM mod 16384, {hash tags}), for
# tests that route keys themselves.
NSLOTS = 16384


def crc16(data):
    crc = 0
    for b in data:
        crc ^= b << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else (crc << 1)
            crc &= 0xFFFF
    return crc


def key_slot(key):
    k = key.encode() if isinstance(key, str) else key
    s = k.find(b"{")
    if s >= 0:
        e = k.find(b"}", s + 1)
        if e > s + 1:
            k = k[s + 1:e]
    return crc16(k) % NSLOTS
