"""How a command names its MQTT broker and logs in there, from its command line: no paho here,
so a command's parser builds in an install without the MQTT extra (`spark_ingest.mqtt` uses
these with the client)."""
from __future__ import annotations

import os
from urllib.parse import urlsplit

__all__ = ["add_broker_flags", "broker_address", "broker_login", "refuse_clear"]


def broker_address(url: str) -> tuple[str, int]:
    """`mqtt://host[:port]` → (host, port), 1883 by default; `mqtts://` (TLS) 8883."""
    parts = urlsplit(url)
    if parts.scheme not in ("mqtt", "mqtts") or not parts.hostname:
        raise ValueError(f"{url!r}: an MQTT broker is mqtt://HOST[:PORT] or mqtts://HOST[:PORT]")
    return parts.hostname, parts.port or (8883 if parts.scheme == "mqtts" else 1883)


def refuse_clear(url: str, password: str | None) -> bool:
    """Whether `url` is TLS; ValueError for a password that would cross the network in clear."""
    tls = urlsplit(url).scheme == "mqtts"
    if password and not tls:
        raise ValueError(f"{url}: a password would cross the network in clear: use mqtts://")
    return tls


def add_broker_flags(parser) -> None:
    """--mqtt-ca, --mqtt-user, --mqtt-password-file: how a command logs in at its broker."""
    parser.add_argument("--mqtt-ca", metavar="FILE",
                        help="mqtts://: the CA certificate the broker's is checked against "
                             "(default: the system's)")
    parser.add_argument("--mqtt-user", metavar="NAME", help="the broker's user name; the "
                        "password from $KSP_MQTT_PASSWORD or --mqtt-password-file (mqtts:// "
                        "only)")
    parser.add_argument("--mqtt-password-file", metavar="FILE",
                        help="a file whose first line is the broker's password")


def broker_login(args) -> dict:
    """{ca, user, password} for `login` from the flags of `add_broker_flags` and
    $KSP_MQTT_PASSWORD; ValueError or OSError (said to the user) for what cannot work:
    a password over plain mqtt://, a CA file that is not there."""
    password = os.environ.get("KSP_MQTT_PASSWORD") or None
    if args.mqtt_password_file:
        with open(args.mqtt_password_file, encoding="utf-8") as f:
            password = f.readline().rstrip("\r\n") or None
    broker_address(args.mqtt)
    refuse_clear(args.mqtt, password)
    if args.mqtt_ca and not os.path.isfile(args.mqtt_ca):
        raise ValueError(f"--mqtt-ca {args.mqtt_ca}: no such file")
    return {"ca": args.mqtt_ca, "user": args.mqtt_user, "password": password}
