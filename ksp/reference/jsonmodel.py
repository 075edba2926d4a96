"""KSP messages as plain JSON: `to_json(msg) -> dict` and `from_json(d) -> Message`.

Why this exists: the golden vectors (`tests/vectors/*.json`, schema in
`tests/vectors/README.md`) describe each message in a form that a non-Python implementation
(the MicroPython firmware codec, a C test harness, a browser tool) can read with nothing but a
JSON parser; command-line tools print and read messages in it; and the bridge can pass
messages to non-Python peers as JSON. The mapping is plain data only (dicts, lists, strings,
numbers, booleans, null), one-to-one with `ksp.model`, and `from_json(to_json(m)) == m` holds
for every message.

Mapping (field names are the model's; fields that are None are omitted):

- message: `{"type": "request" | "response" | "ack", ...the model's fields...}`
- term: `{"type": "uri", "value": IRI}`, `{"type": "bnode", "value": label}`,
  `{"type": "var", "index": k}`,
  `{"type": "literal", "value": lexical, "datatype": IRI}` (+ `"lang"` when language-tagged);
  an unbound result term is `null`
- triple: `{"s": term, "p": term, "o": term}`; graph: list of triples
- expression: list of tokens; a token is a term or `{"type": "op", "op": NAME}` (`ksp.codes.Op`),
  with `"count": n` for a variadic operator (`ksp.model.Call`)
- IRIs that can only be IRIs (graph names, prefixes, datatypes) are plain strings
- enums by NAME (`"tx": "INSERT_DATA"`, `"status": "OK"`, `"order": "ASC"`); a status code
  with no name is its integer
- KP ID: 32 lowercase hex digits
- result: `{"type": "select", "variables", "rows", "total", "prefixes"}`,
  `{"type": "ask", "value"}`, `{"type": "construct", "triples", "total", "prefixes"}`;
  the echo value of an ECHO_REQUIRED RES: `{"type": "echo", "value": hex}`;
  the epochs of a NUMBER_BEHIND RES: `{"type": "behind", "epoch", "next_epoch"}`
- ECHO option: `"echo": hex`; EPOCH option: `"epoch": integer`; a RES's epoch (§15.6):
  `"epoch": integer`

`from_json` also reads a long repetitive string given as `{"repeat": s, "count": n}` (s
repeated n times) wherever a literal's `"value"` goes; the vectors use it to keep the one
4 MiB string vector small. `to_json` always writes plain strings.
"""
from __future__ import annotations

from typing import Any

from ..codes import Op, Status, Tx
from ..model import (
    Ack, AskResult, Behind, Bind, Call, ConstructResult, Credentials, Message, Options, Order,
    Request, Response, SelectResult, SolutionModifier,
)
from ..terms import IRI, BNode, Literal, Triple, Var

__all__ = ["to_json", "from_json", "term_to_json", "term_from_json"]

_REQUEST_GRAPHS = ("delete", "insert", "where", "template")
_OPTION_GRAPH_NAMES = ("delete_graphs", "insert_graphs", "query_graphs")


# ---------------------------------------------------------------------------------------------
# to_json


def term_to_json(term: Any) -> dict | None:
    if term is None:
        return None
    if isinstance(term, str):
        return {"type": "uri", "value": str(term)}
    if isinstance(term, Var):
        return {"type": "var", "index": term.index}
    if isinstance(term, BNode):
        return {"type": "bnode", "value": term.label}
    if isinstance(term, Literal):
        d = {"type": "literal", "value": term.lexical, "datatype": str(term.datatype)}
        if term.lang is not None:
            d["lang"] = term.lang
        return d
    raise TypeError(f"{term!r} is not a KSP term")


def _triple_to_json(t: Triple) -> dict:
    s, p, o = t
    return {"s": term_to_json(s), "p": term_to_json(p), "o": term_to_json(o)}


def _graph_to_json(graph) -> list:
    return [_triple_to_json(t) for t in graph]


def _token_to_json(token: Any) -> dict:
    if isinstance(token, Op):
        return {"type": "op", "op": token.name}
    if isinstance(token, Call):
        return {"type": "op", "op": token.op.name, "count": token.count}
    return term_to_json(token)


def _expr_to_json(expr) -> list:
    return [_token_to_json(t) for t in expr]


def _modifier_to_json(m: SolutionModifier) -> dict:
    d: dict = {"order": Order(m.order).name, "distinct": bool(m.distinct)}
    for key in ("order_var", "limit", "offset"):
        value = getattr(m, key)
        if value is not None:
            d[key] = value
    return d


