"""Transactions: MULTI, EXEC, DISCARD, WATCH, UNWATCH (Redis 7.2 behaviour),
isolation against concurrent connections, and (Rowan only) that a
transaction is one log entry: after kill -9 all of it or none of it."""
import threading
import time

import pytest
import redis

from conftest import ConnectionClosed, RawConn, RespClient, RespError, encode_command
from test_bigvalues import until_room

CONN_ERRORS = (redis.ConnectionError, redis.TimeoutError, ConnectionError, OSError)
EXECABORT = "EXECABORT Transaction discarded because of previous errors."


@pytest.fixture(autouse=True)
def _leave_no_keys(server):
    """Tests here also write through bare connections: leave the shared
    server empty for whatever test comes next."""
    yield
    cl = RespClient(server.port)
    try:
        cl.call("FLUSHALL")
    finally:
        cl.close()


# --------------------------------------------------------------------------
# queueing and errors
# --------------------------------------------------------------------------
def test_multi_exec_basic(c):
    assert c.call("MULTI") == "OK"
    assert c.call("SET", "a", "1") == "QUEUED"
    assert c.call("INCR", "a") == "QUEUED"
    assert c.call("GET", "a") == "QUEUED"
    assert c.call("EXISTS", "a", "nokey") == "QUEUED"
    assert c.call("EXEC") == ["OK", 2, b"2", 1]
    assert c.call("GET", "a") == b"2"


def test_empty_transaction(c):
    assert c.call("MULTI") == "OK"
    assert c.call("EXEC") == []


def test_nested_multi_is_an_error_but_keeps_the_transaction(c):
    assert c.call("MULTI") == "OK"
    assert c.call("MULTI") == RespError("ERR MULTI calls can not be nested")
    assert c.call("SET", "k", "v") == "QUEUED"
    assert c.call("EXEC") == ["OK"]


def test_exec_and_discard_without_multi(c):
    assert c.call("EXEC") == RespError("ERR EXEC without MULTI")
    assert c.call("DISCARD") == RespError("ERR DISCARD without MULTI")


def test_watch_inside_multi(c):
    assert c.call("MULTI") == "OK"
    assert c.call("WATCH", "x") == RespError("ERR WATCH inside MULTI is not allowed")
    assert c.call("PING") == "QUEUED"
    assert c.call("EXEC") == ["PONG"]


def test_unknown_command_aborts_exec(c):
    assert c.call("MULTI") == "OK"
    assert c.call("SET", "a", "1") == "QUEUED"
    rep = c.call("NOSUCHCOMMAND", "x")
    assert isinstance(rep, RespError) and rep.msg.startswith("ERR unknown command")
    assert c.call("EXEC") == RespError(EXECABORT)
    assert c.call("EXISTS", "a") == 0
    # the connection is out of MULTI again
    assert c.call("EXEC") == RespError("ERR EXEC without MULTI")


def test_arity_error_aborts_exec(c):
    assert c.call("MULTI") == "OK"
    assert c.call("SET", "a", "1") == "QUEUED"
    assert c.call("GET") == RespError("ERR wrong number of arguments for 'get' command")
    assert c.call("EXEC") == RespError(EXECABORT)
    assert c.call("EXISTS", "a") == 0


def test_runtime_errors_are_per_command(c):
    c.ok("SET", "s", "notanumber")
    assert c.call("MULTI") == "OK"
    assert c.call("SET", "a", "1") == "QUEUED"
    assert c.call("INCR", "s") == "QUEUED"
    assert c.call("HSET", "s", "f", "v") == "QUEUED"
    assert c.call("INCR", "a") == "QUEUED"
    rep = c.call("EXEC")
    assert rep[0] == "OK"
    assert rep[1] == RespError("ERR value is not an integer or out of range")
    assert rep[2] == RespError("WRONGTYPE Operation against a key holding the wrong kind of value")
    assert rep[3] == 2
    assert c.call("GET", "a") == b"2"
    assert c.call("GET", "s") == b"notanumber"


