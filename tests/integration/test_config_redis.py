"""Redis 7.0's configuration surface: stock redis.conf files load, every
parameter of redis-server's CONFIG GET * exists, and CONFIG GET/SET replies
and errors match a real redis-server (Debian's 7.0) parameter by parameter.

Parameters owned by other families (Lua, streams, HLL, ACL, keyspace
notifications) are added by their own code; until they are there, the files
below leave their lines out and the name comparison skips them."""
import os
import shutil
import subprocess

import pytest

from conftest import RespError, Server

DEBIAN_CONF = "/etc/redis/redis.conf"
REDIS_SERVER = shutil.which("redis-server")

# Parameters added by other families' code (see the module comment).
OTHERS = {"notify-keyspace-events", "lua-time-limit", "busy-reply-threshold",
          "stream-node-max-bytes", "stream-node-max-entries", "hll-sparse-max-bytes",
          "aclfile", "acllog-max-len", "acl-pubsub-default"}

# Where Rowan differs on purpose (README "Configuration"): these are
# immutable in Rowan (the listener, the pool directory) and bounded tighter
# (Rowan's own limits), so CONFIG SET answers differently.
DIFFERENT_ON_PURPOSE = {"port", "bind", "dir", "databases", "maxclients",
                        "min-replicas-to-write", "min-slaves-to-write", "client-output-buffer-limit"}

need_redis = pytest.mark.skipif(REDIS_SERVER is None, reason="needs redis-server")


def flat_to_dict(rep):
    if isinstance(rep, dict):
        return rep
    return dict(zip(rep[0::2], rep[1::2]))


def config_get_all(srv):
    cl = srv.resp()
    return {k.decode() if isinstance(k, bytes) else k: v.decode() if isinstance(v, bytes) else v
            for k, v in flat_to_dict(cl.call("CONFIG", "GET", "*")).items()}


def missing_others(srv):
    """OTHERS names this server does not know yet."""
    have = config_get_all(srv)
    return {n for n in OTHERS if n not in have}


def filtered_conf(text, drop):
    out = []
    for line in text.splitlines():
        words = line.split()
        if words and not line.lstrip().startswith("#") and words[0].lower() in drop:
            continue
        out.append(line)
    return "\n".join(out) + "\n"


class FileServer(Server):
    """rowan-server <conf> --option ... (the test's options come last, so
    they override the file's port, dir, daemonize...)."""

    def __init__(self, target, conf, extra=None):
        super().__init__(target, extra=extra)
        self.conf = conf

    def argv(self):
        a = super().argv()
        return [a[0], self.conf] + a[1:]


@pytest.fixture
def file_server(target):
    made = []

    def make(text, extra=None, start=True):
        srv = FileServer(target, None, extra=extra)
        srv.conf = os.path.join(srv.dir, "redis.conf")
        with open(srv.conf, "w") as f:
            f.write(text)
        made.append(srv)
        if start:
            srv.start()
        return srv

    yield make
    for srv in made:
        srv.cleanup()


@pytest.fixture
def redis_ref():
    srv = Server("redis")
    srv.start()
    yield srv
    srv.cleanup()


SERVICE_OVERRIDES = {"daemonize": "no", "pidfile": "", "supervised": "no"}


@pytest.mark.skipif(not os.path.exists(DEBIAN_CONF), reason="needs the redis-server package")
def test_debian_redis_conf_loads(server, file_server):
    text = open(DEBIAN_CONF).read()
    srv = file_server(filtered_conf(text, missing_others(server)), extra=SERVICE_OVERRIDES)
    got = config_get_all(srv)
    # Values from the file, in Redis's CONFIG GET rendering.
    assert got["hash-max-listpack-entries"] == "512"
    assert got["list-max-listpack-size"] == "-2"
    assert got["appendfsync"] == "everysec"
    assert got["oom-score-adj-values"] == "0 200 800"
    assert got["lazyfree-lazy-user-flush"] == "no"
    assert got["repl-diskless-load"] == "disabled"
    cl = srv.resp()
    assert cl.call("SET", "k", "v") == "OK"
    assert cl.call("GET", "k") == b"v"


