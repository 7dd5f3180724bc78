"""TLS between nodes: `tls-replication yes` and `tls-cluster yes` (issue 12).

Rowan's replication streams and its cluster bus share each node's
replication port, which then speaks TLS with mutual certificate checks
against tls-ca-cert-file (peer_tls.c). A throwaway CA and certificates are
made with the openssl CLI (as test_tls.py does); real clusters started by
utils/rowan-cluster, real kill -9.

Checks: a static cluster replicates over TLS (digests agree); a managed
(ZooKeeper) cluster over TLS fails over after a kill -9 of a primary
without losing an acknowledged write (test_failover.py's checker), and the
killed node rejoins and catches up; the replication port gives a plaintext
peer nothing (no challenge, closed), refuses a TLS peer without a
certificate or with one of another CA, and only a peer with a certificate
of the cluster's CA reaches the peer handshake; a node whose certificate
is of another CA cannot join."""
import os
import shutil
import socket
import ssl
import subprocess
import time

import pytest

from conftest import RespClient, wait_for
from test_tls import _make_ca, _make_cert
from test_failover import (OPTS as MANAGED_OPTS, Checker, cm_node, rowan, wait_digests_agree,
                           wait_healthy)

OPENSSL = shutil.which("openssl")
pytestmark = [pytest.mark.rowan_only("TLS between Rowan nodes"),
              pytest.mark.skipif(OPENSSL is None, reason="needs the openssl CLI")]

CHALLENGE_MAGIC = b"ROWNAUC1"   # peer_auth.c: what the receiver sends first


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("tls-node-certs"))
    _make_ca(d, "ca")
    _make_ca(d, "otherca")
    _make_cert(d, "node", "ca")
    _make_cert(d, "stranger", "otherca")
    p = lambda n: os.path.join(d, n)
    return {"ca": p("ca.crt"), "cert": p("node.crt"), "key": p("node.key"),
            "stranger_cert": p("stranger.crt"), "stranger_key": p("stranger.key")}


def tls_opts(certs, **more):
    o = {"tls-replication": "yes", "tls-cluster": "yes", "tls-cert-file": certs["cert"],
         "tls-key-file": certs["key"], "tls-ca-cert-file": certs["ca"]}
    o.update(more)
    return o


def repl_port(nd):
    return nd.port + 10000      # utils/rowan-cluster's REPL_PORT_OFFSET


def auth_failures(nd):
    return int(nd.info("rowan")["rowan"].get("repl_auth_failures", "0"))


def fill(cl, n=300, prefix="k"):
    rc = cl.cluster_client()
    for i in range(n):
        rc.set("%s%d" % (prefix, i), "v%d" % i)
    return rc


