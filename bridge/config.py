"""`ksp-bridge` configuration: defaults, then the TOML file (`--config`), then flags — read by
`sib.config.load`, as `ksp-sib`'s, so that unknown keys and wrong types are refused the same
way. Every key is in docs/bridge.md and `bridge.example.toml`.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from sib.config import ConfigError, ServingConfig, check_ranges

__all__ = ["BridgeConfig", "ConfigError", "Endpoints"]


@dataclass(frozen=True)
class Endpoints:
    """Where the broker answers: its SPARQL 1.1 Protocol base and paths, its SE Protocol URL
    (None: persistent queries refused)."""

    base: str
    query_path: str
    update_path: str
    subscribe: str | None


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
    # [limits]
    max_queued: int = 10_000
    max_persistent_per_kp: int = 256
    max_subscriptions: int = 10_000  # and ServingConfig's max_session_entries
    rule_firing_limit: int = 16
    cascade_limit: int = 1024
    # [timing]: ServingConfig's ack_timeout and max_retransmit

    SECTIONS = {"bridge": ("data_dir", "memory", "host", "udp_port", "tcp_port", "coap_port", "metrics_port",
                           "metrics_host", "log_level"),
                "broker": ("jsap", "url", "subscribe", "timeout", "max_concurrent", "backoff",
                           "max_backoff"),
                "limits": ("max_queued", "max_persistent_per_kp", "max_subscriptions",
                           "max_session_entries", "rule_firing_limit", "cascade_limit"),
                "timing": ("ack_timeout", "max_retransmit")}
    PREFIXED = {"broker": "broker_"}

    def check(self) -> None:
        check_ranges(self, ports=("udp_port", "tcp_port", "coap_port", "metrics_port"),
                     positive=("broker_timeout", "broker_max_concurrent", "broker_backoff",
                               "broker_max_backoff", "max_queued", "max_persistent_per_kp",
                               "max_subscriptions", "max_session_entries", "ack_timeout",
                               "rule_firing_limit", "cascade_limit"),
                     non_negative=("max_retransmit",))
        if not (self.broker_jsap or self.broker_url):
            raise ConfigError("say where the broker is: --jsap FILE, or --broker URL (and "
                              "--subscribe URL); in a file, [broker] jsap or url")
        self.endpoints()  # a JSAP that cannot be read: said now

    def endpoints(self) -> Endpoints:
        """From the JSAP (host, `sparql11protocol`, `sparql11seprotocol`, as `ksp-sib jsap`
        prints them), with `url` and `subscribe` taking precedence when given."""
        subscribe = self.broker_subscribe or None
        if not self.broker_jsap:
            return Endpoints(self.broker_url, "/query", "/update", subscribe)
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
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ConfigError(f"jsap {self.broker_jsap}: {exc!r} (it needs host and "
                              "sparql11protocol.port)") from None
        return Endpoints(self.broker_url or base, query, update, subscribe)
