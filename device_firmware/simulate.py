"""Try the firmware without a board: `ksp simulate-board CONFIG...` (or, from the repository,
`python -m device_firmware.simulate CONFIG...`) runs the agents of kspfw/ on CPython against a
SIB, each config.json as its own simulated board behind the hal seam (kspfw/hal.py), with the
firmware's own loop and sockets. Host-only: `ksp flash` copies kspfw/ and main.py, not this.

The simulated board: sensors read a slow wave per quantity (or `--values` in turn), outputs
are what the actuator agent prints, Wi-Fi is always up, the clock wraps at 2^30 ms as on a
board, and deep sleep waits the period and then wakes the board as a reset would: a new agent
on the same board, its state kept (as in RTC memory), a new socket.
"""
import argparse
import json
import math
import signal
import socket
import sys
import threading
import time
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: quantity -> (middle, amplitude) of the simulated readings' wave (period WAVE_S seconds)
WAVES = {"temperature": (22.0, 5.0), "humidity": (55.0, 15.0), "pressure": (1013.0, 6.0),
         "light": (0.5, 0.4)}
WAVE_S = 120.0


def firmware_importable():
    """Put kspfw (and lib/, umqtt.simple) on sys.path, with a stand-in for MicroPython's
    `micropython` module."""
    if "micropython" not in sys.modules:
        shim = types.ModuleType("micropython")
        shim.const = lambda value: value  # type: ignore[attr-defined]
        sys.modules["micropython"] = shim
    for path in (HERE / "lib", HERE):
        if str(path) not in sys.path:
            sys.path.insert(0, str(path))


class MicroSocket:
    """MicroPython's stream socket (`write(buf, n)`, `read(n)` until n bytes or the end, None
    when non-blocking and nothing came) on a CPython socket: what umqtt.simple calls."""

    def __init__(self, *args, wrapped=None):
        self._s = socket.socket(*args) if wrapped is None else wrapped

    def __getattr__(self, name):  # settimeout, setblocking, connect, close
        return getattr(self._s, name)

    def write(self, buf, n=None):
        data = buf.encode() if isinstance(buf, str) else bytes(buf)
        data = data if n is None else data[:n]
        self._s.sendall(data)
        return len(data)

    def read(self, n):
        out = b""
        while len(out) < n:
            try:
                chunk = self._s.recv(n - len(out))
            except BlockingIOError:
                return out or None
            if not chunk:
                break
            out += chunk
        return out


class MicroTLS:
    """CPython's TLS context as umqtt.simple uses MicroPython's: `wrap_socket` on the socket
    it made gives a stream with `read` and `write`."""

    def __init__(self, ca):
        import ssl

        self.context = ssl.create_default_context(cafile=ca)  # the CA, and the host's name

    def wrap_socket(self, sock, server_hostname=None):
        return MicroSocket(wrapped=self.context.wrap_socket(sock._s,
                                                            server_hostname=server_hostname))


def umqtt_on_cpython():
    """umqtt.simple (device_firmware/lib, as on a board) with MicroPython's socket API."""
    firmware_importable()
    import umqtt.simple

    umqtt.simple.socket = types.SimpleNamespace(socket=MicroSocket,
                                                getaddrinfo=socket.getaddrinfo)


class DeepSleep(Exception):
    pass


class SimulatedBoard:
    """What kspfw/hal.py asks of a board, on CPython."""

    def __init__(self, values, halt):
        self.values = list(values)
        self.halt = halt
        self.state = None
        self.outputs = {}  # pin -> level driven last
        self.born = time.monotonic()

    def sensor(self, spec):
        quantity = "light" if spec["type"] == "light" else spec.get("quantity", "temperature")
        middle, amplitude = WAVES[quantity]
        reads = [0]

        def read():
            reads[0] += 1
            if self.values:
                return self.values[(reads[0] - 1) % len(self.values)]
            t = time.monotonic() - self.born
            return round(middle + amplitude * math.sin(2 * math.pi * t / WAVE_S), 1)

        return read

    def output(self, spec):
        pin, invert = spec["pin"], bool(spec.get("invert"))

        def drive(on):
            self.outputs[pin] = bool(on) != invert

        return drive

    def free_ram(self):
        return 64 * 1024

    def ticks_ms(self):
        return int(time.monotonic() * 1000) & 0x3FFFFFFF

    def sleep_ms(self, ms):
        self.halt.wait(ms / 1000)

    def deep_sleep(self, ms):
        raise DeepSleep(ms)

    def load_state(self):
        return self.state

    def save_state(self, obj):
        self.state = json.loads(json.dumps(obj))  # what survives is what JSON keeps

    def load_counter(self):
        # A host keeps no flash: a clock-derived start (16 per second since 2026-01-01, as
        # ksp.secure.initial_counter) is above every counter an earlier run used.
        return max(0, int((time.time() - 1767225600) * 16))

    def save_counter(self, n):
        pass

    def network(self, cfg):
        pass

    def connected(self):
        return True

    def set_clock(self):
        pass  # the host's clock is set

    def tls(self, ca):
        return MicroTLS(ca)

    def utc(self):
        return time.gmtime()


