"""config.json: the one file that makes a board a KSP device (format: device_firmware/README.md).

`load(path)` returns the settings as a dict with defaults filled in, or raises ConfigError after
printing one line per bad or missing setting, e.g. `config: sib.port: must be an integer
1..65535, not "80a"`, so the serial console says everything that is wrong at once.
"""
import json
import sys

SENSOR_TYPES = ("chip_temp", "dht22", "bme280", "light")


class ConfigError(Exception):
    pass


def auto_max_size(free, selects=True):
    """MAX RESPONSE SIZE for a board with `free` bytes of heap: an eighth of it, 256..8192; 64
    when it receives no SELECT result (`selects` false): statuses and ASK answers are under 40
    bytes, sealed ones too, and the receive buffer is this size."""
    return max(256, min(8192, free // 8)) if selects else 64


class _Check:
    def __init__(self, cfg):
        self.cfg = cfg
        self.errors = []

    def bad(self, key, why, value=None):
        self.errors.append("config: %s: %s%s" % (key, why, "" if value is None else
                                                     ", not " + json.dumps(value)))

    def get(self, key, kind, default=None, required=True, lo=None, hi=None, choices=None):
        """The setting at dotted `key` if it is of `kind` (int, str, bool, list, dict) and in
        range; records an error (and returns the default) otherwise."""
        node = self.cfg
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node is None:
            if required and default is None:
                self.bad(key, "missing")
            return default
        ok = isinstance(node, kind) and not (kind is int and isinstance(node, bool))
        if ok and kind is str and not node:
            ok = False
        if ok and (lo is not None and node < lo or hi is not None and node > hi):
            ok = False
        if ok and choices is not None and node not in choices:
            ok = False
        if not ok:
            want = {int: "an integer", str: "a non-empty string", bool: "true or false",
                    list: "a list", dict: "an object"}[kind]
            if choices is not None:
                want = "one of " + ", ".join(choices)
            elif lo is not None:
                want += " %s..%s" % (lo, hi)
            self.bad(key, "must be " + want, node)
            return default
        return node


def _pins(c, key, item, names):
    for name in names:
        value = item.get(name)
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 48:
            c.bad("%s.%s" % (key, name), "must be a GPIO number 0..48", value)


def _password(c, cfg, section):
    """An optional password: a string (may be empty, at most 255 bytes)."""
    value = cfg.get(section, {}).get("password", "") if isinstance(cfg.get(section), dict) else ""
    if not isinstance(value, str) or len(value.encode()) > 255:
        c.bad(section + ".password", "must be a string of at most 255 bytes", value)
        return ""
    return value


def _hex(c, key, text, n, why, ok=True):
    """`text` as n bytes of hex digits ('-' ignored, as in UUIDs); None, with an error recorded
    when it is not (or not `ok`)."""
    if text:
        try:
            b = bytes.fromhex(text.replace("-", ""))
            if len(b) == n and ok:
                return b
        except ValueError:
            pass
        c.bad(key, why, text)


def check(cfg, free=None):
    """The validated settings (defaults filled in); raises ConfigError listing every problem."""
    if not isinstance(cfg, dict):
        raise ConfigError(["config: the file must hold one JSON object"])
    c = _Check(cfg)
    out = {}
    out["agent"] = c.get("agent", str, choices=("sensor", "actuator"))
    out["ssid"] = c.get("wifi.ssid", str)
    out["wifi_password"] = _password(c, cfg, "wifi")
    # MQTT mode (a sensor publishing telemetry for ksp-ingest): no SIB, no KP identity.
    mqtt = out["mqtt"] = _mqtt(c, cfg) if "mqtt" in cfg else None
    out["host"] = c.get("sib.host", str, required=mqtt is None)
    out["port"] = c.get("sib.port", int, 7000, required=False, lo=1, hi=65535)
    out["transport"] = c.get("sib.transport", str, "udp", required=False, choices=("udp", "tcp"))
    out["kp_id"] = _hex(c, "kp.id", c.get("kp.id", str, required=mqtt is None), 16,
                        "must be a UUID (32 hex digits)")
    out["kp_password"] = _password(c, cfg, "kp")
    # The sealing key (wire format 13): 64 hex digits, as `ksp-sib new-key` prints; UDP only.
    out["kp_key"] = _hex(c, "kp.key", c.get("kp.key", str, required=False), 32,
                         "must be 64 hex digits (UDP)", out["transport"] == "udp")
    out["device"] = c.get("device", str)
    prefixes = out["prefixes"] = c.get("prefixes", list, [], required=False)
    for i, p in enumerate(prefixes if isinstance(prefixes, list) else ()):
        if not isinstance(p, str) or not p:
            c.bad("prefixes[%d]" % i, "must be a non-empty IRI", p)
    out["period_s"] = c.get("period_s", int, 60, required=False, lo=1, hi=86400)
    out["period_property"] = c.get("period_property", str, required=False)
    out["deep_sleep"] = c.get("deep_sleep", bool, False, required=False)
    out["listen_ms"] = c.get("listen_ms", int, 0, required=False, lo=0, hi=60000)
    size = cfg.get("max_response_size", "auto")
    if size == "auto":
        out["max_size"] = auto_max_size(64 * 1024 if free is None else free, _selects(out, cfg))
    else:
        out["max_size"] = c.get("max_response_size", int, 1024, lo=64, hi=65507)
    if mqtt is not None and out["agent"] != "sensor":
        c.bad("mqtt", "only a sensor publishes telemetry (agent must be sensor)")
    if out["agent"] == "sensor":
        out["sensors"] = _sensors(c, cfg.get("sensors"))
    elif out["agent"] == "actuator":
        out["outputs"] = _outputs(c, cfg.get("outputs"))
    if c.errors:
        for e in c.errors:
            print(e)
        raise ConfigError(c.errors)
    return out


def _selects(out, cfg):
    """Whether the board receives SELECT results: a sensor subscribed to its period, an
    actuator with a "select" output."""
    if out["agent"] == "sensor":
        return out["period_property"] is not None
    outputs = cfg.get("outputs")
    return not isinstance(outputs, list) or any(
        not isinstance(o, dict) or "select" in o for o in outputs)


def _mqtt(c, cfg):
    """The "mqtt" section: the broker and how to log in; the device's name in the telemetry
    (default: the last segment of `device`) must be a name the format accepts."""
    if not isinstance(cfg["mqtt"], dict):
        c.bad("mqtt", "must be an object", cfg["mqtt"])
        return {}
    tls = c.get("mqtt.tls", bool, False, required=False)
    out = {"host": c.get("mqtt.host", str),
           "port": c.get("mqtt.port", int, 8883 if tls else 1883, required=False, lo=1,
                         hi=65535),
           "tls": tls,
           # TLS checks the broker against this CA certificate (a file on the board)
           "ca": c.get("mqtt.ca", str, required=tls),
           "user": c.get("mqtt.user", str, required=False),
           "password": _password(c, cfg, "mqtt"),
           "client_id": c.get("mqtt.client_id", str, required=False),
           "keepalive": c.get("mqtt.keepalive", int, 0, required=False, lo=0, hi=65535),
           "device": c.get("mqtt.device", str, required=False)}
    if out["password"] and not tls:
        c.bad("mqtt.password", "would cross the network in clear: set mqtt.tls and mqtt.ca")
    name = out["device"] or str(cfg.get("device", "")).rsplit("#", 1)[-1].rsplit("/", 1)[-1]
    if not 0 < len(name) <= 64 or any(not (ch.isalpha() or ch.isdigit() or ch in "._-")
                                       or ord(ch) > 127 for ch in name):
        c.bad("mqtt.device", "must be 1-64 of A-Z a-z 0-9 . _ - (default: the end of device)",
              name)
    return out


def _sensors(c, items):
    if not isinstance(items, list) or not items:
        c.bad("sensors", "must be a non-empty list of sensors", items)
        return []
    for i, s in enumerate(items):
        key = "sensors[%d]" % i
        if not isinstance(s, dict):
            c.bad(key, "must be an object", s)
            continue
        kind = s.get("type")
        if kind not in SENSOR_TYPES:
            c.bad(key + ".type", "must be one of " + ", ".join(SENSOR_TYPES), kind)
            continue
        if not isinstance(s.get("property"), str) or not s["property"]:
            c.bad(key + ".property", "must be the IRI of the property the reading is sent as",
                  s.get("property"))
        pins = {"dht22": ("pin",), "bme280": ("sda", "scl"), "light": ("pin",)}.get(kind, ())
        _pins(c, key, s, pins)
        if kind == "bme280" and s.get("quantity", "temperature") not in (
                "temperature", "pressure", "humidity"):
            c.bad(key + ".quantity", "must be temperature, pressure or humidity",
                  s.get("quantity"))
    return items


def _outputs(c, items):
    if not isinstance(items, list) or not items:
        c.bad("outputs", "must be a non-empty list of outputs", items)
        return []
    for i, o in enumerate(items):
        key = "outputs[%d]" % i
        if not isinstance(o, dict):
            c.bad(key, "must be an object", o)
            continue
        _pins(c, key, o, ("pin",))
        query = o.get("ask", o.get("select"))
        if ("ask" in o) == ("select" in o):
            c.bad(key, "needs exactly one of ask, select (a list of [s, p, o] patterns)")
        elif not isinstance(query, list) or not query or not all(
                isinstance(t, list) and len(t) == 3 for t in query):
            c.bad(key + (".ask" if "ask" in o else ".select"),
                  "must be a non-empty list of [s, p, o] patterns", query)
    return items


def unload():
    """Forget this module (main.py, once the settings are checked): only the boot needs the
    checks, and their code would otherwise hold about 6 KB of heap for good."""
    del sys.modules["kspfw.config"]
    delattr(sys.modules["kspfw"], "config")


def _fail(msg):
    print(msg)
    raise ConfigError([msg])


def load(path="config.json", free=None):
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        _fail("config: %s not found: copy config.example.json to the board as config.json, "
              "with your settings" % path)
    try:
        cfg = json.loads(text)
    except ValueError:
        _fail("config: %s is not valid JSON (check quotes, commas and braces)" % path)
    return check(cfg, free)
