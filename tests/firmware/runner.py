"""Golden vectors through the firmware codec; runs inside MicroPython (and on CPython).

    runner.py FIRMWARE_DIR INPUT_DIR OUTPUT_FILE

INPUT_DIR holds the vectors as the test prepares them: without the expected answer (a KP→SIB
vector has no `hex`, a SIB→KP vector no `message`/`decoded`/`error`, only `"invalid": true`
for an invalid one). For every input the runner writes one line to OUTPUT_FILE:
a JSON object `{"name": ..., "kind": ..., ...}`, and for `encode` a tab and the hex (kept out
of the JSON: MicroPython's json is slow on megabyte strings):
- `encode`: a KP→SIB message the firmware sends, built from the vector's JSON description.
- `decode`: a SIB→KP message; `json` is the firmware's decoding in the vectors' JSON form.
- `reject`: an invalid SIB→KP message; `status` is the firmware's KspError status, or
  `json` if it accepted the bytes.
- `unsupported`: outside the firmware's scope; `why` says which part.
- `crash`: anything else the firmware raised (`error`).
This file only translates between the JSON form and the firmware's API; the comparison with
the vectors is done by tests/test_firmware_vectors.py.
"""
import json
import os
import sys

sys.path.insert(0, sys.argv[1])

from kspfw import codec  # noqa: E402
from kspfw.options import Op  # noqa: E402
from kspfw.codec import BNode, Lit  # noqa: E402

TX = {"DELETE_DATA": 1, "INSERT_DATA": 2, "UPDATE_DATA": 3, "DELETE": 4, "INSERT": 5,
      "UPDATE": 6, "SELECT": 7, "ASK": 8, "CONSTRUCT": 9, "DELETE_PERSISTENT": 10,
      "INSERT_PERSISTENT": 11, "UPDATE_PERSISTENT": 12, "SELECT_PERSISTENT": 13,
      "ASK_PERSISTENT": 14, "CONSTRUCT_PERSISTENT": 15, "TERMINATE": 16, "RESET": 17,
      "CREATE": 18, "DROP": 19, "COPY": 20, "MOVE": 21, "ADD": 22}
STATUS = ("OK", "VERSION_NOT_SUPPORTED", "INVALID_TRANSACTION_TYPE", "INVALID_MESSAGE_TYPE",
          "INVALID_DATA_FORMAT", "INVALID_OPTION_TYPE", "INVALID_OPTION_FORMAT",
          "INTERNAL_ERROR", "ACCESS_DENIED", "TERMINATED", "LIMIT_EXCEEDED",
          "UNKNOWN_TRANSACTION", "RESPONSE_TOO_LARGE", "NO_SUCH_GRAPH", "GRAPH_EXISTS",
          "ECHO_REQUIRED", "NUMBER_BEHIND")
OPS = {"EQ": 7, "NE": 8, "LT": 9, "GT": 10, "LE": 11, "GE": 12, "ADD": 13, "SUB": 14,
       "MUL": 15, "DIV": 16, "OR": 17, "AND": 18, "REGEX": 19, "NOT": 20, "NEG": 21,
       "REGEX_FLAGS": 22, "BOUND": 23}
ORDER = {"NONE": 0, "ASC": 1, "DESC": 2}
# Graph fields of each transaction type in wire order (table 3.1), by base type.
LAYOUT = {1: ("delete",), 2: ("insert",), 3: ("delete", "insert"), 4: ("delete", "where"),
          5: ("insert", "where"), 6: ("delete", "insert", "where"), 7: ("where",),
          8: ("where",), 16: (), 17: ()}


class Unsupported(Exception):
    pass


def text(v):
    return v if isinstance(v, str) else v["repeat"] * v["count"]


def term(d):
    k = d["type"]
    if k == "uri":
        return d["value"]
    if k == "var":
        return d["index"]
    if k == "bnode":
        return BNode(d["value"])
    return Lit(text(d["value"]), d["datatype"], d.get("lang"))


def graph(items):
    return [(term(t["s"]), term(t["p"]), term(t["o"])) for t in items]


def token(d):
    if d["type"] != "op":
        return term(d)
    if d["op"] not in OPS or "count" in d:
        raise Unsupported("the function " + d["op"])
    return Op(OPS[d["op"]])


