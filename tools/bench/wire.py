"""Bytes on the wire for the Smart Greenhouse workload of the KSP paper (section IV): KSP over UDP
and TCP against the SPARQL text a SPARQL 1.1 endpoint receives and the JSON a SEPA broker
exchanges (`ksp bench wire`).

The workload is the live demo's (`tools/greenhouse.py`): the Autocontrol KP's six persistent
updates and its ASK subscriptions, the Actuator KP's persistent SELECT, the Sensor KPs' reading
updates, a one-off query, and the answers (RES, IND; SEPA: query results and notifications).
SPARQL text declares the prefixes it uses, as a client must; HTTP and WebSocket framing is not
counted on either side (nor UDP/IP headers). Sizes are exact, not timed: one run suffices.
"""
from __future__ import annotations

import json
import statistics
import sys

from ksp import (
    TCP, UDP, AskResult, IRI, Literal, Response, SelectResult, compile_sparql, encode,
    results_json,
)
from ksp.terms import XSD_DECIMAL
from .report import bench_parser, command_line
from ..greenhouse import ACTUATORS, PREFERENCES, PREFIXES, READINGS, SENSORS, STATES, rules

BOOLEAN = "http://www.w3.org/2001/XMLSchema#boolean"
#: The paper's figures this workload must meet or beat.
PAPER_PERSISTENT_UPDATE = 165  # bytes, average persistent update request
PAPER_UPDATE_RES = 4  # bytes over UDP


def _sparql(body: str) -> str:
    """The text a SPARQL client sends: PREFIX lines for the prefix names the body uses."""
    used = [k for k in PREFIXES if f"{k}:" in body]
    return "".join(f"PREFIX {k}: <{PREFIXES[k]}>\n" for k in used) + body


def _subscribe_json(text: str, alias: str) -> str:
    return json.dumps({"subscribe": {"sparql": text, "alias": alias}}, separators=(",", ":"))


def _notification_json(result, names, sequence: int) -> str:
    added = results_json(result, names)
    removed = {"head": added["head"], "results": {"bindings": []}} if "head" in added else {}
    return json.dumps({"notification": {"spuid": "sepa://subscription/0", "sequence": sequence,
                                        "addedResults": added, "removedResults": removed}},
                      separators=(",", ":"))


def messages() -> list[tuple[str, str, bytes, bytes, int, int]]:
    """(kind, description, KSP UDP bytes, KSP TCP bytes, SPARQL text bytes, SEPA JSON bytes)."""
    out = []

    def request(kind: str, what: str, body: str, persistent: bool, alias: str = "") -> None:
        req = compile_sparql(body, persistent=persistent, prefixes=PREFIXES)._replace(tid=7)
        text = _sparql(body)
        sepa = _subscribe_json(text, alias) if persistent and alias else text
        out.append((kind, what, encode(req, UDP), encode(req, TCP), len(text.encode()),
                    len(sepa.encode())))

    def answer(kind: str, what: str, response: Response, sparql_json: str) -> None:
        out.append((kind, what, encode(response, UDP), encode(response, TCP),
                    len(sparql_json.encode()), len(sparql_json.encode())))

    for n, text in enumerate(rules()):
        request("persistent update", f"Autocontrol rule {n + 1}", text, True)
    for quantity, preference, cmp in (("temperature", "maxTemperature", ">"),
                                      ("humidity", "minHumidity", "<"),
                                      ("luminosity", "minLuminosity", "<")):
        request("ASK subscription", f"{quantity} {cmp} {preference}",
                f"ASK {{ ?s gh:{quantity} ?v . ?p gh:{preference} ?m . FILTER(?v {cmp} ?m) }}",
                True, alias=f"{quantity}-alarm")
    request("persistent SELECT", "Actuator KP: actuator states", STATES, True, alias="states")
    last: dict[str, float] = {}
    for quantity, value in READINGS[:6]:  # the Sensor KPs: the old reading out, the new in,
        sensor = SENSORS[quantity].fragment  # as xsd:float (what the firmware sends)
        if quantity in last:
            request("update", f"{quantity} reading",
                    f'DELETE DATA {{ gh:{sensor} gh:{quantity} "{last[quantity]}"^^xsd:float }}'
                    f' ; INSERT DATA {{ gh:{sensor} gh:{quantity} "{value}"^^xsd:float }}',
                    False)
        last[quantity] = value
    request("query", "the plant's preferences",
            "SELECT ?k ?v WHERE { gh:tomato ?k ?v }", False)
    answer("update RES", "OK, over UDP/TCP; SEPA: HTTP 200", Response(7), "")
    ask = Response(7, result=AskResult(True), indication=True, seq=3)
    answer("ASK IND", "the alarm is on", ask,
           _notification_json(AskResult(True), None, 3))
    gh = PREFIXES["gh"]
    states = SelectResult(2, tuple((IRI(str(a)), Literal("true" if i == 0 else "false", BOOLEAN))
                                   for i, a in enumerate(ACTUATORS)))
    answer("SELECT IND", "three actuator states", Response(7, result=states, indication=True,
                                                          seq=4),
           _notification_json(states, ("a", "s"), 4))
    prefs = SelectResult(2, tuple((IRI(gh + k), Literal(repr(v), XSD_DECIMAL))
                                  for k, v in PREFERENCES.items()))
    answer("query RES", "four preferences", Response(7, result=prefs),
           json.dumps(results_json(prefs, ("k", "v")), separators=(",", ":")))
    return out


