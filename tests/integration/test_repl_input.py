"""Bad input on the replication port: a node's control thread must refuse
what is not a well-formed replication stream from a peer with the same
configuration, close that link, log why, and go on serving and replicating.

The hello and entry formats are written here from src/transport.h and
src/log.h (including the configuration digest of src/cluster.c), so a
valid-looking peer can be played by the test."""
import os
import socket
import struct
import time

import pytest

from conftest import wait_for

pytestmark = pytest.mark.rowan_only("Rowan's replication port")

HELLO_MAGIC = 0x314C50524E574F52  # "ROWNRPL1"
FNV_OFFSET, FNV_PRIME = 1469598103934665603, 1099511628211


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


def set_entry(shard, ver, key, val, good_crc=True):
    """A LOG_SET entry (40-byte header) padded to 64 bytes."""
    body = struct.pack("<BBHQIIqQ", 1, 0, shard, ver, len(key), len(val), 0, 0)[0:36]
    rest = body + key + val
    crc = crc32c(rest) if good_crc else crc32c(rest) ^ 0xDEAD
    e = struct.pack("<I", crc) + rest
    return e + b"\0" * ((-len(e)) % 64)


def repl_conn(node):
    s = socket.create_connection(("127.0.0.1", node.port + 10000), timeout=5)
    return s


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


def test_garbage_and_bad_frames_on_the_replication_port(cluster_factory):
    cl = cluster_factory(3, 3)
    target = cl.nodes[0]
    r = cl.client(0)
    nshards = int(r.config_get("shards")["shards"])
    digest = config_digest(cl.nodes, nshards, 3)

    # 1. bytes that are not a hello
    s = repl_conn(target)
    s.sendall(os.urandom(64))
    assert closed_by_peer(s)
    # 2. a hello from a node with another configuration
    s = repl_conn(target)
    s.sendall(hello(1, digest ^ 1))
    assert closed_by_peer(s)
    # 3. a stale term
    s = repl_conn(target)
    s.sendall(hello(1, digest, term=0))
    assert closed_by_peer(s)
    # 4. a good hello is accepted (ack 0), then an impossible header closes it
    s = repl_conn(target)
    s.sendall(hello(1, digest))
    s.settimeout(5)
    assert s.recv(8) == b"\0" * 8, "a hello with our configuration must be accepted"
    s.sendall(b"\0" * 4 + b"\x00" + b"\0" * 59)        # type 0
    assert closed_by_peer(s)
    s = repl_conn(target)
    s.sendall(hello(1, digest))
    assert s.recv(8) == b"\0" * 8
    s.sendall(struct.pack("<I", 0) + bytes([1, 0, 0, 0]) + b"\0" * 8 +
              struct.pack("<II", 0xFFFFFFF0, 0xFFFFFFF0) + b"\0" * 40)  # 8 GB entry
    assert closed_by_peer(s)
    # 5. a well-framed entry whose checksum is wrong: landed and acked (the
    #    control thread only frames), then skipped by the digest, never applied
    s = repl_conn(target)
    s.sendall(hello(1, digest))
    assert s.recv(8) == b"\0" * 8
    def role(shard):
        flat = r.execute_command("ROWAN", "SHARD", shard)
        return dict(zip(flat[::2], flat[1::2]))[b"role"]
    backup_shard = next(sh for sh in range(nshards) if role(sh) == b"backup")
    s.sendall(set_entry(backup_shard, 1 << 40, b"forged", b"x" * 10, good_crc=False))
    ack = s.recv(8)
    assert struct.unpack("<Q", ack)[0] == 1
    s.close()

    assert wait_for(lambda: int(r.info("rowan")["digest_corrupt"]) >= 1, timeout=20), \
        "the digest must notice the bad checksum"
    text = log_text(target)
    assert "not a Rowan replication hello" in text
    assert "stale or different configuration" in text
    assert "malformed message header" in text

    # The node still serves and still replicates; replicas agree.
    rc = cl.cluster_client()
    for i in range(200):
        rc.set("after:%d" % i, i)
    assert rc.get("after:7") == b"7"

    def agree():
        d = [{int(x[0]): x[1] for x in cl.client(i).execute_command("ROWAN", "DIGEST")}
             for i in range(3)]
        return all(len({dd.get(sh) for dd in d}) == 1 for sh in d[0])
    # (a forged entry applied on the target would make its digest differ)
    assert wait_for(agree, timeout=30)
    assert rc.get("forged") is None