class Device(threading.Thread):
    """One simulated board running the agent its configuration names, until `halt`."""

    def __init__(self, cfg, halt, values=(), period_ms=None):
        threading.Thread.__init__(self, daemon=True)
        self.cfg, self.halt, self.period_ms = cfg, halt, period_ms
        self.board = SimulatedBoard(values, halt)
        self.name = cfg["device"].rsplit("#", 1)[-1].rsplit("/", 1)[-1]
        self.acked = 0  # sensor: updates the SIB acknowledged
        self.error = None

    def run(self):
        boot = self._telemetry_boot() if self.cfg["mqtt"] else self._ksp_boot
        try:
            while not self.halt.is_set():
                try:
                    boot()  # until halted, or a deep sleep: then a wake-up boots again
                    break
                except DeepSleep as e:
                    print("sim %s: deep sleep for %d ms" % (self.name, e.args[0]))
                    self.halt.wait(e.args[0] / 1000)
        except Exception as e:  # noqa: BLE001 (reported by main)
            self.error = e
            self.halt.set()

    def _ksp_boot(self):
        """One boot in KSP mode: a new agent on the board (its state kept), a new socket."""
        from kspfw.agent import run
        from kspfw.net import Link

        def link(cfg):
            return Link(cfg["host"], cfg["port"], cfg["transport"] == "tcp", cfg["max_size"])

        agent = self.agent()
        try:
            run(agent, link, self.halt.is_set)
        except DeepSleep:
            if agent.client.link is not None:
                agent.client.link.close()
            raise

    def _telemetry_boot(self):
        """The MQTT mode: the firmware's telemetry agent and loop, umqtt.simple on CPython;
        `acked` counts the rounds the broker acknowledged."""
        from kspfw.telemetry_agent import TelemetryAgent, run

        umqtt_on_cpython()
        agent = TelemetryAgent(self.cfg, self.board)
        if self.period_ms:
            agent.period = self.period_ms

        def stop():
            rounds = agent.published // max(1, len(agent.readers))
            if rounds > self.acked:
                self.acked = rounds
                print("sim %s: published %d readings to MQTT" % (self.name, agent.published))
            return self.halt.is_set()

        def boot():
            asleep = False
            try:
                run(agent, stop)
            except DeepSleep:
                asleep = True
                raise
            finally:  # the end of the run (halted, or failed), not a sleep
                if not asleep:
                    print("sim %s: %d readings published in all" % (self.name,
                                                                    agent.published))

        return boot

    def agent(self):
        if self.cfg["agent"] == "sensor":
            from kspfw.sensor_agent import SensorAgent

            device = self

            class Sensor(SensorAgent):
                def _sent(self, kind, r):
                    if kind == "res" and r is not None and not r.status and self.in_flight:
                        device.acknowledged(self.in_flight)
                    SensorAgent._sent(self, kind, r)

            agent = Sensor(self.cfg, self.board)
            if self.period_ms:
                agent.period = self.period_ms  # a saved (e.g. SIB-set) period wins on wake-up
            return agent
        from kspfw.actuator_agent import ActuatorAgent

        return ActuatorAgent(self.cfg, self.board)

    def acknowledged(self, values):
        self.acked += 1
        print("sim %s: in the SIB: %s" % (self.name, ", ".join(
            "%s %s" % (p.rsplit("#", 1)[-1], v) for p, v in sorted(values.items()))))


