"""`ksp-sib`: run the SIB (store, KSP over UDP/TCP/CoAP, metrics) until SIGINT/SIGTERM.

    ksp-sib [--config sib.toml] [--data-dir DIR | --memory] [--udp-port N] ...
    ksp-sib hash-password [PASSWORD]     # a password_hash for [[access.kp]] (stdin if omitted)
    ksp-sib new-key                      # a random key for [[access.kp]] key (sealed messages)
    ksp-sib register-token NAME [--config sib.toml] [--data-dir DIR]   # SEPA registration token
    ksp-sib jsap [--config sib.toml] [--merge app.jsap]   # the running SIB's JSAP
    ksp-sib systemd-unit [--config FILE]  # a systemd unit running this ksp-sib (sib/ksp-sib.service)

SIGHUP re-reads the `[access]` section of the configuration file: the new policy is in force for
the next request, and every persistent operation it no longer allows ends with an ACCESS_DENIED
IND, every SEPA subscription with a 403 error frame (a bad file is logged and the old policy
kept). Without --config, SIGHUP is logged: there is nothing to reload.

Shutdown (SIGINT/SIGTERM): an evaluation under way ends at its next look at the clock, KSP
requests still queued are answered 0x07 unexecuted, TCP/CoAP persistent operations get
TERMINATED INDs (UDP ones are journaled and resume after a restart; with --memory they are
terminated too), the store is flushed, sockets are closed, exit status 0.
"""
from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from .access import hash_password
from .budget import stop_all
from .config import Config, ConfigError, ServingConfig, anonymous_notice, load
from .journal import FILE as JOURNAL_FILE, Journal
from .lifecycle import (  # noqa: F401  (lock_data_dir, DataDirLocked: also named here)
    DataDirLocked, claim_data_dir, lock_data_dir, run_main, run_until_stopped, start_metrics,
    steady_heap, stop_metrics,
)
from .metrics import Metrics
from .service import Sib
from .store import QuadStore

__all__ = ["main", "build_parser", "add_capture_flags", "open_capture", "lock_data_dir",
           "DataDirLocked", "sepa_connections", "hash_password_command", "jsap_command"]

log = logging.getLogger("ksp.sib")

TRANSPORTS = ("udp", "tcp", "coap")


def build_parser() -> argparse.ArgumentParser:
    defaults = Config()
    p = argparse.ArgumentParser(
        prog="ksp-sib", formatter_class=argparse.RawDescriptionHelpFormatter, description=(
            "The KSP Semantic Information Broker. Flags override the TOML file (--config);\n"
            "every key is documented in docs/sib.md."), epilog=(
            "subcommands:\n"
            "  ksp-sib hash-password          a password_hash for [[access.kp]] (stdin)\n"
            "  ksp-sib new-key                a key for a board's sealed mode\n"
            "  ksp-sib register-token NAME    a SEPA registration token for NAME\n"
            "  ksp-sib jsap                   the running SIB's JSAP (asked of its gate)\n"
            "  ksp-sib systemd-unit           a systemd unit for a gateway host"))
    from importlib.metadata import PackageNotFoundError, version

    try:
        installed = version("ksp-gateway")
    except PackageNotFoundError:
        installed = "unknown (not installed)"
    p.add_argument("--version", action="version", version=f"ksp-sib {installed}")
    p.add_argument("--config", metavar="FILE", help="TOML configuration file")
    store = p.add_mutually_exclusive_group()  # both: which store was meant?
    store.add_argument("--data-dir", help="directory of the on-disk store and journal")
    store.add_argument("--memory", action="store_const", const=True,
                       help="a throwaway store, deleted at exit (nothing persists)")
    p.add_argument("--host", help="address to listen on")
    for t in TRANSPORTS:
        p.add_argument(f"--{t}-port", type=int, metavar="N",
                       help=f"{t.upper()} port (default {getattr(defaults, t + '_port')}; "
                            "0 = any free port, negative = off)")
    p.add_argument("--sepa-http-port", type=int, metavar="N",
                   help="SEPA gate: SPARQL 1.1 Protocol, /query and /update (default 8000; "
                        "negative = off)")
    p.add_argument("--sepa-ws-port", type=int, metavar="N",
                   help="SEPA gate: SE Protocol subscriptions, ws://HOST:N/subscribe "
                        "(default 9000; negative = off)")
    p.add_argument("--sepa-https-port", type=int, metavar="N",
                   help="SEPA secure mode: /oauth/register, /oauth/token, /secure/query, "
                        "/secure/update over HTTPS (default 8443; needs --sepa-certificate)")
    p.add_argument("--sepa-wss-port", type=int, metavar="N",
                   help="SEPA secure mode: wss://HOST:N/secure/subscribe (default 9443)")
    p.add_argument("--sepa-certificate", metavar="PEM",
                   help="certificate chain of the SEPA secure mode (with --sepa-key)")
    p.add_argument("--sepa-key", metavar="PEM", help="its private key")
    p.add_argument("--metrics-port", type=int, metavar="N",
                   help=f"Prometheus metrics over HTTP on this port (default "
                        f"{defaults.metrics_port}; negative = off)")
    p.add_argument("--metrics-host", metavar="ADDR",
                   help="address of the metrics endpoint (default 127.0.0.1: this host only)")
    p.add_argument("--tls-cert", metavar="PEM",
                   help="certificate chain: the TCP listener speaks TLS (with --tls-key)")
    p.add_argument("--tls-key", metavar="PEM", help="the certificate's private key")
    p.add_argument("--tls-client-ca", metavar="PEM",
                   help="require client certificates signed by this CA (mutual TLS)")
    add_capture_flags(p)
    p.add_argument("--log-level", choices=("debug", "info", "warning", "error"))
    p.add_argument("--max-session-entries", type=int, metavar="N",
                   help="size of each UDP/TCP session table (IND deliveries, ACK routes, "
                        "duplicate cache); above the number of persistent operations")
    p.add_argument("--naive", dest="smart", action="store_const", const=False,
                   help="re-evaluate every persistent operation after every update (baseline)")
    return p


