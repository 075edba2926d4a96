"""`ksp-sib` configuration: defaults, then the TOML file, then command-line flags.

Every key is documented in `docs/sib.md` (section "Configuration"); `sib.example.toml` shows
them all. Unknown keys are an error, so a typo does not silently keep a default.
"""
from __future__ import annotations

import ssl
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ksp import Timing

from ksp.secure import parse_key

from .access import ANONYMOUS_POLICIES, AccessPolicy, is_password_hash
from .budget import Budgets

__all__ = ["Config", "ConfigError", "ServingConfig", "anonymous_closed", "anonymous_notice",
           "check_ranges", "load", "loopback_only", "serving_policy"]


class ConfigError(ValueError):
    pass


@dataclass
class ServingConfig:
    """What `ksp-sib` and `ksp-bridge` serve devices with, alike: the listeners, the metrics
    endpoint, the log, the session tables and IND retransmission."""

    host: str = "127.0.0.1"
    udp_port: int = 7000
    tcp_port: int = 7001
    coap_port: int = 5683
    metrics_port: int = -1
    metrics_host: str = "127.0.0.1"
    log_level: str = "info"
    max_session_entries: int = 65_536  # [limits]
    ack_timeout: float = 2.0  # [timing]
    max_retransmit: int = 4
    capture_file: str = ""  # [capture] (attributes capture_<key>)
    capture_max_bytes: int = 0
    capture_max_files: int = 10

    @property
    def timing(self) -> Timing:
        return Timing(ack_timeout=self.ack_timeout, max_retransmit=self.max_retransmit)

    def port(self, name: str) -> int | None:
        """A transport's port; None = disabled (a negative port in the configuration)."""
        value = getattr(self, f"{name}_port")
        return None if value < 0 else value


