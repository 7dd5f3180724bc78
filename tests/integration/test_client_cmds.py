"""CLIENT REPLY, PAUSE/UNPAUSE, TRACKING (client-side caching) and friends,
and MONITOR: differential, the same exchanges with rowan-server and a real
redis-server (7.0), compared reply by reply."""
import re
import socket
import threading
import time

import pytest

from conftest import Push, RespClient, RespError


def conn(srv, proto=2):
    cl = RespClient(srv.port)
    if proto == 3:
        cl.call("HELLO", "3")
    return cl


def no_reply(cl, wait=0.3):
    """True when nothing arrives within wait seconds."""
    if cl.reader.buf:
        return False
    cl.sock.settimeout(wait)
    try:
        cl.sock.recv(1, socket.MSG_PEEK)
        return False
    except socket.timeout:
        return True
    finally:
        cl.sock.settimeout(15)


def both(pair, fn):
    out = [fn(srv) for srv in pair]
    assert out[0] == out[1], out
    return out[0]


# ---------------------------------------------------------------- CLIENT REPLY
def test_client_reply_modes(pair):
    def run(srv):
        cl = conn(srv)
        cl.call("DEL", "a")
        cl.send_command("CLIENT", "REPLY", "SKIP")
        cl.send_command("SET", "a", "1")
        got = [cl.call("GET", "a")]
        cl.send_command("CLIENT", "REPLY", "OFF")
        cl.send_command("SET", "a", "2")
        cl.send_command("NOSUCHCOMMAND")
        cl.send_command("GET", "a")
        got.append(no_reply(cl))
        got.append(cl.call("CLIENT", "REPLY", "ON"))
        got.append(cl.call("GET", "a"))
        got.append(cl.call("CLIENT", "REPLY", "MAYBE"))
        cl.close()
        return got
    assert both(pair, run) == [b"1", True, "OK", b"2", RespError("ERR syntax error")]


# ---------------------------------------------------------------- CLIENT PAUSE
def timed_call(srv, *args):
    cl = conn(srv)
    t0 = time.monotonic()
    rep = cl.call(*args)
    cl.close()
    return rep, time.monotonic() - t0


@pytest.mark.parametrize("mode", ["WRITE", "ALL"])
def test_client_pause(pair, mode):
    for srv in pair:
        admin = conn(srv)
        admin.call("DEL", "k")
        assert admin.call("CLIENT", "PAUSE", "600", mode) == "OK"
        rep, took = timed_call(srv, "GET", "k")
        assert rep is None
        if mode == "WRITE":
            assert took < 0.4, (srv.target, took)
        else:
            assert took > 0.4, (srv.target, took)
        assert admin.call("CLIENT", "PAUSE", "600", mode) == "OK"
        rep, took = timed_call(srv, "SET", "k", "v")
        assert rep == "OK" and took > 0.4, (srv.target, took)
        assert admin.call("GET", "k") == b"v"
        admin.close()


def test_client_unpause_releases_writers(pair):
    """UNPAUSE lets every held writer go at once, whatever worker serves it
    (the pause itself would last 20 s)."""
    for srv in pair:
        admin = conn(srv)
        assert admin.call("CLIENT", "PAUSE", "20000", "WRITE") == "OK"
        res = {}

        def writer(i):
            res[i] = timed_call(srv, "SET", "u%d" % i, "1")
        ts = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
        for t in ts:
            t.start()
        time.sleep(0.5)
        assert not res, srv.target
        t0 = time.monotonic()
        assert admin.call("CLIENT", "UNPAUSE") == "OK"
        for t in ts:
            t.join(5)
        assert time.monotonic() - t0 < 2, srv.target
        assert all(r[0] == "OK" for r in res.values()) and len(res) == 4, (srv.target, res)
        admin.close()


def test_client_pause_errors(pair):
    def run(srv):
        cl = conn(srv)
        out = [cl.call("CLIENT", "PAUSE", "-1"), cl.call("CLIENT", "PAUSE", "x"),
               cl.call("CLIENT", "PAUSE", "10", "SOME"), cl.call("CLIENT", "PAUSE", "10", "ALL", "X")]
        cl.close()
        return out
    both(pair, run)


