"""`ksp demo greenhouse`: the Smart Greenhouse of the KSP paper (§IV, figure 13), live.

A real `ksp-sib --memory` is started (or `--url` names a running one) and every KP talks to it
over its own UDP socket:

- the **Preferences KP** publishes the plant's preferences and the actuators (all off);
- the **Autocontrol KP** sends six persistent updates — two per actuator type, one switching
  it on and one switching it off (figure 13) — and sends nothing else: from then on the SIB
  runs it, whatever the readings do;
- three **Sensor KPs** publish temperature, humidity and luminosity readings (UPDATE DATA:
  the old reading out, the new one in);
- the **Actuator KP** observes every actuator's state through one persistent SELECT and prints
  each IND, as the KP driving the real fans, LEDs and pump would act on it.

With `--mqtt` (and `--url`), the Sensor KPs publish telemetry to an MQTT broker instead, and a
`ksp-ingest` running on that broker and SIB writes the readings into the SIB: the rules fire on
ingested telemetry as on KSP updates. A reading is published again until it is in the SIB, so
an ingest started just before the demo (still subscribing) gets it too; copies are dropped.
"""
from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable

from rdflib import Literal, Namespace, URIRef

from ksp import Request, Tx
from transports import connect

GH = Namespace("http://example.org/greenhouse#")
PREFIXES = {"gh": str(GH), "xsd": "http://www.w3.org/2001/XMLSchema#",
            "rdf": "http://www.w3.org/1999/02/22-rdf-syntax-ns#"}
PLANT = GH.tomato
#: The plant's preferences (the paper: 19.5–25.7 °C).
PREFERENCES = {"minTemperature": 19.5, "maxTemperature": 25.7, "minHumidity": 40.0,
               "minLuminosity": 300.0}
#: actuator -> (class, measured quantity, preference, comparison that switches it on)
ACTUATORS = {GH.fan1: ("Fan", "temperature", "maxTemperature", ">"),
             GH.led1: ("Led", "luminosity", "minLuminosity", "<"),
             GH.pump1: ("Pump", "humidity", "minHumidity", "<")}
SENSORS = {"temperature": GH.thermometer1, "humidity": GH.hygrometer1,
           "luminosity": GH.luxmeter1}
COMPLEMENT = {">": "<=", "<": ">="}
#: The demo's readings: (quantity, value), in order.
READINGS = [("temperature", 22.0), ("humidity", 55.0), ("luminosity", 500.0),
            ("temperature", 26.5), ("luminosity", 120.0), ("humidity", 30.0),
            ("temperature", 24.0), ("temperature", 27.1), ("humidity", 62.0),
            ("luminosity", 800.0), ("temperature", 21.0)]


def rules() -> list[str]:
    """The Autocontrol KP: two persistent updates per actuator type (on, off)."""
    out = []
    for cls, quantity, preference, on in dict.fromkeys(ACTUATORS.values()):
        for cmp, state in ((on, "true"), (COMPLEMENT[on], "false")):
            out.append(f"DELETE {{ ?a gh:state ?x }} INSERT {{ ?a gh:state {state} }} WHERE {{ "
                       f"?s gh:{quantity} ?v . ?p gh:{preference} ?m . ?a a gh:{cls} . "
                       f"?a gh:state ?x . FILTER(?v {cmp} ?m) }}")
    return out


STATES = "SELECT ?a ?s WHERE { ?a gh:state ?s }"


def states_of(rows) -> dict[URIRef, bool]:
    return {a: bool(s.toPython()) for a, s in rows.rows}


#: The sensors' units in the telemetry (UCUM) when they publish over MQTT.
UNITS = {"temperature": "Cel", "humidity": "%", "luminosity": "lx"}


