"""The bridge's credentials at a secure SEPA broker: one client registration and one token per
identity, so that the broker applies its own policy to each device as to any of its clients.

A device proves its KSP identity to the bridge (CREDENTIALS or a sealed envelope, the SIB's
`[access]`); the bridge speaks for it at the broker under the same name, the `id` of its
`[[access.kp]]` entry. Anonymous devices speak as `anonymous_identity`, or are refused when
there is none. Each identity is registered once (`POST /oauth/register`, as SEPA's clients do);
a broker that asks for a secret to register (a `ksp-sib` does: the identity's password or a
registration token) gets the identity's from `secrets`, as HTTP Basic `identity:secret`;
its client credentials are kept in `path` (mode 0600: the bridge must present the secret again,
so it keeps it as a private key is kept, never in the configuration or a log), because the
broker refuses a second registration of a name. A token (`POST /oauth/token`, HTTP Basic) is
asked for when none is held or the one held is in the last fifth of its life, so a request never
carries one about to expire; a broker that refuses a token anyway (it forgot the client, or its
key changed) gets a new one asked for once, and a forgotten client registers again.
"""
from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from ksp.codes import Status
from sib.sepa.secure import write_private
from ksp.ratelog import RateLimitedLog

from .broker import STATUS_OF_HTTP, BrokerError

log = logging.getLogger("ksp.bridge")
#: Lines a peer can set off, one per kind and minute (`ksp.ratelog`).
peer_log = RateLimitedLog(log, time.monotonic)

__all__ = ["Registrations"]

#: A token is renewed once less than this share of its lifetime is left.
RENEW_AT = 0.2


@dataclass
class _Token:
    authorization: str
    renew_at: float  # time.monotonic()


class Registrations:
    """`await registrations.authorization(identity)` → `"Bearer …"`, registering and asking
    for tokens as needed. `max_identities` bounds what is kept (each configured KP is one)."""

    def __init__(self, register_url: str, token_url: str, *, path: Path | None,
                 ssl: object = None, timeout: float = 10.0, max_identities: int = 10_000,
                 secrets: Mapping[str, str] | None = None) -> None:
        """`secrets`: the secret each identity registers with, where the broker asks for one."""
        self.register_url, self.token_url = register_url, token_url
        self._secrets = dict(secrets or {})
        self.path = path
        self.ssl, self.timeout = ssl, timeout
        self.max_identities = max_identities
        self._clients: dict[str, dict] = {}  # identity -> {"client_id", "client_secret"}
        if path is not None and path.exists():
            self._clients = json.loads(path.read_text())["clients"]
        self._tokens: dict[str, _Token] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._http: aiohttp.ClientSession | None = None
        self.registered = 0  # registrations made by this process (stats)
        self.tokens = 0  # tokens obtained (stats)
        self.refused = 0  # tokens the broker refused before they expired (stats)

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()

    async def authorization(self, identity: str) -> str:
        token = self._tokens.get(identity)
        if token is not None and time.monotonic() < token.renew_at:
            return token.authorization
        lock = self._locks.get(identity)
        if lock is None:
            if len(self._locks) >= self.max_identities:
                raise BrokerError(Status.LIMIT_EXCEEDED, "broker identities")
            lock = self._locks[identity] = asyncio.Lock()
        async with lock:  # one registration and one token request at a time per identity
            token = self._tokens.get(identity)
            if token is None or time.monotonic() >= token.renew_at:
                token = self._tokens[identity] = await self._token(identity)
            return token.authorization

    def expire(self, identity: str, authorization: str) -> None:
        """The broker refused `authorization` (401): the next request asks for a new one."""
        self.refused += 1
        token = self._tokens.get(identity)
        if token is not None and token.authorization == authorization:
            del self._tokens[identity]

    async def _token(self, identity: str) -> _Token:
        client = self._clients.get(identity) or await self._register(identity)
        try:
            return await self._ask_token(client)
        except BrokerError as exc:
            if exc.http_status != 401:
                raise
            # The broker no longer knows this client (an operator forgot it): register anew.
            peer_log.warning("credentials refused",
                             "the broker refused %r's client credentials (%s); registering again",
                             identity, exc.reason)
            self._forget(identity)
            return await self._ask_token(await self._register(identity))

    async def _register(self, identity: str) -> dict:
        headers = {"Accept": "application/json"}
        secret = self._secrets.get(identity)
        if secret is not None:
            basic = base64.b64encode(f"{identity}:{secret}".encode()).decode()
            headers["Authorization"] = f"Basic {basic}"
        status, reply = await self._post(self.register_url, json={"register": {
            "client_identity": identity, "grant_types": ["client_credentials"]}},
            headers=headers)
        try:
            creds = reply["credentials"]
            client = {"client_id": str(creds["client_id"]),
                      "client_secret": str(creds["client_secret"])}
        except (KeyError, TypeError):
            raise BrokerError(Status.INTERNAL_ERROR, f"{self.register_url}: no credentials in "
                                                     "the answer") from None
        self._clients[identity] = client
        self._save()
        self.registered += 1
        log.info("registered at the broker as %r", identity)
        return client

    async def _ask_token(self, client: dict) -> _Token:
        basic = base64.b64encode(f"{client['client_id']}:{client['client_secret']}".encode())
        asked = time.monotonic()
        # The reference broker refuses a token request whose Content-Type is not JSON.
        _, reply = await self._post(self.token_url, data=b"", headers={
            "Authorization": f"Basic {basic.decode()}", "Content-Type": "application/json",
            "Accept": "application/json"})
        flat = reply.get("token") if isinstance(reply.get("token"), dict) else reply
        try:
            token, lifetime = str(flat["access_token"]), float(flat.get("expires_in", 3600))
        except (KeyError, TypeError, ValueError):
            raise BrokerError(Status.INTERNAL_ERROR,
                              f"{self.token_url}: no access_token in the answer") from None
        self.tokens += 1
        # Its expiry is in whole seconds at the broker: a second less, then the last fifth.
        return _Token(f"Bearer {token}", asked + max(0.0, (lifetime - 1) * (1 - RENEW_AT)))

    async def _post(self, url: str, **kw) -> tuple[int, dict]:
        if self._http is None:
            self._http = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.timeout),
                connector=aiohttp.TCPConnector(ssl=self.ssl if self.ssl is not None else True))
        try:
            async with self._http.post(url, **kw) as answer:
                body = await answer.read()
                try:
                    reply = json.loads(body)
                except ValueError:
                    reply = None
                if answer.status >= 300:
                    said = reply.get("error_description") if isinstance(reply, dict) else None
                    raise BrokerError(STATUS_OF_HTTP.get(answer.status, Status.INTERNAL_ERROR),
                                      f"{url}: HTTP {answer.status}"
                                      + (f" ({said})" if said else ""), answer.status)
                if not isinstance(reply, dict):
                    raise BrokerError(Status.INTERNAL_ERROR, f"{url}: the answer is not JSON")
                return answer.status, reply
        except asyncio.TimeoutError:
            raise BrokerError(Status.INTERNAL_ERROR,
                              f"{url}: no answer within {self.timeout} s") from None
        except aiohttp.ClientError as exc:
            raise BrokerError(Status.INTERNAL_ERROR, f"{url}: {exc}") from None

    def _forget(self, identity: str) -> None:
        self._clients.pop(identity, None)
        self._tokens.pop(identity, None)
        self._save()

    def _save(self) -> None:
        if self.path is not None:
            write_private(self.path, json.dumps({"clients": self._clients}).encode())