# ---------------------------------------------------------------- tracking
def drain(cl, wait=0.3):
    """Every push that arrives within wait seconds."""
    out = []
    while not no_reply(cl, wait):
        out.append(cl.read_reply())
    return out


def test_tracking_resp3_default_mode(pair):
    def run(srv):
        cl = conn(srv, 3)
        w = conn(srv)
        w.call("MSET", "a", "1", "b", "2", "c", "3")
        out = [cl.call("CLIENT", "TRACKING", "ON"), cl.call("GET", "a"), cl.call("MGET", "b", "c")]
        w.call("SET", "a", "x")
        w.call("SET", "a", "y")        # not read since: no second message
        w.call("DEL", "b")
        w.call("SET", "zz", "1")       # never read
        out.append(drain(cl))
        out.append(cl.call("SET", "c", "9"))   # our own change: invalidated too
        out.append(drain(cl))
        out.append(cl.call("CLIENT", "TRACKINGINFO"))
        out.append(cl.call("CLIENT", "GETREDIR"))
        out.append(cl.call("CLIENT", "TRACKING", "OFF"))
        out.append(cl.call("GET", "a"))
        w.call("SET", "a", "z")
        out.append(drain(cl))
        cl.close()
        w.close()
        return out
    out = both(pair, run)
    assert out[3] == [Push([b"invalidate", [b"a"]]), Push([b"invalidate", [b"b"]])]


def test_tracking_noloop_optin_optout(pair):
    def run(srv):
        cl = conn(srv, 3)
        w = conn(srv)
        w.call("MSET", "a", "1", "b", "2")
        out = [cl.call("CLIENT", "TRACKING", "ON", "NOLOOP"), cl.call("GET", "a"),
               cl.call("SET", "a", "2")]
        out.append(drain(cl))
        out.append(cl.call("CLIENT", "TRACKING", "ON", "OPTIN"))
        out.append(cl.call("CLIENT", "TRACKING", "OFF"))
        out.append(cl.call("CLIENT", "TRACKING", "ON", "OPTIN"))
        out.append(cl.call("GET", "b"))
        w.call("SET", "b", "x")
        out.append(drain(cl))
        out.append(cl.call("CLIENT", "CACHING", "YES"))
        out.append(cl.call("CLIENT", "TRACKINGINFO"))
        out.append(cl.call("GET", "b"))
        w.call("SET", "b", "y")
        out.append(drain(cl))
        out.append(cl.call("CLIENT", "CACHING", "NO"))
        out.append(cl.call("CLIENT", "TRACKING", "OFF"))
        out.append(cl.call("CLIENT", "TRACKING", "ON", "OPTOUT"))
        out.append(cl.call("CLIENT", "CACHING", "NO"))
        out.append(cl.call("GET", "a"))
        out.append(cl.call("GET", "b"))
        w.call("MSET", "a", "q", "b", "q")
        out.append(drain(cl))
        cl.close()
        w.close()
        return out
    both(pair, run)


