"""The SEPA gate's secure mode (`sib/sepa/secure.py`) through real sockets: HTTPS and WSS with
a certificate, registration, tokens, one access policy for KPs and SEPA clients; and npm
@arces-wot/sepa-js 0.13.2's secure path, unchanged."""
from __future__ import annotations

import asyncio
import base64
import json
import shutil
import ssl
import stat
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from sib import Sib
from sib.access import AccessPolicy, Grant, KPEntry, hash_password
from sib.sepa import SepaError, SepaGate
from sib.sepa.secure import Clients, RegisterTokens, Tokens
from ksp.kpid import kp_id_bytes

EX = "http://example.org/"
ROOT = Path(__file__).resolve().parent.parent


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 120))


def _policy() -> AccessPolicy:
    """Anonymous: nothing. `writer` may read and write everything; `reader` read only."""
    kps = {}
    for name, grant in (("writer", Grant.of(["*"], ["*"])), ("reader", Grant.of(["*"], []))):
        kps[kp_id_bytes(name)] = KPEntry(kp_id_bytes(name), hash_password("pw"), grant, name)
    return AccessPolicy(kps, "none")


def basic(user: str, secret: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{secret}".encode()).decode()


class SecureLab:
    def __init__(self, certificate, data_dir: Path | None = None, gate_args: dict | None = None,
                 sib_args: dict | None = None, **tokens) -> None:
        self.cert, self.key = certificate
        self.data_dir, self.token_args = data_dir, tokens
        self.gate_args, self.sib_args = gate_args or {}, sib_args or {}

    async def __aenter__(self) -> "SecureLab":
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.load_cert_chain(self.cert, self.key)
        self.sib = await Sib(access=_policy(), **self.sib_args).start()
        self.gate = await SepaGate(
            self.sib, http_port=-1, ws_port=-1, ssl_context=tls, https_port=0, wss_port=0,
            clients=Clients(self.data_dir, ["writer", "reader", "guest"]),
            tokens=Tokens(self.data_dir, **self.token_args), **self.gate_args).start()
        trust = ssl.create_default_context(cafile=str(self.cert))
        self.http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=trust))
        self.base = f"https://127.0.0.1:{self.gate.https_port}"
        self.wss = f"wss://127.0.0.1:{self.gate.wss_port}/secure/subscribe"
        return self

    async def __aexit__(self, *exc) -> None:
        await self.http.close()
        await self.gate.close()
        await self.sib.close()

    async def post(self, path: str, **kw) -> tuple[int, dict]:
        async with self.http.post(self.base + path, **kw) as r:
            return r.status, await r.json(content_type=None)

    async def register(self, identity: str, secret: str | None = "pw",
                       **kw) -> tuple[int, dict]:
        """Register with HTTP Basic identity:secret (None: no credentials)."""
        headers = {} if secret is None else {"Authorization": basic(identity, secret)}
        return await self.post("/oauth/register", headers=headers, json={"register": {
            "client_identity": identity, "grant_types": ["client_credentials"]}}, **kw)

    async def token(self, identity: str) -> str:
        """`writer` and `reader` register with their password, others with a registration
        token."""
        secret = "pw" if identity in ("writer", "reader") else \
            self.gate.register_tokens.issue(identity)
        status, body = await self.register(identity, secret)
        assert status == 201, body
        creds = body["credentials"]
        basic = base64.b64encode(f"{creds['client_id']}:{creds['client_secret']}".encode())
        status, body = await self.post("/oauth/token", headers={
            "Authorization": "Basic " + basic.decode(), "Content-Type": "application/json"})
        assert status == 201, body
        return body["access_token"]

    async def update(self, token: str | None, text: str) -> tuple[int, dict]:
        headers = {"Content-Type": "application/sparql-update"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        return await self.post("/secure/update", data=text, headers=headers)

    async def select(self, token: str | None, text: str) -> tuple[int, dict]:
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        async with self.http.get(self.base + "/secure/query", params={"query": text},
                                 headers=headers) as r:
            return r.status, await r.json(content_type=None)


def test_the_jsap_of_the_secure_mode(certificate):
    """Over HTTPS `GET /jsap` describes the secure mode, as SEPA's secure JSAPs do: OAuth on,
    the /secure/ paths over HTTPS, subscriptions over WSS."""
    async def main():
        async with SecureLab(certificate) as lab:
            async with lab.http.get(lab.base + "/jsap") as r:
                jsap = await r.json()
            port, wss = lab.gate.https_port, lab.gate.wss_port
            assert jsap["oauth"] == {
                "enable": True, "register": f"https://127.0.0.1:{port}/oauth/register",
                "tokenRequest": f"https://127.0.0.1:{port}/oauth/token"}
            assert jsap["sparql11protocol"]["protocol"] == "https"
            assert jsap["sparql11protocol"]["port"] == port
            assert jsap["sparql11protocol"]["update"]["path"] == "/secure/update"
            assert jsap["sparql11seprotocol"] == {
                "protocol": "wss",
                "availableProtocols": {"wss": {"port": wss, "path": "/secure/subscribe"}}}
    run(main())


def test_register_and_token_as_the_reference_broker(certificate):
    async def main():
        async with SecureLab(certificate) as lab:
            status, body = await lab.register("writer")
            assert status == 201 and set(body["credentials"]) == {"client_id", "client_secret"}
            creds = body["credentials"]
            # an identity registers once: whoever knows the name cannot take it over
            status, body = await lab.register("writer")
            assert status == 401 and body["error"] == "unauthorized_client"
            status, body = await lab.register("stranger", "pw")  # not listed
            assert status == 401 and body["error"] == "unauthorized_client"
            status, body = await lab.post("/oauth/register", data=b"{nope")
            assert status == 400
            status, body = await lab.post("/register", json={"register": {
                "client_identity": "reader", "grant_types": ["password"]}})
            assert status == 400 and body["error"] == "unsupported_grant_type"
            basic = base64.b64encode(f"{creds['client_id']}:{creds['client_secret']}".encode())
            for path in ("/oauth/token", "/token"):
                status, body = await lab.post(path, headers={
                    "Authorization": "Basic " + basic.decode()})
                assert status == 201, body
                # both shapes: today's flat reply and the {"token": {...}} older clients read
                assert body["token_type"] == "bearer" and body["expires_in"] == 3600
                assert body["token"] == {k: body[k] for k in
                                         ("access_token", "token_type", "expires_in")}
            wrong = base64.b64encode(f"{creds['client_id']}:guess".encode()).decode()
            for headers in ({"Authorization": "Basic " + wrong}, {},
                            {"Authorization": "Basic !!!"}):
                status, body = await lab.post("/oauth/token", headers=headers)
                assert status == 401 and body["error"] == "invalid_client", body
    run(main())


def test_registration_needs_the_identity_s_secret_and_every_refusal_looks_alike(certificate):
    """Registration takes the identity's password or a registration token the operator
    issued (single use, expiring); without either, a listed name, an unlisted one and a taken
    one get the very same 401, so the answers tell nobody which names exist. A token lets a
    registered identity register anew: its old client's tokens stop working."""
    async def main():
        async with SecureLab(certificate) as lab:
            tokens = lab.gate.register_tokens
            expired = RegisterTokens(None)
            lab.gate.register_tokens = expired
            stale = expired.issue("guest", lifetime=-1)
            lab.gate.register_tokens = tokens
            for_reader = tokens.issue("reader")
            refusals = [await lab.register("writer", None), await lab.register("writer", "nope"),
                        await lab.register("stranger", "pw"), await lab.register("guest", "pw"),
                        await lab.register("guest", stale),
                        await lab.register("guest", for_reader)]  # another name's token
            status, body = await lab.post("/oauth/register", headers={
                "Authorization": basic("reader", "pw")}, json={"register": {  # not its name
                    "client_identity": "writer", "grant_types": ["client_credentials"]}})
            refusals.append((status, body))
            assert await lab.register("writer", "pw") == (201, ANY_CREDENTIALS)
            refusals.append(await lab.register("writer", "pw"))  # taken
            assert len({json.dumps(r, sort_keys=True) for r in refusals}) == 1, refusals
            assert refusals[0][0] == 401 and refusals[0][1]["error"] == "unauthorized_client"
            assert "writer" not in json.dumps(refusals[0])
            # a registration token: once, for its identity only
            guest = tokens.issue("guest")
            assert (await lab.register("guest", guest))[0] == 201
            assert (await lab.register("guest", guest)) == refusals[0]
            # with a token a registered identity registers anew; its old client is forgotten
            status, body = await lab.register("reader", for_reader)
            assert status == 201
            again = tokens.issue("reader")
            first_client = body["credentials"]
            status, body = await lab.register("reader", again)
            assert status == 201 and body["credentials"] != first_client
            status, _ = await lab.post("/oauth/token", headers={"Authorization": basic(
                first_client["client_id"], first_client["client_secret"])})
            assert status == 401
            assert len(tokens) == 0  # each used up
    run(main())


class _AnyCredentials:
    def __eq__(self, other) -> bool:
        return set(other.get("credentials", {})) == {"client_id", "client_secret"}


ANY_CREDENTIALS = _AnyCredentials()


def test_wrong_registration_secrets_hold_back_their_source_not_the_identity(certificate):
    """Eleven wrong passwords for `writer` from 127.0.0.1: past ten, that address gets 429 with
    Retry-After, even with the right one; `writer` from another address registers."""
    async def main():
        async with SecureLab(certificate, sib_args={"auth_options": {"clock": lambda: 0.0}}) \
                as lab:
            statuses = [(await lab.register("writer", f"guess{i}"))[0] for i in range(11)]
            assert statuses == [401] * 10 + [429], statuses
            async with lab.http.post(lab.base + "/oauth/register", headers={
                    "Authorization": basic("writer", "pw")}, json={"register": {
                        "client_identity": "writer", "grant_types": ["client_credentials"]}}
                    ) as r:
                assert r.status == 429 and int(r.headers["Retry-After"]) >= 1
            trust = ssl.create_default_context(cafile=str(lab.cert))
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(
                    ssl=trust, local_addr=("127.0.0.2", 0))) as elsewhere:
                async with elsewhere.post(lab.base + "/oauth/register", headers={
                        "Authorization": basic("writer", "pw")}, json={"register": {
                            "client_identity": "writer",
                            "grant_types": ["client_credentials"]}}) as r:
                    assert r.status == 201, await r.text()
            # client secrets are guesses too: the held-back address gets 429 on /oauth/token
            status, body = await lab.post("/oauth/token",
                                          headers={"Authorization": basic("x", "y")})
            assert status == 429 and body["error"] == "too_many_requests"
    run(main())


