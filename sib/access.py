"""Access control: who may read and write which graphs (wire-format R14, status 0x08).

A KP proves its identity with the CREDENTIALS option (KP ID + password), checked against the
configured KPs, whose passwords are stored as salted scrypt hashes (`hash_password`). A request
without CREDENTIALS is anonymous and gets the anonymous policy (none / read / read-write, on
every graph). Wrong password or unknown KP ID: denied — a KP that names an identity must prove
it, it does not fall back to anonymous.

Permissions are per graph: `read` and `write` lists of graph IRIs, `"default"` for the default
graph and `"*"` for every graph. What a request needs is decided from the request alone, before
anything is evaluated or written, so a denied request applies nothing:

- a query or pattern update reads its QUERY GRAPH list, or with none the union of all graphs,
  which needs read on `"*"` (wire-format §7.6: a KP allowed only some graphs names them, and
  is refused otherwise, rather than silently answered from a subset);
- INSERT writes the INSERT GRAPH list (else the default graph); DELETE writes the DELETE GRAPH
  list, or with none every graph (`"*"`);
- CREATE and DROP write the graphs they name; COPY and ADD read the source and write the target;
  MOVE reads and writes the source (it is emptied) and writes the target.

Persistent operations are checked when they are registered, again when they are restored after
a restart (by their KP ID: the saved copy keeps no password) and whenever the policy is replaced
(`SibCore.set_access`); one that the policy no longer allows is ended with an ACCESS_DENIED IND.
"""
from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ksp.codes import Status, Tx
from ksp.model import Request
from ksp.secure import parse_key
from ksp.terms import DEFAULT_GRAPH, IRI

from .errors import RequestError

ALL = "*"
DEFAULT = "default"
ANONYMOUS_POLICIES = ("none", "read", "read-write")
#: The password hash of a KP configured with a key only: no password verifies against it.
_NO_PASSWORD = "!"

# scrypt cost: 16 MiB and ~50 ms per hash. Successful checks are cached (by a SHA-256 of the
# password) so only the first request of a KP pays it.
_N, _R, _P = 2 ** 14, 8, 1


def hash_password(password: str, *, salt: bytes | None = None) -> str:
    """`scrypt$N$r$p$salt$hash` (hex), the form the configuration stores."""
    salt = secrets.token_bytes(16) if salt is None else salt
    digest = hashlib.scrypt(password.encode(), salt=salt, n=_N, r=_R, p=_P, dklen=32)
    return f"scrypt${_N}${_R}${_P}${salt.hex()}${digest.hex()}"


def is_password_hash(stored: object) -> bool:
    """Whether `stored` has the form `hash_password` writes (so a typo is found at start-up,
    not as a KP that can never log in)."""
    if not isinstance(stored, str):
        return False
    parts = stored.split("$")
    try:
        return (len(parts) == 6 and parts[0] == "scrypt" and all(int(x) > 0 for x in parts[1:4])
                and len(bytes.fromhex(parts[4])) >= 8 and len(bytes.fromhex(parts[5])) >= 16)
    except ValueError:
        return False


def verify_password(password: str, stored: str) -> bool:
    try:
        kind, n, r, p, salt, digest = stored.split("$")
        if kind != "scrypt":
            return False
        got = hashlib.scrypt(password.encode(), salt=bytes.fromhex(salt), n=int(n), r=int(r),
                             p=int(p), dklen=len(bytes.fromhex(digest)))
    except ValueError:
        return False
    return hmac.compare_digest(got, bytes.fromhex(digest))


def _graph_name(name: str) -> str:
    return DEFAULT if name == "" else name


@dataclass(frozen=True)
class Grant:
    """What one principal may do: graph names (IRI text, `default`, `*`)."""

    read: frozenset[str] = frozenset()
    write: frozenset[str] = frozenset()

    @classmethod
    def of(cls, read: Iterable[str] = (), write: Iterable[str] = ()) -> "Grant":
        return cls(frozenset(map(_graph_name, read)), frozenset(map(_graph_name, write)))

    def allows(self, kind: str, graphs: Iterable[str]) -> bool:
        allowed = self.read if kind == "read" else self.write
        return ALL in allowed or all(g != ALL and g in allowed for g in graphs)


BUDGETS = ("query", "update")
"""The time budgets a KP's entry may set for itself (`query_seconds`, `update_seconds`); a
persistent operation's is the SIB's (a query group is shared by KPs)."""