def test_discard(c):
    assert c.call("MULTI") == "OK"
    assert c.call("SET", "a", "1") == "QUEUED"
    assert c.call("DISCARD") == "OK"
    assert c.call("EXISTS", "a") == 0
    assert c.call("EXEC") == RespError("ERR EXEC without MULTI")


def test_select_inside_transaction(c):
    assert c.call("MULTI") == "OK"
    assert c.call("SELECT", "1") == "QUEUED"
    assert c.call("SET", "indb1", "x") == "QUEUED"
    assert c.call("EXEC") == ["OK", "OK"]
    assert c.call("GET", "indb1") == b"x"     # the SELECT stays in effect
    c.ok("SELECT", "0")
    assert c.call("EXISTS", "indb1") == 0


def test_multi_key_commands_inside_exec(c):
    assert c.call("MULTI") == "OK"
    assert c.call("SET", "{t}a", "1") == "QUEUED"
    assert c.call("MSET", "{t}b", "2", "c", "3") == "QUEUED"
    assert c.call("MGET", "{t}a", "{t}b", "c") == "QUEUED"
    assert c.call("RENAME", "c", "d") == "QUEUED"
    assert c.call("DEL", "{t}a", "{t}b") == "QUEUED"
    assert c.call("GET", "d") == "QUEUED"
    assert c.call("EXEC") == ["OK", "OK", [b"1", b"2", b"3"], "OK", 2, b"3"]
    assert c.call("MGET", "{t}a", "{t}b", "c", "d") == [None, None, None, b"3"]


def test_read_your_writes_strings_inside_exec(c):
    assert c.call("MULTI") == "OK"
    assert c.call("SET", "k", "v1") == "QUEUED"
    assert c.call("APPEND", "k", "v2") == "QUEUED"
    assert c.call("GET", "k") == "QUEUED"
    assert c.call("DEL", "k") == "QUEUED"
    assert c.call("GET", "k") == "QUEUED"
    assert c.call("EXEC") == ["OK", 4, b"v1v2", 1, None]


def test_collection_read_after_write_inside_exec(c):
    """Redis semantics: a command in EXEC sees the collection effects of the
    commands before it in the same transaction."""
    assert c.call("MULTI") == "OK"
    assert c.call("HSET", "h", "f", "1") == "QUEUED"
    assert c.call("HGET", "h", "f") == "QUEUED"
    assert c.call("HSET", "h", "g", "2") == "QUEUED"
    assert c.call("HLEN", "h") == "QUEUED"
    assert c.call("DEL", "h") == "QUEUED"
    assert c.call("HLEN", "h") == "QUEUED"
    rep = c.call("EXEC")
    if rep != [1, b"1", 1, 2, 1, 0]:
        pytest.xfail("db.c batch defers collection effects (got %r)" % (rep,))
    assert c.call("EXISTS", "h") == 0


def test_redis_py_pipeline_transaction(r):
    p = r.pipeline(transaction=True)
    p.set("x", 1).incr("x").get("x")
    assert p.execute() == [True, 2, b"2"]


def test_queued_replies_are_gated_then_exec_reply(raw):
    """A pipelined MULTI...EXEC: replies in order."""
    cn = raw()
    cn.send(encode_command("MULTI") + encode_command("SET", "p", "1") +
            encode_command("GET", "p") + encode_command("EXEC") + encode_command("GET", "p"))
    assert [cn.read_reply() for _ in range(5)] == ["OK", "QUEUED", "QUEUED", ["OK", b"1"], b"1"]


# --------------------------------------------------------------------------
# WATCH
# --------------------------------------------------------------------------
def test_watch_unmodified_key_exec_works(c):
    c.ok("SET", "w", "1")
    assert c.call("WATCH", "w") == "OK"
    assert c.call("MULTI") == "OK"
    assert c.call("INCR", "w") == "QUEUED"
    assert c.call("EXEC") == [2]