async def _subscribed(lab, token: str, alias: str):
    ws = await lab.http.ws_connect(lab.wss)
    await ws.send_json({"subscribe": {"sparql": "ASK { ?s ?p ?o }", "alias": alias,
                                      "authorization": f"Bearer {token}"}})
    first = await ws.receive_json(timeout=10)
    assert first["notification"]["sequence"] == 0, first
    return ws, first["notification"]["spuid"]


async def _ended(ws) -> tuple[dict, object]:
    """The error frame that ends the subscription, then what follows it (the close)."""
    frame = await ws.receive_json(timeout=60)
    return frame, (await ws.receive(timeout=60)).type


def test_a_subscription_ends_when_its_token_expires(certificate):
    """Tokens that live 2 s: the subscription made with one gets a 401 `token_expired` error
    frame with its spuid and alias once it expires, then its socket is closed; nothing of it is
    left in the broker."""
    async def main():
        async with SecureLab(certificate, lifetime=2) as lab:
            ws, spuid = await _subscribed(lab, await lab.token("writer"), "short")
            frame, then = await _ended(ws)
            assert (frame["status_code"], frame["error"], frame["alias"], frame["spuid"]) == \
                (401, "token_expired", "short", spuid), frame
            assert then in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
            assert not lab.gate.broker.subscriptions
            await ws.close()
    run(main())


