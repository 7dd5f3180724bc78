// BullMQ (npm, tests/apps), unchanged, against a rowan-server (driven by
// tests/integration/test_apps.py): the features beyond a plain job. A paused
// queue keeps jobs, which then run in priority order; progress reaches
// QueueEvents (a stream read with XREAD BLOCK); a flow's parent runs after
// its children with their values; a job scheduler repeats a job exactly its
// limit; removeOnComplete removes the job.
//
//   node bullmq_features.js <port>
//
// Prints one JSON line with what happened.
"use strict";
const { Queue, Worker, QueueEvents, FlowProducer } = require("bullmq");

const connection = { host: "127.0.0.1", port: Number(process.argv[2]) };
const name = "rowan-features";
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function until(cond, ms) {
  for (const end = Date.now() + ms; !cond() && Date.now() < end;) await sleep(20);
}

async function main() {
  const out = {};
  const queue = new Queue(name, { connection });
  const events = new QueueEvents(name, { connection });
  await events.waitUntilReady();
  const progress = [];
  events.on("progress", ({ data }) => progress.push(data));

  await queue.pause();
  out.paused = await queue.isPaused();
  await queue.add("p", { n: "low" }, { priority: 10 });
  await queue.add("p", { n: "high" }, { priority: 1 });
  await queue.add("p", { n: "mid" }, { priority: 5 });
  await queue.add("p", { n: "none" });
  out.whilePaused = await queue.getJobCounts("prioritized", "wait", "active");

  const order = [];
  const ticks = [];
  const worker = new Worker(name, async (job) => {
    switch (job.name) {
      case "p": order.push(job.data.n); return job.data.n;
      case "prog": await job.updateProgress(50); await job.updateProgress(100); return "done";
      case "child": return job.data.x * 2;
      case "parent": return Object.values(await job.getChildrenValues()).reduce((a, b) => a + b, 0);
      case "tick": ticks.push(job.data.v); return job.data.v;
      default: throw new Error("unknown job " + job.name);
    }
  }, { connection, concurrency: 1 });
  await worker.waitUntilReady();
  await queue.resume();
  await until(() => order.length >= 4, 10000);
  out.order = order.slice();

  const pj = await queue.add("prog", {});
  out.prog = await pj.waitUntilFinished(events, 10000);
  await until(() => progress.length >= 2, 5000);
  out.progress = progress;

  const flow = new FlowProducer({ connection });
  const tree = await flow.add({ name: "parent", queueName: name, children: [
    { name: "child", queueName: name, data: { x: 1 } },
    { name: "child", queueName: name, data: { x: 2 } },
    { name: "child", queueName: name, data: { x: 3 } }] });
  out.parentState = await tree.job.getState();
  out.flow = await tree.job.waitUntilFinished(events, 10000);
  await flow.close();

  await queue.upsertJobScheduler("ticker", { every: 300, limit: 3 }, { name: "tick", data: { v: 7 } });
  await until(() => ticks.length >= 3, 10000);
  await sleep(800);   // the limit is reached: no fourth run
  out.ticks = ticks;

  const gone = await queue.add("p", { n: "gone" }, { removeOnComplete: true });
  out.gone = await gone.waitUntilFinished(events, 10000);
  out.goneKept = (await queue.getJob(gone.id)) !== undefined;
  out.completed = (await queue.getJobs(["completed"])).length;

  await worker.close();
  await events.close();
  await queue.obliterate({ force: true });
  await queue.close();
  console.log(JSON.stringify(out));
}

require("./run_main")(main);