def test_tracking_bcast_prefixes(pair):
    def run(srv):
        cl = conn(srv, 3)
        w = conn(srv)
        out = [cl.call("CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "user:", "PREFIX", "obj:"),
               cl.call("CLIENT", "TRACKINGINFO")]
        w.call("SET", "user:1", "a")
        w.call("SET", "other", "a")
        w.call("HSET", "obj:9", "f", "v")
        out.append(drain(cl))
        out.append(cl.call("CLIENT", "TRACKING", "ON", "PREFIX", "x"))
        out.append(cl.call("CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "us"))
        out.append(cl.call("CLIENT", "TRACKING", "ON"))
        cl.close()
        w.close()
        return out
    both(pair, run)


def test_tracking_resp2_redirect(pair):
    def run(srv):
        sub = conn(srv)
        subid = sub.call("CLIENT", "ID")
        assert sub.call("SUBSCRIBE", "__redis__:invalidate")[0] == b"subscribe"
        cl = conn(srv)
        w = conn(srv)
        w.call("SET", "k", "1")
        out = [cl.call("CLIENT", "TRACKING", "ON", "REDIRECT", str(subid)),
               cl.call("CLIENT", "GETREDIR") == subid, cl.call("GET", "k")]
        w.call("SET", "k", "2")
        out.append(drain(sub))
        out.append(cl.call("CLIENT", "LIST", "ID", str(cl.call("CLIENT", "ID"))).decode().split(" ")[7])
        w.call("FLUSHALL")
        out.append(drain(sub))
        sub.close()
        time.sleep(0.2)
        info = cl.call("CLIENT", "TRACKINGINFO")
        out.append((info[1], info[3] == subid))
        cl.call("GET", "k")
        w.call("SET", "k", "3")            # the target is gone: broken
        info = cl.call("CLIENT", "TRACKINGINFO")
        out.append((info[1], info[3] == subid))
        out.append(cl.call("CLIENT", "LIST", "ID", str(cl.call("CLIENT", "ID"))).decode().split(" ")[7])
        cl.close()
        w.close()
        return out
    out = both(pair, run)
    assert out[3] == [[b"message", b"__redis__:invalidate", [b"k"]]]
    assert out[5] == [[b"message", b"__redis__:invalidate", None]]


def test_tracking_errors(pair):
    def run(srv):
        cl = conn(srv)
        out = [cl.call("CLIENT", "TRACKING", "ON", "REDIRECT", "999999"),
               cl.call("CLIENT", "TRACKING", "ON", "REDIRECT", "1", "REDIRECT", "2"),
               cl.call("CLIENT", "TRACKING", "ON", "OPTIN", "OPTOUT"),
               cl.call("CLIENT", "TRACKING", "ON", "BCAST", "OPTIN"),
               cl.call("CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "a", "PREFIX", "ab"),
               cl.call("CLIENT", "TRACKING", "ON", "BOGUS"),
               cl.call("CLIENT", "TRACKING", "MAYBE"),
               cl.call("CLIENT", "CACHING", "YES"),
               cl.call("CLIENT", "TRACKING", "ON"),
               cl.call("CLIENT", "CACHING", "YES"),
               cl.call("CLIENT", "CACHING", "NO"),
               cl.call("CLIENT", "CACHING", "MAYBE"),
               cl.call("CLIENT", "TRACKING", "ON", "OPTIN"),
               cl.call("CLIENT", "TRACKING", "ON", "BCAST"),
               cl.call("CLIENT", "TRACKINGINFO"),
               cl.call("CLIENT", "GETREDIR")]
        cl.close()
        return out
    both(pair, run)


# ---------------------------------------------------------------- MONITOR
LINE = re.compile(r'^\d+\.\d{6} \[(\d+) 127\.0\.0\.1:\d+\] (.*)$')


def test_monitor(pair):
    def run(srv):
        mon = conn(srv)
        assert mon.call("MONITOR") == "OK"
        w = conn(srv)
        w.call("SET", "k", 'v "q"\n\x01')
        w.call("SELECT", "3")
        w.call("GET", "k")
        w.call("CONFIG", "GET", "port")    # admin: not shown
        w.call("AUTH", "x", "y")
        w.call("MULTI")
        w.call("INCR", "n")
        w.call("GET", "n")
        w.call("EXEC")
        lines = []
        deadline = time.monotonic() + 5
        while len(lines) < 8 and time.monotonic() < deadline:
            lines.append(mon.read_reply())
        m = [LINE.match(x) for x in lines]
        assert all(m), lines
        out = [(x.group(1), x.group(2)) for x in m]
        info = [ln for ln in w.call("CLIENT", "LIST").decode().splitlines()
                if "cmd=monitor" in ln]
        out.append(info[0].split(" ")[7])
        mon.close()
        w.close()
        return out
    out = both(pair, run)
    assert out[0] == ("0", '"SET" "k" "v \\"q\\"\\n\\x01"')


def test_monitor_line_from_other_worker(pair):
    """Monitors and writers spread over workers: every line arrives."""
    rowan = pair[0]
    mon = conn(rowan)
    mon.call("MONITOR")
    ws = [conn(rowan) for _ in range(4)]
    for i, w in enumerate(ws):
        w.call("SET", "k%d" % i, "v")
    got = sorted(mon.read_reply().split(" ", 3)[3] for _ in ws)
    assert got == sorted('"SET" "k%d" "v"' % i for i in range(4))
    for w in ws + [mon]:
        w.close()


def test_tracking_clients_come_and_go_under_writes(pair):
    """Tracking clients (own pushes, redirects to subscribers, BCAST) open,
    read and close while writers change the keys and MONITOR watches: the
    server stays up and consistent (run it under ASan to catch races)."""
    rowan = pair[0]
    stop = time.monotonic() + 3
    errors = []

    def tracker(i):
        try:
            while time.monotonic() < stop:
                sub = conn(rowan)
                subid = sub.call("CLIENT", "ID")
                sub.call("SUBSCRIBE", "__redis__:invalidate")
                cl = conn(rowan, 3 if i % 2 else 2)
                if i % 3 == 0:
                    cl.call("CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "k")
                elif i % 2 == 0:
                    cl.call("CLIENT", "TRACKING", "ON", "REDIRECT", str(subid))
                else:
                    cl.call("CLIENT", "TRACKING", "ON", "NOLOOP")
                if i % 4 == 0:
                    sub.close()    # the redirect target goes first
                for k in range(20):
                    cl.call("GET", "k%d" % (k % 7))
                cl.close()
                sub.close()
        except Exception as e:   # noqa: BLE001 - reported below
            errors.append(repr(e))

    def writer():
        try:
            w = conn(rowan)
            while time.monotonic() < stop:
                for k in range(7):
                    w.call("SET", "k%d" % k, "v")
                w.call("DEL", "k3")
                w.call("FLUSHALL")
            w.close()
        except Exception as e:   # noqa: BLE001
            errors.append(repr(e))

    mon = conn(rowan)
    mon.call("MONITOR")
    ts = [threading.Thread(target=tracker, args=(i,)) for i in range(6)]
    ts += [threading.Thread(target=writer) for _ in range(2)]
    for t in ts:
        t.start()
    time.sleep(1)
    mon.close()
    for t in ts:
        t.join(30)
    assert not errors, errors[:3]
    c = conn(rowan)
    assert c.call("PING") == "PONG"
    info = c.call("INFO", "clients").decode()
    assert "tracking_clients:0" in info, info
    c.close()


def test_client_list_and_kill_by_type(pair):
    def run(srv):
        sub = conn(srv)
        sub.call("SUBSCRIBE", "ch")
        other = conn(srv)
        cl = conn(srv)
        lines = lambda *a: len(cl.call("CLIENT", "LIST", *a).decode().splitlines())  # noqa: E731
        out = [lines("TYPE", "pubsub"), lines("TYPE", "normal"), lines("TYPE", "master"),
               lines("TYPE", "replica"), cl.call("CLIENT", "LIST", "TYPE", "bogus"),
               cl.call("CLIENT", "KILL", "TYPE", "master"),
               cl.call("CLIENT", "KILL", "TYPE", "pubsub")]
        out.append(sub.wait_closed(5))
        out.append(lines("TYPE", "pubsub"))
        out.append(cl.call("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"))
        out.append(other.wait_closed(5))
        cl.close()
        return out
    assert both(pair, run)[:3] == [1, 2, 0]


def test_tracking_reads_inside_exec(pair):
    def run(srv):
        cl = conn(srv, 3)
        w = conn(srv)
        w.call("MSET", "a", "1", "b", "2", "c", "3")
        out = [cl.call("CLIENT", "TRACKING", "ON"), cl.call("MULTI"), cl.call("GET", "a"),
               cl.call("EXEC")]
        w.call("SET", "a", "x")
        out.append(drain(cl))
        out.append(cl.call("CLIENT", "TRACKING", "OFF"))
        out.append(cl.call("CLIENT", "TRACKING", "ON", "OPTIN"))
        out.append(cl.call("CLIENT", "CACHING", "YES"))
        out += [cl.call("MULTI"), cl.call("GET", "b"), cl.call("GET", "c"), cl.call("EXEC")]
        out.append(cl.call("GET", "a"))     # CACHING was used up by the transaction
        w.call("MSET", "a", "q", "b", "q", "c", "q")
        out.append(drain(cl))
        cl.close()
        w.close()
        return out
    out = both(pair, run)
    assert out[4] == [Push([b"invalidate", [b"a"]])]