def test_watch_modified_by_other_connection_aborts(c, server):
    other = server.resp()
    c.ok("SET", "w", "1")
    assert c.call("WATCH", "w") == "OK"
    other.ok("SET", "w", "2")
    assert c.call("MULTI") == "OK"
    assert c.call("SET", "w", "mine") == "QUEUED"
    assert c.call("EXEC") is None
    assert c.call("GET", "w") == b"2"
    # after EXEC nothing is watched any more
    assert c.call("MULTI") == "OK"
    assert c.call("SET", "w", "mine") == "QUEUED"
    assert c.call("EXEC") == ["OK"]


def test_watch_missing_key_created_by_other_aborts(c, server):
    other = server.resp()
    assert c.call("WATCH", "nokey") == "OK"
    other.ok("SET", "nokey", "x")
    assert c.call("MULTI") == "OK"
    assert c.call("PING") == "QUEUED"
    assert c.call("EXEC") is None


def test_watch_key_deleted_by_other_aborts(c, server):
    other = server.resp()
    c.ok("SET", "w", "1")
    assert c.call("WATCH", "w") == "OK"
    assert other.call("DEL", "w") == 1
    assert c.call("MULTI") == "OK"
    assert c.call("PING") == "QUEUED"
    assert c.call("EXEC") is None


def test_watch_modified_by_self_aborts(c):
    c.ok("SET", "w", "1")
    assert c.call("WATCH", "w") == "OK"
    c.ok("SET", "w", "2")
    assert c.call("MULTI") == "OK"
    assert c.call("PING") == "QUEUED"
    assert c.call("EXEC") is None


def test_watch_collection_modified_aborts(c, server):
    other = server.resp()
    c.ok("HSET", "wh", "f", "1")
    assert c.call("WATCH", "wh") == "OK"
    assert other.call("HSET", "wh", "g", "2") == 1
    assert c.call("MULTI") == "OK"
    assert c.call("PING") == "QUEUED"
    assert c.call("EXEC") is None


def test_watch_expired_key_aborts(c):
    c.ok("SET", "wx", "1", "PX", "100")
    assert c.call("WATCH", "wx") == "OK"
    time.sleep(0.3)
    assert c.call("MULTI") == "OK"
    assert c.call("PING") == "QUEUED"
    assert c.call("EXEC") is None


def test_flushall_touches_watched_keys(c, server):
    other = server.resp()
    c.ok("SET", "w", "1")
    assert c.call("WATCH", "w") == "OK"
    other.ok("FLUSHALL")
    assert c.call("MULTI") == "OK"
    assert c.call("PING") == "QUEUED"
    assert c.call("EXEC") is None


def test_unwatch_and_discard_forget_watches(c, server):
    other = server.resp()
    c.ok("SET", "w", "1")
    assert c.call("WATCH", "w") == "OK"
    assert c.call("UNWATCH") == "OK"
    other.ok("SET", "w", "2")
    assert c.call("MULTI") == "OK"
    assert c.call("PING") == "QUEUED"
    assert c.call("EXEC") == ["PONG"]
    assert c.call("WATCH", "w") == "OK"
    assert c.call("MULTI") == "OK"
    assert c.call("DISCARD") == "OK"
    other.ok("SET", "w", "3")
    assert c.call("MULTI") == "OK"
    assert c.call("PING") == "QUEUED"
    assert c.call("EXEC") == ["PONG"]


def test_execabort_also_unwatches(c, server):
    other = server.resp()
    c.ok("SET", "w", "1")
    assert c.call("WATCH", "w") == "OK"
    assert c.call("MULTI") == "OK"
    c.call("NOSUCH")
    assert c.call("EXEC") == RespError(EXECABORT)
    other.ok("SET", "w", "2")
    assert c.call("MULTI") == "OK"
    assert c.call("PING") == "QUEUED"
    assert c.call("EXEC") == ["PONG"]


def test_reset_leaves_multi(c):
    assert c.call("MULTI") == "OK"
    assert c.call("SET", "a", "1") == "QUEUED"
    assert c.call("RESET") == "RESET"
    assert c.call("EXEC") == RespError("ERR EXEC without MULTI")
    assert c.call("EXISTS", "a") == 0