@dataclass
class Config(ServingConfig):
    # [sib] (and ServingConfig's host, ports, metrics, log_level)
    data_dir: str = "ksp-data"
    memory: bool = False
    smart: bool = True
    # [limits]
    max_persistent_per_kp: int = 256
    max_persistent: int = 50_000
    max_quads: int = 0  # 0: no cap on the store's size
    max_queued: int = 10_000
    max_queued_per_kp: int = 1_000  # its share of max_queued (sib.fairness)
    #: Time budgets in seconds (`sib.budget`; 0: none): a one-shot query, an update's WHERE,
    #: a persistent operation's evaluation. A KP's [[access.kp]] entry may set its own
    #: query_seconds and update_seconds.
    query_seconds: float = 5.0
    update_seconds: float = 5.0
    persistent_seconds: float = 5.0
    #: Threads the one-shot queries run on, beside the writes (`sib.readers`).
    reader_threads: int = 2
    rule_firing_limit: int = 16
    cascade_limit: int = 1024
    max_tcp_connections: int = 1024
    max_tcp_connections_per_address: int = 64
    max_tcp_buffered_bytes: int = 64 << 20
    tcp_idle_timeout: float = 0.0
    tcp_frame_timeout: float = 30.0
    # [tls] (attributes tls_<key>)
    tls_cert: str = ""
    tls_key: str = ""
    tls_client_ca: str = ""
    # [capture]: ServingConfig's
    # [sepa] (attributes sepa_<key>): the SEPA gate (docs/sepa.md)
    sepa_http_port: int = 8000
    sepa_ws_port: int = 9000
    sepa_max_subscriptions: int = 10_000
    sepa_max_socket_subscriptions: int = 1_000
    sepa_max_subscriptions_per_identity: int = 1_000  # its share of max_subscriptions
    sepa_max_connections: int = 1024
    #: One client's pace: requests and frames a second (`sib.fairness.Pace`; 0: any).
    sepa_requests_per_second_per_identity: float = 500.0
    sepa_max_connections_per_address: int = 64
    #: The secure mode (on with a certificate): HTTPS and WSS ports, who may register, tokens.
    sepa_certificate: str = ""
    sepa_key: str = ""
    sepa_https_port: int = 8443
    sepa_wss_port: int = 9443
    sepa_identities: list = field(default_factory=list)
    sepa_token_lifetime: float = 3600.0
    sepa_token_reply: str = "both"
    #: Prefixes the SIB's JSAP offers beside rdf, rdfs, xsd, owl and sosa (`ksp-sib jsap`).
    sepa_namespaces: dict = field(default_factory=dict)
    #: SERVICE endpoints queries may reach (none by default), with their deadline and threads.
    sepa_service_endpoints: list = field(default_factory=list)
    sepa_service_deadline: float = 10.0
    sepa_service_workers: int = 2
    #: The service base IRI of relative IRIs in queries and updates ("": the gate's root URL,
    #: `http://HOST:HTTP_PORT/`).
    sepa_base_iri: str = ""
    # [access]
    access: dict[str, Any] = field(default_factory=dict)

    SECTIONS = {"sib": ("data_dir", "memory", "host", "udp_port", "tcp_port", "coap_port",
                        "metrics_port", "metrics_host", "log_level", "smart"),
                "limits": ("max_persistent_per_kp", "max_persistent", "max_quads", "max_queued",
                           "max_queued_per_kp", "query_seconds", "update_seconds",
                           "persistent_seconds", "reader_threads", "rule_firing_limit",
                           "cascade_limit", "max_session_entries", "max_tcp_connections",
                           "max_tcp_connections_per_address", "max_tcp_buffered_bytes",
                           "tcp_idle_timeout", "tcp_frame_timeout"),
                "timing": ("ack_timeout", "max_retransmit"),
                "tls": ("cert", "key", "client_ca"),
                "capture": ("file", "max_bytes", "max_files"),
                "sepa": ("http_port", "ws_port", "max_subscriptions",
                         "max_socket_subscriptions", "max_subscriptions_per_identity",
                         "requests_per_second_per_identity", "max_connections", "max_connections_per_address", "certificate",
                         "key", "https_port", "wss_port", "identities", "token_lifetime",
                         "token_reply", "namespaces", "service_endpoints", "service_deadline",
                         "service_workers", "base_iri")}
    #: Sections whose keys are attributes with a prefix ([tls] cert -> tls_cert).
    PREFIXED = {"tls": "tls_", "capture": "capture_", "sepa": "sepa_"}

    def budgets(self) -> Budgets:
        """[limits]' time budgets (0: none)."""
        return Budgets(self.query_seconds or None, self.update_seconds or None,
                       self.persistent_seconds or None)

    def access_policy(self) -> AccessPolicy:
        return serving_policy(self.access, self.host)

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TCP listener's TLS context from [tls] (None: plain TCP). With `client_ca`, a
        client must present a certificate signed by it."""
        if not (self.tls_cert or self.tls_key or self.tls_client_ca):
            return None
        if not (self.tls_cert and self.tls_key):
            raise ConfigError("[tls] needs both cert and key")
        return _server_context(self.tls_cert, self.tls_key, self.tls_client_ca, "[tls]:")

    def sepa_ssl_context(self) -> ssl.SSLContext | None:
        """The SEPA gate's secure mode ([sepa] certificate and key; None: off)."""
        if not (self.sepa_certificate or self.sepa_key):
            return None
        if not (self.sepa_certificate and self.sepa_key):
            raise ConfigError("[sepa] the secure mode needs both certificate and key")
        return _server_context(self.sepa_certificate, self.sepa_key, "",
                               "[sepa] certificate:")

    def check(self) -> None:
        _check_values(self)


def serving_policy(access: dict, host: str) -> AccessPolicy:
    """`[access]` of a server listening on `host` (`ksp-sib`'s, `ksp-bridge`'s). With no
    `anonymous` in it, anonymous clients may read and write while the listeners are on
    loopback (a developer's machine, `ksp demo`) and get nothing once they listen beyond it
    (mosquitto 2's rule): a server opened to a network is never open to anyone by a key left
    out."""
    if anonymous_closed(access, host):
        return AccessPolicy.from_config({**access, "anonymous": "none"})
    return AccessPolicy.from_config(access)


def anonymous_closed(access: dict, host: str) -> bool:
    """Anonymous clients refused for want of an explicit `[access] anonymous`."""
    return "anonymous" not in access and not loopback_only(host)