def tls_peer(port, cert=None, key=None, ca=None):
    """A TLS connection to a replication port as a peer would open it;
    returns the socket after the handshake, or raises."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    if ca:
        ctx.load_verify_locations(ca)
    else:
        ctx.verify_mode = ssl.CERT_NONE
    if cert:
        ctx.load_cert_chain(cert, key)
    raw = socket.create_connection(("127.0.0.1", port), timeout=5)
    return ctx.wrap_socket(raw)


def read_some(s, n=64, timeout=3.0):
    """What the peer sends within timeout: bytes, b"" if it closed, None if
    it sent nothing (still open)."""
    s.settimeout(timeout)
    try:
        return s.recv(n)
    except socket.timeout:
        return None
    except (ssl.SSLError, ConnectionError):
        return b""


def read_until_closed(s, timeout=8.0):
    """Everything the peer sends until it closes; fails if it does not
    close within timeout."""
    got, deadline = b"", time.monotonic() + timeout
    while time.monotonic() < deadline:
        b = read_some(s, 4096, timeout=max(0.1, deadline - time.monotonic()))
        if b == b"":
            return got
        got += b or b""
    raise AssertionError("the port did not close the connection (got %r)" % got)


# --------------------------------------------------------------------------
def test_static_cluster_replicates_over_tls(cluster_factory, certs):
    cl = cluster_factory(3, 3, options=tls_opts(certs))
    rc = fill(cl, 400)
    assert rc.get("k123") == b"v123"
    wait_digests_agree(cl.nodes)
    # the links really are TLS: each node says so, and nothing was refused
    for nd in cl.nodes:
        log = nd.log_text(since_start=True)
        assert "over TLS with certificates" in log, log[-2000:]
        assert auth_failures(nd) == 0
        f = rowan(nd)
        assert f["repl_peers_live"] == f["repl_peers"] == "2", f
    # a write after all that still replicates (acks keep flowing over TLS)
    rc.set("late", "x" * 100000)
    wait_digests_agree(cl.nodes)


def test_repl_port_refuses_plaintext_and_strangers(cluster_factory, certs):
    cl = cluster_factory(3, 3, options=tls_opts(certs))
    fill(cl, 50)
    nd = cl.nodes[0]
    port = repl_port(nd)
    before = auth_failures(nd)
    # 1. plaintext: no challenge (a plaintext port sends one at once); what
    #    it then sends is no TLS handshake, and the port closes on it
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        assert read_some(s, timeout=1.0) is None
        s.sendall(b"ROWNAUR1" + b"\0" * 200)
        got = read_until_closed(s)
        assert CHALLENGE_MAGIC not in got, got
    finally:
        s.close()
    # 2. TLS without a client certificate: refused
    with pytest.raises((ssl.SSLError, ConnectionError, socket.timeout)):
        s = tls_peer(port, ca=certs["ca"])
        try:   # TLS 1.3: the server's refusal arrives after the client's handshake
            assert read_some(s, timeout=5.0) == b""
            raise ConnectionError("closed")
        finally:
            s.close()
    # 3. a certificate of another CA: refused
    with pytest.raises((ssl.SSLError, ConnectionError, socket.timeout)):
        s = tls_peer(port, certs["stranger_cert"], certs["stranger_key"], ca=certs["ca"])
        try:
            assert read_some(s, timeout=5.0) == b""
            raise ConnectionError("closed")
        finally:
            s.close()
    # 4. a certificate of the cluster's CA reaches the peer handshake: the
    #    challenge, inside TLS (and then a bad response is refused by it)
    s = tls_peer(port, certs["cert"], certs["key"], ca=certs["ca"])
    try:
        got = read_some(s, 32, timeout=5.0)
        assert got and got.startswith(CHALLENGE_MAGIC), got
        s.sendall(b"\0" * 300)
        read_until_closed(s)
    finally:
        s.close()
    assert wait_for(lambda: auth_failures(nd) >= before + 3, timeout=10), auth_failures(nd)
    log = nd.log_text(since_start=True)
    assert "Peer port: refused" in log and "TLS: " in log, log[-3000:]
    # the cluster was not hurt by any of it
    rc = fill(cl, 50, prefix="after")
    assert rc.get("after7") == b"v7"
    wait_digests_agree(cl.nodes)


@pytest.mark.parametrize("how", ["foreign-ca", "plaintext"])
def test_node_without_a_good_certificate_cannot_join(cluster_factory, certs, how):
    cl = cluster_factory(3, 3, options=tls_opts(certs))
    fill(cl, 50)
    wait_digests_agree(cl.nodes)
    # node 2 comes back with a certificate of another CA, or without TLS
    victim = cl.nodes[2]
    victim.stop()
    with open(victim.conf) as f:
        conf = f.read()
    if how == "foreign-ca":
        conf = conf.replace(certs["cert"], certs["stranger_cert"]).replace(
            certs["key"], certs["stranger_key"])
        assert certs["stranger_cert"] in conf
    else:
        conf = "\n".join(ln for ln in conf.splitlines() if not ln.startswith("tls-")) + "\n"
    with open(victim.conf, "w") as f:
        f.write(conf)
    f0 = auth_failures(cl.nodes[0])
    victim.start(wait=False)
    # its peers refuse its links, and it cannot use theirs
    assert wait_for(lambda: auth_failures(cl.nodes[0]) > f0, timeout=30), \
        cl.nodes[0].log_tail(40)
    log = cl.nodes[0].log_text(since_start=True)
    if how == "foreign-ca":
        assert "the peer's certificate is refused" in log, log[-3000:]
    else:
        assert "Peer port: refused" in log, log[-3000:]
    # and it stays out: its peers' replication to it never comes back
    time.sleep(2.0)
    f = rowan(cl.nodes[0])
    assert f["repl_peers_live"] != f["repl_peers"], f
    assert rowan(victim)["repl_peers_live"] == "0"
    vlog = victim.log_text(since_start=True)
    assert "cannot reach node" in vlog, vlog[-3000:]
    if how == "foreign-ca":
        # the node itself is told by the TLS alerts why
        assert "TLS: " in vlog, vlog[-3000:]


def test_managed_cluster_fails_over_and_rejoins_over_tls(cluster_factory, certs):
    opts = dict(MANAGED_OPTS)
    opts.update(tls_opts(certs))
    cl = cluster_factory(3, 3, options=opts, zookeeper=True)
    wait_healthy(cl)
    ch = Checker(cl, seed=12)
    ch.start()
    ch.wait_acks(200)
    cm = cm_node(cl)
    victim = next(i for i, nd in enumerate(cl.nodes) if nd is not cm)
    term0 = int(rowan(cm)["cluster_term"])
    cl.kill9(victim)
    ch.wait_acks(200, timeout=30.0)
    survivors = [nd for i, nd in enumerate(cl.nodes) if i != victim]
    fs = wait_healthy(cl, n=2)
    assert int(fs[0]["cluster_term"]) > term0
    ch.wait_acks(100)
    # the victim rejoins (over TLS) and catches up
    cl.restart(victim)
    wait_healthy(cl, n=3, timeout=90.0)
    ch.wait_acks(100)
    ch.stop()
    ch.verify()       # nothing acknowledged was lost
    wait_digests_agree(cl.nodes)
    for nd in survivors:
        assert "over TLS with certificates" in nd.log_text(since_start=True)
        assert auth_failures(nd) == 0


@pytest.mark.parametrize("extra,reason", [
    ({"tls-ca-cert-file": ""}, "need tls-ca-cert-file"),
    ({"replication-mode": "rpc"}, "not supported with replication-mode rpc"),
    ({"tls-key-file": "/nonexistent/node.key"}, "Failed to load private key"),
])
def test_bad_node_tls_setup_stops_the_start(tmp_path, certs, extra, reason):
    """No silent fallback to plaintext: a node that cannot do TLS with its
    peers as configured does not start, and says why."""
    from conftest import free_base_port, DEFAULT_BINARY
    port = free_base_port(2)
    opts = tls_opts(certs, **extra)
    lines = ["cluster-node n0 127.0.0.1 %d %d" % (port, port + 10000),
             "cluster-node n1 127.0.0.1 %d %d" % (port + 1, port + 10001),
             "cluster-self n0", "replicas 2", "bind 127.0.0.1", "port %d" % port,
             "dir %s" % tmp_path, "pool-size 64mb", "workers 1"]
    lines += ["%s %s" % (k, '""' if v == "" else v) for k, v in opts.items()]
    conf = tmp_path / "rowan.conf"
    conf.write_text("\n".join(lines) + "\n")
    binary = os.environ.get("ROWAN_SERVER", DEFAULT_BINARY)
    p = subprocess.run([binary, str(conf)], capture_output=True, text=True, timeout=60)
    out = p.stdout + p.stderr
    assert p.returncode != 0, out[-2000:]
    assert reason in out, out[-2000:]