@dataclass(slots=True)
class _Storage:
    """The store and, with a data directory, its journal and lock (`created`: made by this
    start, removed again if the start fails)."""
    store: QuadStore
    journal: Journal | None = None
    lock: IO | None = None
    created: bool = False


async def serve(config: Config, ready: asyncio.Event | None = None,
                stop: asyncio.Event | None = None,
                reload: Callable[[], Config] | None = None) -> None:
    """Run the SIB until `stop` is set (or SIGINT/SIGTERM). `reload`: what SIGHUP reads
    the access policy from (the configuration file again)."""
    tls = config.ssl_context()  # a bad certificate stops startup before anything is opened
    sepa_tls = config.sepa_ssl_context()
    storage = _open_storage(config)
    metrics = Metrics()
    sib = _new_sib(config, storage, metrics)
    pcap = open_capture(config)
    if pcap is not None:
        log.info("capturing to %s", config.capture_file)
    try:
        server = await _start_server(config, sib, tls, pcap)
    except OSError as exc:  # a port in use
        await _abandon(config, sib, storage, pcap)
        raise _with_flag(exc) from exc
    _count_server(metrics, server)
    if storage.journal is not None:
        _restore(sib, server, storage.journal)
    ksp_ports = _ksp_ports(server, tls is not None)
    for scheme, port in ksp_ports.items():
        log.info("listening on %s://%s:%d", scheme, config.host, port)
    if (notice := anonymous_notice(config.access, config.host)) is not None:
        log.warning("%s", notice)
    try:
        gate = await _start_gate(config, sib, sepa_tls, ksp_ports)
    except OSError as exc:  # a port in use
        await server.close()
        await _abandon(config, sib, storage, pcap)
        raise _with_flag(exc) from exc
    metrics_server = await start_metrics(metrics, config, log)
    # What startup built (store handles, restored operations) lives as long as the SIB: keep it
    # out of the collector's full passes, which otherwise pause the SIB for hundreds of ms with
    # ~10,000 persistent operations (observed in the benchmark).
    gc.collect()
    gc.freeze()
    steady_heap()  # big blocks given back when freed: a heap that does not creep (lifecycle)
    mode = "smart" if config.smart else "naive"
    try:
        # An evaluation keeping the loop busy ends at its next look at the clock (`stop_all`),
        # so a stop never waits for one.
        await run_until_stopped(sib, stop, reload, logger=log, ready=ready, interrupt=stop_all,
                                ready_message=f"SIB ready ({mode} mode)")
        log.info("shutting down: %d queued requests answered 0x07", sib.queued)
    finally:
        await _shut_down(gate, sib, server, metrics_server, storage, pcap)


