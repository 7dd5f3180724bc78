"""Backup cleaning: b-log segments become committed on the backups (MaxVer <=
CommitVer) and the cleaner reclaims them, without disturbing the replicas.

A 3-node cluster on small pools is driven through many overwrites of a few
keys, so each node's b-log fills far more segments than the pool has: the
load can only complete if committed b-log segments are reclaimed. Then every
shard's digest must still agree on all three nodes."""
import time

import pytest
from redis.cluster import RedisCluster

pytestmark = pytest.mark.rowan_only


def rowan_info(r):
    return r.info("rowan")


def digests(cl):
    out = []
    for i in range(3):
        rows = cl.client(i).execute_command("ROWAN", "DIGEST")
        out.append({int(r[0]): (r[1], int(r[2])) for r in rows})
    return out


def wait_digests_agree(cl, deadline_s=30):
    end = time.time() + deadline_s
    while True:
        d = digests(cl)
        bad = [s for s in d[0] if len({x.get(s) for x in d}) != 1]
        if not bad:
            return d
        if time.time() > end:
            pytest.fail("replicas disagree on shards %s" % bad[:10])
        time.sleep(0.2)


def test_backup_blog_segments_are_committed_and_cleaned(cluster_factory):
    # 64 MiB pools: 15 segments of 4 MiB each, some kept in reserve.
    cl = cluster_factory(3, 3)
    rc = RedisCluster(host="127.0.0.1", port=cl.nodes[0].port)
    value = "x" * 3000
    # ~170 MB written; each node backs up 2/3 of it (~110 MB) in a 64 MB pool.
    written = {}
    for rnd in range(20):
        pipe = rc.pipeline(transaction=False)
        for i in range(2800):
            key = "k%d" % (i % 400)
            v = "%s:%d" % (value, rnd)
            pipe.set(key, v)
            written[key] = v
        pipe.execute()
    infos = [rowan_info(cl.client(i)) for i in range(3)]
    committed = sum(int(x["blog_segments_committed"]) for x in infos)
    cleaned = sum(int(x["clean_segments"]) for x in infos)
    # Backups committed b-log segments and the cleaner freed segments.
    assert cleaned > 0, infos
    assert all(int(x["digest_corrupt"]) == 0 for x in infos)
    # Each node's b-log took in more bytes than its whole pool holds: its
    # segments were committed by the digest and reclaimed by the cleaner.
    for x in infos:
        assert int(x["blog_bytes"]) > 64 * 1024 * 1024, x
        # the digest committed b-log segments (MaxVer <= CommitVer)
        assert int(x["digest_committed_segments"]) > 0, x
    assert committed + cleaned > 0
    d = wait_digests_agree(cl)
    assert sum(v[1] for v in d[0].values()) == len(written)
    for key, v in list(written.items())[:50]:
        assert rc.get(key).decode() == v
