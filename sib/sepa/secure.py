"""SEPA's secure mode: client registration, tokens, and who a token speaks for.

As the reference broker: `POST /oauth/register` with `{"register": {"client_identity",
"grant_types": ["client_credentials"]}}` answers 201 `{"credentials": {"client_id",
"client_secret"}}`; `POST /oauth/token` with HTTP Basic `client_id:client_secret` answers 201
with a signed JWT (HS256, PyJWT) that expires after `token_lifetime` seconds; every request on
the secure ports carries it (`Authorization: Bearer …`, or `authorization` in a subscribe).

Who may register: only the identities the configuration lists (`[sepa] identities`), and only
with a secret, sent as HTTP Basic `identity:secret` with the register request: the password of
the `[[access.kp]]` entry whose id is the identity (once per identity: a second registration
with it is refused), or a registration token the operator issued (`ksp-sib register-token
NAME`: single use, expiring, kept as its SHA-256 in `sepa-register-tokens.json`; it also lets a
registered identity register anew, its old client and tokens ending). Every refusal is the same
401, so the answers tell no one which names are listed or taken. What a client may do is the
SIB's one access policy: the grant of the `[[access.kp]]` entry whose id is its identity, else
the anonymous grant.

Nothing secret is kept in clear: a client secret is stored as its SHA-256 (it is 32 random
bytes, so a fast hash is enough), in `sepa-clients.json` in the data directory; the token
signing key is `sepa-token.key` (mode 0600) there, or lives in memory with `--memory`.
"""
from __future__ import annotations

import base64
import binascii
import fcntl
import hashlib
import hmac
import json
import os
import secrets
import time
import uuid
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from pathlib import Path

import jwt

from ..config import TOKEN_REPLIES
from .broker import SepaError

__all__ = ["Clients", "RegisterTokens", "Tokens", "basic_credentials", "write_private",
           "REFUSED"]

ISSUER = "ksp-sib"
#: The one answer to every refused registration, whatever the reason.
REFUSED = SepaError(401, "unauthorized_client",
                    "registration refused: send the identity and its secret (its password, "
                    "or a registration token) as HTTP Basic credentials")


def basic_credentials(header: str | None) -> tuple[str, str] | None:
    """(user, secret) of an HTTP Basic `Authorization` header; None if there is none or it is
    malformed."""
    if not header or not header.lower().startswith("basic "):
        return None
    try:
        user, colon, secret = base64.b64decode(header[6:].strip(), validate=True) \
            .decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return (user, secret) if colon else None


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
        #: Called with the client_ids `forget` drops (the gate ends their subscriptions).
        self.on_forget: list[Callable[[list[str]], None]] = []
        if self.path is not None and self.path.exists():
            self._clients = json.loads(self.path.read_text())["clients"]

    def __len__(self) -> int:
        return len(self._clients)

    @staticmethod
    def check_request(identity: object, grant_types: object) -> str:
        """The identity of a well-formed register request (400 otherwise)."""
        if not isinstance(identity, str) or not identity:
            raise SepaError(400, "invalid_request", "register needs a client_identity")
        if not isinstance(grant_types, list) or "client_credentials" not in grant_types:
            raise SepaError(400, "unsupported_grant_type",
                            "grant_types must include client_credentials")
        return identity

    def register(self, identity: object, grant_types: object, *,
                 anew: bool = False) -> tuple[str, str]:
        """A new client for `identity`, whose secret the caller has checked. `anew`: an
        identity registered before gets this client in place of its old ones (else refused)."""
        identity = self.check_request(identity, grant_types)
        if identity not in self.identities:
            raise REFUSED
        if any(c["identity"] == identity for c in self._clients.values()):
            if not anew:
                raise REFUSED
            self.forget(identity)
        if len(self._clients) >= self.max_clients:
            raise SepaError(429, "too_many_clients", f"{self.max_clients} clients, the limit")
        client_id, secret = str(uuid.uuid4()), secrets.token_urlsafe(32)
        self._clients[client_id] = {"identity": identity, "secret_sha256": _digest(secret)}
        self._save()
        return client_id, secret

    def forget(self, identity: str) -> bool:
        """Forget `identity`'s clients: their tokens stop working and their subscriptions end
        (each of `on_forget` is called with the client_ids)."""
        gone = [cid for cid, c in self._clients.items() if c["identity"] == identity]
        for cid in gone:
            del self._clients[cid]
        if gone:
            self._save()
            for watcher in self.on_forget:
                watcher(gone)
        return bool(gone)

    def identity(self, client_id: str) -> str | None:
        client = self._clients.get(client_id)
        return None if client is None else client["identity"]

    def authenticate(self, header: str | None) -> tuple[str, str]:
        """(client_id, identity) from an HTTP Basic `Authorization` header."""
        if not header or not header.lower().startswith("basic "):
            raise SepaError(401, "invalid_client", "the token request needs HTTP Basic "
                                                   "authentication with the client credentials")
        given = basic_credentials(header)
        if given is None:
            raise SepaError(401, "invalid_client", "malformed Basic credentials")
        client_id, secret = given
        client = self._clients.get(client_id)
        stored = client["secret_sha256"] if client is not None else _digest("")
        if not hmac.compare_digest(stored, _digest(secret)) or client is None:
            raise SepaError(401, "invalid_client", "unknown client or wrong secret")
        return client_id, client["identity"]

    def _save(self) -> None:
        if self.path is not None:
            write_private(self.path, json.dumps({"clients": self._clients}).encode())