def test_a_subscription_ends_when_its_client_is_forgotten(certificate):
    """Its client forgotten (the token revoked): the writer's subscription ends with a 401
    error frame and a close; the reader's goes on."""
    async def main():
        async with SecureLab(certificate) as lab:
            w, spuid = await _subscribed(lab, await lab.token("writer"), "w")
            r, _ = await _subscribed(lab, await lab.token("reader"), "r")
            lab.gate.clients.forget("writer")
            frame, then = await _ended(w)
            assert (frame["status_code"], frame["error"], frame["spuid"]) == \
                (401, "invalid_token", spuid), frame
            assert then in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
            assert [s.alias for s in lab.gate.broker.subscriptions.values()] == ["r"]
            await w.close()
            await r.close()
    run(main())


def test_registration_tokens_are_bounded_hashed_and_expire(tmp_path):
    now = [1000.0]
    tokens = RegisterTokens(tmp_path, max_tokens=2, clock=lambda: now[0])
    first = tokens.issue("a", lifetime=10)
    tokens.issue("b", lifetime=100)
    with pytest.raises(ValueError):
        tokens.issue("c")
    stored = (tmp_path / RegisterTokens.FILE).read_text()
    assert first not in stored
    assert stat.S_IMODE((tmp_path / RegisterTokens.FILE).stat().st_mode) == 0o600
    now[0] = 1010.0  # the first has expired: dropped, and room for another
    assert not RegisterTokens(tmp_path, clock=lambda: now[0]).take("a", first)
    assert len(tokens) == 1 and tokens.issue("c")