def _open_storage(config: Config) -> _Storage:
    if config.memory:
        log.info("store: temporary, deleted at exit (nothing persists)")
        return _Storage(QuadStore(temporary=True))  # compacted in the background (sib.store)
    data = Path(config.data_dir)
    lock, created = claim_data_dir(data)
    storage = _Storage(QuadStore(str(data / "store")), Journal(str(data / JOURNAL_FILE)), lock,
                       created)
    log.info("store: %s (%d quads)", data.resolve(), len(storage.store))
    return storage


def _new_sib(config: Config, storage: _Storage, metrics: Metrics) -> Sib:
    return Sib(storage.store, smart=config.smart, max_queued=config.max_queued,
               max_queued_per_kp=config.max_queued_per_kp,
               access=config.access_policy(), max_persistent_per_kp=config.max_persistent_per_kp,
               max_persistent=config.max_persistent, max_quads=config.max_quads or None,
               rule_firing_limit=config.rule_firing_limit, cascade_limit=config.cascade_limit,
               journal=storage.journal, metrics=metrics, budgets=config.budgets(),
               reader_threads=config.reader_threads)


async def _start_server(config: Config, sib: Sib, tls, pcap):
    """The KSP listeners (`transports.Server`)."""
    from ksp.session import SessionOptions
    from transports.limits import ConnectionLimits
    from transports.server import Server

    return await Server.start(sib, config.host, timing=config.timing, ssl=tls, pcap=pcap,
                              tcp_limits=ConnectionLimits(
                                  config.max_tcp_connections,
                                  config.max_tcp_connections_per_address,
                                  config.max_tcp_buffered_bytes, config.tcp_idle_timeout,
                                  config.tcp_frame_timeout),
                              options=SessionOptions(max_entries=config.max_session_entries),
                              **{t: config.port(t) for t in TRANSPORTS})


def _count_server(metrics: Metrics, server) -> None:
    """The listeners' figures on the SIB's metrics."""
    metrics.counters["ksp_ind_retransmissions_total"] = (
        "INDs sent again for want of an ACK (UDP).", lambda: server.ind_retransmissions)
    metrics.counters["ksp_sealed_dropped_total"] = (
        "Sealed datagrams dropped unopened: unknown KP, bad tag or a replay (wire format 13.3).",
        lambda: server.sealed_dropped)
    metrics.counters["ksp_held_for_validation_total"] = (
        "Answers held back until their address is validated (ECHO REQUIRED instead, or an IND "
        "not sent), and sealed requests asked to prove freshness (wire format 14, 13.5).",
        lambda: server.held_for_validation)
    if server.tcp is not None:
        guard = server.tcp.guard
        metrics.gauges["ksp_tcp_connections"] = ("Open KSP TCP connections.", lambda: len(guard))
        metrics.gauges["ksp_tcp_buffered_bytes"] = (
            "Bytes of unfinished messages held across the TCP connections.",
            lambda: guard.total_buffered)
        metrics.counters["ksp_tcp_connections_closed_by_limit_total"] = (
            "TCP connections closed by a limit (transports/limits.py).",
            lambda: sum(guard.refused.values()))


def _restore(sib: Sib, server, journal: Journal) -> None:
    """The journaled persistent operations, each on the channel of its transport; one whose
    transport is off, or that cannot be restored, is forgotten."""
    restored = 0
    for saved in list(journal):
        if getattr(server, saved.transport, None) is None:
            log.warning("%s tid %d: its transport %s is off; forgotten", saved.kp,
                        saved.tid, saved.transport)
            journal.remove(saved.kp, saved.tid)
            continue
        try:
            channel = server.channel(saved.transport, saved.kp, saved.tid)
            restored += sib.core.restore(saved, channel)
        except Exception:
            log.exception("%s tid %d: could not be restored; forgotten", saved.kp,
                          saved.tid)
            journal.remove(saved.kp, saved.tid)
    if restored:
        log.info("%d persistent operations restored", restored)