@need_redis
def test_every_redis_parameter_loads_from_a_file(server, redis_ref, file_server):
    """A file with every parameter of redis-server's CONFIG GET *, written
    with the values redis-server shows, starts rowan-server, and CONFIG GET
    shows the same values back."""
    ref = config_get_all(redis_ref)
    skip = missing_others(server) | {"port", "bind", "dir", "pidfile", "logfile", "daemonize",
                                     "supervised", "databases"}
    lines = []
    for name, value in sorted(ref.items()):
        if name in skip:
            continue
        if name == "save":
            value = "900 1 300 10"
        if name == "client-output-buffer-limit":
            words = value.split()
            for i in range(0, len(words), 4):
                lines.append("%s %s" % (name, " ".join(words[i:i + 4])))
            continue
        lines.append('%s "%s"' % (name, value) if value == "" or " " in value and name not in
                     ("save", "oom-score-adj-values", "latency-tracking-info-percentiles",
                      "replicaof", "slaveof") else "%s %s" % (name, value))
    srv = file_server("\n".join(lines) + "\n", extra=SERVICE_OVERRIDES)
    got = config_get_all(srv)
    for name, value in ref.items():
        if name in skip or name in ("min-replicas-to-write", "min-slaves-to-write"):
            continue
        want = "900 1 300 10" if name == "save" else value
        assert got.get(name) == want, name


@need_redis
def test_config_get_star_has_every_redis_parameter(server, redis_ref):
    ref = set(config_get_all(redis_ref))
    got = set(config_get_all(server))
    assert sorted(ref - got - missing_others(server)) == []


def unknown_directive_fails(target, tmp_path, line):
    conf = tmp_path / "bad.conf"
    conf.write_text("port 0\n" + line + "\n")
    binary = Server(target).binary
    p = subprocess.run([binary, str(conf)], capture_output=True, text=True, timeout=20)
    return p.returncode, p.stdout + p.stderr


def test_unknown_directive_fails_like_redis(target, tmp_path):
    rc, out = unknown_directive_fails(target, tmp_path, "no-such-directive yes")
    assert rc == 1
    assert "Bad directive or wrong number of arguments" in out
    assert "no-such-directive" in out
    rc, out = unknown_directive_fails(target, tmp_path, "appendfsync sometimes")
    assert rc == 1
    assert "argument(s) must be one of the following: everysec, always, no" in out


def probe_values(value):
    return ["x!y", "-99999999999999999", "99999999999999999", "", "-1", "0", "1", "yes",
            "7", "100 1", "3600 1 300 100 60 10000", "no one", "0 200 800", "0 200",
            "50 99.9", "101", "local", "allkeys-lru", "1gb", value]


