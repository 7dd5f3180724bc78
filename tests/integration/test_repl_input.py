"""The replication port against bad input and intruders.

Bad input: a node's control thread must refuse what is not a well-formed
replication stream from a peer with the same configuration, close that
link, log why, and go on serving and replicating.

Intruders (issue 10, item 5): every link opens with the peer handshake of
src/repl/peer_auth.c. A peer that does not know the cluster secret
(cluster-secret, else requirepass) is refused before a byte of its stream
is landed; a recorded handshake cannot be replayed; a sender never trusts
acks from a receiver that did not prove it knows the secret; a node with
the wrong secret never counts as a replica; and without any secret the
port opens only on an address `bind` allows.

The handshake, hello and entry formats are written here from
src/repl/peer_auth.c, src/repl/transport.h and src/store/log.h (including the
configuration digest of src/cluster/cluster.c), so the test can play a peer, a
forger and a fake receiver."""
import hashlib
import hmac
import os
import re
import socket
import struct
import subprocess
import tempfile
import threading

import pytest

from conftest import DEFAULT_BINARY, key_slot, tmp_root, wait_for

pytestmark = pytest.mark.rowan_only("Rowan's replication port")

HELLO_MAGIC = 0x324C50524E574F52  # "ROWNRPL2" (protocol 2)
HELLO_MAGIC_V1 = 0x314C50524E574F52  # "ROWNRPL1": an older rowan-server
FNV_OFFSET, FNV_PRIME = 1469598103934665603, 1099511628211
LOG_SET, LOG_COMMITVER = 1, 6
SECRET = "correct horse battery staple"