def table(rows, markdown: bool) -> str:
    kinds: dict[str, list] = {}
    for row in rows:
        kinds.setdefault(row[0], []).append(row)
    head = ("| messages | n | KSP/UDP | KSP/TCP | SPARQL text | SEPA JSON | KSP/UDP ÷ SEPA |",
            "|---|---|---|---|---|---|---|")
    lines = list(head)
    total = [0, 0, 0, 0]
    for kind, group in kinds.items():
        udp = statistics.mean(len(r[2]) for r in group)
        tcp = statistics.mean(len(r[3]) for r in group)
        text = statistics.mean(r[4] for r in group)
        sepa = statistics.mean(r[5] for r in group)
        for k, size in enumerate((sum(len(r[2]) for r in group), sum(len(r[3]) for r in group),
                                  sum(r[4] for r in group), sum(r[5] for r in group))):
            total[k] += size
        ratio = f"{udp / sepa:.2f}" if sepa else "—"
        lines.append(f"| {kind} | {len(group)} | {udp:.0f} | {tcp:.0f} | {text:.0f} | "
                     f"{sepa:.0f} | {ratio} |")
    lines.append(f"| **all, bytes** | {len(rows)} | {total[0]} | {total[1]} | {total[2]} | "
                 f"{total[3]} | {total[0] / total[3]:.2f} |")
    text = "\n".join(lines)
    return text if markdown else text.replace("**", "")


def targets(rows) -> str:
    rules_udp = statistics.mean(len(r[2]) for r in rows if r[0] == "persistent update")
    res_udp = max(len(r[2]) for r in rows if r[0] == "update RES")
    return "\n".join([
        f"persistent update requests: {rules_udp:.0f} bytes on average over UDP (the paper: "
        f"{PAPER_PERSISTENT_UPDATE}): {'met' if rules_udp <= PAPER_PERSISTENT_UPDATE else 'NOT MET'}",
        f"update RES: {res_udp} bytes over UDP (the paper: {PAPER_UPDATE_RES}): "
        f"{'met' if res_udp <= PAPER_UPDATE_RES else 'NOT MET'}"])


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = bench_parser("tools.bench.wire", __doc__, prog,
                        "the same (sizes are exact; kept for symmetry)").parse_args(argv)
    rows = messages()
    print(f"Greenhouse workload, bytes per message (`{command_line('tools.bench.wire', prog, argv)}`)"
          "\n")
    print(table(rows, args.markdown))
    print()
    print(targets(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
