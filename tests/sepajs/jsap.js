// sepa-js 0.13.2's JSAP API, unchanged, on the JSAP that `ksp-sib jsap --merge` printed: the
// application's named update and query, by alias with their forced bindings, against the SIB.
// Usage: node jsap.js JSAP_FILE. One JSON line per step; exits 1 on a failure.
const fs = require("fs");
const { Jsap } = require("@arces-wot/sepa-js");
const { say, within, once, values } = require("./steps");

const app = new Jsap(fs.readFileSync(process.argv[2], "utf8"));
const sensor = "http://example.org/gh#s1";

async function main() {
  const up = await app.SET_TEMP({ sensor, value: 20 });
  say("update", { status: up.status });
  say("query", { values: values(await app.TEMP.query({ sensor })) });
  const sub = app.TEMP({ sensor });
  const first = await within(10000, "subscribed", once(sub, "subscribed"));
  say("subscribed", { sequence: first.sequence, added: values(first.addedResults) });
  const added = once(sub, "added");
  const removed = once(sub, "removed");
  await app.SET_TEMP({ sensor, value: 21 });
  say("notification", { added: values(await within(10000, "added", added)),
                        removed: values(await within(10000, "removed", removed)) });
  sub.kill();
  process.exit(0);
}

main().catch((e) => { say("failed", { message: String(e && e.stack || e) }); process.exit(1); });
