"""TLS for clients (tls-port and the tls-* options), as in Redis 7.0.

A throwaway CA and certificates are made with the `openssl` CLI once per
session; real clients connect: Debian's python3-redis (ssl=True),
`redis-cli --tls`, and Python's ssl module for handshake details. Checks:
client certificates required/optional/ignored (tls-auth-clients), protocol
and session-cache options taking effect, plain TCP off with port 0, large
values and pipelines through non-blocking SSL_read/SSL_write, garbage and
failed handshakes never hurting the server, and kill -9 durability over TLS.
The same tests run against redis-server (--target redis) where Debian's
build has TLS."""
import os
import shutil
import socket
import ssl
import subprocess
import time

import pytest
import redis

from conftest import wait_for

OPENSSL = shutil.which("openssl")
REDIS_CLI = shutil.which("redis-cli")
pytestmark = pytest.mark.skipif(OPENSSL is None, reason="needs the openssl CLI")


def _openssl(*args, cwd):
    subprocess.run([OPENSSL] + list(args), cwd=cwd, check=True, capture_output=True, timeout=60)


def _make_ca(d, name):
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", name + ".key", "-out", name + ".crt", "-days", "2",
             "-subj", "/CN=" + name, cwd=d)


def _make_cert(d, name, ca, san="IP:127.0.0.1,DNS:localhost"):
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", name + ".key", "-out", name + ".csr", "-subj", "/CN=" + name, cwd=d)
    with open(os.path.join(d, name + ".ext"), "w") as f:
        f.write("subjectAltName=%s\n" % san)
    _openssl("x509", "-req", "-in", name + ".csr", "-CA", ca + ".crt", "-CAkey", ca + ".key",
             "-CAcreateserial", "-out", name + ".crt", "-days", "2",
             "-extfile", name + ".ext", cwd=d)


@pytest.fixture(scope="session")
def certs(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("tls-certs"))
    _make_ca(d, "ca")
    _make_ca(d, "otherca")             # a CA the server does not trust
    _make_cert(d, "server", "ca")
    _make_cert(d, "client", "ca")
    _make_cert(d, "stranger", "otherca")
    # the server key again, encrypted (tls-key-file-pass)
    _openssl("pkey", "-in", "server.key", "-aes256", "-passout", "pass:s3cret",
             "-out", "server-enc.key", cwd=d)
    p = lambda n: os.path.join(d, n)
    return {"dir": d, "ca": p("ca.crt"), "cert": p("server.crt"), "key": p("server.key"),
            "enc_key": p("server-enc.key"), "client_cert": p("client.crt"),
            "client_key": p("client.key"), "stranger_cert": p("stranger.crt"),
            "stranger_key": p("stranger.key")}


def tls_options(certs, port, **more):
    opts = {"tls-port": str(port), "tls-cert-file": certs["cert"],
            "tls-key-file": certs["key"], "tls-ca-cert-file": certs["ca"]}
    opts.update({k.replace("_", "-"): v for k, v in more.items()})
    return opts


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_tls(server_factory, certs, plain=True, **more):
    """A server with a TLS port (and its plain port unless plain=False);
    returns (server, tls_port)."""
    tport = free_port()
    extra = tls_options(certs, tport, **more)
    if not plain:
        extra["port"] = "0"
    srv = server_factory(extra=extra, start=plain)
    if not plain:
        srv.start(wait=False)
    wait_for(lambda: tls_ping(certs, tport) or not srv.alive(), timeout=30)
    assert srv.alive(), srv.log_tail(30)
    return srv, tport


def tls_ping(certs, port):
    try:
        return tls_client(certs, port, socket_timeout=2).ping()
    except (redis.exceptions.ConnectionError, OSError):
        return False


def tls_client(certs, port, client_cert=True, stranger=False, **kw):
    args = {"host": "127.0.0.1", "port": port, "ssl": True, "ssl_ca_certs": certs["ca"],
            "ssl_cert_reqs": "required", "socket_timeout": 20}
    if client_cert:
        who = "stranger" if stranger else "client"
        args["ssl_certfile"] = certs[who + "_cert"]
        args["ssl_keyfile"] = certs[who + "_key"]
    args.update(kw)
    return redis.Redis(**args)