def host_port(text):
    """`HOST:PORT` (or `:PORT` for 127.0.0.1) -> (host, port); argparse says what is wrong."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError("%r: expected HOST:PORT with a port 1..65535" % text)
    return host.strip("[]") or "127.0.0.1", int(port)


def sib_address(text):
    """`HOST:PORT` or `udp://HOST:PORT` (the other KSP tools' form) -> (host, port): a board
    speaks KSP over UDP, so another scheme is a usage error, not an address to look up."""
    scheme, sep, rest = text.partition("://")
    if sep:
        if scheme != "udp":
            raise argparse.ArgumentTypeError(
                "%r: a board speaks KSP over UDP: expected HOST:PORT or udp://HOST:PORT" % text)
        text = rest.rstrip("/")
    return host_port(text)


def mqtt_url(text):
    """`mqtt://HOST[:PORT]` -> (host, port), 1883 by default."""
    rest = text[len("mqtt://"):] if text.startswith("mqtt://") else None
    if not rest:
        raise argparse.ArgumentTypeError("%r: expected mqtt://HOST[:PORT]" % text)
    return host_port(rest if ":" in rest.rsplit("]", 1)[-1] else rest + ":1883")


def build_parser(prog="ksp simulate-board"):
    p = argparse.ArgumentParser(prog=prog, description=(
        "Run the device firmware's agents on CPython with simulated boards against a SIB: "
        "each CONFIG (a board's config.json) is one board. Stops on Ctrl-C or SIGTERM."))
    p.add_argument("configs", nargs="*", type=Path, metavar="CONFIG",
                   default=[HERE / "config.example.json"],
                   help="config.json files (default: device_firmware/config.example.json)")
    p.add_argument("--sib", metavar="HOST:PORT", type=sib_address,
                   help="the SIB to use instead of the configs' sib.host and sib.port "
                        "(udp://HOST:PORT too)")
    p.add_argument("--mqtt", metavar="mqtt://HOST[:PORT]", type=mqtt_url,
                   help="sensors publish telemetry to this MQTT broker (for ksp-ingest) "
                        "instead of writing to a SIB: the configs' \"mqtt\" mode")
    p.add_argument("--period", type=float, metavar="SECONDS",
                   help="sampling period instead of the configs' period_s (fractions allowed)")
    p.add_argument("--values", metavar="V1,V2,...",
                   help="readings every sensor gives in turn (default: a slow wave)")
    p.add_argument("--readings", type=int, metavar="N",
                   help="stop once every sensor board has had N updates acknowledged")
    return p


def main(argv=None, prog="ksp simulate-board"):
    args = build_parser(prog).parse_args(argv)
    firmware_importable()
    from kspfw import config

    try:
        sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    except AttributeError:
        pass
    values = [float(v) for v in args.values.split(",")] if args.values else []
    halt = threading.Event()
    devices = []
    for path in args.configs:
        print("sim: %s" % path)
        try:
            if args.mqtt:  # the config's sensors, in MQTT mode on that broker
                raw = json.loads(path.read_text())
                raw["mqtt"] = dict(raw.get("mqtt") or {}, host=args.mqtt[0], port=args.mqtt[1])
                cfg = config.check(raw, 64 * 1024)
            else:
                cfg = config.load(str(path), 64 * 1024)
        except config.ConfigError:
            return 2
        except (OSError, ValueError) as e:
            print("sim: %s: %s" % (path, e))
            return 2
        if args.sib:
            cfg["host"], cfg["port"] = args.sib
        devices.append(Device(cfg, halt, values,
                              int(args.period * 1000) if args.period else None))
    signal.signal(signal.SIGTERM, lambda *_: halt.set())
    for d in devices:
        if d.cfg["mqtt"]:
            print("sim %s: sensor agent, telemetry to MQTT %s:%d" % (
                d.name, d.cfg["mqtt"]["host"], d.cfg["mqtt"]["port"]))
        else:
            print("sim %s: %s agent, SIB %s:%d/%s" % (d.name, d.cfg["agent"], d.cfg["host"],
                                                      d.cfg["port"], d.cfg["transport"]))
        d.start()
    sensors = [d for d in devices if d.cfg["agent"] == "sensor"]
    try:
        while not halt.is_set():
            if args.readings and sensors and all(d.acked >= args.readings for d in sensors):
                break
            halt.wait(0.05)
    except KeyboardInterrupt:
        pass
    halt.set()
    for d in devices:
        d.join(30)
    failed = [d for d in devices if d.error is not None]
    for d in failed:
        print("sim %s: stopped by %r" % (d.name, d.error), file=sys.stderr)
    print("sim: stopped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(prog="python -m device_firmware.simulate"))
