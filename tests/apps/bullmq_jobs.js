// BullMQ (npm, tests/apps), unchanged, against a rowan-server (driven by
// tests/integration/test_apps.py): a queue, a worker and queue events run a
// plain job, a delayed job, a job whose processor fails once and is retried,
// and a job that always fails. BullMQ is Lua scripts (EVALSHA), sorted sets,
// lists, hashes, streams (XADD, XREAD BLOCK for the events) and blocking
// list moves, so this exercises most of Rowan's data types together.
//
//   node bullmq_jobs.js <port> [cluster]
//
// Prints one JSON line with what the jobs returned and how they ended.
"use strict";
const { Queue, Worker, QueueEvents } = require("bullmq");
const Redis = require("ioredis");

const port = Number(process.argv[2]);
// "cluster": a Rowan cluster through ioredis's Cluster client, the queue's
// keys under one hash tag, as BullMQ requires there.
const cluster = process.argv[3] === "cluster";
const connection = cluster
  ? new Redis.Cluster([{ host: "127.0.0.1", port }], { redisOptions: { maxRetriesPerRequest: null } })
  : { host: "127.0.0.1", port };
const prefix = cluster ? "{rowan}" : "bull";
const name = "rowan-jobs";

async function main() {
  const out = {};
  const queue = new Queue(name, { connection, prefix });
  const events = new QueueEvents(name, { connection, prefix });
  await events.waitUntilReady();
  const worker = new Worker(name, async (job) => {
    if (job.name === "flaky" && job.attemptsMade === 0) throw new Error("first try fails");
    if (job.name === "doomed") throw new Error("always fails");
    return { sum: job.data.a + job.data.b };
  }, { connection, prefix });
  await worker.waitUntilReady();

  const plain = await queue.add("add", { a: 2, b: 3 });
  out.plain = await plain.waitUntilFinished(events, 20000);
  out.plainState = await plain.getState();

  const t0 = Date.now();
  const delayed = await queue.add("add", { a: 10, b: 20 }, { delay: 1500 });
  out.delayedState = await delayed.getState();
  out.delayed = await delayed.waitUntilFinished(events, 20000);
  out.delayedWaited = Date.now() - t0 >= 1500;
  const d = await queue.getJob(delayed.id);
  out.delayedRanLate = d.processedOn - d.timestamp >= 1500;

  const flaky = await queue.add("flaky", { a: 1, b: 1 },
                                { attempts: 3, backoff: { type: "fixed", delay: 200 } });
  out.flaky = await flaky.waitUntilFinished(events, 20000);
  const f = await queue.getJob(flaky.id);
  out.flakyAttempts = f.attemptsMade;
  out.flakyState = await f.getState();

  const doomed = await queue.add("doomed", { a: 0, b: 0 }, { attempts: 2 });
  try {
    await doomed.waitUntilFinished(events, 20000);
    out.doomed = "completed";
  } catch (e) {
    out.doomed = e.message;
  }
  const g = await queue.getJob(doomed.id);
  out.doomedState = await g.getState();
  out.doomedReason = g.failedReason;
  out.doomedAttempts = g.attemptsMade;

  out.counts = await queue.getJobCounts("completed", "failed", "delayed", "wait", "active");
  await worker.close();
  await events.close();
  await queue.obliterate({ force: true });
  await queue.close();
  if (cluster) await connection.quit();
  console.log(JSON.stringify(out));
}

require("./run_main")(main);