def ssl_context(certs, client_cert=True, **versions):
    ctx = ssl.create_default_context(cafile=certs["ca"])
    if client_cert:
        ctx.load_cert_chain(certs["client_cert"], certs["client_key"])
    for k, v in versions.items():
        setattr(ctx, k, v)
    return ctx


def ssl_connect(ctx, port, session=None):
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    return ctx.wrap_socket(raw, server_hostname="127.0.0.1", session=session)


def refused(fn):
    """fn() fails with a connection-level error (handshake refused or the
    connection closed), never with a reply."""
    try:
        fn()
    except (redis.exceptions.ConnectionError, ssl.SSLError, ConnectionError, OSError):
        return True
    return False


def cli(certs, port, *args, client_cert=True, stdin=None):
    cmd = [REDIS_CLI, "--tls", "--cacert", certs["ca"], "-h", "127.0.0.1", "-p", str(port)]
    if client_cert:
        cmd += ["--cert", certs["client_cert"], "--key", certs["client_key"]]
    return subprocess.run(cmd + list(args), capture_output=True, timeout=60, input=stdin)


def assert_serving(srv, certs, port):
    assert srv.alive(), srv.log_tail(30)
    c = tls_client(certs, port)
    assert c.ping()
    c.close()


# ---------------------------------------------------------------- basics

def test_python_client_over_tls(server_factory, certs):
    srv, tport = start_tls(server_factory, certs)
    c = tls_client(certs, tport)
    assert c.set("k", "v")
    assert c.get("k") == b"v"
    assert c.hset("h", mapping={"a": "1", "b": "2"}) == 2
    assert c.hgetall("h") == {b"a": b"1", b"b": b"2"}
    assert c.incr("n", 5) == 5
    # the plain port serves the same data beside the TLS one
    plain = redis.Redis(port=srv.port)
    assert plain.get("k") == b"v"
    assert plain.config_get("tls-port") == {"tls-port": str(tport)}
    assert plain.config_get("tls-auth-clients") == {"tls-auth-clients": "yes"}


@pytest.mark.skipif(REDIS_CLI is None, reason="needs redis-cli")
def test_redis_cli_tls(server_factory, certs):
    srv, tport = start_tls(server_factory, certs)
    p = cli(certs, tport, "PING")
    assert p.stdout.strip() == b"PONG", p.stderr
    value = os.urandom(700 * 1024).hex().encode()        # 1.4 MB
    p = cli(certs, tport, "-x", "SET", "big", stdin=value)
    assert p.stdout.strip() == b"OK", p.stderr
    p = cli(certs, tport, "--no-raw", "STRLEN", "big")
    assert p.stdout.strip() == b"(integer) %d" % len(value)
    p = cli(certs, tport, "GET", "big")
    assert p.stdout.rstrip(b"\n") == value
    # without a client certificate (tls-auth-clients yes): refused
    p = cli(certs, tport, "PING", client_cert=False)
    assert b"PONG" not in p.stdout
    assert_serving(srv, certs, tport)


# ---------------------------------------------------------------- client auth

def test_auth_clients_yes_refuses_without_or_with_untrusted_cert(server_factory, certs):
    srv, tport = start_tls(server_factory, certs)
    assert refused(lambda: tls_client(certs, tport, client_cert=False).ping())
    assert refused(lambda: tls_client(certs, tport, stranger=True).ping())
    assert tls_client(certs, tport).ping()
    assert_serving(srv, certs, tport)


def test_auth_clients_no_and_optional(server_factory, certs):
    srv, tport = start_tls(server_factory, certs, tls_auth_clients="no")
    assert tls_client(certs, tport, client_cert=False).ping()
    assert tls_client(certs, tport, stranger=True).ping()   # not even looked at
    srv2, tport2 = start_tls(server_factory, certs, tls_auth_clients="optional")
    assert tls_client(certs, tport2, client_cert=False).ping()
    assert tls_client(certs, tport2).ping()
    # optional: a certificate that is offered must verify
    assert refused(lambda: tls_client(certs, tport2, stranger=True).ping())
    assert_serving(srv2, certs, tport2)


