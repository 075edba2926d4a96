"""`ksp-bridge` configuration: defaults, then the TOML file (`--config`), then flags — read by
`sib.config.load`, as `ksp-sib`'s, so that unknown keys and wrong types are refused the same
way. Every key is in docs/bridge.md and `bridge.example.toml`.
"""
from __future__ import annotations

import json
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from sib import AccessPolicy
from sib.config import ConfigError, ServingConfig, check_ranges, serving_policy

__all__ = ["BridgeConfig", "ConfigError", "Endpoints"]


@dataclass(frozen=True)
class Endpoints:
    """Where the broker answers: its SPARQL 1.1 Protocol base and paths, its SE Protocol URL
    (None: persistent queries refused), and in secure mode its registration and token URLs."""

    base: str
    query_path: str
    update_path: str
    subscribe: str | None
    register: str | None = None
    token: str | None = None

    @property
    def secure(self) -> bool:
        return self.register is not None and self.token is not None


@dataclass
class BridgeConfig(ServingConfig):
    # [bridge]: ServingConfig's host, ports, metrics and log_level, and
    data_dir: str = "ksp-bridge-data"  # the journal of persistent operations
    memory: bool = False  # no journal: persistent operations end at shutdown
    # [broker] (attributes broker_<key>)
    broker_jsap: str = ""
    broker_url: str = ""
    broker_subscribe: str = ""
    broker_timeout: float = 10.0
    broker_max_concurrent: int = 16
    broker_backoff: float = 0.25
    broker_max_backoff: float = 15.0
    broker_register: str = ""  # secure mode: /oauth/register (or the JSAP's oauth)
    broker_token: str = ""  # and /oauth/token
    broker_anonymous_identity: str = ""  # whom anonymous devices speak as ("": refused)
    #: identity = secret each registers with at a broker that asks for one (a ksp-sib)
    broker_register_secrets: dict = field(default_factory=dict)
    broker_ca_file: str = ""  # PEM certificates to trust for https/wss ("": the system's)
    # [limits]
    max_queued: int = 10_000
    max_persistent_per_kp: int = 256
    max_persistent: int = 50_000
    max_subscriptions: int = 10_000  # and ServingConfig's max_session_entries
    rule_firing_limit: int = 16
    cascade_limit: int = 1024
    # [timing]: ServingConfig's ack_timeout and max_retransmit; [capture]: its capture_*
    # [access]: the SIB's (anonymous, [[access.kp]]), checked before anything is forwarded
    access: dict[str, Any] = field(default_factory=dict)

    SECTIONS = {"bridge": ("data_dir", "memory", "host", "udp_port", "tcp_port", "coap_port", "metrics_port",
                           "metrics_host", "log_level"),
                "broker": ("jsap", "url", "subscribe", "timeout", "max_concurrent", "backoff",
                           "max_backoff", "register", "token", "anonymous_identity",
                           "register_secrets", "ca_file"),
                "limits": ("max_queued", "max_persistent_per_kp", "max_persistent",
                           "max_subscriptions", "max_session_entries", "rule_firing_limit",
                           "cascade_limit"),
                "timing": ("ack_timeout", "max_retransmit"),
                "capture": ("file", "max_bytes", "max_files")}
    PREFIXED = {"broker": "broker_", "capture": "capture_"}

    def check(self) -> None:
        check_ranges(self, ports=("udp_port", "tcp_port", "coap_port", "metrics_port"),
                     positive=("broker_timeout", "broker_max_concurrent", "broker_backoff",
                               "broker_max_backoff", "max_queued", "max_persistent_per_kp",
                               "max_persistent", "max_subscriptions", "max_session_entries",
                               "ack_timeout", "rule_firing_limit", "cascade_limit"),
                     non_negative=("max_retransmit", "capture_max_bytes", "capture_max_files"))
        if not (self.broker_jsap or self.broker_url):
            raise ConfigError("say where the broker is: --jsap FILE, or --broker URL (and "
                              "--subscribe URL); in a file, [broker] jsap or url")
        where = self.endpoints()  # a JSAP that cannot be read: said now
        for what, url, schemes in (("the broker", where.base, ("http", "https")),
                                   ("subscriptions", where.subscribe, ("ws", "wss")),
                                   ("register", where.register, ("http", "https")),
                                   ("token", where.token, ("http", "https"))):
            parts = urlsplit(url) if url else None
            if parts is not None and (parts.scheme not in schemes or not parts.hostname):
                raise ConfigError(f"{what} at {url!r}: the bridge reaches it at "
                                  f"{' or '.join(s + '://HOST[:PORT]' for s in schemes)}")
        if bool(self.broker_register) != bool(self.broker_token):
            raise ConfigError("[broker] register and token go together (the secure mode)")
        if not all(isinstance(k, str) and isinstance(v, str) and v
                   for k, v in self.broker_register_secrets.items()):
            raise ConfigError("[broker] register_secrets: a table of identity = \"secret\"")
        if self.broker_anonymous_identity and not where.secure:
            raise ConfigError("[broker] anonymous_identity is for a secure broker (register "
                              "and token, or a JSAP with oauth.enable)")
        self.ssl_context()
        try:
            self.access_policy()
        except (ValueError, KeyError) as exc:
            raise ConfigError(f"[access]: {exc}") from None

    def access_policy(self) -> AccessPolicy:
        return serving_policy(self.access, self.host)

    def ssl_context(self) -> ssl.SSLContext | None:
        """What https and wss connections to the broker trust: `ca_file`, else the system's
        store (None)."""
        if not self.broker_ca_file:
            return None
        try:
            return ssl.create_default_context(cafile=self.broker_ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"[broker] ca_file {self.broker_ca_file}: {exc}") from None

    def endpoints(self) -> Endpoints:
        """From the JSAP (host, `sparql11protocol`, `sparql11seprotocol`, as `ksp-sib jsap`
        prints them), with `url` and `subscribe` taking precedence when given."""
        subscribe = self.broker_subscribe or None
        register, token = self.broker_register or None, self.broker_token or None
        if not self.broker_jsap:
            return Endpoints(self.broker_url, "/query", "/update", subscribe, register, token)
        try:
            jsap = json.loads(Path(self.broker_jsap).read_text())
            host = jsap["host"]
            http = jsap["sparql11protocol"]
            base = f"{http.get('protocol', 'http')}://{host}:{int(http['port'])}"
            query = http.get("query", {}).get("path", "/query")
            update = http.get("update", {}).get("path", "/update")
            se = jsap.get("sparql11seprotocol") or {}
            ws = (se.get("availableProtocols") or {}).get(se.get("protocol", "ws"))
            if subscribe is None and ws:
                subscribe = (f"{se.get('protocol', 'ws')}://{host}:{int(ws['port'])}"
                             f"{ws.get('path', '/subscribe')}")
            oauth = jsap.get("oauth") or {}
            if oauth.get("enable") and register is None and token is None:
                register, token = str(oauth["register"]), str(oauth["tokenRequest"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ConfigError(f"jsap {self.broker_jsap}: {exc!r} (it needs host and "
                              "sparql11protocol.port)") from None
        return Endpoints(self.broker_url or base, query, update, subscribe, register, token)
