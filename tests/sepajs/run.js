// sepa-js 0.13.2, unchanged, against a running ksp-sib's SEPA gate.
// Usage: node run.js HOST HTTP_PORT WS_PORT. Prints one JSON line per step; exits 1 on a failure.
const { SEPA } = require("@arces-wot/sepa-js");
const [host, httpPort, wsPort] = process.argv.slice(2);
const EX = "http://example.org/";

const client = new SEPA({
  host,
  oauth: { enable: false },
  sparql11protocol: {
    protocol: "http", port: Number(httpPort),
    query: { path: "/query", method: "POST", format: "JSON" },
    update: { path: "/update", method: "POST", format: "JSON" },
  },
  sparql11seprotocol: {
    protocol: "ws",
    availableProtocols: { ws: { port: Number(wsPort), path: "/subscribe" } },
  },
});

const say = (step, data) => console.log(JSON.stringify({ step, ...data }));
const within = (ms, what, promise) => Promise.race([promise, new Promise((_, reject) =>
  setTimeout(() => reject(new Error(`no ${what} within ${ms} ms`)), ms))]);
const once = (emitter, event) => new Promise((resolve) => emitter.once(event, resolve));

async function main() {
  const up = await client.update(`INSERT DATA { <${EX}t> <${EX}temp> 20 }`);
  say("update", { status: up.status });

  const res = await client.query(`SELECT ?v WHERE { <${EX}t> <${EX}temp> ?v }`);
  say("query", { values: res.results.bindings.map((b) => b.v.value) });

  const sub = client.subscribe(`SELECT ?v WHERE { <${EX}t> <${EX}temp> ?v }`, undefined, "temps");
  const first = await within(10000, "subscribed", once(sub, "subscribed"));
  say("subscribed", { sequence: first.sequence, alias: first.alias,
                      added: first.addedResults.results.bindings.map((b) => b.v.value) });

  const added = once(sub, "added");
  const removed = once(sub, "removed");
  await client.update(`DELETE { <${EX}t> <${EX}temp> ?v } INSERT { <${EX}t> <${EX}temp> 21 } ` +
                      `WHERE { <${EX}t> <${EX}temp> ?v }`);
  const a = await within(10000, "added", added);
  const r = await within(10000, "removed", removed);
  say("notification", { added: a.results.bindings.map((b) => b.v.value),
                        removed: r.results.bindings.map((b) => b.v.value) });

  const bad = client.subscribe("SELECT WHERE {", undefined, "broken");
  const err = await within(10000, "error", once(bad, "error"));
  say("error", { status_code: err.status_code, alias: err.alias });

  const gone = once(sub, "unsubscribed");
  sub.unsubscribe();
  const u = await within(10000, "unsubscribed", gone);
  say("unsubscribed", { spuid: u.unsubscribed.spuid });
  bad.kill();
  process.exit(0);
}

main().catch((e) => { say("failed", { message: String(e && e.stack || e) }); process.exit(1); });
