// sepa-js 0.13.2, unchanged, against a running ksp-sib's SEPA gate.
// Usage: node run.js HOST HTTP_PORT WS_PORT. Prints one JSON line per step; exits 1 on a failure.
const { SEPA } = require("@arces-wot/sepa-js");
const { CHANGE, say, within, once, values, writeReadSubscribe } = require("./steps");
const [host, httpPort, wsPort] = process.argv.slice(2);

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

async function main() {
  const sub = await writeReadSubscribe(client);

  const added = once(sub, "added");
  const removed = once(sub, "removed");
  await client.update(CHANGE);
  const a = await within(10000, "added", added);
  const r = await within(10000, "removed", removed);
  say("notification", { added: values(a), removed: values(r) });

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