def test_client_must_verify_the_server(server_factory, certs):
    """The server presents tls-cert-file: a client trusting another CA stops."""
    srv, tport = start_tls(server_factory, certs)
    other_ca = os.path.join(certs["dir"], "otherca.crt")
    assert refused(lambda: tls_client(certs, tport, ssl_ca_certs=other_ca).ping())
    assert_serving(srv, certs, tport)


# ---------------------------------------------------------------- listeners

def test_port_zero_serves_tls_only(server_factory, certs):
    srv, tport = start_tls(server_factory, certs, plain=False)
    c = tls_client(certs, tport)
    assert c.set("only", "tls")
    assert c.get("only") == b"tls"
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", srv.port), timeout=2).close()


def test_plain_client_on_tls_port_fails_cleanly(server_factory, certs):
    srv, tport = start_tls(server_factory, certs)
    s = socket.create_connection(("127.0.0.1", tport), timeout=10)
    s.sendall(b"*1\r\n$4\r\nPING\r\n")
    data = b""
    try:
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    except ConnectionResetError:
        pass
    s.close()
    assert b"PONG" not in data
    # redis-py without ssl: an error, not a hang or a reply
    assert refused(lambda: redis.Redis(port=tport, socket_timeout=5).ping())
    assert_serving(srv, certs, tport)


def test_garbage_and_broken_handshakes_never_crash(server_factory, certs):
    srv, tport = start_tls(server_factory, certs, tls_auth_clients="optional")
    rnd = os.urandom(64 * 1024)
    for payload in (rnd[:1], rnd[:5], rnd, b"\x16\x03\x01\x00\x05hello", b"\x16\x03\x03\xff\xff" +
                    rnd[:300], b"GET / HTTP/1.1\r\n\r\n", b"\x80" * 10000):
        s = socket.create_connection(("127.0.0.1", tport), timeout=10)
        try:
            s.sendall(payload)
            s.recv(100)
        except OSError:
            pass
        s.close()
    # a real ClientHello, then the connection dropped mid-handshake
    for _ in range(20):
        raw = socket.create_connection(("127.0.0.1", tport), timeout=10)
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        obj = ssl_context(certs).wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
        with pytest.raises(ssl.SSLWantReadError):
            obj.do_handshake()
        raw.sendall(outgoing.read())
        raw.close()
    # handshakes done, then bytes of garbage inside the TLS stream
    for _ in range(10):
        s = ssl_connect(ssl_context(certs), tport)
        s.sendall(b"*1\r\n$4\r\nPING\r\n")
        assert s.recv(100) == b"+PONG\r\n"
        s.sendall(b"*2\r\n$3\r\nGET\r\n$-5\r\n" + rnd[:100])   # protocol error: closed
        s.close()
    assert_serving(srv, certs, tport)


# ---------------------------------------------------------------- volume

def test_large_values_and_pipelines(server_factory, certs):
    srv, tport = start_tls(server_factory, certs)
    c = tls_client(certs, tport, socket_timeout=60)
    big = os.urandom(3 * 1024 * 1024)      # a stored value fits one 4 MiB log segment
    assert c.set("big", big)
    assert c.get("big") == big
    huge = os.urandom(12 * 1024 * 1024)    # ECHO: 12 MB each way, nothing stored
    assert c.echo(huge) == huge
    # a pipeline written whole before any reply is read, large both ways
    vals = [os.urandom(200 * 1024) for _ in range(30)]
    p = c.pipeline(transaction=False)
    for i, v in enumerate(vals):
        p.set("v%d" % i, v)
    for i in range(len(vals)):
        p.get("v%d" % i)
    res = p.execute()
    assert res[:30] == [True] * 30
    assert res[30:] == vals
    p = c.pipeline(transaction=False)
    for i in range(20000):
        p.incr("ctr")
    assert p.execute()[-1] == 20000
    # many small replies read back at once (decrypted bytes left in OpenSSL)
    s = ssl_connect(ssl_context(certs), tport)
    s.sendall(b"*1\r\n$4\r\nPING\r\n" * 5000)
    want = b"+PONG\r\n" * 5000
    got = b""
    while len(got) < len(want):
        chunk = s.recv(65536)
        assert chunk
        got += chunk
    assert got == want
    s.close()
    assert_serving(srv, certs, tport)


