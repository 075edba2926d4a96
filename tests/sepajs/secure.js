// sepa-js 0.13.2, unchanged, against a ksp-sib's SEPA secure mode: register → token →
// secure update, query and subscribe (the token inside the subscribe), as SecureSEPA does them.
// Usage: node secure.js HOST HTTPS_PORT WSS_PORT CA_PEM IDENTITY. One JSON line per step.
// The configuration is ours, the library is not touched: the SIB's certificate is trusted
// through an https.Agent, and the HTTPS port is set after register (which writes 8443).
const fs = require("fs");
const https = require("https");
const { secure: SecureSEPA } = require("@arces-wot/sepa-js").client;
const [host, httpsPort, wssPort, caFile, identity] = process.argv.slice(2);
const EX = "http://example.org/";
const agent = new https.Agent({ ca: fs.readFileSync(caFile) });

const say = (step, data) => console.log(JSON.stringify({ step, ...data }));
const within = (ms, what, promise) => Promise.race([promise, new Promise((_, reject) =>
  setTimeout(() => reject(new Error(`no ${what} within ${ms} ms`)), ms))]);
const once = (emitter, event) => new Promise((resolve) => emitter.once(event, resolve));

async function main() {
  const client = await SecureSEPA.register(identity, {
    host,
    oauth: { enable: true, register: `https://${host}:${httpsPort}/oauth/register`,
             tokenRequest: `https://${host}:${httpsPort}/oauth/token` },
    sparql11seprotocol: {
      protocol: "wss",
      availableProtocols: { wss: { port: Number(wssPort), path: "/secure/subscribe" } },
    },
    options: { httpsAgent: agent },
  });
  client.config.sparql11protocol.port = Number(httpsPort);
  say("registered", { client_id: client.clientID.length > 0 });

  await client.login();
  say("token", { type: client.webToken.token_type, expires_in: client.webToken.expires_in });

  const up = await client.update(`INSERT DATA { <${EX}t> <${EX}temp> 20 }`);
  say("update", { status: up.status });
  const res = await client.query(`SELECT ?v WHERE { <${EX}t> <${EX}temp> ?v }`);
  say("query", { values: res.results.bindings.map((b) => b.v.value) });

  const sub = client.subscribe(`SELECT ?v WHERE { <${EX}t> <${EX}temp> ?v }`, undefined, "temps");
  const first = await within(10000, "subscribed", once(sub, "subscribed"));
  say("subscribed", { sequence: first.sequence,
                      added: first.addedResults.results.bindings.map((b) => b.v.value) });
  const added = once(sub, "added");
  await client.update(`DELETE { <${EX}t> <${EX}temp> ?v } INSERT { <${EX}t> <${EX}temp> 21 } ` +
                      `WHERE { <${EX}t> <${EX}temp> ?v }`);
  const a = await within(10000, "added", added);
  say("notification", { added: a.results.bindings.map((b) => b.v.value) });
  sub.kill();
  process.exit(0);
}

main().catch((e) => {
  say("failed", { message: String(e && e.stack || e),
                  response: e && e.response ? e.response.data : undefined });
  process.exit(1);
});
