"""The MQTT side of the source: a paho-mqtt 2.x client (`CallbackAPIVersion.VERSION2`) that puts
what the broker sends into the durable buffer and only then acknowledges it.

QoS 1, a persistent session (a fixed client id, `clean_session=False`) and manual
acknowledgement: a message is PUBACKed once its transaction in the buffer has committed, so a
receiver killed before that gets it again from the broker when it reconnects (MQTT's
at-least-once; the ingest drops the duplicates a redelivery makes, by device, property and
time). Messages are written in batches: every `batch` messages or `linger` seconds, whichever
comes first. The buffer never holds more than its `max_messages`: what does not fit waits in
memory unacknowledged, at most the broker's in-flight window (`max_inflight_messages` in
mosquitto.conf; with MQTT 5, our Receive Maximum), and goes in as committed batches make room.

With `share`, the receiver is one of a group splitting the topic: an MQTT 5 client (session
that never expires, clean start off) subscribed to `$share/<share>/<topic>`.

The broker's SUBACK is written to the file `subscribed` beside the buffer (`subscription`
reads it): the receiver runs in a process of its own (the job's, `spark_ingest.receiving`, or a
shard's) or in a Python worker of Spark's (the `ksp_mqtt` source's reader), and the process that
says "ready" waits for it. Before the SUBACK a new session has no subscription:
what is published then is not for it.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

import paho.mqtt.client as mqtt

from .broker_args import refuse_clear, add_broker_flags, broker_address, broker_login
from .buffer import Buffer, shard_directory

log = logging.getLogger("ksp.ingest")

__all__ = ["SUBSCRIBED", "Receiver", "add_broker_flags", "broker_address", "broker_login",
           "login", "receivers", "subscription"]

#: MQTT 5 session expiry "never": the session and what it has queued outlive any stop.
SESSION_NEVER_EXPIRES = 0xFFFFFFFF
#: MQTT 5 Receive Maximum: unacknowledged messages the broker may have in flight to us.
RECEIVE_MAXIMUM = 1000
#: The file, beside the buffer's, that holds the broker's answer to the subscription.
SUBSCRIBED = "subscribed"


def subscription(directory: str | Path) -> str | None:
    """The broker's answer to the subscription of the receiver whose buffer is in
    `directory`: "ok", "refused: <reason codes>", or None before its SUBACK."""
    try:
        return (Path(directory) / SUBSCRIBED).read_text() or None
    except FileNotFoundError:
        return None


def login(client: mqtt.Client, url: str, *, ca: str | None = None, user: str | None = None,
          password: str | None = None) -> None:
    """TLS for `mqtts://` (the broker checked against `ca`, or the system's CAs) and the user's
    name and password; a password over plain `mqtt://` is refused: it would go in clear."""
    tls = refuse_clear(url, password)
    if tls:
        client.tls_set(ca_certs=ca)
    if user:
        client.username_pw_set(user, password or None)


class Receiver:
    """`Receiver(url, topic, client_id, buffer).start()`; `stop()` at the end."""

    def __init__(self, url: str, topic: str, client_id: str, buffer: Buffer, *,
                 batch: int = 500, linger: float = 0.01, share: str | None = None,
                 ca: str | None = None, user: str | None = None,
                 password: str | None = None) -> None:
        self.host, self.port = broker_address(url)
        self.buffer = buffer
        self.batch, self.linger = batch, linger
        if share is None:
            self.topic, self._connect = topic, {}
            self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id,
                                      clean_session=False, protocol=mqtt.MQTTv311,
                                      manual_ack=True)
        else:  # one of a group that splits the topic: MQTT 5's shared subscription
            from paho.mqtt.packettypes import PacketTypes
            from paho.mqtt.properties import Properties

            props = Properties(PacketTypes.CONNECT)
            props.SessionExpiryInterval = SESSION_NEVER_EXPIRES  # persistent, as in 3.1.1
            props.ReceiveMaximum = RECEIVE_MAXIMUM  # the broker's in-flight window for us
            self.topic = f"$share/{share}/{topic}"
            self._connect = {"clean_start": False, "properties": props}
            self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id,
                                      protocol=mqtt.MQTTv5, manual_ack=True)
        login(self.client, url, ca=ca, user=user, password=password)
        self.client.on_connect = self._on_connect
        self.client.on_subscribe = self._on_subscribe
        self.client.on_message = self._on_message
        self._session_present = False
        self._pending: list[mqtt.MQTTMessage] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._flusher = threading.Thread(target=self._flush_loop, name="mqtt-buffer",
                                         daemon=True)
        self.received = 0  # messages written to the buffer, then acknowledged (stats)
        self.subscribed = threading.Event()

    def start(self) -> "Receiver":
        (self.buffer.path.parent / SUBSCRIBED).unlink(missing_ok=True)  # an earlier run's
        self.client.connect_async(self.host, self.port, keepalive=30, **self._connect)
        self.client.loop_start()
        self._flusher.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._flusher.join(5)
        self._flush()
        self.client.disconnect()
        self.client.loop_stop()

    def _on_connect(self, client, userdata, flags, reason_code, properties) -> None:
        if reason_code.is_failure:
            log.warning("MQTT %s:%d refused the connection: %s", self.host, self.port,
                        reason_code)
            return
        self._session_present = flags.session_present
        client.subscribe(self.topic, qos=1)  # again after each reconnection

    def _on_subscribe(self, client, userdata, mid, reason_codes, properties) -> None:
        # Subscribed only now, at the SUBACK: a message published before the broker has the
        # subscription is not for this client (on a new session it is simply not delivered).
        if any(code.is_failure for code in reason_codes):
            codes = ", ".join(str(c) for c in reason_codes)
            log.error("MQTT %s:%d refused the subscription to %s: %s", self.host, self.port,
                      self.topic, codes)
            self._answered(f"refused: {codes}")
            return
        self.subscribed.set()
        self._answered("ok")
        log.info("MQTT %s:%d: subscribed to %s (session %s)", self.host, self.port,
                 self.topic, "resumed" if self._session_present else "new")

    def _answered(self, answer: str) -> None:
        """The SUBACK into `SUBSCRIBED`, written aside and renamed: read whole or not at all."""
        path = self.buffer.path.parent / SUBSCRIBED
        tmp = path.with_name(SUBSCRIBED + ".tmp")
        tmp.write_text(answer)
        os.replace(tmp, path)

    def _on_message(self, client, userdata, message: mqtt.MQTTMessage) -> None:
        with self._lock:
            self._pending.append(message)
            ready = len(self._pending) >= self.batch
        if ready:
            self._flush()

    def _flush_loop(self) -> None:
        while not self._stop.wait(self.linger):
            try:
                self._flush()
            except Exception:  # the buffer's disk, say: said, and tried again
                log.exception("MQTT receiver: writing the buffer failed")

    def _flush(self) -> None:
        with self._lock:
            room = self.buffer.max_messages - len(self.buffer)
            if not self._pending or room <= 0:
                return
            taken, self._pending = self._pending[:room], self._pending[room:]
            self.buffer.append([(m.topic, m.payload) for m in taken])
            self.received += len(taken)
            # After the commit, now the broker may forget them; under the lock, so that the
            # PUBACKs go in the order the PUBLISHes came (MQTT-4.6.0-2) whichever thread wrote.
            for m in taken:
                if m.qos > 0:
                    self.client.ack(m.mid, m.qos)

    def wait_subscribed(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        return self.subscribed.wait(max(0.0, deadline - time.monotonic()))


def receivers(options: dict[str, str]) -> list[Receiver]:
    """The receivers the `ksp_mqtt` source's `options` ask for (`spark_ingest.source`:
    `broker`, `topic`, `client_id`, `buffer`, `receivers`, `share`, `maxBuffered`, `ca`,
    `user`, `password`), started: one, or with `receivers` N > 1 one per shard of the buffer,
    splitting the topic through an MQTT 5 shared subscription."""
    shards = int(options.get("receivers", 1))
    client_id = options.get("client_id", "ksp-ingest")
    share = (options.get("share") or client_id) if shards > 1 else None
    most = int(options.get("maxBuffered", 1_000_000))
    return [Receiver(options["broker"], options.get("topic", "ksp/+/telemetry"),
                     client_id if share is None else f"{client_id}-{k}",
                     Buffer(shard_directory(options["buffer"], k, shards), max_messages=most),
                     share=share, ca=options.get("ca") or None,
                     user=options.get("user") or None,
                     password=options.get("password") or None).start()
            for k in range(shards)]
