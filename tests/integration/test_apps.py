"""Applications, unchanged, against a real server: BullMQ (npm, Node job
queue: Lua scripts, streams, sorted sets, blocking list moves) and RQ
(Debian's python3-rq: a Python job queue over redis-py with a forking
worker). Each runs the app's own code end to end; the same tests pass
against redis-server (--target redis), which checks the expectations; the
kill -9 test also against redis-server with appendfsync always
(ROWAN_TEST_REDIS_AOF=1)."""
import json
import os
import subprocess

import pytest

APPS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "apps")


def _node(srv, script, *args):
    """Runs tests/apps/<script> against srv; returns its last line's JSON."""
    if not os.path.isdir(os.path.join(APPS, "node_modules", "bullmq")):
        pytest.fail("bullmq is not installed: run `npm ci --prefix tests/apps` (make does)")
    p = subprocess.run(["node", os.path.join(APPS, script), str(srv.port)] + list(args),
                       capture_output=True, text=True, timeout=90)
    lines = p.stdout.strip().splitlines()
    res = json.loads(lines[-1]) if lines else {"fatal": "no output"}
    if "fatal" in res or p.returncode != 0:
        pytest.fail("%s: %r rc=%d\n%s" % (script, res, p.returncode, p.stderr[-3000:]))
    return res


BULLMQ_JOBS = {"plain": {"sum": 5}, "plainState": "completed",
               "delayedState": "delayed", "delayed": {"sum": 30},
               "delayedWaited": True, "delayedRanLate": True,
               "flaky": {"sum": 2}, "flakyAttempts": 2, "flakyState": "completed",
               "doomed": "always fails", "doomedState": "failed",
               "doomedReason": "always fails", "doomedAttempts": 2,
               "counts": {"completed": 3, "failed": 1, "delayed": 0,
                          "wait": 0, "active": 0}}


def test_bullmq_jobs(server, r):
    """BullMQ's Queue, Worker and QueueEvents: a job completes, a delayed
    job waits its delay then completes, a job whose processor fails once is
    retried and completes, a job that always fails ends in failed."""
    res = _node(server, "bullmq_jobs.js")
    assert res == BULLMQ_JOBS, res
    assert r.keys("bull:*") == []   # obliterate removed the queue


def test_bullmq_features(server, r):
    """BullMQ beyond a plain job: pause/resume and priorities, progress
    events, a flow (parent after children), a job scheduler's repeats and
    removeOnComplete."""
    res = _node(server, "bullmq_features.js")
    assert res == {"paused": True,
                   "whilePaused": {"prioritized": 3, "wait": 1, "active": 0},
                   "order": ["none", "high", "mid", "low"],
                   "prog": "done", "progress": [50, 100],
                   "parentState": "waiting-children", "flow": 12,
                   "ticks": [7, 7, 7],
                   "gone": "gone", "goneKept": False, "completed": 12}, res
    assert r.keys("bull:*") == []


@pytest.mark.rowan_only("durability of acknowledged writes across kill -9")
@pytest.mark.redis_aof_ok
def test_bullmq_survives_kill9(server_factory):
    """BullMQ's queue across kill -9 and a restart: completed jobs keep
    their results and do not run again; waiting and delayed jobs run once."""
    srv = server_factory()
    res = _node(srv, "bullmq_crash.js", "before")
    assert res == {"ran": ["j0", "j1", "j2", "j3", "j4"],
                   "counts": {"completed": 5, "failed": 0, "delayed": 3,
                              "wait": 5, "active": 0}}, res
    srv.kill9()
    srv.restart()
    res = _node(srv, "bullmq_crash.js", "after")
    assert res == {"ran": ["d0", "d1", "d2", "j5", "j6", "j7", "j8", "j9"],
                   "values": {"j0": ["completed", {"twice": 0}],
                              "j4": ["completed", {"twice": 8}],
                              "j5": ["completed", {"twice": 10}],
                              "j9": ["completed", {"twice": 18}],
                              "d0": ["completed", {"twice": 200}],
                              "d2": ["completed", {"twice": 204}]},
                   "counts": {"completed": 13, "failed": 0, "delayed": 0,
                              "wait": 0, "active": 0}}, res


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


def rq_flaky(key):
    """Fails on its first run (counted in the server), succeeds after."""
    from rq import get_current_job
    job = get_current_job()
    n = job.connection.incr(key)
    if n == 1:
        raise RuntimeError("first run fails")
    return n


def rq_sleep(s):
    import time
    time.sleep(s)
    return "woke"