def test_slow_reader_gets_every_byte(server_factory, certs):
    """Replies far beyond the socket buffers, taken in small slow reads:
    SSL_write hits WANT_WRITE again and again while the output buffer grows
    and is compacted under it (ACCEPT_MOVING_WRITE_BUFFER)."""
    srv, tport = start_tls(server_factory, certs)
    c = tls_client(certs, tport)
    val = os.urandom(300 * 1024)
    assert c.set("v", val)
    s = ssl_connect(ssl_context(certs), tport)
    n = 40
    s.sendall(b"*2\r\n$3\r\nGET\r\n$1\r\nv\r\n" * n)
    want = (b"$%d\r\n" % len(val) + val + b"\r\n") * n
    got = bytearray()
    reads = 0
    while len(got) < len(want):
        chunk = s.recv(7000)
        assert chunk
        got += chunk
        reads += 1
        if reads % 200 == 0:
            time.sleep(0.05)
            assert c.ping()        # others are served meanwhile
    assert bytes(got) == want
    s.close()
    assert_serving(srv, certs, tport)


@pytest.mark.rowan_only("Redis writes its refusal line inside TLS after the handshake")
def test_maxclients_refusal_on_tls_port(server_factory, certs):
    srv, tport = start_tls(server_factory, certs)
    plain = redis.Redis(port=srv.port)
    plain.ping()   # its connection is open: with maxclients 1 no other fits
    assert plain.config_set("maxclients", 1)
    assert refused(lambda: tls_client(certs, tport).ping())
    assert plain.config_set("maxclients", 10000)
    assert_serving(srv, certs, tport)


def test_many_clients_at_once(server_factory, certs):
    srv, tport = start_tls(server_factory, certs)
    clients = [tls_client(certs, tport) for _ in range(40)]
    for i, c in enumerate(clients):
        assert c.set("c%d" % i, i)
    for i, c in enumerate(clients):
        assert c.get("c%d" % i) == str(i).encode()
    info = clients[0].info("clients")
    assert info["connected_clients"] >= 40


# ---------------------------------------------------------------- options

def test_protocols_option(server_factory, certs):
    srv, tport = start_tls(server_factory, certs, tls_protocols="TLSv1.3")
    s = ssl_connect(ssl_context(certs), tport)
    assert s.version() == "TLSv1.3"
    s.close()
    ctx12 = ssl_context(certs, maximum_version=ssl.TLSVersion.TLSv1_2)
    assert refused(lambda: ssl_connect(ctx12, tport).recv(1))
    srv2, tport2 = start_tls(server_factory, certs, tls_protocols="TLSv1.2")
    s = ssl_connect(ssl_context(certs), tport2)
    assert s.version() == "TLSv1.2"
    s.close()
    assert_serving(srv, certs, tport)


def test_ciphers_options(server_factory, certs):
    srv, tport = start_tls(server_factory, certs, tls_protocols="TLSv1.2",
                           tls_ciphers="ECDHE-ECDSA-AES128-GCM-SHA256",
                           tls_prefer_server_ciphers="yes")
    s = ssl_connect(ssl_context(certs), tport)
    assert s.cipher()[0] == "ECDHE-ECDSA-AES128-GCM-SHA256"
    s.close()
    srv2, tport2 = start_tls(server_factory, certs, tls_ciphersuites="TLS_CHACHA20_POLY1305_SHA256")
    s = ssl_connect(ssl_context(certs), tport2)
    assert s.cipher()[0] == "TLS_CHACHA20_POLY1305_SHA256"
    s.close()


def _reused(certs, port):
    ctx = ssl_context(certs)
    s = ssl_connect(ctx, port)
    s.sendall(b"*1\r\n$4\r\nPING\r\n")
    assert s.recv(100) == b"+PONG\r\n"       # TLS 1.3 tickets arrive after the handshake
    sess = s.session
    s.close()
    s = ssl_connect(ctx, port, session=sess)
    s.sendall(b"*1\r\n$4\r\nPING\r\n")
    assert s.recv(100) == b"+PONG\r\n"
    r = s.session_reused
    s.close()
    return r


@pytest.mark.rowan_only("redis-server 7.0 sets no session id context: a resumed handshake "
                        "with client certificates fails with an internal error alert")