def test_token_reply_shapes_are_configurable():
    flat = Tokens(None, reply="flat").issue("c")
    wrapped = Tokens(None, reply="wrapped").issue("c")
    assert set(flat) == {"access_token", "token_type", "expires_in"}
    assert set(wrapped) == {"token"} and set(wrapped["token"]) == set(flat)
    with pytest.raises(ValueError):
        Tokens(None, reply="xml")


def test_every_secure_request_checks_the_token_and_the_policy(certificate):
    async def main():
        async with SecureLab(certificate) as lab:
            writer, reader, guest = [await lab.token(i) for i in ("writer", "reader", "guest")]
            insert = f"INSERT DATA {{ <{EX}t> <{EX}temp> 20 }}"
            query = f"SELECT ?v WHERE {{ <{EX}t> <{EX}temp> ?v }}"
            for token in (None, "", "not-a-jwt", writer[:-4] + "AAAA"):
                status, body = await lab.update(token, insert)
                assert status == 401, (token, body)
                status, body = await lab.select(token, query)
                assert status == 401
            assert len(lab.sib.store) == 0  # nothing applied
            status, _ = await lab.update(writer, insert)
            assert status == 200
            # one policy: the KP entry named by the identity, else the anonymous grant
            assert (await lab.update(reader, insert))[0] == 403
            status, body = await lab.select(reader, query)
            assert status == 200 and body["results"]["bindings"][0]["v"]["value"] == "20"
            assert (await lab.select(guest, query))[0] == 403
            # "Bearer" is optional; an expired token is refused
            async with lab.http.get(lab.base + "/secure/query", params={"query": query},
                                    headers={"Authorization": writer}) as r:
                assert r.status == 200
            lab.gate.clients.forget("writer")  # a forgotten client's tokens stop working
            status, body = await lab.update(writer, insert)
            assert status == 401 and body["error"] == "invalid_token"
    run(main())


def test_expired_tokens_are_refused(certificate):
    async def main():
        async with SecureLab(certificate, lifetime=-5) as lab:
            token = await lab.token("writer")
            status, body = await lab.select(token, "ASK {}")
            assert status == 401 and body["error"] == "token_expired"
            async with lab.http.ws_connect(lab.wss) as ws:
                await ws.send_json({"subscribe": {"sparql": "ASK {}", "alias": "late",
                                                  "authorization": f"Bearer {token}"}})
                err = await ws.receive_json(timeout=10)
                assert err["status_code"] == 401 and err["alias"] == "late"
    run(main())


def test_secure_subscribe_needs_a_token_in_or_beside_the_subscribe(certificate):
    """The reference broker once accepted secure subscribes without a token (vaimee/SEPA#45): here each needs a valid one, inside `subscribe` or at the top level."""
    async def main():
        async with SecureLab(certificate) as lab:
            writer, guest = await lab.token("writer"), await lab.token("guest")
            query = f"SELECT ?v WHERE {{ <{EX}t> <{EX}temp> ?v }}"
            async with lab.http.ws_connect(lab.wss) as ws:
                for extra in ({}, {"authorization": "Bearer nonsense"}):
                    await ws.send_json({"subscribe": {"sparql": query, "alias": "x", **extra}})
                    err = await ws.receive_json(timeout=10)
                    assert err["status_code"] == 401 and err["alias"] == "x", err
                await ws.send_json({"subscribe": {"sparql": query, "alias": "g",
                                                  "authorization": guest}})
                err = await ws.receive_json(timeout=10)
                assert err["status_code"] == 403 and err["alias"] == "g"
                assert not lab.gate.broker.subscriptions
                await ws.send_json({"subscribe": {"sparql": query, "alias": "in",
                                                  "authorization": f"Bearer {writer}"}})
                got = await ws.receive_json(timeout=10)
                assert "notification" in got and got["notification"]["alias"] == "in", got
                await ws.send_json({"authorization": writer,
                                    "subscribe": {"sparql": query, "alias": "beside"}})
                assert (await ws.receive_json(timeout=10))["notification"]["alias"] == "beside"
                assert (await lab.update(writer, f"INSERT DATA {{ <{EX}t> <{EX}temp> 5 }}"))[0] \
                    == 200
                got = [await ws.receive_json(timeout=10) for _ in range(2)]
                assert all(n["notification"]["sequence"] == 1 for n in got)
    run(main())


