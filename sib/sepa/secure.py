"""SEPA's secure mode: client registration, tokens, and who a token speaks for.

As the reference broker: `POST /oauth/register` with `{"register": {"client_identity",
"grant_types": ["client_credentials"]}}` answers 201 `{"credentials": {"client_id",
"client_secret"}}`; `POST /oauth/token` with HTTP Basic `client_id:client_secret` answers 201
with a signed JWT (HS256, PyJWT) that expires after `token_lifetime` seconds; every request on
the secure ports carries it (`Authorization: Bearer …`, or `authorization` in a subscribe).

Who may register: only the identities the configuration lists (`[sepa] identities`), each
once — a second registration of an identity is refused, so whoever knows a name cannot take
over a client that registered under it (the operator forgets a client to let it register
anew: `Clients.forget`). What a client may do is the SIB's one access policy: the grant of the
`[[access.kp]]` entry whose id is its identity, else the anonymous grant.

Nothing secret is kept in clear: a client secret is stored as its SHA-256 (it is 32 random
bytes, so a fast hash is enough), in `sepa-clients.json` in the data directory; the token
signing key is `sepa-token.key` (mode 0600) there, or lives in memory with `--memory`.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import secrets
import time
import uuid
from collections.abc import Iterable
from pathlib import Path

import jwt

from ..config import TOKEN_REPLIES
from .broker import SepaError

__all__ = ["Clients", "Tokens", "write_private"]

ISSUER = "ksp-sib"


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def write_private(path: Path, data: bytes) -> None:
    """Atomically, readable by the owner only (a secret the process must read back)."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class Clients:
    """Registered clients: client_id → (identity, SHA-256 of the secret)."""

    def __init__(self, data_dir: Path | None, identities: Iterable[str], *,
                 max_clients: int = 1_000) -> None:
        self.identities = frozenset(identities)
        self.max_clients = max_clients
        self.path = None if data_dir is None else Path(data_dir) / "sepa-clients.json"
        self._clients: dict[str, dict] = {}
        if self.path is not None and self.path.exists():
            self._clients = json.loads(self.path.read_text())["clients"]

    def __len__(self) -> int:
        return len(self._clients)

    def register(self, identity: object, grant_types: object) -> tuple[str, str]:
        if not isinstance(identity, str) or not identity:
            raise SepaError(400, "invalid_request", "register needs a client_identity")
        if not isinstance(grant_types, list) or "client_credentials" not in grant_types:
            raise SepaError(400, "unsupported_grant_type",
                            "grant_types must include client_credentials")
        if identity not in self.identities:
            raise SepaError(401, "unauthorized_client",
                            f"{identity!r} may not register with this SIB")
        if any(c["identity"] == identity for c in self._clients.values()):
            raise SepaError(401, "unauthorized_client", f"{identity!r} is already registered")
        if len(self._clients) >= self.max_clients:
            raise SepaError(429, "too_many_clients", f"{self.max_clients} clients, the limit")
        client_id, secret = str(uuid.uuid4()), secrets.token_urlsafe(32)
        self._clients[client_id] = {"identity": identity, "secret_sha256": _digest(secret)}
        self._save()
        return client_id, secret

    def forget(self, identity: str) -> bool:
        gone = [cid for cid, c in self._clients.items() if c["identity"] == identity]
        for cid in gone:
            del self._clients[cid]
        if gone:
            self._save()
        return bool(gone)

    def identity(self, client_id: str) -> str | None:
        client = self._clients.get(client_id)
        return None if client is None else client["identity"]

    def authenticate(self, header: str | None) -> tuple[str, str]:
        """(client_id, identity) from an HTTP Basic `Authorization` header."""
        if not header or not header.lower().startswith("basic "):
            raise SepaError(401, "invalid_client", "the token request needs HTTP Basic "
                                                   "authentication with the client credentials")
        try:
            client_id, _, secret = base64.b64decode(header[6:].strip(), validate=True) \
                .decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            raise SepaError(401, "invalid_client", "malformed Basic credentials") from None
        client = self._clients.get(client_id)
        stored = client["secret_sha256"] if client is not None else _digest("")
        if not hmac.compare_digest(stored, _digest(secret)) or client is None:
            raise SepaError(401, "invalid_client", "unknown client or wrong secret")
        return client_id, client["identity"]

    def _save(self) -> None:
        if self.path is not None:
            write_private(self.path, json.dumps({"clients": self._clients}).encode())


class Tokens:
    """Signed, expiring tokens for registered clients."""

    def __init__(self, data_dir: Path | None, lifetime: float = 3600.0,
                 reply: str = "both") -> None:
        if reply not in TOKEN_REPLIES:
            raise ValueError(f"token reply {reply!r}: one of {TOKEN_REPLIES}")
        self.lifetime, self.reply = lifetime, reply
        self._key = self._load_key(data_dir)

    @staticmethod
    def _load_key(data_dir: Path | None) -> bytes:
        if data_dir is None:
            return secrets.token_bytes(32)
        path = Path(data_dir) / "sepa-token.key"
        if path.exists():
            return path.read_bytes()
        key = secrets.token_bytes(32)
        write_private(path, key)
        return key

    def issue(self, client_id: str) -> dict:
        now = int(time.time())
        token = jwt.encode({"iss": ISSUER, "sub": client_id, "iat": now,
                            "exp": now + int(self.lifetime), "jti": secrets.token_hex(8)},
                           self._key, algorithm="HS256")
        flat = {"access_token": token, "token_type": "bearer",
                "expires_in": int(self.lifetime)}
        if self.reply == "flat":
            return flat
        if self.reply == "wrapped":
            return {"token": flat}
        return {**flat, "token": flat}

    def client_of(self, authorization: object) -> str:
        """The client_id a `Bearer <jwt>` (or bare `<jwt>`) speaks for."""
        if not isinstance(authorization, str) or not authorization.strip():
            raise SepaError(401, "unauthorized", "this is a secure endpoint: a token is needed")
        token = authorization.strip()
        if token.lower().startswith("bearer "):
            token = token[7:].strip()
        try:
            claims = jwt.decode(token, self._key, algorithms=["HS256"], issuer=ISSUER,
                                options={"require": ["exp", "sub", "iss"]})
        except jwt.ExpiredSignatureError:
            raise SepaError(401, "token_expired", "the token has expired") from None
        except jwt.InvalidTokenError:
            raise SepaError(401, "invalid_token", "the token is not valid here") from None
        return claims["sub"]