def test_session_caching(server_factory, certs):
    srv, tport = start_tls(server_factory, certs)
    assert _reused(certs, tport) is True
    srv2, tport2 = start_tls(server_factory, certs, tls_session_caching="no")
    assert _reused(certs, tport2) is False


def test_encrypted_key_file(server_factory, certs):
    srv, tport = start_tls(server_factory, certs, tls_key_file=certs["enc_key"],
                           tls_key_file_pass="s3cret")
    assert tls_client(certs, tport).ping()


def _start_fails(server_factory, extra):
    srv = server_factory(extra=extra, start=False)
    p = subprocess.run(srv.argv(), capture_output=True, text=True, timeout=30, cwd=srv.dir)
    return p.returncode, p.stdout + p.stderr + srv.log_text()


@pytest.mark.rowan_only("Rowan's startup messages")
def test_bad_tls_configuration_fails_at_start(server_factory, certs):
    port = free_port()
    rc, out = _start_fails(server_factory, tls_options(certs, port, tls_key_file=certs["enc_key"],
                                                       tls_key_file_pass="wrong"))
    assert rc != 0 and "Failed to configure TLS" in out and "private key" in out
    rc, out = _start_fails(server_factory, tls_options(certs, port, tls_cert_file="/nonexistent"))
    assert rc != 0 and "Failed to load certificate" in out
    rc, out = _start_fails(server_factory, tls_options(certs, port, tls_protocols="TLSv9"))
    assert rc != 0 and "Invalid tls-protocols specified" in out
    rc, out = _start_fails(server_factory, tls_options(certs, port, tls_ca_cert_file=""))
    assert rc != 0 and "Either tls-ca-cert-file or tls-ca-cert-dir must be specified" in out
    rc, out = _start_fails(server_factory, tls_options(certs, port, tls_key_file=certs["client_key"]))
    assert rc != 0 and "key values mismatch" in out


# ---------------------------------------------------------------- durability

@pytest.mark.rowan_only("kill -9 durability of acknowledged writes")
def test_kill9_durability_over_tls(server_factory, certs):
    srv, tport = start_tls(server_factory, certs)
    c = tls_client(certs, tport)
    p = c.pipeline(transaction=False)
    for i in range(2000):
        p.set("d%d" % i, "x%d" % i)
    assert all(p.execute())
    assert c.rpush("l", *range(100)) == 100
    srv.kill9()
    srv.start()
    wait_for(lambda: tls_ping(certs, tport), timeout=30)
    c = tls_client(certs, tport)
    vals = c.mget(["d%d" % i for i in range(2000)])
    assert vals == [b"x%d" % i for i in range(2000)]
    assert c.llen("l") == 100


# ---------------------------------------------------------------- CONFIG SET

def test_config_set_rebuilds_the_context(server_factory, certs, target):
    srv, tport = start_tls(server_factory, certs)
    c = tls_client(certs, tport)
    assert refused(lambda: tls_client(certs, tport, client_cert=False).ping())
    assert c.config_set("tls-auth-clients", "no")
    assert tls_client(certs, tport, client_cert=False).ping()
    assert c.config_set("tls-protocols", "TLSv1.2")
    s = ssl_connect(ssl_context(certs), tport)
    assert s.version() == "TLSv1.2"
    s.close()
    # a context that cannot be built changes nothing
    with pytest.raises(redis.exceptions.ResponseError) as e:
        c.config_set("tls-cert-file", "/nonexistent")
    assert str(e.value) == ("CONFIG SET failed (possibly related to argument 'tls-cert-file') - "
                            "Unable to update TLS configuration. Check server logs.")
    assert c.config_get("tls-cert-file") == {"tls-cert-file": certs["cert"]}
    with pytest.raises(redis.exceptions.ResponseError):
        c.execute_command("CONFIG", "SET", "tls-protocols", "TLSv1.3", "tls-ciphers", "NOPE:x")
    assert c.config_get("tls-protocols") == {"tls-protocols": "TLSv1.2"}
    assert c.ping()                               # the old connection goes on
    assert tls_client(certs, tport, client_cert=False).ping()
    if target == "rowan":   # fixed at start, like port (README: differs on purpose)
        with pytest.raises(redis.exceptions.ResponseError):
            c.config_set("tls-port", str(free_port()))