async def _start_gate(config: Config, sib: Sib, sepa_tls, ksp_ports: dict[str, int]):
    """The SEPA gate (`sib.sepa`) as `[sepa]` describes it, its listeners logged; None when
    all of them are off."""
    if config.sepa_http_port < 0 and config.sepa_ws_port < 0 and sepa_tls is None:
        return None
    from .sepa import GateLimits, GateListen, SepaGate
    from .sepa.outbound import Outbound
    from .sepa.secure import Clients, RegisterTokens, Tokens

    data_dir = None if config.memory else Path(config.data_dir)
    listen = GateListen(host=config.host, http_port=config.sepa_http_port,
                        ws_port=config.sepa_ws_port, ssl_context=sepa_tls,
                        https_port=config.sepa_https_port, wss_port=config.sepa_wss_port,
                        base_iri=config.sepa_base_iri or None)
    limits = GateLimits(
        max_subscriptions=config.sepa_max_subscriptions,
        max_socket_subscriptions=config.sepa_max_socket_subscriptions,
        max_subscriptions_per_identity=config.sepa_max_subscriptions_per_identity,
        requests_per_second_per_identity=config.sepa_requests_per_second_per_identity or None)
    gate = await SepaGate(sib, listen=listen, limits=limits,
                          clients=Clients(data_dir, config.sepa_identities),
                          tokens=Tokens(data_dir, config.sepa_token_lifetime,
                                        config.sepa_token_reply),
                          register_tokens=RegisterTokens(data_dir),
                          ksp=ksp_ports, namespaces=config.sepa_namespaces,
                          connections=sepa_connections(config),
                          outbound=Outbound(config.sepa_service_endpoints,
                                            deadline=config.sepa_service_deadline,
                                            workers=config.sepa_service_workers)).start()
    for scheme, port, what in (
            ("http", gate.http_port, "/query, /update"), ("ws", gate.ws_port, "/subscribe"),
            ("https", gate.https_port,
             "/oauth/register, /oauth/token, /secure/query, /secure/update"),
            ("wss", gate.wss_port, "/secure/subscribe")):
        if port is not None:
            log.info("listening on %s://%s:%d (SEPA: %s)", scheme, config.host, port, what)
    return gate


#: The flag that sets each listener's port (`OSError.listener`, set by the listeners).
_PORT_FLAGS = {"udp": "--udp-port", "tcp": "--tcp-port", "coap": "--coap-port",
               "http": "--sepa-http-port", "ws": "--sepa-ws-port",
               "https": "--sepa-https-port", "wss": "--sepa-wss-port"}


def _with_flag(exc: OSError) -> OSError:
    """A listener's port error (one in use, say) with the flag that moves it and turns it off."""
    flag = _PORT_FLAGS.get(getattr(exc, "listener", None))
    if flag is None:
        return exc
    return OSError(exc.errno, f"{exc.strerror or exc} ({flag} N takes another port, "
                              f"{flag} -1 turns it off)")


async def _abandon(config: Config, sib: Sib, storage: _Storage, pcap) -> None:
    """A start that failed leaves nothing behind that it created."""
    await sib.close()
    storage.store.close()
    if pcap is not None:
        pcap.close()
    if storage.journal is not None:
        storage.journal.close()
    if storage.created:
        shutil.rmtree(config.data_dir, ignore_errors=True)


async def _shut_down(gate, sib: Sib, server, metrics_server, storage: _Storage, pcap) -> None:
    """Close in the order that lets every KP hear the end: the gate's subscriptions end while
    the scheduler runs, the SIB's persistent operations while the sockets are open. Reads
    under way are given up first: a stop never waits for an evaluation, nor answers one after
    it (`Readers.stop`)."""
    sib.readers.stop()
    if gate is not None:
        await gate.close()
    await sib.close()  # journals what the KPs ACKed by now (`SibCore.terminate_all`)
    log.info("store flushed")
    await server.close()
    await stop_metrics(metrics_server)
    if storage.journal is not None:
        storage.journal.close()
    if storage.lock is not None:
        storage.lock.close()
    if pcap is not None:
        pcap.close()
    storage.store.close()  # a temporary store's directory goes
    log.info("stopped")


def sepa_connections(config: Config):
    """The SEPA gate's connection limits (`[sepa] max_connections`,
    `max_connections_per_address`): the KSP TCP listener's `transports.limits.Guard`, in all
    and per address, with no timeouts (aiohttp's keep-alive closes silent HTTP connections;
    subscribers are silent). `ksp bench sepa --guard` measures the gate behind it."""
    from transports.limits import ConnectionLimits, Guard

    return Guard(ConnectionLimits(config.sepa_max_connections,
                                  config.sepa_max_connections_per_address,
                                  max_buffered_bytes=None, frame_timeout=0.0),
                 "sepa", lambda conn: conn.transport.abort())