def _options_to_json(opts: Options) -> dict:
    d: dict = {}
    if opts.prefixes is not None:
        d["prefixes"] = [str(p) for p in opts.prefixes]
    for key in _OPTION_GRAPH_NAMES:
        value = getattr(opts, key)
        if value is not None:
            d[key] = [str(g) for g in value]
    if opts.optional is not None:
        d["optional"] = [_graph_to_json(g) for g in opts.optional]
    if opts.filters is not None:
        d["filters"] = [_expr_to_json(e) for e in opts.filters]
    if opts.modifier is not None:
        d["modifier"] = _modifier_to_json(opts.modifier)
    if opts.binds is not None:
        d["binds"] = [{"var": b.var, "expr": _expr_to_json(b.expr)} for b in opts.binds]
    if opts.max_response_size is not None:
        d["max_response_size"] = opts.max_response_size
    if opts.credentials is not None:
        d["credentials"] = {"kp_id": bytes(opts.credentials.kp_id).hex(),
                            "password": opts.credentials.password}
    if opts.echo is not None:
        d["echo"] = bytes(opts.echo).hex()
    if opts.epoch is not None:
        d["epoch"] = opts.epoch
    return d


def _result_to_json(result) -> dict:
    if isinstance(result, (bytes, bytearray)):
        return {"type": "echo", "value": bytes(result).hex()}
    if isinstance(result, Behind):
        return {"type": "behind", "epoch": result.epoch, "next_epoch": result.next_epoch}
    if isinstance(result, AskResult):
        return {"type": "ask", "value": bool(result.value)}
    if isinstance(result, SelectResult):
        d: dict = {"type": "select", "variables": result.variables,
                   "rows": [[term_to_json(t) for t in row] for row in result.rows]}
    elif isinstance(result, ConstructResult):
        d = {"type": "construct", "triples": _graph_to_json(result.triples)}
    else:
        raise TypeError(f"{result!r} is not a query result")
    if result.total is not None:
        d["total"] = result.total
    if result.prefixes is not None:
        d["prefixes"] = [str(p) for p in result.prefixes]
    return d


def _status_to_json(status: Status | int) -> str | int:
    try:
        return Status(status).name
    except ValueError:
        return int(status)


def to_json(msg: Message) -> dict:
    """The JSON description (plain dicts/lists) of a Request, Response or Ack."""
    if isinstance(msg, Request):
        d: dict = {"type": "request", "tx": Tx(msg.tx).name, "tid": msg.tid,
                   "confirmable": bool(msg.confirmable), "version": msg.version}
        for key in _REQUEST_GRAPHS:
            value = getattr(msg, key)
            if value is not None:
                d[key] = _graph_to_json(value)
        if msg.optional is not None:
            d["optional"] = [_graph_to_json(g) for g in msg.optional]
        if msg.projection is not None:
            d["projection"] = msg.projection
        if msg.graphs is not None:
            d["graphs"] = [str(g) for g in msg.graphs]
        for key in ("source", "target"):
            value = getattr(msg, key)
            if value is not None:
                d[key] = str(value)
        d["options"] = _options_to_json(msg.options)
        return d
    if isinstance(msg, Response):
        d = {"type": "response", "tid": msg.tid, "status": _status_to_json(msg.status),
             "indication": bool(msg.indication), "version": msg.version}
        if msg.result is not None:
            d["result"] = _result_to_json(msg.result)
        if msg.seq is not None:
            d["seq"] = msg.seq
        if msg.epoch is not None:
            d["epoch"] = msg.epoch
        return d
    if isinstance(msg, Ack):
        d = {"type": "ack", "tid": msg.tid, "version": msg.version}
        if msg.seq is not None:
            d["seq"] = msg.seq
        return d
    raise TypeError(f"{msg!r} is not a KSP message")


# ---------------------------------------------------------------------------------------------
# from_json