class Greenhouse:
    """The KPs of the demo, connected to the SIB at `url` (UDP). With `mqtt`, the Sensor KPs
    publish telemetry to that broker instead, for `ksp-ingest` to put into the SIB."""

    def __init__(self, url: str, say: Callable[[str], None] = print,
                 mqtt: str | None = None) -> None:
        self.url = url
        self.say = say
        self.mqtt = mqtt
        self.readings: dict[str, float] = {}
        self.observed: dict[URIRef, bool] = {}
        self._changed = asyncio.Event()
        self.sensors: dict = {}  # quantity -> its Sensor KP's connection, once opened

    async def publish(self, quantity: str, value: float) -> None:
        """A Sensor KP's reading: UPDATE DATA, the old reading out and the new one in; or,
        over MQTT, one telemetry message, and back once the ingest has put it in the SIB."""
        if self.mqtt:
            return await self._publish_mqtt(quantity, value)
        kp = self.sensors.get(quantity)
        if kp is None:
            kp = self.sensors[quantity] = await connect(self.url,
                                                        kp_id=f"greenhouse-{quantity}-sensor")
        old = self.readings.get(quantity)
        sensor = SENSORS[quantity]
        new = (sensor, GH[quantity], Literal(value))
        if old is None:
            await kp.insert_data([new])
        else:
            await kp.update(Request(Tx.UPDATE_DATA, 0, delete=((sensor, GH[quantity],
                                                                 Literal(old)),), insert=(new,)))
        self.readings[quantity] = value
        self.say(f"Sensor KP: {quantity} {value}")

    async def _publish_mqtt(self, quantity: str, value: float, timeout: float = 120.0,
                            again: float = 5.0) -> None:
        """Publish the reading and wait until the ingest has put it in the SIB. The same
        message goes out again every `again` seconds until then: an ingest that was still
        starting (its subscription not yet made, as when it is started just before the demo)
        gets it, and one that had it drops the copy (same device, property and time)."""
        from spark_ingest.telemetry import reading, topic_of
        from .telemetry import publish

        device = SENSORS[quantity].fragment
        message = (topic_of(device), reading(device, quantity, value, UNITS[quantity]), "ok")
        await asyncio.to_thread(publish, self.mqtt, [message])
        self.say(f"Sensor KP: {quantity} {value} (MQTT: {message[0]})")
        query = f"SELECT ?v WHERE {{ <{SENSORS[quantity]}> <{GH[quantity]}> ?v }}"
        loop = asyncio.get_running_loop()
        async with await connect(self.url, prefixes=PREFIXES) as kp:
            deadline, resend = loop.time() + timeout, loop.time() + again
            while [float(r[0].toPython()) for r in (await kp.query(query)).rows] != [value]:
                if loop.time() > deadline:
                    raise TimeoutError(f"{quantity} {value} not in the SIB after {timeout:g} s: "
                                       "is ksp-ingest running on this broker and SIB?")
                if loop.time() > resend:
                    await asyncio.to_thread(publish, self.mqtt, [message])
                    resend = loop.time() + again
                await asyncio.sleep(0.2)
        self.readings[quantity] = value

    async def close(self) -> None:
        for kp in self.sensors.values():
            await kp.close()
        self.sensors.clear()

    async def setup(self) -> None:
        async with await connect(self.url, kp_id="greenhouse-preferences",
                                 prefixes=PREFIXES) as kp:
            triples = [(PLANT, GH[k], Literal(v)) for k, v in PREFERENCES.items()]
            for actuator, (cls, *_rest) in ACTUATORS.items():
                triples += [(actuator, URIRef(PREFIXES["rdf"] + "type"), GH[cls]),
                            (actuator, GH.state, Literal(False))]
            await kp.insert_data(triples)
        self.say(f"Preferences KP: {PLANT.n3()} prefers "
                 + ", ".join(f"{k} {v}" for k, v in PREFERENCES.items())
                 + "; fan1, led1 and pump1 are off")
        async with connect(self.url, kp_id="greenhouse-autocontrol", prefixes=PREFIXES,
                           keep_persistent=True) as kp:  # its rules outlive the connection
            for text in rules():
                await kp.request(text, persistent=True)
        self.say(f"Autocontrol KP: {len(rules())} persistent updates installed; it sleeps now")

    async def actuator(self, ready: asyncio.Event) -> None:
        """The Actuator KP: one persistent SELECT, an IND whenever a state changes."""
        async with await connect(self.url, kp_id="greenhouse-actuator", prefixes=PREFIXES) as kp:
            async with kp.subscribe(STATES) as sub:
                ready.set()
                async for ind in sub:
                    now = states_of(ind.result)
                    for a, on in sorted(now.items()):
                        if self.observed.get(a) != on:
                            self.say(f"  Actuator KP: {a.fragment} {'ON' if on else 'off'}")
                    self.observed = now
                    self._changed.set()

    async def until_observed(self, want: dict[URIRef, bool], actuator: asyncio.Task,
                             timeout: float = 60.0) -> None:
        """Until the Actuator KP (the task `actuator`) has seen the states `want`; a
        `TimeoutError` that says what it saw, or why its subscription ended."""
        async def wait():
            while self.observed != want:
                self._changed.clear()
                changed = asyncio.ensure_future(self._changed.wait())
                await asyncio.wait((changed, actuator), return_when=asyncio.FIRST_COMPLETED)
                changed.cancel()
                if actuator.done():
                    error = None if actuator.cancelled() else actuator.exception()
                    raise TimeoutError(
                        f"the Actuator KP's subscription ended before it saw {_states(want)}: "
                        f"{error!r}" if error else "the Actuator KP's subscription ended")
        try:
            await asyncio.wait_for(wait(), timeout)
        except TimeoutError as exc:
            if str(exc):
                raise
            raise TimeoutError(f"the Actuator KP did not see {_states(want)} within "
                               f"{timeout:g} s (its last IND: {_states(self.observed)})") from None

    async def run(self, readings=READINGS, interval: float = 0.0) -> list[tuple[dict, dict]]:
        """Set up, then publish `readings` one by one; after each, wait until the Actuator KP
        has seen what the rules made of it. Returns, per reading, the states the Actuator KP
        observed and the states a plain SELECT finds in the store (sent after the reading, it
        is executed after the reading's rule cascade: one request at a time). `interval`: the
        pause after each reading (for people watching the dashboard)."""
        await self.setup()
        ready = asyncio.Event()
        actuator = asyncio.create_task(self.actuator(ready))
        history = []
        checker = await connect(self.url, prefixes=PREFIXES)
        try:
            await asyncio.wait_for(ready.wait(), 60)
            for quantity, value in readings:
                await self.publish(quantity, value)
                stored = states_of(await checker.query(STATES))
                await self.until_observed(stored, actuator)
                history.append((dict(self.observed), stored))
                await asyncio.sleep(interval)
        finally:
            await checker.close()
            await self.close()
            actuator.cancel()
            try:
                await actuator
            except (asyncio.CancelledError, Exception):  # its connection ends with the task
                pass
        return history