def _ksp_ports(server, tls: bool) -> dict[str, int]:
    """The bound KSP ports by URL scheme (TLS: `tcps`), as logged and in the SIB's JSAP."""
    ports = {}
    for t in TRANSPORTS:
        adapter = getattr(server, t)
        if adapter is not None:
            ports["tcps" if t == "tcp" and tls else t] = adapter.port
    return ports


def hash_password_command(args: list[str]) -> int:
    """`ksp-sib hash-password`: the password is read without echo and asked twice on a
    terminal, or one line from a pipe; never from the command line (it would be in `ps`)."""
    import getpass

    argparse.ArgumentParser(
        prog="ksp-sib hash-password",
        description="Print a password_hash for an [[access.kp]] entry of the configuration. "
                    "The password is asked for (twice, without echo) on a terminal, or read "
                    "as one line from standard input.").parse_args(args)
    if sys.stdin.isatty():
        password = getpass.getpass("password: ")
        if password and getpass.getpass("again: ") != password:
            print("ksp-sib hash-password: the two passwords differ", file=sys.stderr)
            return 1
    else:
        password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        print("ksp-sib hash-password: an empty password is refused", file=sys.stderr)
        return 1
    print(hash_password(password))
    return 0


def register_token_command(argv: list[str]) -> int:
    """`ksp-sib register-token NAME`: a one-time token with which the SEPA client NAME may
    register with the SIB using this data directory (running or not), printed once."""
    from .sepa.secure import RegisterTokens

    p = argparse.ArgumentParser(
        prog="ksp-sib register-token",
        description="Print a one-time registration token for a SEPA client identity listed in "
                    "[sepa] identities: it registers with HTTP Basic IDENTITY:TOKEN on "
                    "/oauth/register (docs/sepa.md). Only its hash is kept, in the data "
                    "directory; it works once, before it expires.")
    p.add_argument("identity", metavar="NAME")
    p.add_argument("--config", help="the SIB's TOML configuration (its data_dir, identities)")
    p.add_argument("--data-dir", help="the SIB's data directory (over the configuration's)")
    p.add_argument("--expires-in", type=float, default=86_400.0, metavar="SECONDS",
                   help="how long the token is valid (default: a day)")
    args = p.parse_args(argv)
    try:
        config = load(args.config, {"data_dir": args.data_dir})
    except ConfigError as exc:
        print(f"ksp-sib register-token: {exc}", file=sys.stderr)
        return 2
    if args.config and args.identity not in config.sepa_identities:
        print(f"ksp-sib register-token: {args.identity!r} is not in [sepa] identities",
              file=sys.stderr)
        return 2
    if args.expires_in <= 0:
        print("ksp-sib register-token: --expires-in must be positive", file=sys.stderr)
        return 2
    data = Path(config.data_dir)
    if not data.is_dir():
        print(f"ksp-sib register-token: no data directory {data}", file=sys.stderr)
        return 2
    try:
        token = RegisterTokens(data).issue(args.identity, args.expires_in)
    except (OSError, ValueError) as exc:
        print(f"ksp-sib register-token: {exc}", file=sys.stderr)
        return 1
    print(token)
    return 0


def add_capture_flags(p: argparse.ArgumentParser) -> None:
    """`--pcap` and `--pcap-max-bytes`, `[capture]`'s flags (ksp-sib's and ksp-bridge's)."""
    p.add_argument("--pcap", dest="capture_file", metavar="FILE",
                   help="write every KSP datagram and TCP byte received and sent to FILE "
                        "(pcapng, for Wireshark and `ksp decode --pcap`)")
    p.add_argument("--pcap-max-bytes", dest="capture_max_bytes", type=int, metavar="N",
                   help="start FILE.1, FILE.2, … past N bytes, keeping the newest "
                        "[capture] max_files (default 10)")


def open_capture(config: ServingConfig):
    """The `transports.pcap.PcapWriter` that `[capture] file` asks for, else None."""
    if not config.capture_file:
        return None
    from transports.pcap import PcapWriter

    try:
        return PcapWriter(config.capture_file, max_bytes=config.capture_max_bytes or None,
                          max_files=config.capture_max_files)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"[capture]: {exc}") from exc