def test_a_secure_client_s_share_of_the_subscriptions_is_by_its_identity(certificate):
    """`max_subscriptions_per_identity` in the secure mode counts a client's token identity,
    not its address: past its share `writer` gets 429, while `reader`, from the same address
    and on the same socket, still subscribes."""
    async def main():
        async with SecureLab(certificate, gate_args={"max_subscriptions_per_identity": 2}) as lab:
            writer, reader = await lab.token("writer"), await lab.token("reader")
            async with lab.http.ws_connect(lab.wss) as ws:
                got = []
                for k, token in enumerate((writer, writer, writer, reader)):
                    await ws.send_json({"subscribe": {
                        "sparql": f"ASK {{ <{EX}t{k}> ?p ?o }}", "alias": str(k),
                        "authorization": f"Bearer {token}"}})
                    got.append(await ws.receive_json(timeout=10))
            assert ["notification" in g for g in got] == [True, True, False, True], got
            assert got[2]["status_code"] == 429 and got[2]["alias"] == "2"
    run(main())


def test_a_new_policy_ends_the_subscriptions_it_no_longer_allows(certificate):
    """As SIGHUP does (`Sib.set_access`): the reader loses its read permission, so its
    subscription gets an error frame naming it and ends; the writer's goes on; nothing of a
    later change reaches the reader."""
    async def main():
        async with SecureLab(certificate) as lab:
            writer, reader = await lab.token("writer"), await lab.token("reader")
            query = f"SELECT ?v WHERE {{ <{EX}t> <{EX}temp> ?v }}"
            async with lab.http.ws_connect(lab.wss) as w, lab.http.ws_connect(lab.wss) as r:
                for ws, token, alias in ((w, writer, "w"), (r, reader, "r")):
                    await ws.send_json({"subscribe": {"sparql": query, "alias": alias,
                                                      "authorization": token}})
                    assert (await ws.receive_json(timeout=10))["notification"]["sequence"] == 0
                (spuid,) = [s.spuid for s in lab.gate.broker.subscriptions.values()
                            if s.alias == "r"]
                reader_id = kp_id_bytes("reader")
                policy = _policy()
                policy.kps[reader_id] = KPEntry(reader_id, hash_password("pw"), Grant.of([], []),
                                                "reader")
                lab.sib.set_access(policy)
                ended = await r.receive_json(timeout=10)
                assert (ended["status_code"], ended["alias"], ended["spuid"]) == (403, "r", spuid)
                assert "ended by the new access policy" in ended["error_description"]
                assert [s.alias for s in lab.gate.broker.subscriptions.values()] == ["w"]
                assert (await lab.update(writer, f"INSERT DATA {{ <{EX}t> <{EX}temp> 7 }}"))[0] \
                    == 200
                assert (await w.receive_json(timeout=10))["notification"]["sequence"] == 1
                with pytest.raises(asyncio.TimeoutError):
                    await r.receive_json(timeout=0.5)
    run(main())