def fnv(h, data):
    for b in data:
        h = ((h ^ b) * FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
    return h


def config_digest(nodes, nshards, k):
    """cluster_config_digest(): FNV-1a over each node's name, host (with
    their NULs), port and repl port (int32 LE), then shards and k."""
    h = FNV_OFFSET
    for n in nodes:
        h = fnv(h, n.name.encode() + b"\0")
        h = fnv(h, n.host.encode() + b"\0")
        h = fnv(h, struct.pack("<ii", n.port, n.port + 10000))
    return fnv(h, struct.pack("<ii", nshards, k))


def hello(node_index, digest, term=1, magic=HELLO_MAGIC, mode=0):
    return struct.pack("<QHHIQQ", magic, node_index, 0, mode, term, digest)


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def entry(etype, shard, ver, key=b"", val=b"", good_crc=True):
    """A log entry (40-byte header) padded to a multiple of 64 bytes."""
    body = struct.pack("<BBHQIIqQ", etype, 0, shard, ver, len(key), len(val), 0, 0)[0:36]
    rest = body + key + val
    crc = crc32c(rest) if good_crc else crc32c(rest) ^ 0xDEAD
    e = struct.pack("<I", crc) + rest
    return e + b"\0" * ((-len(e)) % 64)


def set_entry(shard, ver, key, val, good_crc=True):
    return entry(LOG_SET, shard, ver, key, val, good_crc)


def commitvers(vers):
    """One CommitVer marker for several shards (protocol 2): shard 0xFFFF,
    payload a u64 (shard << 48 | version) per shard."""
    return entry(LOG_COMMITVER, 0xFFFF, 0,
                 val=b"".join(struct.pack("<Q", sh << 48 | v) for sh, v in vers.items()))


def forged_write(shard, key=b"forged"):
    """What the intruder of issue 10 sent: a SET at version 10^9 and the
    CommitVer that makes a backup apply it."""
    return (set_entry(shard, 10 ** 9, key, b"x" * 10) +
            entry(LOG_COMMITVER, shard, 10 ** 9))


# ---- the peer handshake (src/repl/peer_auth.c) ----
CHALLENGE, RESPONSE, PROOF, REFUSAL = b"ROWNAUC1", b"ROWNAUR1", b"ROWNAUP1", b"ROWNAUF1"


def recv_exact(s, n, timeout=5.0):
    s.settimeout(timeout)
    out = b""
    while len(out) < n:
        d = s.recv(n - len(out))
        if not d:
            raise ConnectionError("closed after %d of %d bytes" % (len(out), n))
        out += d
    return out


def response(challenge, hello_bytes, secret, keyed=None, mac=None):
    """The client's handshake response to challenge, MACed with secret
    (keyed: the flag a node with a secret sets)."""
    keyed = bool(secret) if keyed is None else keyed
    hdr = RESPONSE + bytes([1, 1 if keyed else 0]) + struct.pack("<H", len(hello_bytes)) + \
        b"\0" * 4 + os.urandom(16)
    if mac is None:
        mac = hmac.new(secret.encode(), b"rowan-peer-auth-1 client" + challenge + hdr + hello_bytes,
                       hashlib.sha256).digest()
    return hdr + mac + hello_bytes


def proof(challenge, resp, secret, bogus=False):
    """The server's reply to resp: a proof MACed with secret (or a bogus MAC)."""
    hdr = PROOF + bytes([1, 1 if secret else 0]) + b"\0" * 6
    mac = os.urandom(32) if bogus else hmac.new(
        secret.encode(), b"rowan-peer-auth-1 server" + challenge + resp[:64] + resp[64:] + hdr,
        hashlib.sha256).digest()
    return hdr + mac


def repl_conn(node):
    return socket.create_connection(("127.0.0.1", node.port + 10000), timeout=5)


def handshake(node, hello_bytes, secret="", **kw):
    """Connect and authenticate as a peer. Returns (socket, challenge,
    response, reply); the reply is a verified proof when the node took us."""
    s = repl_conn(node)
    ch = recv_exact(s, 32)
    assert ch[:8] == CHALLENGE, "the receiver must speak first, with a challenge: %r" % ch[:8]
    resp = response(ch, hello_bytes, secret, **kw)
    s.sendall(resp)
    try:
        reply = recv_exact(s, 48)
    except (ConnectionError, OSError):
        reply = b""
    if reply[:8] == PROOF:
        assert hmac.compare_digest(reply, proof(ch, resp, secret)), \
            "the receiver's proof does not verify with the secret"
    return s, ch, resp, reply


def closed_by_peer(s, timeout=5.0):
    """Read until the server closes; True if it did within timeout."""
    s.settimeout(timeout)
    try:
        while True:
            d = s.recv(4096)
            if not d:
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


def log_text(node):
    with open(node.log_path, errors="replace") as f:
        return f.read()


def rowan_info(node, password=None):
    return node.info("rowan", password=password)["rowan"]


def shard_info(r, shard):
    flat = r.execute_command("ROWAN", "SHARD", shard)
    return {k.decode() if isinstance(k, bytes) else k: v for k, v in zip(flat[::2], flat[1::2])}


def shard_of_role(r, nshards, role):
    return next(sh for sh in range(nshards) if shard_info(r, sh)["role"] == role)


def keys_in_shard(r, shard, n, prefix="k"):
    info = shard_info(r, shard)
    lo, hi = int(info["first_slot"]), int(info["last_slot"])
    out, i = [], 0
    while len(out) < n:
        k = "%s:%d" % (prefix, i)
        if lo <= key_slot(k) <= hi:
            out.append(k)
        i += 1
    return out


def node_digests(cl, password=None):
    return [{int(x[0]): (x[1], int(x[2])) for x in
             cl.client(i, password=password).execute_command("ROWAN", "DIGEST")}
            for i in range(len(cl.nodes))]


def replicas_agree(cl, password=None):
    """Every shard's replicas report the same digest and key count."""
    d = node_digests(cl, password)
    return all(len({dd[sh] for dd in d if sh in dd}) == 1 for dd0 in d for sh in dd0)


def test_garbage_and_bad_frames_on_the_replication_port(cluster_factory):
    cl = cluster_factory(3, 3)
    target = cl.nodes[0]
    r = cl.client(0)
    assert rowan_info(target)["repl_auth"] == "none"
    nshards = int(r.config_get("shards")["shards"])
    digest = config_digest(cl.nodes, nshards, 3)

    # 1. bytes that are not a handshake
    s = repl_conn(target)
    s.sendall(os.urandom(64))
    assert closed_by_peer(s)
    # 2. authenticated (no secret: an empty key), but not a replication hello
    s, _, _, reply = handshake(target, b"\x01" * 16)
    assert reply[:8] == PROOF
    assert closed_by_peer(s)
    # 3. a hello from a node with another configuration
    s, _, _, reply = handshake(target, hello(1, digest ^ 1))
    assert closed_by_peer(s)
    # 4. a stale term
    s, _, _, reply = handshake(target, hello(1, digest, term=0))
    assert closed_by_peer(s)
    # 4b. a node of an older replication protocol (its CommitVer markers
    #     differ): refused, and the log says why
    s, _, _, reply = handshake(target, hello(1, digest, magic=HELLO_MAGIC_V1))
    assert reply[:8] == PROOF
    assert closed_by_peer(s)
    # 5. a good hello is accepted (ack 0), then an impossible header closes it
    s, _, _, reply = handshake(target, hello(1, digest))
    assert reply[:8] == PROOF
    assert recv_exact(s, 8) == b"\0" * 8, "a hello with our configuration must be accepted"
    s.sendall(b"\0" * 4 + b"\x00" + b"\0" * 59)        # type 0
    assert closed_by_peer(s)
    s, _, _, reply = handshake(target, hello(1, digest))
    assert recv_exact(s, 8) == b"\0" * 8
    s.sendall(struct.pack("<I", 0) + bytes([1, 0, 0, 0]) + b"\0" * 8 +
              struct.pack("<II", 0xFFFFFFF0, 0xFFFFFFF0) + b"\0" * 40)  # 8 GB entry
    assert closed_by_peer(s)
    # 6. a well-framed entry whose checksum is wrong: landed and acked (the
    #    control thread only frames), then skipped by the digest, never applied
    s, _, _, reply = handshake(target, hello(1, digest))
    assert recv_exact(s, 8) == b"\0" * 8
    backup_shard = shard_of_role(r, nshards, b"backup")
    s.sendall(set_entry(backup_shard, 1 << 40, b"forged", b"x" * 10, good_crc=False))
    ack = recv_exact(s, 8)
    assert struct.unpack("<Q", ack)[0] == 1
    s.close()
    # 7. a peer that connects and never answers the challenge is dropped
    failures = int(rowan_info(target)["repl_auth_failures"])
    s = repl_conn(target)
    assert recv_exact(s, 32)[:8] == CHALLENGE
    assert closed_by_peer(s, timeout=30), "a silent peer must not hold a link forever"
    assert int(rowan_info(target)["repl_auth_failures"]) == failures + 1

    assert wait_for(lambda: int(r.info("rowan")["digest_corrupt"]) >= 1, timeout=20), \
        "the digest must notice the bad checksum"
    text = log_text(target)
    assert "Peer port: refused" in text and "not a Rowan peer handshake" in text
    assert "not a Rowan replication hello" in text
    assert "stale or different configuration" in text
    assert "speaks replication protocol 1" in text and "same rowan-server version" in text
    assert "malformed message header" in text

    # The node still serves and still replicates; replicas agree.
    rc = cl.cluster_client()
    for i in range(200):
        rc.set("after:%d" % i, i)
    assert rc.get("after:7") == b"7"
    # (a forged entry applied on the target would make its digest differ)
    assert wait_for(lambda: replicas_agree(cl), timeout=30)
    assert rc.get("forged") is None


# --------------------------------------------------------------------------
# intruders
# --------------------------------------------------------------------------
def test_forged_and_replayed_hellos_are_refused(cluster_factory):
    """With cluster-secret set: the cluster replicates; a hello built from
    the public configuration, with no MAC, an unkeyed one, one under a
    wrong secret, or a real handshake replayed on a new connection, is
    refused and nothing it sends lands; the version-10^9 entry it carries is
    never applied and later legitimate writes to that shard still
    replicate. A peer with the secret is accepted (the refusals above are
    the secret's doing), and what it lands IS applied (the checks above
    would see a forged entry that got in)."""
    cl = cluster_factory(3, 3, options={"cluster-secret": SECRET})
    target = cl.nodes[0]
    r = cl.client(0)
    assert r.config_get("cluster-secret") == {"cluster-secret": SECRET}
    for nd in cl.nodes:
        assert rowan_info(nd)["repl_auth"] == "cluster-secret"
    nshards = int(r.config_get("shards")["shards"])
    digest = config_digest(cl.nodes, nshards, 3)
    rc = cl.cluster_client()
    for i in range(300):
        rc.set("k:%d" % i, "v%d" % i)
    assert wait_for(lambda: replicas_agree(cl), timeout=30)
    shard = shard_of_role(r, nshards, b"backup")    # a shard node0 backs up
    primary = int(shard_info(r, shard)["primary"][len("node"):])
    keys_before = int(shard_info(r, shard)["keys"])
    assert keys_before == int(shard_info(cl.client(primary), shard)["keys"])
    before = rowan_info(target)
    good_hello = hello(primary, digest)

    # 1. the intruder of issue 10: a bare hello and the forged write
    s = repl_conn(target)
    assert recv_exact(s, 32)[:8] == CHALLENGE
    s.sendall(good_hello + forged_write(shard))
    assert closed_by_peer(s)
    # 2. the handshake without a secret (an empty key), 3. under a wrong
    # secret, 4. with a made-up MAC: refused, and what follows never lands
    for secret, kw in (("", {}), ("wrong " + SECRET, {}), ("", {"keyed": True, "mac": os.urandom(32)})):
        s, _, _, reply = handshake(target, good_hello, secret, **kw)
        assert reply[:8] == REFUSAL, "a forged handshake must be refused: %r" % reply[:8]
        try:
            s.sendall(forged_write(shard))
        except OSError:
            pass
        assert closed_by_peer(s)
    # 5. a replay: a genuine response (the secret's holder made it, and the
    # node accepted it on its own connection) sent again on a new one
    s, ch1, resp1, reply = handshake(target, good_hello, SECRET)
    assert reply[:8] == PROOF, "the right secret must be accepted"
    assert recv_exact(s, 8) == b"\0" * 8
    s.close()
    s = repl_conn(target)
    ch2 = recv_exact(s, 32)
    assert ch2 != ch1, "every connection gets a fresh challenge"
    s.sendall(resp1 + forged_write(shard))
    assert recv_exact(s, 48)[:8] == REFUSAL
    assert closed_by_peer(s)

    after = rowan_info(target)
    assert after["blog_messages"] == before["blog_messages"], "a refused peer's bytes landed"
    assert after["digest_applied"] == before["digest_applied"]
    assert int(after["repl_auth_failures"]) >= int(before["repl_auth_failures"]) + 5
    log = log_text(target)
    assert "without the authentication handshake" in log or "MAC is wrong" in log
    # the forged key is not on the backup, and later writes to its shard
    # still reach it
    assert int(shard_info(r, shard)["keys"]) == keys_before
    for k in keys_in_shard(r, shard, 20, prefix="later"):
        rc.set(k, "legit")
    assert wait_for(lambda: replicas_agree(cl), timeout=30)
    assert int(shard_info(r, shard)["keys"]) == keys_before + 20
    assert int(shard_info(cl.client(primary), shard)["keys"]) == keys_before + 20

    # Control: a peer WITH the secret lands the same forged write, and the
    # backup applies it -- so the checks above would have seen it.
    s, _, _, reply = handshake(target, good_hello, SECRET)
    assert reply[:8] == PROOF
    assert recv_exact(s, 8) == b"\0" * 8
    s.sendall(forged_write(shard))
    assert struct.unpack("<Q", recv_exact(s, 8))[0] == 2
    s.close()
    assert wait_for(lambda: int(shard_info(r, shard)["keys"]) == keys_before + 21, timeout=20)
    assert not replicas_agree(cl)

    # The same through one CommitVer marker for two shards (protocol 2,
    # log.h): each entry is applied once the marker names its version --
    # and only up to it (shard2's second entry stays pending).
    shard2 = next(sh for sh in range(nshards) if sh != shard and
                  shard_info(r, sh)["role"] == b"backup" and
                  int(shard_info(r, sh)["primary"][len("node"):]) == primary)
    keys2 = int(shard_info(r, shard2)["keys"])
    s, _, _, reply = handshake(target, good_hello, SECRET)
    assert recv_exact(s, 8) == b"\0" * 8
    s.sendall(set_entry(shard, 10 ** 9 + 1, b"forged2", b"y") +
              set_entry(shard2, 10 ** 9, b"forged3", b"z") +
              set_entry(shard2, 10 ** 9 + 5, b"forged4", b"w") +
              commitvers({shard: 10 ** 9 + 1, shard2: 10 ** 9}))
    assert struct.unpack("<Q", recv_exact(s, 8))[0] == 4
    s.close()
    assert wait_for(lambda: int(shard_info(r, shard)["keys"]) == keys_before + 22 and
                    int(shard_info(r, shard2)["keys"]) == keys2 + 1, timeout=20)
    assert int(rowan_info(target)["digest_pending"]) >= 1


class FakeReceiver:
    """Listens on a (dead) node's replication port and plays its control
    thread: sends a well-formed challenge, records each sender's response,
    answers with a proof (valid only if it was given the secret) and then
    acks everything, as a receiver that cheats would."""

    def __init__(self, port, secret_known=None):
        self.secret = secret_known
        self.captured = []            # (challenge, response)
        self.ls = socket.socket()
        self.ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # a killed node's listener can outlive its main thread's exit briefly
        assert wait_for(lambda: self._bind(port), timeout=10), "port %d stays busy" % port
        self.ls.listen(64)
        self.ls.settimeout(0.2)
        self.stop = False
        self.conns = []
        self.th = threading.Thread(target=self.run, daemon=True)
        self.th.start()

    def _bind(self, port):
        try:
            self.ls.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False

    def run(self):
        while not self.stop:
            try:
                c, _ = self.ls.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            self.conns.append(c)
            threading.Thread(target=self.serve, args=(c,), daemon=True).start()

    def serve(self, c):
        try:
            ch = CHALLENGE + bytes([1, 1]) + b"\0" * 6 + os.urandom(16)
            c.sendall(ch)
            hdr = recv_exact(c, 64)
            resp = hdr + recv_exact(c, struct.unpack("<H", hdr[10:12])[0])
            self.captured.append((ch, resp))
            c.sendall(proof(ch, resp, self.secret or "", bogus=self.secret is None) +
                      struct.pack("<QQ", 0, 1 << 40))
            c.settimeout(0.5)
            while not self.stop:
                try:
                    if not c.recv(65536):
                        return
                except socket.timeout:
                    continue
        except OSError:
            return

    def close(self):
        self.stop = True
        self.ls.close()
        for c in self.conns:
            try:
                c.close()
            except OSError:
                pass
        self.th.join(5)


def test_senders_trust_only_a_receiver_that_knows_the_secret(cluster_factory):
    """A fake receiver on a dead node's port that acks everything: without
    the secret its proof fails and writes that need that node are refused
    (NOREPLICAS), never acknowledged on its word; the same fake given the
    secret is believed (so it is the proof that stops it). The handshakes it
    captured from real senders, replayed to the real node, are refused."""
    cl = cluster_factory(3, 3, options={"cluster-secret": SECRET, "replication-timeout": 1500})
    rc = cl.cluster_client()
    r1 = cl.client(1)
    nshards = int(r1.config_get("shards")["shards"])
    own = shard_of_role(r1, nshards, b"primary")      # node1's; node0 backs it up
    key = keys_in_shard(r1, own, 1, prefix="m")[0]
    rc.set(key, "before")
    cl.kill9(0)
    repl0 = cl.nodes[0].port + 10000
    fake = FakeReceiver(repl0)
    try:
        assert wait_for(lambda: len(fake.captured) >= 1, timeout=20), "no sender connected"
        with pytest.raises(Exception) as exc:
            r1.set(key, "acked by a fake")
        assert "NOREPLICAS" in str(exc.value)
        assert wait_for(lambda: "failed to prove it knows the cluster secret" in
                        log_text(cl.nodes[1]), timeout=10)
        assert rowan_info(cl.nodes[1])["repl_peer_node0"].startswith("state=down")
    finally:
        fake.close()
    captured = list(fake.captured)
    # control: the same fake, able to prove, is believed
    fake = FakeReceiver(repl0, secret_known=SECRET)
    try:
        assert wait_for(lambda: rowan_info(cl.nodes[1])["repl_peer_node0"].startswith("state=live"),
                        timeout=20)
        r1.set(key, "acked by a fake that knows the secret")
    finally:
        fake.close()

    cl.restart(0)
    target = cl.nodes[0]
    failures = int(rowan_info(target)["repl_auth_failures"])
    for ch, resp in captured[:3]:
        s = repl_conn(target)
        assert recv_exact(s, 32) != ch
        s.sendall(resp)
        assert recv_exact(s, 48)[:8] == REFUSAL, "a captured handshake replayed must be refused"
        assert closed_by_peer(s)
    assert int(rowan_info(target)["repl_auth_failures"]) == failures + min(3, len(captured))
    assert wait_for(lambda: all(int(rowan_info(nd)["repl_peers_live"]) == 2 for nd in cl.nodes),
                    timeout=30)
    rc2 = cl.cluster_client()
    rc2.set(key, "after")
    assert wait_for(lambda: replicas_agree(cl), timeout=30)


def test_requirepass_is_the_secret_without_cluster_secret(cluster_factory):
    pw = "s3cret pass"
    cl = cluster_factory(3, 3, options={"requirepass": pw})
    target = cl.nodes[0]
    r = cl.client(0, password=pw)
    assert rowan_info(target, pw)["repl_auth"] == "requirepass"
    rc = cl.cluster_client(password=pw)
    for i in range(200):
        rc.set("k:%d" % i, i)
    assert wait_for(lambda: replicas_agree(cl, pw), timeout=30)
    nshards = int(r.config_get("shards")["shards"])
    good_hello = hello(1, config_digest(cl.nodes, nshards, 3))
    before = rowan_info(target, pw)
    for secret, kw in (("", {}), ("not " + pw, {})):
        s, _, _, reply = handshake(target, good_hello, secret, **kw)
        assert reply[:8] == REFUSAL
        assert closed_by_peer(s)
    s, _, _, reply = handshake(target, good_hello, pw)
    assert reply[:8] == PROOF, "requirepass must be the key"
    assert recv_exact(s, 8) == b"\0" * 8
    s.close()
    after = rowan_info(target, pw)
    assert int(after["repl_auth_failures"]) == int(before["repl_auth_failures"]) + 2
    assert after["blog_messages"] == before["blog_messages"]


def test_node_with_the_wrong_secret_is_never_a_replica(cluster_factory):
    cl = cluster_factory(3, 3, options={"cluster-secret": SECRET, "replication-timeout": 1500})
    odd = cl.nodes[2]
    odd.stop()
    with open(odd.conf) as f:
        conf = f.read()
    conf2 = re.sub(r"(?m)^cluster-secret .*$", 'cluster-secret "not the secret"', conf)
    assert conf2 != conf
    with open(odd.conf, "w") as f:
        f.write(conf2)
    odd.mark_log()
    cl.nodes[0].mark_log()
    odd.start()
    r0 = cl.client(0)
    nshards = int(r0.config_get("shards")["shards"])
    own = shard_of_role(r0, nshards, b"primary")
    key = keys_in_shard(r0, own, 1, prefix="w")[0]
    with pytest.raises(Exception) as exc:
        r0.set(key, "x")
    assert "NOREPLICAS" in str(exc.value)
    assert rowan_info(cl.nodes[0])["repl_peer_node2"].startswith("state=down")
    assert int(rowan_info(cl.nodes[0])["repl_peers_live"]) == 1
    # both sides' logs say why
    assert wait_for(lambda: "cluster secret differs" in odd.log_since_mark(), timeout=10), \
        odd.log_since_mark()[-2000:]
    assert "cluster secret differs" in cl.nodes[0].log_since_mark()
    assert int(rowan_info(odd)["repl_auth_failures"]) >= 1
    # its cluster bus is refused too: it cannot ask its peers about the
    # shards it is primary of, so it does not serve them
    assert int(rowan_info(odd)["shards_reconciling"]) > 0
    # The secret can be fixed at run time: new links use it.
    odd.client().config_set("cluster-secret", SECRET)
    assert wait_for(lambda: all(int(rowan_info(nd)["repl_peers_live"]) == 2 for nd in cl.nodes),
                    timeout=30)
    assert wait_for(lambda: int(rowan_info(odd)["shards_reconciling"]) == 0, timeout=30)
    r0.set(key, "y")
    assert wait_for(lambda: replicas_agree(cl), timeout=30)


def run_node(conf_lines, d, wait_ready=True):
    """A cluster node from a config file in d; returns (Popen, log path)."""
    conf = os.path.join(d, "rowan.conf")
    log = os.path.join(d, "server.log")
    with open(conf, "w") as f:
        f.write("\n".join(conf_lines + ["dir " + d, "pool-size 64mb", "workers 1",
                                        "logfile " + log]) + "\n")
    binary = os.environ.get("ROWAN_SERVER", DEFAULT_BINARY)
    p = subprocess.Popen([binary, conf], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True)
    return p, log


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def test_without_a_secret_the_port_opens_only_where_bind_allows():
    """The node's replication address is 127.0.0.2. With bind 127.0.0.1 and
    no secret it must refuse to start; with a secret, or with 127.0.0.2 in
    bind, it starts. A node that started with requirepass as its only secret
    and then drops it takes no peers on that address any more."""
    p0, p1 = free_ports(2)
    if p0 + 10000 > 65535 or p1 + 10000 > 65535:
        p0, p1 = 30000 + p0 % 20000, 30001 + p0 % 20000
    base = ["cluster-node a 127.0.0.2 %d %d" % (p0, p0 + 10000),
            "cluster-node b 127.0.0.1 %d %d" % (p1, p1 + 10000),
            "cluster-self a", "port %d" % p0]
    with tempfile.TemporaryDirectory(dir=tmp_root()) as d:
        p, log = run_node(base + ["bind 127.0.0.1"], d)
        out, _ = p.communicate(timeout=60)
        assert p.returncode != 0, "started with an open replication port"
        text = out + (open(log).read() if os.path.exists(log) else "")
        assert "bind" in text and "cluster-secret" in text and "127.0.0.2" in text, text[-2000:]

    for extra, source in ((["bind 127.0.0.1", 'cluster-secret "x y"'], "cluster-secret"),
                          (["bind 127.0.0.1 127.0.0.2"], "none"),
                          (["bind 127.0.0.1", "requirepass pw"], "requirepass")):
        with tempfile.TemporaryDirectory(dir=tmp_root()) as d:
            p, log = run_node(base + extra, d)
            try:
                def up():
                    try:
                        with socket.create_connection(("127.0.0.1", p0), timeout=1) as s:
                            s.sendall(b"PING\r\n")
                            return s.recv(64)
                    except OSError:
                        return None
                assert wait_for(up, timeout=30), "did not start with %s" % extra
                # the control thread logs it as it starts listening, which can
                # come a moment after the client port answers
                line = "peers authenticate with: %s" % source
                assert wait_for(lambda: line in open(log).read(), timeout=10), open(log).read()
                if source == "requirepass":
                    # drop the only secret at run time: peers are refused now
                    with socket.create_connection(("127.0.0.1", p0), timeout=5) as s:
                        s.sendall(b"AUTH pw\r\nCONFIG SET requirepass \"\"\r\n")
                        got = b""
                        while got.count(b"\r\n") < 2:
                            got += s.recv(64)
                        assert got == b"+OK\r\n+OK\r\n", got
                    s = socket.create_connection(("127.0.0.2", p0 + 10000), timeout=5)
                    assert closed_by_peer(s)
                    assert wait_for(lambda: "bind does not cover" in open(log).read(), timeout=5)
            finally:
                p.terminate()
                p.communicate(timeout=60)