@need_redis
def test_config_set_replies_match_redis(server_factory, redis_ref):
    """CONFIG SET of every Redis parameter with a series of good and bad
    values answers as redis-server does (OK or the same error text), and
    CONFIG GET then shows the same value."""
    srv = server_factory()
    ref = config_get_all(redis_ref)
    skip = missing_others(srv) | DIFFERENT_ON_PURPOSE | {
        "requirepass",   # would lock the test's own clients out
        "maxmemory",     # 1gb/huge values are fine but 1 would evict the test's keys
        "tls-port", "tls-cert-file", "tls-key-file", "tls-ca-cert-file", "tls-ca-cert-dir",
        "tls-dh-params-file", "tls-client-cert-file", "tls-client-key-file",
        "tls-key-file-pass", "tls-client-key-file-pass", "tls-ciphers", "tls-ciphersuites",
        "tls-protocols",  # redis-server checks these by loading the files/TLS context
        "cluster-announce-hostname",  # hostname character rules not modelled
        "bind-source-addr", "proc-title-template",  # redis checks these against the OS
        "timeout", "hz", "slowlog-max-len", "slowlog-log-slower-than", "loglevel",
        "maxmemory-clients", "client-query-buffer-limit", "proto-max-bulk-len",
        "tcp-keepalive", "protected-mode",  # existing Rowan options, tested in test_server_cmds
        "logfile",       # each server has its own
        "activedefrag", "tls-cluster", "tls-replication"}  # redis-server refuses "yes" for
        # want of its jemalloc / a TLS setup: build-dependent, not syntax
    rc, rr = srv.resp(), redis_ref.resp()
    mismatches = []
    for name in sorted(ref):
        if name in skip:
            continue
        rc.call("CONFIG", "SET", name, ref[name])
        for v in probe_values(ref[name]):
            a = rc.call("CONFIG", "SET", name, v)
            b = rr.call("CONFIG", "SET", name, v)
            ga = rc.call("CONFIG", "GET", name)
            gb = rr.call("CONFIG", "GET", name)
            if str(a) != str(b) or flat_to_dict(ga) != flat_to_dict(gb):
                mismatches.append((name, v, a, b, ga, gb))
        rc.call("CONFIG", "SET", name, ref[name])
        rr.call("CONFIG", "SET", name, ref[name])
    for m in mismatches:
        print("MISMATCH", m)
    assert mismatches == []


@need_redis
def test_aliases_and_duplicates_match_redis(server, redis_ref):
    for srv in (server, redis_ref):
        cl = srv.resp()
        assert cl.call("CONFIG", "SET", "hash-max-ziplist-entries", "17") == "OK"
        assert flat_to_dict(cl.call("CONFIG", "GET", "hash-max-listpack-entries")) == \
            {b"hash-max-listpack-entries": b"17"}
        assert flat_to_dict(cl.call("CONFIG", "GET", "hash-max-*-entries")) == \
            {b"hash-max-listpack-entries": b"17", b"hash-max-ziplist-entries": b"17"}
        # An option and its alias in one CONFIG SET: the later one wins.
        assert cl.call("CONFIG", "SET", "slave-priority", "5", "replica-priority", "6") == "OK"
        assert flat_to_dict(cl.call("CONFIG", "GET", "slave-priority")) == {b"slave-priority": b"6"}
        e = cl.call("CONFIG", "SET", "slave-priority", "5", "SLAVE-priority", "6")
        assert isinstance(e, RespError)
        assert str(e) == ("ERR CONFIG SET failed (possibly related to argument "
                          "'SLAVE-priority') - duplicate parameter")
        assert cl.call("CONFIG", "SET", "hash-max-ziplist-entries", "512") == "OK"


def test_save_lines_add_up_and_rewrite_keeps_them(file_server):
    srv = file_server("save 60 1\nsave 30 2\nslave-read-only no\nappendonly no\n"
                      "hash-max-ziplist-entries 99\n")
    cl = srv.resp()
    got = flat_to_dict(cl.call("CONFIG", "GET", "save"))
    assert got == {b"save": b"60 1 30 2"}
    assert flat_to_dict(cl.call("CONFIG", "GET", "replica-read-only")) == {b"replica-read-only": b"no"}
    assert cl.call("CONFIG", "SET", "appendonly", "yes", "appendfsync", "always") == "OK"
    assert cl.call("CONFIG", "SET", "save", "") == "OK"
    assert cl.call("CONFIG", "REWRITE") == "OK"
    text = open(srv.conf).read()
    assert "appendonly yes" in text
    assert "appendfsync always" in text
    assert "replica-read-only no" in text and "slave-read-only" not in text
    assert "hash-max-listpack-entries 99" in text
    assert 'save ""' in text and "save 60" not in text
    srv.stop()
    srv.start()
    got = config_get_all(srv)
    assert got["save"] == "" and got["appendonly"] == "yes" and got["appendfsync"] == "always"
    assert got["hash-max-listpack-entries"] == "99"


