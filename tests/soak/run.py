#!/usr/bin/python3
"""make soak: randomized crash cycles under load for a given time, each
checked for every acknowledged write (tests/integration/ackcheck.py).

    ROWAN_SERVER=build/release/rowan-server tests/soak/run.py --seconds 600

Each cycle is one of the kinds in CYCLES, drawn at random: it runs the
writers against a real rowan-server, cuts it at a random moment, restarts
it and reads every writer's keys back. It returns (acknowledged writes
checked, problems, acknowledged writes lost or wrong). At the end the soak
prints the cycles run (per kind), the acknowledged writes checked and the
writes lost, which must be 0 (the exit status is 1 otherwise).

The wipe-rejoin kind runs on a managed 3-node cluster (its own ZooKeeper)
kept between its cycles. To add a kind of cycle, write a
function taking (soak) and returning (checked, problems, lost), and add it to
CYCLES: soak.rng, soak.server() (a standalone server with a fresh or
continued pool) and soak.load (the writers and their models) are there
for it. A kind that needs its own servers (a cluster) can keep them on
the Soak object between its cycles."""
import argparse
import os
import random
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

from ackcheck import Load, kill9_cycle, powerloss_cycle  # noqa: E402
from conftest import Cluster, Server, ServerStartError  # noqa: E402
from test_failover import OPTS, Checker, wait_healthy  # noqa: E402


class Soak:
    """What the cycles share: one standalone server directory whose pool
    carries on from cycle to cycle (the writers' models with it)."""

    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.srv = None
        self.load = None
        self.cl = None           # the managed cluster of the rejoin cycles
        self.cl_cycles = 0

    def cluster(self):
        """A managed 3-node cluster (k=3, its own ZooKeeper), kept across
        the rejoin cycles."""
        if self.cl is None:
            self.cl = Cluster(3, 3, options=OPTS, zookeeper=True)
            wait_healthy(self.cl)
        return self.cl

    def server(self):
        if self.srv is None:
            self.srv = Server("rowan", extra={"pool-size": "64mb"})
            self.load = Load(self.srv.port, nwriters=4, seed=self.rng.random())
        return self.srv

    def fresh(self):
        """Start over with a new pool (after a failed cycle)."""
        if self.srv is not None:
            self.srv.cleanup()
        self.srv = None
        return self.server()

    def fresh_cluster(self):
        if self.cl is not None:
            self.cl.cleanup()
        self.cl = None

    def close(self):
        if self.srv is not None:
            self.srv.cleanup()
        self.fresh_cluster()


def cycle_kill9(soak):
    srv = soak.server()
    return kill9_cycle(srv, soak.load, soak.rng)


def cycle_powerloss(soak):
    srv = soak.server()
    return powerloss_cycle(srv, soak.load, soak.rng)


def cycle_powerloss_slow_flush(soak):
    """Power loss with a slow device and early cuts: the widest window for
    what the server does while a flush is in flight."""
    srv = soak.server()
    return powerloss_cycle(srv, soak.load, soak.rng, acks=(1, 200),
                           sync_delay_ms=soak.rng.choice([20, 50]))


def cycle_rejoin(soak):
    """A managed cluster under the failover checker's load (several
    clients, unique values, reads): kill -9 a random node, often wipe its
    directory's pool, restart it; the survivors fail it over, it rejoins
    (a full copy when wiped) and the cluster is whole again. Every
    acknowledged write must still read back, no read may see a value that
    later vanished (test_failover.Checker)."""
    cl = soak.cluster()
    rng = soak.rng
    soak.cl_cycles += 1
    ch = Checker(cl, seed=rng.randrange(1 << 30), prefix="soak%d-" % soak.cl_cycles)
    ch.start()
    try:
        ch.wait_acks(rng.randint(50, 300))
        victim = rng.randrange(len(cl.nodes))
        cl.kill9(victim)
        time.sleep(rng.uniform(0.05, 0.6))
        if rng.random() < 0.7:
            os.unlink(os.path.join(cl.nodes[victim].dir, "rowan.pool"))
        cl.restart(victim)
        wait_healthy(cl, n=len(cl.nodes), timeout=90.0)
        ch.wait_acks(50, timeout=60.0)
    finally:
        ch.stop()
    ch.final_reads()
    bad = ch.violations()
    nacks = sum(1 for o in ch.hist if o[0] == "w" and o[5] == "ok")
    return nacks, bad[:5], len(bad)


CYCLES = {
    "kill9": cycle_kill9,
    "powerloss": cycle_powerloss,
    "powerloss-slow-flush": cycle_powerloss_slow_flush,
    "wipe-rejoin": cycle_rejoin,
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=float(os.environ.get("SOAK_SECONDS", 600)))
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--kinds", default=",".join(CYCLES),
                    help="comma-separated cycle kinds (default: all of %s)" % ", ".join(CYCLES))
    args = ap.parse_args()
    kinds = [k for k in args.kinds.split(",") if k]
    for k in kinds:
        if k not in CYCLES:
            ap.error("unknown cycle kind %r" % k)
    soak = Soak(args.seed)
    print("soak: %.0f s of %s cycles, seed %d, server %s" % (
        args.seconds, "/".join(kinds), args.seed, os.environ.get("ROWAN_SERVER")), flush=True)
    counts = {k: 0 for k in kinds}
    checked = lost = failed = 0
    deadline = time.monotonic() + args.seconds
    try:
        while time.monotonic() < deadline:
            kind = soak.rng.choice(kinds)
            try:
                n, problems, bad = CYCLES[kind](soak)
            except (ServerStartError, AssertionError) as e:
                n, problems, bad = 0, ["%s cycle failed: %s" % (kind, e)], 0
            counts[kind] += 1
            checked += n
            lost += bad
            if problems:
                failed += 1
                print("soak: cycle %d (%s) FAILED:\n  %s" % (
                    sum(counts.values()), kind, "\n  ".join(problems[:5])), flush=True)
                if kind == "wipe-rejoin":
                    if soak.cl is not None:
                        print("  cluster dir kept: %s" % soak.cl.dir, flush=True)
                        os.environ["ROWAN_TEST_KEEP"] = "1"
                    soak.fresh_cluster()
                    os.environ.pop("ROWAN_TEST_KEEP", None)
                else:
                    if soak.srv is not None:
                        print("  server dir kept: %s" % soak.srv.dir, flush=True)
                        soak.srv.own_dir = False
                    soak.fresh()
            if sum(counts.values()) % 25 == 0:
                print("soak: %d cycles, %d acknowledged writes checked, %d lost" % (
                    sum(counts.values()), checked, lost), flush=True)
    finally:
        soak.close()
    print("soak: cycles run: %d (%s)" % (sum(counts.values()),
                                         ", ".join("%s %d" % kv for kv in counts.items())))
    print("soak: acknowledged writes checked: %d" % checked)
    print("soak: writes lost: %d" % lost)
    if failed:
        print("soak: %d cycles FAILED (see above)" % failed)
    return 1 if lost or failed else 0


if __name__ == "__main__":
    sys.exit(main())
