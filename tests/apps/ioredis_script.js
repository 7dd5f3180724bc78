// ioredis's defineCommand (Lua scripts sent with EVALSHA, falling back to
// EVAL on NOSCRIPT), unchanged, against a rowan-server (driven by
// tests/integration/test_scripting.py).
//
//   node ioredis_script.js <port>
//
// Prints one JSON line with what the scripts returned.
"use strict";
const Redis = require("ioredis");

const port = Number(process.argv[2]);
const redis = new Redis({ host: "127.0.0.1", port, maxRetriesPerRequest: 3 });

redis.defineCommand("incrCapped", {
  numberOfKeys: 1,
  lua: `local v = redis.call('incrby', KEYS[1], ARGV[1])
        if v > tonumber(ARGV[2]) then
          redis.call('set', KEYS[1], ARGV[2])
          return tonumber(ARGV[2])
        end
        return v`,
});
redis.defineCommand("swapKeys", {
  numberOfKeys: 2,
  lua: `local a = redis.call('get', KEYS[1])
        local b = redis.call('get', KEYS[2])
        redis.call('set', KEYS[1], b)
        redis.call('set', KEYS[2], a)
        return {a, b}`,
});
redis.defineCommand("fails", { numberOfKeys: 0, lua: "return redis.error_reply('NOPE not today')" });

async function main() {
  const out = {};
  await redis.script("FLUSH");
  out.first = await redis.incrCapped("capped", 5, 12);    // NOSCRIPT, then EVAL
  out.second = await redis.incrCapped("capped", 5, 12);   // EVALSHA
  out.third = await redis.incrCapped("capped", 5, 12);
  await redis.set("ka", "A");
  await redis.set("kb", "B");
  out.swap = await redis.swapKeys("ka", "kb");
  out.after = [await redis.get("ka"), await redis.get("kb")];
  const p = redis.pipeline();
  p.incrCapped("piped", 1, 100);
  p.incrCapped("piped", 2, 100);
  out.pipeline = (await p.exec()).map(([err, v]) => (err ? String(err) : v));
  try {
    await redis.fails();
    out.error = null;
  } catch (e) {
    out.error = e.message;
  }
  console.log(JSON.stringify(out));
  redis.disconnect();
}

main().catch((e) => {
  console.log(JSON.stringify({ fatal: String(e) }));
  redis.disconnect();
});