def _states(states: dict[URIRef, bool]) -> str:
    return ", ".join(f"{a.fragment} {'ON' if on else 'off'}" for a, on in sorted(states.items()))


def main(argv: list[str] | None = None, prog: str = "ksp demo greenhouse") -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a running SIB (udp://host:port); default: start "
                                      "`ksp-sib --memory` on a free port")
    parser.add_argument("--dashboard", action="store_true",
                        help="start the SIB with its SEPA gate and print the live dashboard's "
                             "address (http://127.0.0.1:PORT/dashboard)")
    parser.add_argument("--interval", type=float, metavar="S",
                        help="seconds between readings (default 0; 2 with --dashboard)")
    parser.add_argument("--loop", action="store_true",
                        help="repeat the readings until Ctrl-C (with --dashboard: to watch)")
    parser.add_argument("--mqtt", metavar="mqtt://HOST[:PORT]",
                        help="with --url: the Sensor KPs publish telemetry to this MQTT broker "
                             "and `ksp-ingest` (running on it and the SIB) writes it into the "
                             "SIB, where the rules fire as before")
    parser.add_argument("--screenshot", metavar="PNG",
                        help="with --dashboard: after the readings, a headless Chromium's "
                             "picture of the dashboard (Debian's chromium)")
    args = parser.parse_args(argv)
    interval = args.interval if args.interval is not None else 2.0 if args.dashboard else 0.0
    if args.screenshot and not args.dashboard:
        parser.error("--screenshot needs --dashboard")
    if args.mqtt and not args.url:
        parser.error("--mqtt needs --url: the SIB that ksp-ingest writes into")
    if args.url:
        try:
            asyncio.run(_sib_up(args.url))
            asyncio.run(_run(args.url, interval, args.loop, mqtt=args.mqtt))
        except TimeoutError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        return 0
    from sib.testing import SibProcess

    print("Starting ksp-sib --memory ...")
    gate = ("--sepa-http-port", "0", "--sepa-ws-port", "0") if args.dashboard else ()
    with SibProcess("--memory", "--udp-port", "0", "--tcp-port", "-1",
                    "--coap-port", "-1", *gate) as sib:
        url = f"udp://127.0.0.1:{sib.ports['udp']}"
        print(f"SIB listening on {url}")
        dashboard = None
        if args.dashboard:
            dashboard = f"http://127.0.0.1:{sib.ports['http']}/dashboard"
            print(f"Dashboard: {dashboard}")
        print()
        try:
            asyncio.run(_run(url, interval, args.loop, dashboard, args.screenshot))
        except KeyboardInterrupt:
            pass
        status = sib.stop()
    print(f"\nSIB stopped (exit status {status}).")
    return 0 if status == 0 else 1


async def _sib_up(url: str, within: float = 30.0) -> None:
    """Wait until the SIB at `url` answers, for `ksp-sib ... &` started just before the demo:
    a SIB still starting is not yet listening, and would fail the first KP."""
    from .kp_cli import nothing_listens, sib_up

    if not await sib_up(url, within):
        raise TimeoutError(f"no SIB at {url} within {within:g} s: "
                           f"{nothing_listens(url.partition(':')[0])}")


async def _run(url: str, interval: float, loop: bool, dashboard: str | None = None,
               screenshot: str | None = None, mqtt: str | None = None) -> None:
    browser = page = None
    if screenshot:
        from .browser import Browser

        browser = await Browser(height=600).__aenter__()
        page = await browser.open(dashboard)
        await page.wait_for("document.getElementById('status').textContent === 'live'")
    try:
        greenhouse = Greenhouse(url, mqtt=mqtt)
        await greenhouse.run(interval=interval)
        while loop:
            await greenhouse.run(interval=interval)
        if page is not None:
            await page.wait_for(DASHBOARD_SHOWS.format(value=READINGS[-1][1]))
            print(f"screenshot: {await page.screenshot(screenshot)}")
    finally:
        if browser is not None:
            await browser.__aexit__()


#: True once the dashboard shows the last temperature (its cards are drawn from notifications).
DASHBOARD_SHOWS = ("(document.querySelector('[data-sensor=thermometer1] .value') || {{}})"
                   ".textContent === '{value:g}°C'")


if __name__ == "__main__":
    sys.exit(main())