def _text(value: Any) -> str:
    """A string, or the `{"repeat": s, "count": n}` shorthand for a long repetitive one."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and set(value) == {"repeat", "count"}:
        return value["repeat"] * value["count"]
    raise ValueError(f"expected a string, not {value!r}")


def term_from_json(d: dict | None):
    if d is None:
        return None
    kind = d["type"]
    if kind == "uri":
        return IRI(d["value"])
    if kind == "var":
        return Var(d["index"])
    if kind == "bnode":
        return BNode(d["value"])
    if kind == "literal":
        return Literal(_text(d["value"]), d["datatype"], d.get("lang"))
    raise ValueError(f"unknown term type {kind!r}")


def _triple_from_json(d: dict) -> Triple:
    return Triple(term_from_json(d["s"]), term_from_json(d["p"]), term_from_json(d["o"]))


def _graph_from_json(items) -> tuple:
    return tuple(_triple_from_json(t) for t in items)


def _token_from_json(d: dict):
    if d["type"] == "op":
        return Call(Op[d["op"]], d["count"]) if "count" in d else Op[d["op"]]
    return term_from_json(d)


def _expr_from_json(items) -> tuple:
    return tuple(_token_from_json(t) for t in items)


def _iris(items) -> tuple:
    return tuple(IRI(i) for i in items)


def _options_from_json(d: dict) -> Options:
    values: dict = {}
    if "prefixes" in d:
        values["prefixes"] = tuple(d["prefixes"])
    for key in _OPTION_GRAPH_NAMES:
        if key in d:
            values[key] = _iris(d[key])
    if "optional" in d:
        values["optional"] = tuple(_graph_from_json(g) for g in d["optional"])
    if "filters" in d:
        values["filters"] = tuple(_expr_from_json(e) for e in d["filters"])
    if "modifier" in d:
        m = d["modifier"]
        values["modifier"] = SolutionModifier(
            Order[m.get("order", "NONE")], m.get("order_var"), m.get("limit"), m.get("offset"),
            bool(m.get("distinct", False)))
    if "binds" in d:
        values["binds"] = tuple(Bind(b["var"], _expr_from_json(b["expr"])) for b in d["binds"])
    if "max_response_size" in d:
        values["max_response_size"] = d["max_response_size"]
    if "credentials" in d:
        c = d["credentials"]
        kp_id = bytes.fromhex(c["kp_id"])
        if len(kp_id) != 16:
            raise ValueError(f"a KP ID is 32 hex digits, not {c['kp_id']!r}")
        values["credentials"] = Credentials(kp_id, c.get("password", ""))
    if "echo" in d:
        values["echo"] = bytes.fromhex(d["echo"])
    if "epoch" in d:
        values["epoch"] = d["epoch"]
    return Options(**values)


def _result_from_json(d: dict):
    kind = d["type"]
    if kind == "echo":
        return bytes.fromhex(d["value"])
    if kind == "behind":
        return Behind(d["epoch"], d["next_epoch"])
    if kind == "ask":
        return AskResult(bool(d["value"]))
    prefixes = tuple(d["prefixes"]) if "prefixes" in d else None
    if kind == "select":
        rows = tuple(tuple(term_from_json(t) for t in row) for row in d.get("rows", ()))
        return SelectResult(d["variables"], rows, d.get("total"), prefixes)
    if kind == "construct":
        return ConstructResult(_graph_from_json(d.get("triples", ())), d.get("total"), prefixes)
    raise ValueError(f"unknown result type {kind!r}")


def _status_from_json(value: str | int) -> Status | int:
    if isinstance(value, str):
        return Status[value]
    try:
        return Status(value)
    except ValueError:
        return int(value)


def from_json(d: dict) -> Message:
    """The Request, Response or Ack that `d` (as written by `to_json`) describes."""
    kind = d["type"]
    if kind == "request":
        fields: dict = {}
        for key in _REQUEST_GRAPHS:
            if key in d:
                fields[key] = _graph_from_json(d[key])
        if "optional" in d:
            fields["optional"] = tuple(_graph_from_json(g) for g in d["optional"])
        if "projection" in d:
            fields["projection"] = d["projection"]
        if "graphs" in d:
            fields["graphs"] = _iris(d["graphs"])
        for key in ("source", "target"):
            if key in d:
                fields[key] = IRI(d[key])
        return Request(Tx[d["tx"]], d["tid"], bool(d.get("confirmable", True)),
                       options=_options_from_json(d.get("options", {})),
                       version=d.get("version", 1), **fields)
    if kind == "response":
        result = _result_from_json(d["result"]) if "result" in d else None
        return Response(d["tid"], _status_from_json(d.get("status", "OK")), result,
                        bool(d.get("indication", False)), d.get("seq"), d.get("version", 1),
                        d.get("epoch"))
    if kind == "ack":
        return Ack(d["tid"], d.get("seq"), d.get("version", 1))
    raise ValueError(f"unknown message type {kind!r}")
