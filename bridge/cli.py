"""`ksp-bridge`: KSP devices in front of a SEPA broker, until SIGINT/SIGTERM.

    ksp-bridge --jsap broker.jsap [--udp-port N] ...        # the broker as a JSAP describes it
    ksp-bridge --broker http://HOST:8000 --subscribe ws://HOST:9000/subscribe
    ksp-bridge --config bridge.toml                         # every key: docs/bridge.md

The devices get the SIB's transports and sessions (UDP, TCP, CoAP); requests go to the broker
over HTTP, persistent queries over its WebSocket (docs/bridge.md). SIGHUP re-reads the
configuration's `[access]`, as ksp-sib does: persistent operations the new policy does not allow
end with an ACCESS_DENIED IND; without --config it is logged, nothing else. The persistent
operations of UDP devices are journaled in --data-dir (default ./ksp-bridge-data) and resume
after a restart, as the SIB's do; shutdown ends the others with a TERMINATED IND (all of them
with --memory), unsubscribes, closes the sockets, exit status 0.
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

from sib.config import anonymous_notice

from .config import BridgeConfig, ConfigError

log = logging.getLogger("ksp.bridge")

TRANSPORTS = ("udp", "tcp", "coap")


def build_parser() -> argparse.ArgumentParser:
    from sib.cli import add_capture_flags

    p = argparse.ArgumentParser(prog="ksp-bridge", description=(
        "Serve KSP devices (UDP, TCP, CoAP) in front of a SEPA broker: their queries and "
        "updates over the SPARQL 1.1 Protocol, their persistent queries as SE Protocol "
        "subscriptions. Flags override the TOML file (--config); docs/bridge.md has every "
        "key."))
    p.add_argument("--config", metavar="FILE", help="TOML configuration file")
    p.add_argument("--jsap", dest="broker_jsap", metavar="FILE",
                   help="the broker's JSAP (host, sparql11protocol, sparql11seprotocol), as "
                        "`ksp-sib jsap` prints it")
    p.add_argument("--broker", dest="broker_url", metavar="URL",
                   help="the broker's SPARQL 1.1 Protocol base, http://HOST:8000 (its /query "
                        "and /update)")
    p.add_argument("--subscribe", dest="broker_subscribe", metavar="URL",
                   help="its SE Protocol endpoint, ws://HOST:9000/subscribe (without it or a "
                        "JSAP that names one, persistent queries are refused)")
    p.add_argument("--data-dir", metavar="DIR",
                   help="directory of the journal of persistent operations (default "
                        "./ksp-bridge-data)")
    p.add_argument("--memory", action="store_const", const=True,
                   help="no journal: persistent operations end when the bridge stops")
    p.add_argument("--host", help="address the devices reach (default 127.0.0.1)")
    for t, port in zip(TRANSPORTS, (7000, 7001, 5683)):
        p.add_argument(f"--{t}-port", type=int, metavar="N",
                       help=f"{t.upper()} port (default {port}; 0 = any free port, "
                            "negative = off)")
    p.add_argument("--timeout", dest="broker_timeout", type=float, metavar="S",
                   help="seconds the broker has to answer (default 10)")
    p.add_argument("--metrics-port", type=int, metavar="N",
                   help="Prometheus metrics over HTTP on this port (negative = off)")
    p.add_argument("--metrics-host", metavar="ADDR",
                   help="address of the metrics endpoint (default 127.0.0.1: this host only)")
    add_capture_flags(p)
    p.add_argument("--log-level", choices=("debug", "info", "warning", "error"))
    return p


async def serve(config: BridgeConfig, stop: asyncio.Event | None = None,
                reload=None) -> None:
    """Run the bridge until `stop` is set (or SIGINT/SIGTERM). `reload`: what SIGHUP reads
    the access policy from (the configuration file again)."""
    from sib import JOURNAL_FILE, Journal
    from sib.cli import open_capture

    pcap = open_capture(config)  # a file that cannot be written stops the start here
    if pcap is not None:
        log.info("capturing to %s", config.capture_file)
    from sib.lifecycle import claim_data_dir

    journal = lock = None
    try:
        if not config.memory:
            data = Path(config.data_dir)
            lock, _ = claim_data_dir(data, "ksp-bridge")
            journal = Journal(str(data / JOURNAL_FILE))
        await _serve(config, journal, pcap, stop, reload)
    finally:
        if journal is not None:
            journal.close()
        if lock is not None:
            lock.close()
        if pcap is not None:
            pcap.close()


async def _say_if_unreachable(broker) -> None:
    """A broker that does not answer at all is said before "bridge ready" (the bridge starts
    all the same, and goes on asking: a broker may come after it); any HTTP answer, a refusal
    included, is a broker there."""
    from .broker import BrokerError

    try:
        await broker.query("ASK {}")
    except BrokerError as exc:
        if exc.http_status is None:
            log.warning("the broker does not answer (%s): the devices' requests get "
                        "INTERNAL_ERROR until it does", exc.reason)


async def _serve(config: BridgeConfig, journal, pcap, stop: asyncio.Event | None,
                 reload) -> None:
    from ksp.session import SessionOptions
    from sib import Metrics
    from sib.lifecycle import run_until_stopped, start_metrics, stop_metrics
    from transports.server import Server

    from .broker import Broker
    from .options import BridgeOptions
    from .secure import Registrations
    from .service import Bridge

    where = config.endpoints()
    tls = config.ssl_context()
    metrics = Metrics()
    registrations = None
    if where.secure:
        registrations = Registrations(
            where.register, where.token, ssl=tls, timeout=config.broker_timeout,
            path=None if config.memory else Path(config.data_dir) / "broker-clients.json",
            secrets=config.broker_register_secrets)
    async with Broker(where.base, query_path=where.query_path, update_path=where.update_path,
                      timeout=config.broker_timeout, max_concurrent=config.broker_max_concurrent,
                      ssl=tls) as broker:
        options = BridgeOptions(
            max_queued=config.max_queued, max_persistent_per_kp=config.max_persistent_per_kp,
            max_persistent=config.max_persistent, max_subscriptions=config.max_subscriptions,
            rule_firing_limit=config.rule_firing_limit, cascade_limit=config.cascade_limit,
            backoff=config.broker_backoff, max_backoff=config.broker_max_backoff)
        bridge = await Bridge(broker, where.subscribe, options=options, journal=journal,
                              access=config.access_policy(), registrations=registrations,
                              anonymous_identity=config.broker_anonymous_identity or None,
                              metrics=metrics).start()
        try:
            server = await Server.start(bridge, config.host, timing=config.timing, pcap=pcap,
                                        options=SessionOptions(
                                            max_entries=config.max_session_entries),
                                        **{t: config.port(t) for t in TRANSPORTS})
        except OSError:
            await bridge.close()
            raise
        metrics.counters["ksp_ind_retransmissions_total"] = (
            "INDs sent again for want of an ACK (UDP).", lambda: server.ind_retransmissions)
        restored = await bridge.restore(server)
        if restored:
            log.info("%d persistent operations restored", restored)
        for t in TRANSPORTS:
            adapter = getattr(server, t)
            if adapter is not None:
                log.info("listening on %s://%s:%d", t, config.host, adapter.port)
        if (notice := anonymous_notice(config.access, config.host)) is not None:
            log.warning("%s", notice)
        metrics_server = await start_metrics(metrics, config, log)
        log.info("broker: %s (query %s, update %s), subscriptions: %s", where.base,
                 where.query_path, where.update_path,
                 where.subscribe or "none (persistent queries refused)")
        await _say_if_unreachable(broker)
        if registrations is not None:
            log.info("secure broker: each device registered under its [[access.kp]] id (%s), "
                     "anonymous devices %s", where.register,
                     f"as {config.broker_anonymous_identity!r}"
                     if config.broker_anonymous_identity else "refused")
        try:
            await run_until_stopped(bridge, stop, reload, logger=log,
                                    ready_message="bridge ready")
        finally:
            await bridge.close()  # TERMINATED INDs (journaled ones kept) while sockets are open
            await server.close()
            await stop_metrics(metrics_server)
            log.info("stopped")


def main(argv: list[str] | None = None) -> int:
    from sib.config import load
    from sib.lifecycle import run_main

    args = build_parser().parse_args(argv)
    overrides = {k: v for k, v in vars(args).items() if k != "config"}
    try:
        config = load(args.config, overrides, kind=BridgeConfig)
    except ConfigError as exc:
        print(f"ksp-bridge: {exc}", file=sys.stderr)
        return 2
    reload = None if args.config is None else (
        lambda: load(args.config, overrides, kind=BridgeConfig))
    return run_main(log, config.log_level, lambda: serve(config, reload=reload))


if __name__ == "__main__":
    sys.exit(main())