@dataclass
class KPEntry:
    kp_id: bytes
    password_hash: str
    grant: Grant
    name: str = ""
    #: The KP's key for sealed messages (`ksp.secure`, wire format 13), if it has one.
    key: bytes | None = None
    #: Only sealed messages: CREDENTIALS naming this KP are refused, whatever the password.
    require_auth: bool = False
    #: This KP's time budgets in seconds, in place of `[limits]`'s (`sib.budget`): keys
    #: `query`, `update` (from `query_seconds`, `update_seconds` in its entry).
    budgets: dict[str, float] = field(default_factory=dict)


@dataclass
class AccessPolicy:
    """`check(request)` raises `RequestError(ACCESS_DENIED)` or returns. `open()` allows all."""

    kps: dict[bytes, KPEntry] = field(default_factory=dict)
    #: `none`, `read` (every graph), `read-write` (every graph), or per graph a mapping
    #: {"read": [...], "write": [...]} of graph names as in a KP's entry.
    anonymous: str | Mapping = "read-write"
    _verified: dict[bytes, bytes] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.anonymous, Mapping):
            unknown = set(self.anonymous) - {"read", "write"}
            if unknown:
                raise ValueError(f"anonymous policy: unknown keys {sorted(unknown)}")
            self._anonymous = Grant.of(self.anonymous.get("read", ()),
                                       self.anonymous.get("write", ()))
        elif self.anonymous in ANONYMOUS_POLICIES:
            self._anonymous = Grant.of((ALL,) if self.anonymous != "none" else (),
                                       (ALL,) if self.anonymous == "read-write" else ())
        else:
            raise ValueError(f"anonymous policy {self.anonymous!r}: one of {ANONYMOUS_POLICIES}"
                             " or a table of read/write graphs")

    @classmethod
    def open(cls) -> "AccessPolicy":
        return cls()

    @classmethod
    def from_config(cls, config: Mapping) -> "AccessPolicy":
        """`[access]` of the TOML file: `anonymous` and a list `kp` of {id, password_hash,
        read, write}. `id` is a UUID or a name (hashed to a UUID as the client does)."""
        from ksp.kpid import kp_id_bytes

        kps = {}
        for entry in config.get("kp", ()):
            kp_id = kp_id_bytes(str(entry["id"]))
            key = parse_key(str(entry["key"])) if "key" in entry else None
            if "password_hash" not in entry and key is None:
                raise ValueError(f"[[access.kp]] {entry['id']}: password_hash or key needed")
            budgets = {kind: float(entry[f"{kind}_seconds"]) for kind in BUDGETS
                       if f"{kind}_seconds" in entry}
            if any(seconds <= 0 for seconds in budgets.values()):
                raise ValueError(f"[[access.kp]] {entry['id']}: a budget must be above 0 s")
            kps[kp_id] = KPEntry(kp_id, str(entry.get("password_hash", _NO_PASSWORD)),
                                 Grant.of(entry.get("read", ()), entry.get("write", ())),
                                 str(entry["id"]), key,
                                 bool(entry.get("require_auth", "password_hash" not in entry)),
                                 budgets)
        anonymous = config.get("anonymous", "read-write")
        return cls(kps, anonymous if isinstance(anonymous, Mapping) else str(anonymous))

    @property
    def is_open(self) -> bool:
        return not self.kps and self.anonymous == "read-write"

    def anonymous_grant(self) -> Grant:
        return self._anonymous

    def proven(self, kp_id: bytes, token: bytes) -> bool:
        """Whether the password whose SHA-256 is `token` was verified for `kp_id`."""
        cached = self._verified.get(kp_id)
        return cached is not None and kp_id in self.kps and hmac.compare_digest(cached, token)

    def remember(self, kp_id: bytes, token: bytes) -> None:
        """The password whose SHA-256 is `token` is right for `kp_id` (verified elsewhere, off
        the request path: `sib.auth`)."""
        self._verified[kp_id] = token

    def grant_of(self, request: Request) -> Grant:
        creds = request.options.credentials
        if creds is None:
            return self.anonymous_grant()
        entry = self.kps.get(bytes(creds.kp_id))
        if entry is None:
            raise RequestError(Status.ACCESS_DENIED, "unknown KP ID")
        if entry.require_auth:
            raise RequestError(Status.ACCESS_DENIED, "this KP must use sealed messages")
        token = hashlib.sha256(creds.password.encode()).digest()
        if not self.proven(entry.kp_id, token):
            if not verify_password(creds.password, entry.password_hash):
                raise RequestError(Status.ACCESS_DENIED, "wrong password")
            self.remember(entry.kp_id, token)
        return entry.grant

    def check_by_id(self, kp_id: bytes | None, request: Request) -> None:
        """`check` for a KP known only by its KP ID (None: anonymous) whose password was
        proven before: a persistent operation restored after a restart (the saved copy has no
        password), or re-checked under a reloaded policy."""
        if self.is_open:
            return
        if kp_id is None:
            grant = self.anonymous_grant()
        elif (entry := self.kps.get(kp_id)) is not None:
            grant = entry.grant
        else:
            raise RequestError(Status.ACCESS_DENIED, "KP ID no longer configured")
        self.check_grant(grant, request)

    def who(self, kp) -> "_Named":
        """`kp` (a `KPIdentity`) for a log line: with its configured id beside its UUID."""
        return _Named(kp, self)

    def key_of(self, kp_id: bytes) -> bytes | None:
        entry = self.kps.get(kp_id)
        return None if entry is None else entry.key

    def budget(self, kp_id: bytes | None, kind: str, default: float | None) -> float | None:
        """The `kind` time budget of KP `kp_id`: its entry's, else `default`."""
        entry = self.kps.get(kp_id) if kp_id is not None else None
        return default if entry is None else entry.budgets.get(kind, default)

    def requires_auth(self, kp_id: bytes) -> bool:
        entry = self.kps.get(kp_id)
        return entry is not None and entry.require_auth

    def check_sealed(self, kp_id: bytes, request: Request) -> None:
        """`check` for a request whose envelope proved `kp_id` (its key, not a password)."""
        entry = self.kps.get(kp_id)
        if entry is None or entry.key is None:
            raise RequestError(Status.ACCESS_DENIED, "KP ID has no key")
        if request.tx not in (Tx.TERMINATE, Tx.RESET):
            self.check_grant(entry.grant, request)

    def check_from(self, kp_id: bytes | None, request: Request) -> None:
        """`check` of a request as it arrived: `kp_id` set and no CREDENTIALS means a sealed
        envelope proved the KP ID (`check_sealed`); otherwise its CREDENTIALS say who it is."""
        if kp_id is not None and request.options.credentials is None:
            self.check_sealed(kp_id, request)
        else:
            self.check(request)

    def check(self, request: Request) -> None:
        if self.is_open:
            return
        grant = self.grant_of(request)
        if request.tx not in (Tx.TERMINATE, Tx.RESET):  # their own operations: identity is enough
            self.check_grant(grant, request)

    def check_grant(self, grant: Grant, request: Request) -> None:
        """Whether `grant` covers every graph `request` reads and writes."""
        if self.is_open:
            return
        reads, writes = needs(request)
        if not grant.allows("read", reads):
            raise RequestError(Status.ACCESS_DENIED, f"no read permission on {sorted(reads)}")
        if not grant.allows("write", writes):
            raise RequestError(Status.ACCESS_DENIED, f"no write permission on {sorted(writes)}")