def test_include(file_server, tmp_path):
    inc = tmp_path / "frag"
    inc.mkdir()
    (inc / "a.conf").write_text("maxmemory-samples 7\n")
    (inc / "b.conf").write_text("maxmemory-samples 9\nactiverehashing no\n")
    srv = file_server("include %s/*.conf\ninclude %s/none-*.conf\n" % (inc, inc))
    got = config_get_all(srv)
    assert got["maxmemory-samples"] == "9"
    assert got["activerehashing"] == "no"


def test_protected_config_needs_enable_protected_configs(server_factory):
    srv = server_factory()
    e = srv.resp().call("CONFIG", "SET", "dbfilename", "x.rdb")
    assert str(e) == ("ERR CONFIG SET failed (possibly related to argument 'dbfilename') - "
                      "can't set protected config")
    srv2 = server_factory(extra={"enable-protected-configs": "yes"})
    assert srv2.resp().call("CONFIG", "SET", "dbfilename", "x.rdb") == "OK"


def encodings(srv, script):
    cl = srv.resp()
    out = []
    for cmd in script:
        rep = cl.call(*cmd)
        if cmd[0] == "OBJECT":
            out.append(rep)
    return out


ENCODING_SCRIPT = [
    ("FLUSHALL",),
    ("CONFIG", "SET", "hash-max-ziplist-entries", "2", "hash-max-listpack-value", "5"),
    ("HSET", "h1", "a", "1", "b", "2"), ("OBJECT", "ENCODING", "h1"),
    ("HSET", "h1", "c", "3"), ("OBJECT", "ENCODING", "h1"),
    ("HSET", "h2", "a", "123456"), ("OBJECT", "ENCODING", "h2"),
    ("CONFIG", "SET", "zset-max-listpack-entries", "3", "zset-max-ziplist-value", "4"),
    ("ZADD", "z1", "1", "a", "2", "b", "3", "c"), ("OBJECT", "ENCODING", "z1"),
    ("ZADD", "z1", "4", "d"), ("OBJECT", "ENCODING", "z1"),
    ("ZADD", "z2", "1", "abcde"), ("OBJECT", "ENCODING", "z2"),
    ("CONFIG", "SET", "set-max-intset-entries", "2"),
    ("SADD", "s1", "1", "2"), ("OBJECT", "ENCODING", "s1"),
    ("CONFIG", "SET", "hash-max-listpack-entries", "512", "hash-max-listpack-value", "64",
     "zset-max-listpack-entries", "128", "zset-max-listpack-value", "64",
     "set-max-intset-entries", "512"),
]


@need_redis
def test_encoding_knobs_match_redis(server, redis_ref):
    assert encodings(server, ENCODING_SCRIPT) == encodings(redis_ref, ENCODING_SCRIPT)
    assert encodings(server, ENCODING_SCRIPT)[:2] == [b"listpack", b"hashtable"]


def test_set_listpack_knobs(server):
    """Redis 7.2's set encodings (redis-server here is 7.0, without them)."""
    script = [("FLUSHALL",), ("CONFIG", "SET", "set-max-intset-entries", "2"),
              ("SADD", "s", "1", "2", "3"), ("OBJECT", "ENCODING", "s"),
              ("CONFIG", "SET", "set-max-listpack-entries", "3", "set-max-listpack-value", "3"),
              ("SADD", "t", "a", "b", "c"), ("OBJECT", "ENCODING", "t"),
              ("SADD", "t", "d"), ("OBJECT", "ENCODING", "t"),
              ("SADD", "u", "abcd"), ("OBJECT", "ENCODING", "u"),
              ("CONFIG", "SET", "set-max-intset-entries", "512", "set-max-listpack-entries",
               "128", "set-max-listpack-value", "64")]
    # An intset over set-max-intset-entries becomes a hashtable (7.2's
    # setTypeAddAux); strings go to a listpack while it fits its limits.
    assert encodings(server, script) == [b"hashtable", b"listpack", b"hashtable", b"hashtable"]