def encode_request(m, tcp):
    tx = TX[m["tx"]]
    base = tx - 6 if 10 <= tx <= 15 else tx
    if base not in LAYOUT:
        raise Unsupported("transaction " + m["tx"])
    o = m["options"]
    for key in ("optional", "binds"):
        if key in o:
            raise Unsupported("option " + key)
    kw = {}
    for key in ("delete_graphs", "insert_graphs", "query_graphs"):
        if key in o:
            kw[key] = o[key]
    if "filters" in o:
        kw["filters"] = [[token(t) for t in e] for e in o["filters"]]
    if "modifier" in o:
        d = o["modifier"]
        kw["modifier"] = (ORDER[d["order"]], d.get("order_var"), d.get("limit"),
                          d.get("offset"), d["distinct"])
    if "max_response_size" in o:
        kw["max_size"] = o["max_response_size"]
    if "credentials" in o:
        c = o["credentials"]
        kw["credentials"] = (bytes.fromhex(c["kp_id"]), c["password"])
    if "echo" in o:
        kw["echo"] = bytes.fromhex(o["echo"])
    if "epoch" in o:
        kw["epoch"] = o["epoch"]
    return codec.request(tx, m["tid"], m["confirmable"], [graph(m[k]) for k in LAYOUT[base]],
                         m.get("projection"), [graph(g) for g in m.get("optional", ())],
                         o["prefixes"], tcp, **kw)


def term_json(t):
    if t is None:
        return None
    if isinstance(t, str):
        return {"type": "uri", "value": t}
    if isinstance(t, BNode):
        return {"type": "bnode", "value": t.label}
    d = {"type": "literal", "value": t.value, "datatype": t.datatype}
    if t.lang is not None:
        d["lang"] = t.lang
    return d


def response_json(r):
    d = {"type": "response", "tid": r.tid,
         "status": STATUS[r.status] if r.status < len(STATUS) else r.status,
         "indication": bool(r.ind), "version": 1}
    if r.seq is not None:
        d["seq"] = r.seq
    if r.epoch is not None:
        d["epoch"] = r.epoch
    res = r.result
    if isinstance(res, bool):
        d["result"] = {"type": "ask", "value": res}
    elif isinstance(res, bytes):  # the value an ECHO REQUIRED RES asks to be echoed
        d["result"] = {"type": "echo", "value": res.hex()}
    elif isinstance(res, tuple):  # the epochs of a NUMBER BEHIND RES
        d["result"] = {"type": "behind", "epoch": res[0], "next_epoch": res[1]}
    elif res is not None:
        d["result"] = {"type": "select", "variables": res.variables, "total": res.total,
                       "prefixes": res.prefixes,
                       "rows": [[term_json(t) for t in row] for row in res.rows]}
    return d


def run(v):
    name = v["name"]
    tcp = v["transport"] == "tcp"
    if v["direction"] == "kp_to_sib":
        if v.get("invalid"):
            raise Unsupported("decoding REQ/ACK (the SIB's side)")
        m = v["message"]
        if m["type"] == "ack":
            if "seq" not in m:
                raise Unsupported("bare ACK")
            raw = codec.ack(m["tid"], m["seq"])
        else:
            raw = encode_request(m, tcp)
        return {"name": name, "kind": "encode"}, bytes(raw).hex()
    raw = bytes.fromhex(v["hex"])
    answers = TX[v["answers"]]
    try:
        r = codec.decode(raw, answers, tcp)
    except codec.KspError as e:
        if v.get("invalid"):
            return {"name": name, "kind": "reject", "status": e.status}, None
        raise
    except NotImplementedError as e:
        raise Unsupported(str(e))
    kind = "reject" if v.get("invalid") else "decode"
    return {"name": name, "kind": kind, "json": response_json(r)}, None


def main():
    vdir = sys.argv[2]
    with open(sys.argv[3], "w") as out:
        for fn in sorted(os.listdir(vdir)):
            if not fn.endswith(".json"):
                continue
            with open(vdir + "/" + fn) as f:
                v = json.load(f)
            hexed = None
            try:
                rec, hexed = run(v)
            except Unsupported as e:
                rec = {"name": v["name"], "kind": "unsupported", "why": str(e)}
            except Exception as e:  # reported per vector; the test names the one that failed
                rec = {"name": v["name"], "kind": "crash",
                       "error": "%s: %s" % (type(e).__name__, e)}
            v = None
            out.write(json.dumps(rec))
            if hexed is not None:
                out.write("\t")
                out.write(hexed)
            out.write("\n")


main()