def test_clients_and_key_kept_in_the_data_directory_without_secrets_in_clear(tmp_path):
    clients = Clients(tmp_path, ["app"])
    client_id, secret = clients.register("app", ["client_credentials"])
    stored = (tmp_path / "sepa-clients.json").read_text()
    assert secret not in stored and client_id in stored
    assert stat.S_IMODE((tmp_path / "sepa-clients.json").stat().st_mode) == 0o600
    tokens = Tokens(tmp_path)
    assert stat.S_IMODE((tmp_path / "sepa-token.key").stat().st_mode) == 0o600
    token = tokens.issue(client_id)["access_token"]
    # after a restart: the same clients and key, so credentials and tokens still hold
    again, tokens_again = Clients(tmp_path, ["app"]), Tokens(tmp_path)
    basic = "Basic " + base64.b64encode(f"{client_id}:{secret}".encode()).decode()
    assert again.authenticate(basic) == (client_id, "app")
    assert tokens_again.client_of("Bearer " + token) == client_id
    with pytest.raises(SepaError) as err:  # registered once, even across a restart
        Clients(tmp_path, ["app"]).register("app", ["client_credentials"])
    assert err.value.status == 401


def test_the_number_of_clients_is_bounded(tmp_path):
    clients = Clients(None, [f"c{i}" for i in range(5)], max_clients=3)
    for i in range(3):
        clients.register(f"c{i}", ["client_credentials"])
    with pytest.raises(SepaError) as err:
        clients.register("c3", ["client_credentials"])
    assert err.value.status == 429