def test_rq_features(server, r):
    """RQ beyond a plain job: a dependent job waits for its dependency, a
    retried job (rq.Retry) succeeds on its second run, a job scheduled with
    enqueue_in runs once due (the worker's scheduler), a job over its timeout
    is killed and failed, job meta is saved."""
    import time
    try:
        import rq
    except ImportError:
        pytest.fail("python3-rq is not installed: run deps/install.sh")
    from rq.registry import FailedJobRegistry, ScheduledJobRegistry, DeferredJobRegistry
    from datetime import timedelta
    conn = server.client()
    q = rq.Queue("rowan2", connection=conn)
    first = q.enqueue(rq_add, 1, 2)
    then = q.enqueue(rq_add, 10, 20, depends_on=first)
    assert then.get_status() == "deferred"
    assert DeferredJobRegistry(queue=q).get_job_ids() == [then.id]
    flaky = q.enqueue(rq_flaky, "flaky-runs", retry=rq.Retry(max=2))
    slow = q.enqueue(rq_sleep, 5, job_timeout=1)
    later = q.enqueue_in(timedelta(seconds=1), rq_add, 100, 200)
    assert later.get_status() == "scheduled"
    assert ScheduledJobRegistry(queue=q).get_job_ids() == [later.id]
    first.meta["owner"] = "rowan"
    first.save_meta()

    assert rq.Worker([q], connection=conn).work(burst=True)
    for job in (first, then, flaky, slow):
        job.refresh()
    assert (first.get_status(), first.return_value()) == ("finished", 3)
    assert first.meta == {"owner": "rowan"}
    assert (then.get_status(), then.return_value()) == ("finished", 30)
    assert (flaky.get_status(), flaky.return_value()) == ("finished", 2)
    assert slow.get_status() == "failed"
    assert "JobTimeoutException" in slow.latest_result().exc_string
    assert FailedJobRegistry(queue=q).get_job_ids() == [slow.id]

    time.sleep(1.2)   # the scheduled job is due; a worker's scheduler moves it
    assert rq.Worker([q], connection=conn).work(burst=True, with_scheduler=True)
    later.refresh()
    assert (later.get_status(), later.return_value()) == ("finished", 300)
    assert ScheduledJobRegistry(queue=q).get_job_ids() == []


def test_redis_py_lock_waits_and_expires(server, r):
    """redis-py's Lock (Lua scripts) as a mutex between threads: a blocking
    acquire waits for the holder's release, gives up after its
    blocking_timeout, takes over a lock whose holder let it expire, and
    reacquire resets the expiry (test_scripting.py covers the basics)."""
    import threading
    import time
    import redis
    a, b = server.client(), server.client()
    held = a.lock("mutex", timeout=10)
    assert held.acquire(blocking=False)
    got = {}

    def wait_for_it():
        lk = b.lock("mutex", timeout=10)
        got["ok"] = lk.acquire(blocking=True, blocking_timeout=5)
        got["at"] = time.monotonic()
        lk.release()

    t = threading.Thread(target=wait_for_it)
    t.start()
    time.sleep(0.3)
    released = time.monotonic()
    held.release()
    t.join(10)
    assert got["ok"] and got["at"] >= released

    assert held.acquire(blocking=False)
    assert not b.lock("mutex", timeout=10).acquire(blocking=True, blocking_timeout=0.3)
    assert held.owned() and held.locked()
    held.release()

    short = a.lock("mutex", timeout=0.5)
    assert short.acquire(blocking=False)
    assert 0 < a.pttl("mutex") <= 500
    time.sleep(0.3)
    short.reacquire()
    assert 200 < a.pttl("mutex") <= 500   # not reset: at most 200 left
    late = b.lock("mutex", timeout=10)
    assert late.acquire(blocking=True, blocking_timeout=3)   # after the expiry
    assert not short.owned()
    with pytest.raises(redis.exceptions.LockNotOwnedError):
        short.release()
    late.release()


def test_bullmq_on_a_cluster(cluster_factory):
    """The same BullMQ jobs on a three-node Rowan cluster through ioredis's
    Cluster client (the queue's keys under one {hash tag})."""
    cl = cluster_factory(3, 3)
    res = _node(cl.nodes[0], "bullmq_jobs.js", "cluster")
    assert res == BULLMQ_JOBS, res


def test_rq_worker_process_and_commands(server, r):
    """RQ's own `rq worker` (its CLI, a long-running process, as deployed)
    runs jobs as they arrive and obeys a shutdown command sent over pub/sub."""
    import time
    try:
        import rq
        from rq.command import send_shutdown_command
    except ImportError:
        pytest.fail("python3-rq is not installed: run deps/install.sh")
    conn = server.client()
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.abspath(__file__)))
    p = subprocess.Popen(["/usr/bin/rq", "worker", "--name", "w1",
                          "-u", "redis://127.0.0.1:%d" % server.port, "rowan3"],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 20
        while not rq.Worker.all(connection=conn) and time.monotonic() < deadline:
            time.sleep(0.05)
        [w] = rq.Worker.all(connection=conn)
        assert w.name == "w1"
        q = rq.Queue("rowan3", connection=conn)
        jobs = [q.enqueue(rq_add, i, i) for i in range(5)]
        for job in jobs:
            while job.get_status(refresh=True) != "finished" and time.monotonic() < deadline:
                time.sleep(0.05)
        assert [job.return_value() for job in jobs] == [0, 2, 4, 6, 8]
        send_shutdown_command(conn, "w1")
        assert p.wait(20) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        out = p.stdout.read()
    assert "Job OK" in out, out
    assert rq.Worker.all(connection=conn) == []
