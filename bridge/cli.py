"""`ksp-bridge`: KSP devices in front of a SEPA broker, until SIGINT/SIGTERM.

    ksp-bridge --jsap broker.jsap [--udp-port N] ...        # the broker as a JSAP describes it
    ksp-bridge --broker http://HOST:8000 --subscribe ws://HOST:9000/subscribe

The devices get the SIB's transports and sessions (UDP, TCP, CoAP); requests go to the broker
over HTTP, persistent queries over its WebSocket (docs/bridge.md). Shutdown ends every bridged
persistent query with a TERMINATED IND, unsubscribes, closes the sockets, exit status 0.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
from pathlib import Path

log = logging.getLogger("ksp.bridge")

TRANSPORTS = {"udp": 7000, "tcp": 7001, "coap": 5683}


class BridgeConfigError(ValueError):
    pass


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ksp-bridge", description=(
        "Serve KSP devices (UDP, TCP, CoAP) in front of a SEPA broker: their queries and "
        "updates over the SPARQL 1.1 Protocol, their persistent queries as SE Protocol "
        "subscriptions (docs/bridge.md)."))
    p.add_argument("--jsap", metavar="FILE",
                   help="the broker's JSAP (host, sparql11protocol, sparql11seprotocol), as "
                        "`ksp-sib jsap` prints it")
    p.add_argument("--broker", metavar="URL",
                   help="the broker's SPARQL 1.1 Protocol base, http://HOST:8000 (its /query "
                        "and /update)")
    p.add_argument("--subscribe", metavar="URL",
                   help="its SE Protocol endpoint, ws://HOST:9000/subscribe (without it, "
                        "persistent queries are refused)")
    p.add_argument("--host", default="127.0.0.1", help="address the devices reach")
    for t, port in TRANSPORTS.items():
        p.add_argument(f"--{t}-port", type=int, default=port, metavar="N",
                       help=f"{t.upper()} port (default {port}; 0 = any free port, "
                            "negative = off)")
    p.add_argument("--timeout", type=float, default=10.0, metavar="S",
                   help="seconds the broker has to answer (default 10)")
    p.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    return p


def broker_urls(args: argparse.Namespace) -> tuple[str, str, str, str | None]:
    """(base URL, query path, update path, subscribe URL) from --jsap or the URL flags."""
    if args.jsap:
        try:
            jsap = json.loads(Path(args.jsap).read_text())
            host = jsap["host"]
            http = jsap["sparql11protocol"]
            base = f"{http.get('protocol', 'http')}://{host}:{int(http['port'])}"
            query = http.get("query", {}).get("path", "/query")
            update = http.get("update", {}).get("path", "/update")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise BridgeConfigError(f"--jsap {args.jsap}: {exc!r} (it needs host and "
                                    "sparql11protocol.port)") from None
        se = jsap.get("sparql11seprotocol") or {}
        ws = (se.get("availableProtocols") or {}).get(se.get("protocol", "ws"))
        subscribe = args.subscribe or (f"{se.get('protocol', 'ws')}://{host}:{int(ws['port'])}"
                                       f"{ws.get('path', '/subscribe')}" if ws else None)
        return args.broker or base, query, update, subscribe
    if not args.broker:
        raise BridgeConfigError("say where the broker is: --jsap FILE, or --broker URL "
                                "(and --subscribe URL)")
    return args.broker, "/query", "/update", args.subscribe


async def serve(args: argparse.Namespace, stop: asyncio.Event | None = None) -> None:
    from transports.server import Server

    from .broker import Broker
    from .service import Bridge

    base, query, update, subscribe = broker_urls(args)
    ports = {t: (None if getattr(args, f"{t}_port") < 0 else getattr(args, f"{t}_port"))
             for t in TRANSPORTS}
    async with Broker(base, query_path=query, update_path=update,
                      timeout=args.timeout) as broker:
        bridge = await Bridge(broker, subscribe).start()
        try:
            server = await Server.start(bridge, args.host, **ports)
        except OSError:
            await bridge.close()
            raise
        for t in TRANSPORTS:
            adapter = getattr(server, t)
            if adapter is not None:
                log.info("listening on %s://%s:%d", t, args.host, adapter.port)
        log.info("broker: %s (query %s, update %s), subscriptions: %s", base, query, update,
                 subscribe or "none (persistent queries refused)")
        stop = stop or asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, stop.set)
            except (NotImplementedError, RuntimeError):  # not the main thread
                pass
        log.info("bridge ready")
        try:
            await stop.wait()
        finally:
            await bridge.close()  # TERMINATED INDs while the sockets are still open
            await server.close()
            log.info("stopped")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    for t in TRANSPORTS:
        if getattr(args, f"{t}_port") > 65535:
            print(f"ksp-bridge: --{t}-port {getattr(args, f'{t}_port')}: a port is 0..65535",
                  file=sys.stderr)
            return 2
    try:
        broker_urls(args)
    except BridgeConfigError as exc:
        print(f"ksp-bridge: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        asyncio.run(serve(args))
    except OSError as exc:  # a port in use
        log.error("%s", exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
