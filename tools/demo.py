"""`ksp demo`: the Smart Greenhouse of the KSP paper (section IV) on the wire.

Until the SIB lands this is the main job: it builds the messages the paper's KPs exchange,
encodes them, shows every field, decodes them back, and compares their size with the SPARQL
text a SPARQL endpoint would have received.
"""
from __future__ import annotations

from ksp import (
    UDP, IRI, Literal, Op, Options, Request, Response, SelectResult, Triple, Tx, Var,
    decode_kp_message, decode_sib_message, encode,
)
from ksp.reference.explain import explain, render
from ksp.terms import XSD_DATETIME, XSD_FLOAT

GH = "http://example.org/greenhouse#"
RDF_TYPE = IRI("http://www.w3.org/1999/02/22-rdf-syntax-ns#type")


def greenhouse_messages() -> list[tuple[str, object, Tx | None, str]]:
    """(title, message, transaction answered, equivalent SPARQL) for the demo."""
    reading = Request(Tx.INSERT_DATA, 0x0101, confirmable=False, insert=(
        Triple(IRI(GH + "sensor42"), IRI(GH + "temperature"), Literal("26.5", XSD_FLOAT)),
        Triple(IRI(GH + "sensor42"), IRI(GH + "timestamp"),
               Literal("2026-11-21T12:00:00", XSD_DATETIME)),
    ))
    # Autocontrol KP, as the paper's figure 13: a persistent update switches the fan on when the
    # temperature exceeds the plant's maximum.
    fan_rule = Request(Tx.INSERT_PERSISTENT, 0x0102, insert=(
        Triple(Var(2), IRI(GH + "state"), Literal("true", "http://www.w3.org/2001/XMLSchema#boolean")),
    ), where=(
        Triple(Var(0), IRI(GH + "temperature"), Var(1)),
        Triple(Var(2), RDF_TYPE, IRI(GH + "Fan")),
        Triple(Var(3), IRI(GH + "maxTemperature"), Var(4)),
    ), options=Options(filters=((Var(1), Var(4), Op.GT),)))
    actuator_query = Request(Tx.SELECT_PERSISTENT, 0x0103, projection=2, where=(
        Triple(Var(0), RDF_TYPE, IRI(GH + "Fan")),
        Triple(Var(0), IRI(GH + "state"), Var(1)),
    ), optional=())
    indication = Response(0x0103, result=SelectResult(2, (
        (IRI(GH + "fan1"), Literal("true", "http://www.w3.org/2001/XMLSchema#boolean")),
        (IRI(GH + "fan2"), None),
    )), indication=True, seq=1)
    return [
        ("Sensor KP publishes a reading (NON INSERT DATA)", reading, None,
         f'PREFIX gh: <{GH}> PREFIX xsd: <http://www.w3.org/2001/XMLSchema#> INSERT DATA '
         '{ gh:sensor42 gh:temperature "26.5"^^xsd:float ; gh:timestamp '
         '"2026-11-21T12:00:00"^^xsd:dateTime }'),
        ("Autocontrol KP installs a rule (CON INSERT_PERSISTENT)", fan_rule, None,
         f'PREFIX gh: <{GH}> INSERT {{ ?f gh:state true }} WHERE {{ ?s gh:temperature ?t . '
         '?f a gh:Fan . ?p gh:maxTemperature ?m . FILTER(?t > ?m) }'),
        ("Actuator KP subscribes to the fans (CON SELECT_PERSISTENT)", actuator_query, None,
         f'PREFIX gh: <{GH}> SELECT ?f ?s WHERE {{ ?f a gh:Fan . ?f gh:state ?s }}'),
        ("SIB indicates the current fan states (IND, seq 1; fan2 unbound)", indication,
         Tx.SELECT_PERSISTENT,
         '{"head":{"vars":["f","s"]},"results":{"bindings":[{"f":{"type":"uri","value":"'
         + GH + 'fan1"},"s":{"type":"literal","datatype":"http://www.w3.org/2001/XMLSchema#'
         'boolean","value":"true"}},{"f":{"type":"uri","value":"' + GH + 'fan2"}}]}}'),
    ]


def run() -> int:
    total_ksp = total_text = 0
    for title, msg, answers, text in greenhouse_messages():
        wire = encode(msg, UDP)
        if answers is None:
            back = decode_kp_message(wire, UDP)
            direction = "kp_to_sib"
        else:
            back = decode_sib_message(wire, UDP, answers)
            direction = "sib_to_kp"
        if encode(back, UDP) != wire:
            raise SystemExit(f"round trip changed the bytes of: {title}")
        size_text = len(text.encode())
        total_ksp += len(wire)
        total_text += size_text
        print(f"== {title}\n{len(wire)} bytes of KSP over UDP; the SPARQL/JSON equivalent is "
              f"{size_text} bytes ({100 * len(wire) / size_text:.0f} %)")
        print(render(explain(wire, UDP, direction, answers), wire))
        print()
    print(f"In all: {total_ksp} bytes of KSP for {total_text} bytes of SPARQL/JSON "
          f"({100 - 100 * total_ksp / total_text:.1f} % shorter). Every message decoded back "
          "to the same bytes.")
    return 0
