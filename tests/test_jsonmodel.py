"""`ksp.reference.jsonmodel`: from_json(to_json(m)) == m over every message of the golden vectors."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from ksp import IRI, Literal, Options, Request, Response, Status, Tx, Var
from ksp.reference.jsonmodel import from_json, to_json

VECTOR_DIR = Path(__file__).parent / "vectors"
MESSAGES = []
for _path in sorted(VECTOR_DIR.glob("*.json")):
    _v = json.loads(_path.read_text(encoding="utf-8"))
    for _key in ("message", "decoded"):
        if _key in _v:
            MESSAGES.append(pytest.param(_v[_key], id=f"{_path.stem}.{_key}"))


def test_there_are_messages():
    assert len(MESSAGES) >= 120


@pytest.mark.parametrize("description", MESSAGES)
def test_round_trip(description):
    msg = from_json(description)
    d = to_json(msg)
    assert from_json(d) == msg
    # plain JSON: survives serialisation unchanged
    assert json.loads(json.dumps(d)) == d
    assert to_json(from_json(d)) == d


def test_repeat_shorthand_expands():
    d = {"type": "literal", "value": {"repeat": "ab", "count": 3},
         "datatype": "http://www.w3.org/2001/XMLSchema#string"}
    req = {"type": "request", "tx": "INSERT_DATA", "tid": 1, "confirmable": True, "version": 1,
           "insert": [{"s": {"type": "uri", "value": "urn:s"},
                       "p": {"type": "uri", "value": "urn:p"}, "o": d}],
           "options": {"prefixes": []}}
    assert from_json(req).insert[0].o == Literal("ababab")
    assert to_json(from_json(req))["insert"][0]["o"]["value"] == "ababab"


def test_shapes():
    req = Request(Tx.SELECT, 7, False, projection=1, where=((Var(0), IRI("urn:p"), Var(1)),),
                  optional=(), options=Options(prefixes=()))
    d = to_json(req)
    assert d["tx"] == "SELECT" and d["confirmable"] is False and d["options"] == {"prefixes": []}
    assert d["where"][0]["s"] == {"type": "var", "index": 0}
    assert "delete" not in d and "graphs" not in d
    res = to_json(Response(3, 0x11))
    assert res["status"] == 17 and "result" not in res and "seq" not in res
    assert to_json(Response(3, Status.GRAPH_EXISTS))["status"] == "GRAPH_EXISTS"
    assert from_json(res) == Response(3, 0x11)
