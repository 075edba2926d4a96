"""The sensor agent's MQTT mode ("mqtt" in config.json): every period each sensor's reading is
published as one telemetry message for `ksp-ingest` (the format of spark_ingest/README.md: JSON
device, property, value, unit, time on ksp/<device>/telemetry), at QoS 1 through
micropython-lib's umqtt.simple, instead of being written to a SIB.

With "tls" the connection is TLS, the broker checked against the CA certificate "ca" (a file
on the board); a password is only ever sent that way (config.py refuses it otherwise).

QoS 1: umqtt.simple's publish returns once the broker's PUBACK has come, so a reading is sent
again (same time, so the ingest drops the copy) until the broker has it; a broken connection
is rebuilt with back-off. The time is the board's UTC clock, set by NTP after Wi-Fi: a board
whose clock is not set yet publishes nothing (a reading's time is what makes it unique)."""
import json

from .floats import float32

#: UCUM units of the drivers' quantities (bme280: °C, hPa, %RH; light: a fraction 0..1).
UNITS = {"temperature": "Cel", "humidity": "%", "pressure": "hPa", "light": "1"}


def local_name(iri):
    """The last segment of an IRI (after '#', else after '/'): a name the format accepts."""
    return iri.rsplit("#", 1)[-1].rsplit("/", 1)[-1]


def stamp(t):
    """RFC 3339 UTC from a `time.gmtime()` tuple."""
    return "%04d-%02d-%02dT%02d:%02d:%02dZ" % tuple(t[:6])


def message(device, prop, value, unit, when):
    """(topic, payload) of one reading; None for a value JSON cannot carry (inf, nan)."""
    text = float32(value)
    if text in ("INF", "-INF", "NaN"):
        return None
    body = '{"device":%s,"property":%s,"value":%s,"time":"%s"' % (
        json.dumps(device), json.dumps(prop), text, stamp(when))
    if unit:
        body += ',"unit":%s' % json.dumps(unit)
    return "ksp/%s/telemetry" % device, (body + "}").encode()


def unit_of(spec):
    if "unit" in spec:
        return spec["unit"]
    return UNITS["light" if spec["type"] == "light" else spec.get("quantity", "temperature")]


class TelemetryAgent:
    def __init__(self, cfg, board):
        self.cfg, self.board = cfg, board
        m = cfg["mqtt"]
        self.device = m["device"] or local_name(cfg["device"])
        self.readers = [(local_name(s["property"]), unit_of(s), board.sensor(s))
                        for s in cfg["sensors"]]
        self.period = cfg["period_s"] * 1000
        self.published = 0  # messages the broker acknowledged

    def client(self):
        from umqtt.simple import MQTTClient

        m = self.cfg["mqtt"]
        c = MQTTClient(m["client_id"] or self.device, m["host"], m["port"], m["user"],
                       m["password"], keepalive=m["keepalive"],
                       ssl=self.board.tls(m["ca"]) if m["tls"] else None)
        c.connect(timeout=10)
        return c

    def readings(self):
        """This period's messages; none while the board's clock is not set."""
        when = self.board.utc()
        if when is None:
            print("telemetry: the clock is not set (NTP), nothing published")
            return []
        out = []
        for prop, unit, read in self.readers:
            try:
                msg = message(self.device, prop, read(), unit, when)
            except (OSError, ValueError) as e:  # skip this sensor for this reading
                print("telemetry: reading %s failed: %s" % (prop, e))
                continue
            if msg is not None:
                out.append(msg)
        return out

    def publish(self, client, msgs):
        """Publish `msgs` in turn; those the broker has not acknowledged are left in `msgs`
        (an OSError: the connection broke)."""
        while msgs:
            topic, payload = msgs[0]
            client.sock.settimeout(10)  # umqtt.simple's reads leave the socket blocking
            client.publish(topic, payload, qos=1)
            msgs.pop(0)
            self.published += 1


def run(agent, stop=None):
    """Read, publish, wait a period (or deep sleep), forever or until `stop()` is true; a lost
    network or broker is rebuilt with back-off and the unsent readings go first."""
    from umqtt.simple import MQTTException

    board = agent.board
    client, backoff, unsent = None, 1000, []
    while stop is None or not stop():
        try:
            if client is None:
                board.network(agent.cfg)
                board.set_clock()
                client = agent.client()
                backoff = 1000
            if not unsent:
                unsent = agent.readings()
            agent.publish(client, unsent)
            if stop is not None and stop():
                break
            if agent.cfg["deep_sleep"]:
                client.disconnect()
                client = None
                board.deep_sleep(agent.period)
            else:
                board.sleep_ms(agent.period)
        except (OSError, MQTTException) as e:  # MQTTException: the broker refused us
            print("telemetry: MQTT %s:%d down (%s), again in %d ms" % (
                agent.cfg["mqtt"]["host"], agent.cfg["mqtt"]["port"], e, backoff))
            if client is not None:
                try:
                    client.sock.close()
                except OSError:
                    pass
            client = None
            board.sleep_ms(backoff)
            backoff = min(backoff * 2, 60000)
