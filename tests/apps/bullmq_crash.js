// BullMQ (npm, tests/apps) across a kill -9 of rowan-server (driven by
// tests/integration/test_apps.py). Two phases, each its own process:
//
//   node bullmq_crash.js <port> before   five jobs run and complete; five
//                                        more wait, three are delayed 1.5 s
//   node bullmq_crash.js <port> after    (after kill -9 and restart) a worker
//                                        runs what was left, exactly once
//
// Each prints one JSON line.
"use strict";
const { Queue, Worker, QueueEvents } = require("bullmq");

const connection = { host: "127.0.0.1", port: Number(process.argv[2]) };
const phase = process.argv[3];
const name = "rowan-crash";
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function runWorker(ran, want) {
  const worker = new Worker(name, async (job) => {
    ran.push(job.id);
    return { twice: job.data.n * 2 };
  }, { connection });
  for (const end = Date.now() + 15000; ran.length < want && Date.now() < end;) await sleep(20);
  await sleep(300);   // nothing more should run
  await worker.close();
}

async function before(queue, out) {
  const events = new QueueEvents(name, { connection });
  await events.waitUntilReady();
  const ran = [];
  const first = [];
  for (let i = 0; i < 5; i++) first.push(await queue.add("n", { n: i }, { jobId: "j" + i }));
  await runWorker(ran, 5);
  out.ran = ran.sort();
  for (let i = 5; i < 10; i++) await queue.add("n", { n: i }, { jobId: "j" + i });
  for (let i = 0; i < 3; i++) await queue.add("n", { n: 100 + i }, { jobId: "d" + i, delay: 1500 });
  await events.close();
}

async function after(queue, out) {
  const ran = [];
  await runWorker(ran, 8);
  out.ran = ran.sort();
  out.values = {};
  for (const id of ["j0", "j4", "j5", "j9", "d0", "d2"]) {
    const job = await queue.getJob(id);
    out.values[id] = [await job.getState(), job.returnvalue];
  }
}

async function main() {
  const out = {};
  const queue = new Queue(name, { connection });
  await (phase === "before" ? before : after)(queue, out);
  out.counts = await queue.getJobCounts("completed", "failed", "delayed", "wait", "active");
  await queue.close();
  console.log(JSON.stringify(out));
}

require("./run_main")(main);