@pytest.mark.slow
def test_ksp_sib_secure_mode_from_flags_and_sepa_js_unchanged(certificate, tmp_path):
    """`ksp-sib --sepa-certificate/--sepa-key` with identities from the TOML file; a
    registration token from `ksp-sib register-token` while it runs; npm @arces-wot/sepa-js
    0.13.2's SecureSEPA, the token in its register URL: register → token → secure update,
    query and a subscription whose notification arrives."""
    from sib.testing import SibProcess

    if shutil.which("node") is None or not (ROOT / "node_modules/@arces-wot/sepa-js").is_dir():
        pytest.fail("node and npm's @arces-wot/sepa-js are installed by scripts/_env.sh")
    cert, key = certificate
    config = tmp_path / "sib.toml"
    config.write_text('[sepa]\nidentities = ["sepa-js"]\n')
    with SibProcess("--config", str(config), "--data-dir", str(tmp_path / "data"),
                    "--udp-port", "-1", "--tcp-port", "-1", "--coap-port", "-1",
                    "--sepa-certificate", str(cert), "--sepa-key", str(key),
                    "--sepa-https-port", "0", "--sepa-wss-port", "0") as sib:
        issued = subprocess.run([sys.executable, "-m", "sib.cli", "register-token", "sepa-js",
                                 "--config", str(config), "--data-dir", str(tmp_path / "data")],
                                capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert issued.returncode == 0, issued.stderr
        secret = issued.stdout.strip()
        out = subprocess.run(["node", str(ROOT / "tests/sepajs/secure.js"), "localhost",
                              str(sib.ports["https"]), str(sib.ports["wss"]), str(cert),
                              "sepa-js", secret], capture_output=True, text=True, timeout=120)
    steps = {s.pop("step"): s for s in map(json.loads, out.stdout.splitlines())}
    assert out.returncode == 0, (out.stdout, out.stderr)
    assert steps["registered"] == {"client_id": True}
    assert steps["token"] == {"type": "bearer", "expires_in": 3600}
    assert steps["update"] == {"status": 200}
    assert steps["query"] == {"values": ["20"]}
    assert steps["subscribed"] == {"sequence": 0, "alias": "temps", "added": ["20"]}
    assert steps["notification"] == {"added": ["21"]}
    assert (tmp_path / "data" / "sepa-clients.json").exists()
    assert secret not in (tmp_path / "data" / RegisterTokens.FILE).read_text()


@pytest.mark.parametrize("line, said", [
    ('token_reply = "xml"', "token_reply"),
    ('identities = "app"', "identities"),
    ('identities = [1]', "identities"),
    ('certificate = "/nonexistent.pem"', "both certificate and key"),
    ('namespaces = ["gh"]', "namespaces: expected dict"),
    ('namespaces = { gh = 1 }', "namespaces: a table of prefix"),
])
def test_secure_mode_configuration_errors_are_one_line(tmp_path, line, said):
    from sib.config import ConfigError, load

    path = tmp_path / "sib.toml"
    path.write_text(f"[sepa]\n{line}\n")
    with pytest.raises(ConfigError) as err:
        load(path).sepa_ssl_context()
    assert said in str(err.value)


@pytest.mark.slow
def test_a_bad_certificate_stops_ksp_sib_before_anything_starts(tmp_path):
    bad = tmp_path / "bad.pem"
    bad.write_text("not a certificate")
    out = subprocess.run([sys.executable, "-m", "sib.cli", "--memory", "--sepa-certificate",
                          str(bad), "--sepa-key", str(bad)], capture_output=True, text=True,
                         timeout=60, cwd=ROOT)
    assert out.returncode == 2 and out.stderr.startswith("ksp-sib: [sepa] certificate")
    assert "Traceback" not in out.stderr


def test_ksp_sib_register_token_prints_a_token_once_and_keeps_its_hash(tmp_path, capsys):
    from sib.cli import main

    config = tmp_path / "sib.toml"
    config.write_text('[sepa]\nidentities = ["app"]\n')
    data = tmp_path / "data"
    data.mkdir()
    assert main(["register-token", "app", "--config", str(config), "--data-dir",
                 str(data)]) == 0
    token = capsys.readouterr().out.strip()
    assert token and token not in (data / RegisterTokens.FILE).read_text()
    assert RegisterTokens(data).take("app", token) and not RegisterTokens(data).take("app", token)
    assert main(["register-token", "other", "--config", str(config), "--data-dir",
                 str(data)]) == 2  # not in [sepa] identities
    assert "not in [sepa] identities" in capsys.readouterr().err
    assert main(["register-token", "app", "--data-dir", str(tmp_path / "none")]) == 2


def test_the_table_of_token_bound_subscriptions_is_bounded(certificate):
    """Subscriptions made and ended on one socket with a long-lived token: what the gate keeps
    of their expiries stays within twice the live subscriptions (and 64)."""
    async def main():
        async with SecureLab(certificate) as lab:
            token = await lab.token("writer")
            async with lab.http.ws_connect(lab.wss) as ws:
                for i in range(150):
                    await ws.send_json({"subscribe": {"sparql": f"ASK {{ <{EX}s{i}> ?p ?o }}",
                                                      "alias": str(i), "authorization": token}})
                    spuid = (await ws.receive_json(timeout=10))["notification"]["spuid"]
                    await ws.send_json({"unsubscribe": {"spuid": spuid}})
                    assert "unsubscribed" in await ws.receive_json(timeout=10)
                live = len(lab.gate.broker.subscriptions)
                assert lab.gate.token_bound <= 2 * live + 64
    run(main())


def test_the_secure_endpoints_describe_themselves_after_the_token(certificate):
    """`GET /secure/query` with no query, and `GET /secure/update`: 401 without a token (a
    secure answer, any answer, needs one), the endpoint's Service Description with one, naming
    it (and for queries the WSS subscribe URL); the Protocol's refusals hold on the secure
    paths too."""
    async def main():
        async with SecureLab(certificate) as lab:
            reader, writer = await lab.token("reader"), await lab.token("writer")
            described = {}
            for path in ("/secure/query", "/secure/update"):
                async with lab.http.get(lab.base + path) as r:
                    assert r.status == 401
                async with lab.http.get(lab.base + path, headers={
                        "Authorization": f"Bearer {reader}", "Accept": "text/turtle"}) as r:
                    assert r.status == 200 and r.content_type == "text/turtle"
                    described[path] = text = await r.text()
                assert f"<{lab.base}{path}>" in text
            assert f"<{lab.wss}>" in described["/secure/query"]
            update = described["/secure/update"]
            assert "SPARQL11Update" in update
            assert "SPARQL11Query" not in update and "subscribe" not in update
            async with lab.http.get(lab.base + "/secure/query?query=ASK%7B%7D&query=ASK%7B%7D",
                                    headers={"Authorization": f"Bearer {reader}"}) as r:
                assert r.status == 400
            status, _ = await lab.post("/secure/update", data="update=CLEAR%20NAMED&update=CLEAR"
                                       "%20DEFAULT", headers={
                                           "Authorization": f"Bearer {writer}",
                                           "Content-Type": "application/x-www-form-urlencoded"})
            assert status == 400
            status, _ = await lab.post("/secure/update", data="CLEAR ALL".encode("utf-16"),
                                       headers={"Authorization": f"Bearer {writer}",
                                                "Content-Type": "application/sparql-update; "
                                                                "charset=UTF-16"})
            assert status == 415
    run(main())
