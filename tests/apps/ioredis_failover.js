// ioredis's Cluster client, unchanged, across a failover of a managed Rowan
// cluster (driven by tests/integration/test_failover.py).
//
//   node ioredis_failover.js <port> <nkeys>
//
// Writes nkeys keys (value a<i>), prints "phase1", waits for a line on
// stdin (the test kills a primary meanwhile), writes them again (b<i>),
// retrying what the client reports failed, reads every key back and prints
// one JSON line: {"acked": n, "mismatch": [...], "errors": n}.
"use strict";
const Redis = require("ioredis");
const readline = require("readline");

const port = Number(process.argv[2]);
const nkeys = Number(process.argv[3] || 100);
const cluster = new Redis.Cluster([{ host: "127.0.0.1", port }], {
  retryDelayOnClusterDown: 50,
  retryDelayOnTryAgain: 50,
  retryDelayOnFailover: 50,
  clusterRetryStrategy: () => 50,
  redisOptions: { connectTimeout: 2000, maxRetriesPerRequest: 3 },
});
const acked = new Map();
let errors = 0;

async function write(prefix, deadlineMs) {
  for (let i = 0; i < nkeys; i++) {
    const key = "io" + i, val = prefix + i;
    for (;;) {
      try {
        if ((await cluster.set(key, val)) === "OK") acked.set(key, val);
        break;
      } catch (e) {
        errors++;
        if (Date.now() > deadlineMs) throw new Error("SET " + key + " never acknowledged: " + e);
        await new Promise((r) => setTimeout(r, 50));
      }
    }
  }
}

async function main() {
  await write("a", Date.now() + 30000);
  console.log("phase1");
  const rl = readline.createInterface({ input: process.stdin });
  await new Promise((r) => rl.once("line", r));
  rl.close();
  await write("b", Date.now() + 60000);
  const mismatch = [];
  for (const [k, v] of acked) {
    const got = await cluster.get(k);
    if (got !== v) mismatch.push([k, v, got]);
  }
  console.log(JSON.stringify({ acked: acked.size, mismatch, errors }));
  await cluster.quit();
}

main().catch((e) => {
  console.log(JSON.stringify({ fatal: String(e) }));
  process.exit(1);
});
