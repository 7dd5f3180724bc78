"""Applications, unchanged, against a real server: BullMQ (npm, Node job
queue: Lua scripts, streams, sorted sets, blocking list moves) and RQ
(Debian's python3-rq: a Python job queue over redis-py with a forking
worker). Each runs the app's own code end to end; the same tests pass
against redis-server (--target redis), which checks the expectations."""
import json
import os
import subprocess

import pytest

APPS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "apps")


def test_bullmq_jobs(server, r):
    """BullMQ's Queue, Worker and QueueEvents: a job completes, a delayed
    job waits its delay then completes, a job whose processor fails once is
    retried and completes, a job that always fails ends in failed."""
    if not os.path.isdir(os.path.join(APPS, "node_modules", "bullmq")):
        pytest.fail("bullmq is not installed: run `npm ci --prefix tests/apps` (make does)")
    p = subprocess.run(["node", os.path.join(APPS, "bullmq_jobs.js"), str(server.port)],
                       capture_output=True, text=True, timeout=90)
    lines = p.stdout.strip().splitlines()
    res = json.loads(lines[-1]) if lines else {"fatal": "no output"}
    assert res == {"plain": {"sum": 5}, "plainState": "completed",
                   "delayedState": "delayed", "delayed": {"sum": 30},
                   "delayedWaited": True, "delayedRanLate": True,
                   "flaky": {"sum": 2}, "flakyAttempts": 2, "flakyState": "completed",
                   "doomed": "always fails", "doomedState": "failed",
                   "doomedReason": "always fails", "doomedAttempts": 2,
                   "counts": {"completed": 3, "failed": 1, "delayed": 0,
                              "wait": 0, "active": 0}}, (res, p.stderr)
    assert r.keys("bull:*") == []   # obliterate removed the queue


def rq_add(a, b):
    """An RQ job (imported by name, test_apps.rq_add, in the work horse)."""
    return a + b


def rq_fail(msg):
    raise ValueError(msg)


def test_rq_jobs(server, r):
    """RQ (Debian's python3-rq): enqueue jobs, a burst worker (forking a work
    horse per job, as deployed) runs them; a result comes back and a failing
    job lands in the failed job registry with its traceback."""
    try:
        import rq
    except ImportError:
        pytest.fail("python3-rq is not installed: run deps/install.sh")
    from rq.registry import FailedJobRegistry, FinishedJobRegistry
    conn = server.client()
    q = rq.Queue("rowan", connection=conn)
    ok = q.enqueue(rq_add, 2, 3)
    bad = q.enqueue(rq_fail, "no luck")
    assert ok.get_status() == "queued" and len(q) == 2
    w = rq.Worker([q], connection=conn, name="rowan-worker")
    assert w.work(burst=True)
    ok.refresh()
    bad.refresh()
    assert ok.get_status() == "finished"
    assert ok.return_value() == 5
    assert bad.get_status() == "failed"
    res = bad.latest_result()
    assert res.type == res.Type.FAILED and "ValueError: no luck" in res.exc_string
    assert FailedJobRegistry(queue=q).get_job_ids() == [bad.id]
    assert FinishedJobRegistry(queue=q).get_job_ids() == [ok.id]
    assert len(q) == 0
    assert rq.Worker.all(connection=conn) == []   # the burst worker left