DEBUG_REFUSED = ('ERR DEBUG command not allowed. If the enable-debug-command option is set to '
                 '"local", you can run it from a local connection, otherwise you need to set this '
                 'option in the configuration file, and then restart the server.')


@need_redis
@pytest.mark.parametrize("setting", [None, "no", "local", "yes"])
def test_enable_debug_command_matches_redis(target, setting):
    replies = []
    for kind in ("rowan", "redis"):
        srv = Server(kind, extra={"enable-debug-command": setting})
        srv.start()
        try:
            cl = srv.resp()
            replies.append([str(cl.call("DEBUG", "SLEEP", "0")),
                            str(cl.call("DEBUG", "SET-ACTIVE-EXPIRE", "1")),
                            flat_to_dict(cl.call("CONFIG", "GET", "enable-debug-command")),
                            str(cl.call("CONFIG", "SET", "enable-debug-command", "yes"))])
        finally:
            srv.cleanup()
    assert replies[0] == replies[1]
    if setting in (None, "no"):
        assert replies[0][0] == DEBUG_REFUSED
    else:
        assert replies[0][0] == "OK"


def test_debug_set_active_expire_and_object(server):
    cl = server.resp()
    cl.call("FLUSHALL")
    assert cl.call("DEBUG", "SET-ACTIVE-EXPIRE", "0") == "OK"
    try:
        cl.call("SET", "e", "v", "PX", "50")
        import time
        time.sleep(0.5)
        # Not expired in the background: still counted until touched.
        assert cl.call("DBSIZE") == 1
        assert cl.call("EXISTS", "e") == 0
    finally:
        assert cl.call("DEBUG", "SET-ACTIVE-EXPIRE", "1") == "OK"
    cl.call("SET", "s", "hello")
    cl.call("HSET", "h", "f", "v")
    line = cl.call("DEBUG", "OBJECT", "s")
    assert "encoding:embstr" in line and "lru_seconds_idle:" in line
    assert "encoding:listpack" in cl.call("DEBUG", "OBJECT", "h")
    assert str(cl.call("DEBUG", "OBJECT", "nope")) == "ERR no such key"


def test_rename_command(file_server, target):
    if target != "rowan":
        pytest.skip("checks Rowan's startup errors")
    srv = file_server('rename-command FLUSHALL ""\nrename-command CONFIG MYCONFIG\n'
                      'rename-command get fetch\n')
    cl = srv.resp()
    assert str(cl.call("FLUSHALL")).startswith("ERR unknown command 'FLUSHALL'")
    assert str(cl.call("CONFIG", "GET", "port")).startswith("ERR unknown command 'CONFIG'")
    assert flat_to_dict(cl.call("MYCONFIG", "GET", "maxmemory")) == {b"maxmemory": b"0"}
    cl.call("SET", "k", "v")
    assert cl.call("FETCH", "k") == b"v"
    assert cl.call("MYCONFIG", "REWRITE") == "OK"
    assert "rename-command get fetch" in open(srv.conf).read()
    bad = file_server("rename-command NOSUCH x\n", start=False)
    p = subprocess.run(bad.argv(), capture_output=True, text=True, timeout=20)
    assert p.returncode == 1
    assert "No such command in rename-command" in p.stdout + p.stderr


def test_no_effect_directives_warn(server_factory, target):
    if target != "rowan":
        pytest.skip("Rowan's warning")
    srv = server_factory(extra={"replicaof": "10.0.0.1 6379", "tls-replication": "yes"})
    cl = srv.resp()
    assert flat_to_dict(cl.call("CONFIG", "GET", "slaveof")) == {b"slaveof": b"10.0.0.1 6379"}
    log = srv.log_text()
    assert "'replicaof 10.0.0.1 6379' is accepted for compatibility but has no effect" in log
    assert "'tls-replication yes' is accepted" in log
    assert cl.call("SET", "k", "v") == "OK"     # still a primary