def jsap_command(argv: list[str]) -> int:
    """`ksp-sib jsap`: the running SIB's JSAP, asked of its gate (`GET /jsap`), so the ports
    are the ones it bound; `--merge` points an application's JSAP at it."""
    import json
    import urllib.error
    import urllib.request

    from .sepa.jsap import merge

    p = argparse.ArgumentParser(prog="ksp-sib jsap", description=(
        "Print the JSAP of the running ksp-sib that this configuration (file and flags, as "
        "given to ksp-sib) describes: host, ports, paths, namespaces, and its KSP listeners "
        "under extended.ksp. It is asked of the SIB's SEPA gate over HTTP."))
    p.add_argument("--config", metavar="FILE", help="the SIB's TOML configuration file")
    p.add_argument("--host", help="the address the SIB listens on (as ksp-sib --host)")
    p.add_argument("--sepa-http-port", type=int, metavar="N", help="its SEPA HTTP port")
    p.add_argument("--name", metavar="HOST",
                   help="the host name to write in the JSAP (default: the address asked)")
    p.add_argument("--secure", action="store_true",
                   help="describe the secure mode (HTTPS, WSS, OAuth register and token)")
    p.add_argument("--merge", metavar="APP.jsap",
                   help="print this application JSAP (namespaces, queries, updates) pointed "
                        "at the SIB")
    args = p.parse_args(argv)
    try:
        config = load(args.config, {"host": args.host, "sepa_http_port": args.sepa_http_port})
        application = None
        if args.merge:
            try:
                application = json.loads(Path(args.merge).read_text())
            except (OSError, ValueError) as exc:
                raise ConfigError(f"--merge {args.merge}: {exc}") from None
            if not isinstance(application, dict):
                raise ConfigError(f"--merge {args.merge}: a JSAP is a JSON object")
    except ConfigError as exc:
        print(f"ksp-sib jsap: {exc}", file=sys.stderr)
        return 2
    if config.sepa_http_port <= 0:
        print("ksp-sib jsap: the SIB's SEPA HTTP port is off or chosen at start "
              f"(sepa_http_port = {config.sepa_http_port}); give it with --sepa-http-port",
              file=sys.stderr)
        return 2
    address = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(config.host,
                                                                         config.host)
    url = f"http://{f'[{address}]' if ':' in address else address}:{config.sepa_http_port}/jsap"
    request = urllib.request.Request(url + ("?secure" if args.secure else ""))
    if args.name:
        request.add_header("Host", f"{args.name}:{config.sepa_http_port}")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            jsap = json.loads(answer.read())
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        print(f"ksp-sib jsap: no SIB answers at {url} ({reason}); is it running, with "
              "this configuration?", file=sys.stderr)
        return 1
    if application is not None:
        try:
            jsap = merge(jsap, application)
        except ValueError as exc:
            print(f"ksp-sib jsap: --merge {args.merge}: {exc}", file=sys.stderr)
            return 2
    print(json.dumps(jsap, indent=2, ensure_ascii=False))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["hash-password"]:
        return hash_password_command(argv[1:])
    if argv[:1] == ["jsap"]:
        return jsap_command(argv[1:])
    if argv[:1] == ["systemd-unit"]:
        from .systemd import systemd_unit_command
        return systemd_unit_command(argv[1:])
    if argv[:1] == ["register-token"]:
        return register_token_command(argv[1:])
    if argv[:1] == ["new-key"]:
        if len(argv) > 1:
            print("usage: ksp-sib new-key", file=sys.stderr)
            return 2
        from ksp.secure import new_key
        print(new_key())
        return 0
    args = build_parser().parse_args(argv)
    overrides = {k: v for k, v in vars(args).items() if k != "config"}
    try:
        config = load(args.config, overrides)
        config.ssl_context()  # a bad certificate or key: said now, before anything starts
        config.sepa_ssl_context()
    except ConfigError as exc:
        print(f"ksp-sib: {exc}", file=sys.stderr)
        return 2
    reload = (lambda: load(args.config, overrides)) if args.config else None
    return run_main(log, config.log_level, lambda: serve(config, reload=reload))


if __name__ == "__main__":
    sys.exit(main())
