"""Receivers on other machines: `ksp-ingest-shard` runs one MQTT receiver and its
buffer shard on a machine of its own, and serves the shard to the ingest's driver over HTTP
(`ksp-ingest --shards URL,URL,...`), which reads and commits it as it does a local one.

Why a process per machine rather than receivers inside the driver: SQLite's WAL wants its
readers and writers on one host, and a fleet's MQTT connections, acknowledgements and buffer
writes are what one machine runs out of first. Each shard is one member of an MQTT 5 shared
subscription (`$share/<group>/<topic>`) with its own persistent session, as `--receivers` makes
them in one process; what holds for a local shard holds here (a message is acknowledged to the
broker once in the shard's file, and leaves it only when a committed batch read it).

Every request is signed: HMAC-SHA256, with a secret both sides read from `$KSP_INGEST_SECRET`
or a file, over the method, the path with its query and a time, which must be within
`MAX_SKEW` seconds of the shard's clock. The secret never crosses the network; a request
without a valid signature gets 401 and nothing else. The readings themselves travel in clear
(as over plain MQTT): serve shards on a network you trust, or through a TLS tunnel.

    GET  /state                  {"last", "committed", "backlog": [messages, seconds],
                                  "subscription": the SUBACK ("ok", "refused: …") or null}
    GET  /read?after=A&upto=B    rows (seq, topic, payload, received) with A < seq <= B, JSON
    POST /commit?upto=B          a committed batch read up to B: those messages go
"""
from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import json
import logging
import os
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, urlsplit

from .bounded_http import BoundedHTTPServer
from .buffer import Buffer
from .mqtt import subscription

__all__ = ["ShardServer", "RemoteShard", "MAX_SKEW", "read_secret", "main"]

log = logging.getLogger("ksp.ingest")

MAX_SKEW = 60.0
"""Seconds a signed request's time may differ from the shard's clock."""

#: At most this many rows per `/read` answer: the driver asks again from where it stopped.
PAGE = 20_000


def read_secret(path: str | None) -> bytes:
    """The shared secret: the first line of `path`, else `$KSP_INGEST_SECRET`; at least 16
    bytes (ValueError otherwise: an unsigned shard would answer anyone)."""
    secret = os.environ.get("KSP_INGEST_SECRET", "")
    if path:
        with open(path, encoding="utf-8") as f:
            secret = f.readline().rstrip("\r\n")
    if len(secret.encode()) < 16:
        raise ValueError("a shard secret of at least 16 bytes is needed: $KSP_INGEST_SECRET "
                         "or --secret-file")
    return secret.encode()


def signature(secret: bytes, method: str, target: str, when: str) -> str:
    """The `X-KSP-Signature` of a request to a shard: HMAC-SHA256 of "METHOD target when"."""
    return hmac.new(secret, f"{method} {target} {when}".encode(), hashlib.sha256).hexdigest()


class ShardServer(BoundedHTTPServer):
    """Serves one `Buffer` (see the module docstring). `ShardServer((host, port), buffer,
    secret)`; `serve_forever()` in a thread, `shutdown()` at the end.

    Bounded: at most `max_connections` at once (a thread each; the driver and the executors
    reading spans need a handful), a connection over it closed unanswered, and one that sends
    nothing for `idle_timeout` seconds dropped, so its slot comes back."""

    def __init__(self, address: tuple[str, int], buffer: Buffer, secret: bytes, *,
                 max_connections: int = 16, idle_timeout: float = 30.0) -> None:
        self.buffer, self.secret = buffer, secret
        self.idle_timeout = idle_timeout
        self.refused = 0  # requests without a valid signature
        super().__init__(address, _Handler, max_connections=max_connections)


