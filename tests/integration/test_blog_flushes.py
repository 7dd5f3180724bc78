"""The backup side's b-log flushes in INFO (issue 14), Rowan-only.

A node's control thread lands the writes its peers send it in the one b-log
and makes everything that arrived durable with one flush, then acks each
link cumulatively. INFO rowan shows how many flushes it began
(blog_flushes) and the writes each covered on average
(blog_writes_per_flush = blog_messages / blog_flushes). Under concurrent
writers a flush must cover more than one write: one flush per write would
mean the batching is gone."""
import threading
import time

import pytest

pytestmark = pytest.mark.rowan_only("b-log flush counters of Rowan's replication")

OPTS = {"pool-size": "128mb", "workers": 2}
WRITERS, PER_WRITER = 8, 150


def blog(nd_client):
    info = nd_client.info("rowan")
    return info["blog_flushes"], info["blog_messages"], info["blog_writes_per_flush"]


def wait_live(cl, timeout=60):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if all(c.info("rowan").get("repl_peers_live") == c.info("rowan").get("repl_peers") == 2
                   for c in (cl.client(i) for i in range(len(cl.nodes)))):
                return
        except Exception:   # a node still starting
            pass
        time.sleep(0.1)
    pytest.fail("replication peers not live after %d s" % timeout)


def test_blog_flushes_batch_concurrent_writes(cluster_factory):
    cl = cluster_factory(3, 3, options=OPTS)
    wait_live(cl)
    before = [blog(cl.client(i)) for i in range(3)]
    errors = []

    def writer(w):
        try:
            rc = cl.cluster_client()
            for n in range(PER_WRITER):
                assert rc.set("bf:%d:%d" % (w, n), "v" * 100) is True
        except Exception as e:   # reported below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(WRITERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    after = [blog(cl.client(i)) for i in range(3)]
    flushes = sum(a[0] - b[0] for a, b in zip(after, before))
    msgs = sum(a[1] - b[1] for a, b in zip(after, before))
    # every SET went to k-1 = 2 backups, each landing it in its b-log
    assert msgs >= 2 * WRITERS * PER_WRITER, (msgs, flushes)
    assert 0 < flushes < msgs, "b-log flushes %d for %d writes: no batching" % (flushes, msgs)
    for f, m, per in after:
        assert f > 0
        assert per == pytest.approx(m / f, abs=0.01), (f, m, per)