class RegisterTokens:
    """One-time registration tokens the operator issues (`ksp-sib register-token`): each for
    one identity, until it expires or is used. Only their SHA-256 is kept, in
    `sepa-register-tokens.json` in the data directory (in memory without one), read and
    written under a lock, since the command adds to it while the SIB takes from it. At most
    `max_tokens` outstanding; expired ones are dropped whenever the file is written."""

    FILE = "sepa-register-tokens.json"

    def __init__(self, data_dir: Path | None, *, max_tokens: int = 1_000,
                 clock: Callable[[], float] = time.time) -> None:
        self.path = None if data_dir is None else Path(data_dir) / self.FILE
        self.max_tokens, self.clock = max_tokens, clock
        self._memory: dict[str, dict] = {}

    def issue(self, identity: str, lifetime: float = 86_400.0) -> str:
        """A new token for `identity`, valid `lifetime` seconds: shown once, here."""
        token = secrets.token_urlsafe(24)
        with self._held() as tokens:
            if len(tokens) >= self.max_tokens:
                raise ValueError(f"{self.max_tokens} registration tokens outstanding, the "
                                 "limit: wait for some to be used or to expire")
            tokens[_digest(token)] = {"identity": identity,
                                      "expires": self.clock() + lifetime}
        return token

    def take(self, identity: str, token: str) -> bool:
        """Whether `token` is a live one for `identity`; if so it is used up."""
        with self._held() as tokens:
            entry = tokens.get(_digest(token))
            if entry is None or entry["identity"] != identity:
                return False
            del tokens[_digest(token)]
            return True

    def __len__(self) -> int:
        with self._held() as tokens:
            return len(tokens)

    @contextmanager
    def _held(self):
        """The live tokens, to read and change; written back on leaving."""
        if self.path is None:
            yield self._live(self._memory)
            return
        with open(self.path.with_name(self.FILE + ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                saved = (json.loads(self.path.read_text())["tokens"] if self.path.exists()
                         else {})
                tokens = self._live(dict(saved))
                yield tokens
                if tokens != saved:
                    write_private(self.path, json.dumps({"tokens": tokens}).encode())
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _live(self, tokens: dict[str, dict]) -> dict[str, dict]:
        now = self.clock()
        for digest in [d for d, e in tokens.items() if e["expires"] <= now]:
            del tokens[digest]
        return tokens


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
        return self.claims(authorization)[0]

    def claims(self, authorization: object) -> tuple[str, float]:
        """(client_id, expiry in `time.time()` seconds) of a `Bearer <jwt>` (or bare
        `<jwt>`)."""
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
        return claims["sub"], float(claims["exp"])
