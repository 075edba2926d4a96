// sepa-js 0.13.2, unchanged, against a ksp-sib's SEPA secure mode: register → token →
// secure update, query and subscribe (the token inside the subscribe), as SecureSEPA does them.
// Usage: node secure.js HOST HTTPS_PORT WSS_PORT CA_PEM IDENTITY SECRET. One JSON line per step.
// The configuration is ours, the library is not touched: the SIB's certificate is trusted
// through an https.Agent, the HTTPS port is set after register (which writes 8443), and the
// registration secret (a `ksp-sib register-token`) is in the register URL as
// IDENTITY:SECRET@, which axios sends as HTTP Basic credentials.
const fs = require("fs");
const https = require("https");
const { secure: SecureSEPA } = require("@arces-wot/sepa-js").client;
const { CHANGE, say, within, once, values, writeReadSubscribe } = require("./steps");
const [host, httpsPort, wssPort, caFile, identity, secret] = process.argv.slice(2);
const userinfo = `${encodeURIComponent(identity)}:${encodeURIComponent(secret)}@`;
const agent = new https.Agent({ ca: fs.readFileSync(caFile) });

async function main() {
  const client = await SecureSEPA.register(identity, {
    host,
    oauth: { enable: true, register: `https://${userinfo}${host}:${httpsPort}/oauth/register`,
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

  const sub = await writeReadSubscribe(client);
  const added = once(sub, "added");
  await client.update(CHANGE);
  const a = await within(10000, "added", added);
  say("notification", { added: values(a) });
  sub.kill();
  process.exit(0);
}

main().catch((e) => {
  say("failed", { message: String(e && e.stack || e),
                  response: e && e.response ? e.response.data : undefined });
  process.exit(1);
});