class _Named:
    """Formatted only if the log record is emitted."""

    __slots__ = ("kp", "policy")

    def __init__(self, kp, policy: AccessPolicy) -> None:
        self.kp, self.policy = kp, policy

    def __str__(self) -> str:
        entry = self.policy.kps.get(self.kp.kp_id) if self.kp.kp_id is not None else None
        return f"{self.kp} ({entry.name})" if entry is not None and entry.name else str(self.kp)


def graph_names(graphs: Iterable[IRI] | None, none: str = ALL) -> set[str]:
    """Graphs as a grant names them (`default` for the default graph); `none` stands for a
    list that is not given."""
    if graphs is None:
        return {none}
    return {DEFAULT if g == DEFAULT_GRAPH else str(g) for g in graphs}


def needs(request: Request) -> tuple[set[str], set[str]]:
    """(graphs read, graphs written) by `request`; `*` = every graph."""
    tx, opts = request.tx.base, request.options
    reads: set[str] = set()
    writes: set[str] = set()
    if tx.is_query or request.where is not None:
        reads |= graph_names(opts.query_graphs, ALL)
    if tx in (Tx.CREATE, Tx.DROP):
        writes |= graph_names(request.graphs, ALL)
    elif tx in (Tx.COPY, Tx.MOVE, Tx.ADD):
        reads |= graph_names((request.source,), ALL)
        writes |= graph_names((request.target,), ALL)
        if tx is Tx.MOVE:
            writes |= graph_names((request.source,), ALL)
    else:
        if request.insert is not None:
            writes |= graph_names(opts.insert_graphs, DEFAULT)
        if request.delete is not None:
            writes |= graph_names(opts.delete_graphs, ALL)
    return reads, writes