def anonymous_notice(access: dict, host: str) -> str | None:
    """What the startup log says when `serving_policy` closed the door (None: it did not)."""
    if not anonymous_closed(access, host):
        return None
    return (f"anonymous clients get nothing: the listeners are on {host or '*'}, beyond "
            "loopback, and [access] sets no anonymous policy; anonymous = \"read\" (or a "
            "table of graphs) in [access] lets them in")


def loopback_only(host: str) -> bool:
    """`host` (the listeners' address) reaches this machine only: a loopback address or
    `localhost`. The wildcard (`""`, `0.0.0.0`, `::`), any other address or name: beyond."""
    import ipaddress

    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _server_context(cert: str, key: str, client_ca: str, where: str) -> ssl.SSLContext:
    for path in (cert, key, client_ca):  # one that is missing or unreadable, named
        if path:
            try:
                with open(path, "rb"):
                    pass
            except OSError as exc:
                raise ConfigError(f"{where} {path}: {exc.strerror or exc}") from exc
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
        if client_ca:
            context.load_verify_locations(client_ca)
            context.verify_mode = ssl.CERT_REQUIRED
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"{where} {exc}") from exc
    return context


def load(path: str | Path | None = None, overrides: dict[str, Any] | None = None,
         kind: type = Config) -> Any:
    """Defaults ← TOML file at `path` ← `overrides` (flags given; None values are ignored),
    then `check()`ed. `kind`: a dataclass with `SECTIONS` and `PREFIXED` as `Config`'s (the
    bridge's `BridgeConfig` is one)."""
    config = kind()
    types = {f.name: f.type for f in fields(kind)}
    if path is not None:
        try:
            data = tomllib.loads(Path(path).read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"{path}: {exc}") from exc
        for section, table in data.items():
            if section == "access" and "access" in {f.name for f in fields(kind)}:
                _check_access(table)
                config.access = table
                continue
            keys = kind.SECTIONS.get(section)
            if keys is None or not isinstance(table, dict):
                raise ConfigError(f"{path}: unknown section [{section}]")
            prefix = kind.PREFIXED.get(section, "")
            for key, value in table.items():
                if key not in keys:
                    raise ConfigError(f"{path}: unknown key {key!r} in [{section}]")
                setattr(config, prefix + key, _typed(key, value, types[prefix + key]))
    for key, value in (overrides or {}).items():
        if value is not None:
            setattr(config, key, _typed(key, value, types[key]))
    config.check()
    return config


LOG_LEVELS = ("debug", "info", "warning", "error")
#: The SEPA token reply's shapes (`sib.sepa.secure.Tokens`): both in one object (the default: no
#: request header tells the clients apart), today's broker's flat one, or the `{"token": {...}}`
#: older clients (sepa-js, sepy) read.
TOKEN_REPLIES = ("both", "flat", "wrapped")
#: Keys that must be at least 1 ([limits]) or above 0 ([timing]).
_POSITIVE = ("max_persistent_per_kp", "max_persistent", "max_queued", "max_queued_per_kp",
             "reader_threads", "rule_firing_limit", "cascade_limit", "max_session_entries",
             "ack_timeout", "max_tcp_connections", "max_tcp_connections_per_address",
             "max_tcp_buffered_bytes", "sepa_max_subscriptions", "sepa_max_socket_subscriptions",
             "sepa_max_subscriptions_per_identity", "sepa_max_connections",
             "sepa_max_connections_per_address", "sepa_token_lifetime",
             "sepa_service_deadline", "sepa_service_workers")