class _Handler(BaseHTTPRequestHandler):
    server: ShardServer

    @property
    def timeout(self) -> float:  # read by `setup`: the socket's timeout for each read
        return self.server.idle_timeout

    def log_message(self, format: str, *args) -> None:  # quiet: the driver polls often
        pass

    def do_GET(self) -> None:
        if not self._signed():
            return
        url = urlsplit(self.path)
        buffer = self.server.buffer
        if url.path == "/state":
            self._json({"last": buffer.last(), "committed": buffer.committed(),
                        "backlog": list(buffer.backlog()),
                        "subscription": subscription(buffer.path.parent)})
        elif url.path == "/read":
            after, upto = self._numbers(url.query, "after", "upto")
            if after is None:
                return
            rows = []
            for seq, topic, payload, received in buffer.read(after, upto):
                rows.append([seq, topic, base64.b64encode(payload).decode(), received])
                if len(rows) >= PAGE:
                    break
            self._json(rows)
        else:
            self.send_error(404)

    def do_POST(self) -> None:
        if not self._signed():
            return
        url = urlsplit(self.path)
        if url.path != "/commit":
            self.send_error(404)
            return
        (upto,) = self._numbers(url.query, "upto")
        if upto is not None:
            self.server.buffer.commit(upto)  # a replay is harmless: commits only move on
            self._json({"committed": self.server.buffer.committed()})

    def _signed(self) -> bool:
        """Checked before anything else is looked at."""
        when = self.headers.get("X-KSP-Time", "")
        given = self.headers.get("X-KSP-Signature", "")
        want = signature(self.server.secret, self.command, self.path, when)
        try:
            fresh = abs(float(when) - time.time()) <= MAX_SKEW
        except ValueError:
            fresh = False
        if fresh and hmac.compare_digest(given, want):
            return True
        self.server.refused += 1
        self.send_error(401)
        return False

    def _numbers(self, query: str, *names: str) -> tuple:
        values = parse_qs(query)
        try:
            return tuple(int(values[name][0]) for name in names)
        except (KeyError, ValueError):
            self.send_error(400, f"wants {', '.join(names)} as integers")
            return (None,) * len(names)

    def _json(self, value) -> None:
        body = json.dumps(value).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class RemoteShard:
    """A shard served by `ShardServer`, with the `Buffer` methods the MQTT source and the
    status line use (`last`, `committed`, `backlog`, `read`, `commit`)."""

    def __init__(self, url: str, secret: bytes, timeout: float = 30.0) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{url!r}: a shard is http://HOST:PORT")
        self.url, self.secret, self.timeout = url.rstrip("/"), secret, timeout

    def _call(self, method: str, target: str, wait: float = 0.0):
        """The answer to a signed request; a shard that cannot be reached (restarting, say)
        is asked again for up to `wait` seconds, then OSError. A refusal (HTTPError) is
        final."""
        deadline = time.monotonic() + wait
        while True:
            when = f"{time.time():.3f}"
            request = urllib.request.Request(self.url + target, method=method, headers={
                "X-KSP-Time": when,
                "X-KSP-Signature": signature(self.secret, method, target, when)})
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as answer:
                    return json.loads(answer.read())
            except urllib.error.HTTPError:
                raise
            except OSError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.5)

    def state(self) -> dict:
        return self._call("GET", "/state")

    def last(self) -> int:
        return self.state()["last"]

    def committed(self) -> int:
        return self.state()["committed"]

    def backlog(self) -> tuple[int, float]:
        n, waited = self.state()["backlog"]
        return n, waited

    def read(self, after: int, upto: int, wait: float = 300.0):
        """What `Buffer.read` gives, waiting up to `wait` seconds for a shard that is away:
        the batch that holds its rows cannot go on without them."""
        while after < upto:
            rows = self._call("GET", f"/read?after={after}&upto={upto}", wait)
            if not rows:
                return
            for seq, topic, payload, received in rows:
                yield seq, topic, base64.b64decode(payload), received
            after = rows[-1][0]

    def commit(self, upto: int) -> None:
        self._call("POST", f"/commit?upto={upto}")

    def close(self) -> None:
        pass


def main(argv: list[str] | None = None) -> int:
    from .mqtt import Receiver, add_broker_flags, broker_login

    p = argparse.ArgumentParser(prog="ksp-ingest-shard",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--mqtt", default="mqtt://127.0.0.1:1883", metavar="URL")
    add_broker_flags(p)
    p.add_argument("--topic", default="ksp/+/telemetry")
    p.add_argument("--client-id", required=True,
                   help="this shard's MQTT session (one per shard; keep it)")
    p.add_argument("--share-group", default="ksp-ingest",
                   help="the shared subscription's group, the same for every shard")
    p.add_argument("--buffer", required=True, metavar="DIR", help="the shard's buffer")
    p.add_argument("--max-buffered", type=int, default=1_000_000, metavar="N")
    p.add_argument("--listen", default="127.0.0.1:7400", metavar="HOST:PORT")
    p.add_argument("--secret-file", metavar="FILE",
                   help="the shared secret's file (default: $KSP_INGEST_SECRET)")
    args = p.parse_args(argv)
    logging.basicConfig(level="INFO", stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        secret = read_secret(args.secret_file)
        broker = broker_login(args)
        host, _, port = args.listen.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"--listen {args.listen!r}: HOST:PORT")
        server = ShardServer((host, int(port)), None, secret)  # bound first: a port in use
    except (OSError, ValueError) as exc:                     # says so before MQTT is touched
        print(f"shards: {exc}", file=sys.stderr)
        return 2
    server.buffer = Buffer(args.buffer, max_messages=args.max_buffered)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    threading.Thread(target=server.serve_forever, daemon=True).start()
    log.info("shard %s serving http://%s:%d", args.client_id, *server.server_address[:2])
    receiver = Receiver(args.mqtt, args.topic, args.client_id, server.buffer,
                        share=args.share_group, **broker).start()
    stop.wait()
    server.shutdown()
    receiver.stop()
    server.buffer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
