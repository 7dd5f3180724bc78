// run_main.js -- how every application script here ends: run main() under
// a 60 s guard, and turn any failure into the one JSON line the pytest
// driver (tests/integration/test_apps.py) reads, {"fatal": ...}, exit 1.
"use strict";

module.exports = function runMain(main, timeoutMs = 60000) {
  const guard = setTimeout(() => {
    console.log(JSON.stringify({ fatal: "timed out" }));
    process.exit(1);
  }, timeoutMs);
  main().then(() => clearTimeout(guard)).catch((e) => {
    console.log(JSON.stringify({ fatal: String(e && e.stack || e) }));
    process.exit(1);
  });
};