def _check_values(config: Config) -> None:
    """Values of the right type that still cannot work: said now, in one line, rather than as a
    traceback from deep inside the start-up."""
    check_ranges(config, ports=("udp_port", "tcp_port", "coap_port", "metrics_port",
                                "sepa_http_port", "sepa_ws_port", "sepa_https_port",
                                "sepa_wss_port"),
                 positive=_POSITIVE,
                 non_negative=("max_retransmit", "max_quads", "tcp_idle_timeout",
                               "tcp_frame_timeout", "query_seconds", "update_seconds",
                               "persistent_seconds", "sepa_requests_per_second_per_identity"))
    if not all(isinstance(i, str) and i for i in config.sepa_identities):
        raise ConfigError("[sepa] identities: a list of client identities (strings)")
    if not all(isinstance(k, str) and isinstance(v, str) and v
               for k, v in config.sepa_namespaces.items()):
        raise ConfigError("[sepa] namespaces: a table of prefix = \"namespace IRI\"")
    if config.sepa_service_endpoints:
        from .sepa.outbound import check_endpoint  # the gate's package: only when it is used
    for endpoint in config.sepa_service_endpoints:
        if (why := check_endpoint(endpoint)) is not None:
            raise ConfigError(f"[sepa] service_endpoints: {why}")
    if config.sepa_base_iri:
        from .sepa.protocol import base_iri  # the gate's package: only when it is used
        try:
            base_iri(config.sepa_base_iri, "", None, None)
        except ValueError as exc:
            raise ConfigError(f"[sepa] base_iri: {exc}") from None
    if config.sepa_token_reply not in TOKEN_REPLIES:
        raise ConfigError(f"[sepa] token_reply = {config.sepa_token_reply!r}: one of "
                          f"{', '.join(TOKEN_REPLIES)}")


def check_ranges(config: Any, ports: tuple[str, ...], positive: tuple[str, ...],
                 non_negative: tuple[str, ...]) -> None:
    """The checks every configuration shares: ports, `log_level`, keys that must be above 0 and
    keys that must be 0 (off) or more."""
    for name in ports:
        if getattr(config, name) > 65535:
            raise ConfigError(f"{name} = {getattr(config, name)}: a port is 0..65535 "
                              "(0: any free port; negative: off)")
    if config.log_level not in LOG_LEVELS:
        raise ConfigError(f"log_level = {config.log_level!r}: one of {', '.join(LOG_LEVELS)}")
    for name in positive:
        if getattr(config, name) <= 0:
            raise ConfigError(f"{name} = {getattr(config, name)}: must be above 0")
    for name in non_negative:
        if getattr(config, name) < 0:
            raise ConfigError(f"{name} = {getattr(config, name)}: must be 0 (off) or more")


def _typed(key: str, value: Any, kind: str) -> Any:
    want = {"str": str, "bool": bool, "int": int, "float": (int, float), "list": list,
            "dict": dict}[kind]
    if not isinstance(value, want) or (kind == "int" and isinstance(value, bool)):
        raise ConfigError(f"{key}: expected {kind}, got {value!r}")
    return float(value) if kind == "float" else value


def _check_access(table: Any) -> None:
    if not isinstance(table, dict):
        raise ConfigError("[access] must be a table")
    unknown = set(table) - {"anonymous", "kp"}
    if unknown:
        raise ConfigError(f"unknown keys in [access]: {sorted(unknown)}")
    anonymous = table.get("anonymous", "read-write")
    if isinstance(anonymous, dict):
        extra = set(anonymous) - {"read", "write"}
        if extra or not all(isinstance(v, list) and all(isinstance(g, str) for g in v)
                            for v in anonymous.values()):
            raise ConfigError("[access] anonymous: a table may only hold read and write, "
                              "lists of graph names")
    elif anonymous not in ANONYMOUS_POLICIES:
        raise ConfigError(f"[access] anonymous: one of {ANONYMOUS_POLICIES}, or a table "
                          "{ read = [...], write = [...] }")
    for entry in table.get("kp", ()):
        missing = {"id"} - set(entry) | ({"password_hash or key"}
                                           if not {"password_hash", "key"} & set(entry) else set())
        extra = set(entry) - {"id", "password_hash", "key", "require_auth", "read", "write"}
        if missing or extra:
            raise ConfigError(f"[[access.kp]] {entry.get('id')!r}: missing {sorted(missing)}, "
                              f"unknown {sorted(extra)}")
        if "password_hash" in entry and not is_password_hash(entry["password_hash"]):
            raise ConfigError(f"[[access.kp]] {entry['id']!r}: password_hash is not "
                              "`ksp-sib hash-password` output (scrypt$N$r$p$salt$hash)")
        if "key" in entry:
            try:
                parse_key(str(entry["key"]))
            except ValueError as exc:
                raise ConfigError(f"[[access.kp]] {entry.get('id')!r}: {exc}") from None
