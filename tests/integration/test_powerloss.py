"""Power loss (Rowan-only).

kill -9 leaves the page cache alive, so it can never show a reply that ran
ahead of its flush. Here rowan-server runs under the power-loss shim
(tests/powerloss/shim.c, LD_PRELOAD): it keeps a durable image of the pool
holding only the bytes that completed flushes (fdatasync, msync) covered,
snapshotted at each flush's entry. Writers (ackcheck.py: SET, DEL, INCR,
HSET, LPUSH, MSET, MULTI/EXEC on several connections, and pipelined SETs)
run until a random moment; the server is killed, the image becomes the
pool, and a fresh server starts on it. Every acknowledged write must be
there, whole transactions or none, no value that was never written, and
recovery must find no damage: a power loss is not corruption. Some cuts
also let random pieces of unflushed writes reach the image (writeback), so
torn tails appear; some flushes are slow (a wide window for whatever the
server does while one is in flight: this is how the cleaner was caught
freeing a segment whose entries were made dead by a write not yet
durable); some cuts come right after a start. The load continues across
cuts on the recovered pool.

The second test proves the checker can fail: with the shim's
skip-fdatasync fault (flushes that do nothing and succeed, i.e. replies
that run ahead of durability) acknowledged writes must be found missing.

On pmem pools persistence is CPU cache flushes, which no shim can see: this
covers block storage (the default)."""
import random

import pytest

from ackcheck import Load, powerloss_cycle
from conftest import ServerStartError

pytestmark = pytest.mark.rowan_only("power loss of Rowan's pool (LD_PRELOAD shim)")

CUTS = 40


def test_power_loss_never_loses_acknowledged_writes(server_factory):
    srv = server_factory(start=False)
    load = Load(srv.port, nwriters=4, seed=20261125)
    rng = random.Random(20261125)
    total = 0
    for cut in range(CUTS):
        checked, problems, lost = powerloss_cycle(srv, load, rng)
        assert not problems, "power loss %d of %d lost acknowledged writes:\n%s" % (
            cut + 1, CUTS, "\n".join(problems[:5]))
        total += checked
    assert total >= CUTS * 100, "only %d acknowledged writes in %d cuts" % (total, CUTS)


def test_power_loss_checker_catches_lying_flushes(server_factory):
    """Flushes that do nothing: what was acknowledged is not in the image,
    and the check must say so (or recovery must refuse the pool, when a
    durable end recorded in its meta table got out ahead of the data)."""
    caught_by_checker = 0
    for attempt in range(3):
        srv = server_factory(start=False)
        load = Load(srv.port, nwriters=2, seed=attempt)
        rng = random.Random(attempt)
        try:
            checked, problems, lost = powerloss_cycle(srv, load, rng, acks=(200, 400),
                                                      writeback=0, sync_delay_ms=0,
                                                      fault="skip-fdatasync")
        except ServerStartError:
            assert "CORRUPTION" in srv.log_text(since_start=True)
            continue
        assert problems and lost > 0, "acknowledged writes whose flushes were skipped all " \
                                      "survived a power loss: the checker cannot see lost writes"
        caught_by_checker += 1
    assert caught_by_checker >= 1