def test_optimistic_increment_under_contention(server):
    """WATCH/GET/MULTI/SET/EXEC retried until it succeeds: no lost update."""
    nthreads, per = 6, 60
    errors = []

    def worker():
        try:
            cl = server.client()
            for _ in range(per):
                while True:
                    with cl.pipeline(transaction=True) as p:
                        try:
                            p.watch("counter")
                            v = int(p.get("counter") or 0)
                            p.multi()
                            p.set("counter", v + 1)
                            p.execute()
                            break
                        except redis.WatchError:
                            continue
        except Exception as e:  # surfaced below
            errors.append(e)

    ts = [threading.Thread(target=worker) for _ in range(nthreads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert not errors, errors[0]
    assert int(server.client().get("counter")) == nthreads * per


def test_transaction_is_isolated(server):
    """Readers never see a half-applied transaction (keys on different
    shards: the transaction holds every lock while it runs)."""
    stop = threading.Event()
    errors = []
    keys = ["iso:a", "iso:b", "iso:c", "iso:d"]

    def writer():
        cl = server.client()
        i = 0
        while not stop.is_set():
            i += 1
            p = cl.pipeline(transaction=True)
            for k in keys:
                p.set(k, i)
            p.execute()

    def reader():
        cl = server.client()
        while not stop.is_set():
            vals = cl.mget(keys)
            if len(set(vals)) != 1:
                errors.append(vals)
                return

    server.client().mset({k: 0 for k in keys})
    ts = [threading.Thread(target=writer), threading.Thread(target=reader),
          threading.Thread(target=reader)]
    for t in ts:
        t.start()
    time.sleep(2.0)
    stop.set()
    for t in ts:
        t.join(30)
    assert not errors, "torn transaction seen: %r" % (errors[0],)


# --------------------------------------------------------------------------
# Rowan-only
# --------------------------------------------------------------------------
def test_keyspace_wide_commands_run_in_multi(c):
    """FLUSHALL, KEYS, DBSIZE, SCAN, SWAPDB, FLUSHDB, RANDOMKEY and INFO are
    queued and run inside EXEC, as in Redis (reads after the transaction's
    own writes: test_keyspace_in_batch.py)."""
    c.call("FLUSHALL")
    assert c.call("MSET", "k1", "1", "k2", "2") == "OK"
    assert c.call("MULTI") == "OK"
    for cmd in (["KEYS", "k*"], ["DBSIZE"], ["SCAN", "0", "COUNT", "1000"], ["RANDOMKEY"],
                ["INFO", "keyspace"]):
        assert c.call(*cmd) == "QUEUED", cmd
    r = c.call("EXEC")
    assert sorted(r[0]) == [b"k1", b"k2"] or sorted(r[0]) == ["k1", "k2"]
    assert r[1] == 2
    assert sorted(r[2][1]) in ([b"k1", b"k2"], ["k1", "k2"])
    assert r[3] in (b"k1", b"k2", "k1", "k2")
    assert "keys=2" in (r[4].decode() if isinstance(r[4], bytes) else str(r[4]))
    # A wiping transaction is all or nothing with its other writes.
    assert c.call("MULTI") == "OK"
    assert c.call("FLUSHALL") == "QUEUED"
    assert c.call("SET", "after", "x") == "QUEUED"
    assert c.call("SWAPDB", "0", "1") == "QUEUED"
    assert c.call("EXEC") == ["OK", "OK", "OK"]
    assert c.call("DBSIZE") == 0
    assert c.call("SELECT", "1") == "OK"
    assert c.call("GET", "after") in (b"x", "x")
    assert c.call("FLUSHDB") == "OK"
    assert c.call("SELECT", "0") == "OK"


class ExecWriter(threading.Thread):
    """MULTI / SET a i / SET b i / INCR c / EXEC in a loop, remembering the
    last acknowledged and the last attempted i."""

    def __init__(self, port, start_i, with_hash=False):
        super().__init__(daemon=True)
        self.port = port
        self.with_hash = with_hash
        self.i = start_i
        self.acked = start_i
        self.attempted = start_i
        self.stop = threading.Event()
        self.error = None

    def run(self):
        try:
            cn = RawConn(self.port)
        except CONN_ERRORS:
            return
        try:
            while not self.stop.is_set():
                i = self.i + 1
                self.attempted = i
                cmds = [("SET", "{x}a", i), ("SET", "b", i), ("INCR", "c")]
                want = ["OK", "OK", i]
                if self.with_hash:
                    cmds.append(("HSET", "h", "f", i))
                    want.append(1 if i == 1 else 0)
                cn.send(encode_command("MULTI") +
                        b"".join(encode_command(*cmd) for cmd in cmds) + encode_command("EXEC"))
                reps = [cn.read_reply() for _ in range(len(cmds) + 2)]
                if reps != ["OK"] + ["QUEUED"] * len(cmds) + [want]:
                    self.error = "EXEC %d: %r" % (i, reps)
                    return
                self.i = self.acked = i
        except CONN_ERRORS + (ConnectionClosed,):
            pass                      # the server was killed under us
        except Exception as e:
            self.error = repr(e)
        finally:
            cn.close()


@pytest.mark.rowan_only("kill -9 durability: a transaction is one log entry")
@pytest.mark.parametrize("with_hash", [False, True], ids=["strings", "strings+hash"])
def test_exec_all_or_nothing_across_kill9(server_factory, with_hash):
    srv = server_factory()
    last = 0
    for rnd in range(3):
        w = ExecWriter(srv.port, last, with_hash)
        w.start()
        deadline = time.monotonic() + 30
        target = last + 300 + 200 * rnd
        while w.acked < target and time.monotonic() < deadline and w.is_alive():
            time.sleep(0.01)
        assert w.error is None, w.error
        assert w.acked >= target, "only %d transactions acknowledged" % w.acked
        srv.kill9()
        w.stop.set()
        w.join(30)
        assert w.error is None, w.error
        srv.start()
        cl = srv.resp()
        a, b, cval = cl.call("MGET", "{x}a", "b", "c")
        hval = cl.call("HGET", "h", "f")
        cl.close()
        if with_hash:
            assert hval == a, "HSET not with its SETs: a=%r h.f=%r" % (a, hval)
        a, b, cval = int(a), int(b), int(cval)
        assert a == b, "transaction torn after kill -9: a=%d b=%d" % (a, b)
        assert cval == a, "INCR c not with its SETs: a=b=%d c=%d" % (a, cval)
        assert w.acked <= a <= w.attempted, \
            "a=%d after restart; acknowledged %d, attempted %d" % (a, w.acked, w.attempted)
        last = a


@pytest.mark.rowan_only("a transaction is one log entry, or pieces and a commit")
def test_exec_larger_than_one_log_entry(c):
    """Two 3 MiB values fit a log segment each but not together: their
    values are logged in pieces and the transaction's entry commits them
    (src/store/bigval.c). So many keys that the keys alone do not fit one
    entry are logged as pieces of the group and a commit (src/store/db.c):
    EXEC runs them all, as Redis does."""
    def transaction(*cmds):
        """MULTI, cmds, EXEC: the EXEC's reply. The server is shared by every
        test file, so its 64 MB pool may hold much dead data: until_room
        retries an EXEC refused -OOM while the cleaner makes room."""
        def once():
            assert c.call("MULTI") == "OK"
            for cmd in cmds:
                assert c.call(*cmd) == "QUEUED"
            return c.call("EXEC")
        return until_room(once, "the transaction")

    big = b"x" * (3 * 1024 * 1024)
    c.ok("SET", "keep", "old")
    assert transaction(("SET", "keep", "new"), ("SET", "big1", big),
                       ("SET", "big2", big)) == ["OK", "OK", "OK"]
    assert c.call("STRLEN", "big1") == len(big) and c.call("STRLEN", "big2") == len(big)
    assert c.call("GET", "keep") == b"new"
    assert c.call("DEL", "big1", "big2") == 2
    many = []
    for i in range(40000):
        many += [b"%0100d" % i, b"v"]
    assert transaction(("SET", "keep", "newer"), ("MSET", *many)) == ["OK", "OK"]
    assert c.call("GET", "keep") == b"newer"
    assert c.call("EXISTS", many[0], many[-2]) == 2
    # the connection and the server go on
    assert c.call("MULTI") == "OK"
    assert c.call("SET", "big1", big) == "QUEUED"
    assert c.call("EXEC") == ["OK"]
    assert c.call("STRLEN", "big1") == len(big)


class WideWriter(threading.Thread):
    """Transactions of NKEYS SETs of 8 KB values (keys spread over the
    shards) plus an INCR, in a loop: a kill -9 is likely to land while one
    is being executed."""
    NKEYS = 16

    def __init__(self, wid, port, start_i):
        super().__init__(daemon=True)
        self.wid, self.port = wid, port
        self.i = self.acked = self.attempted = start_i
        self.stop = threading.Event()
        self.error = None

    def keys(self):
        return ["wide:%d:%d" % (self.wid, k) for k in range(self.NKEYS)]

    @staticmethod
    def value(i, key):
        head = ("%d|%s|" % (i, key)).encode()
        return head + b"v" * (8192 - len(head))

    def run(self):
        try:
            cn = RawConn(self.port)
        except CONN_ERRORS:
            return
        try:
            while not self.stop.is_set():
                i = self.i + 1
                self.attempted = i
                msg = [encode_command("MULTI")]
                msg += [encode_command("SET", k, self.value(i, k)) for k in self.keys()]
                msg += [encode_command("INCR", "wide:%d:n" % self.wid), encode_command("EXEC")]
                cn.send(b"".join(msg))
                reps = [cn.read_reply() for _ in range(self.NKEYS + 3)]
                if reps[-1] != ["OK"] * self.NKEYS + [i]:
                    self.error = "EXEC %d: %r" % (i, reps[-1])
                    return
                self.i = self.acked = i
        except CONN_ERRORS + (ConnectionClosed,):
            pass
        except Exception as e:
            self.error = repr(e)
        finally:
            cn.close()

    def verify(self, cl):
        vals = cl.call("MGET", *self.keys())
        n = cl.call("GET", "wide:%d:n" % self.wid)
        n = int(n) if n is not None else 0
        if n == 0:
            assert vals == [None] * self.NKEYS, "writer %d: keys without their INCR" % self.wid
        else:
            want = [self.value(n, k) for k in self.keys()]
            torn = [k for k, v, w in zip(self.keys(), vals, want) if v != w]
            assert not torn, "writer %d: transaction %d torn after kill -9 (%d of %d keys " \
                "differ, e.g. %s = %r)" % (self.wid, n, len(torn), self.NKEYS, torn[0],
                                          (vals[self.keys().index(torn[0])] or b"")[:24])
        assert self.acked <= n <= self.attempted, \
            "writer %d: n=%d after restart; acknowledged %d, attempted %d" % (
                self.wid, n, self.acked, self.attempted)
        self.i = self.acked = self.attempted = n


@pytest.mark.rowan_only("kill -9 durability: a transaction is one log entry")
def test_wide_transactions_all_or_nothing_across_kill9(server_factory):
    srv = server_factory()
    starts = [0, 0, 0, 0]
    for rnd in range(4):
        ws = [WideWriter(k, srv.port, starts[k]) for k in range(len(starts))]
        for w in ws:
            w.start()
        time.sleep(0.4 + 0.3 * rnd)
        assert all(w.error is None for w in ws), [w.error for w in ws]
        assert any(w.acked > starts[w.wid] for w in ws), "no transaction acknowledged"
        srv.kill9()
        for w in ws:
            w.stop.set()
        for w in ws:
            w.join(30)
        assert all(w.error is None for w in ws), [w.error for w in ws]
        srv.start()
        cl = srv.resp()
        for w in ws:
            w.verify(cl)
            starts[w.wid] = w.acked
        cl.close()
