// What run.js and secure.js do alike with a sepa-js client: one JSON line per step.
const EX = "http://example.org/";
const TEMP = `SELECT ?v WHERE { <${EX}t> <${EX}temp> ?v }`;
const CHANGE = `DELETE { <${EX}t> <${EX}temp> ?v } INSERT { <${EX}t> <${EX}temp> 21 } ` +
               `WHERE { <${EX}t> <${EX}temp> ?v }`;

const say = (step, data) => console.log(JSON.stringify({ step, ...data }));
const within = (ms, what, promise) => Promise.race([promise, new Promise((_, reject) =>
  setTimeout(() => reject(new Error(`no ${what} within ${ms} ms`)), ms))]);
const once = (emitter, event) => new Promise((resolve) => emitter.once(event, resolve));
const values = (results) => results.results.bindings.map((b) => b.v.value);

// Insert a reading, query it, subscribe to it (alias "temps"); the subscription.
async function writeReadSubscribe(client) {
  const up = await client.update(`INSERT DATA { <${EX}t> <${EX}temp> 20 }`);
  say("update", { status: up.status });
  say("query", { values: values(await client.query(TEMP)) });
  const sub = client.subscribe(TEMP, undefined, "temps");
  const first = await within(10000, "subscribed", once(sub, "subscribed"));
  say("subscribed", { sequence: first.sequence, alias: first.alias,
                      added: values(first.addedResults) });
  return sub;
}

module.exports = { CHANGE, say, within, once, values, writeReadSubscribe };
