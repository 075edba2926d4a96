"""The Lua dissector (tools/wireshark/ksp.lua) in Debian's tshark — a third
reader of docs/wire-format.md, after the Python and the firmware codecs.

Every golden vector is put in one capture (UDP datagrams to port 7000, TCP streams to port 7001,
one conversation each; a RES or IND is preceded by a request of the type it answers, with its
TID), tshark dissects it once, and for each vector the dissector's fields must equal the
vector's decoded content: message type, transaction type or status, TID, sequence number, CON,
every term in wire order (as text), graph names, prefixes, RPN tokens, modifier, sizes,
credentials, result counts; an invalid vector must get the expert info naming its status.
The kept captures (tests/captures/) are dissected too, every frame with no malformed field.
"""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from ksp import UDP, Tx
from ksp.codec import TCP
from ksp.layout import REQUEST_FIELDS, Body
from transports.pcap import PcapWriter

ROOT = Path(__file__).resolve().parent.parent
LUA = ROOT / "tools" / "wireshark" / "ksp.lua"
VECTORS = sorted((ROOT / "tests" / "vectors").glob("*.json"))
TSHARK = shutil.which("tshark")
# slow: tshark processes
pytestmark = [pytest.mark.skipif(TSHARK is None, reason="tshark: scripts/test installs it"),
              pytest.mark.slow]
#: Faults a TCP stream reader cannot see in one frame: a Length larger than the bytes that
#: follow is, in a stream, a message whose rest has not arrived (the dissector waits for it,
#: as TCP reassembly must); `ksp.codec` sees the mismatch because it is handed one whole frame.
STREAM_ONLY = {"invalid_0x04_tcp_length_mismatch"}
NUMERIC = {"ksp.tx", "ksp.status", "ksp.option", "ksp.answers"}  # tshark shows them in hex
FIELDS = ["ksp.msg", "ksp.tx", "ksp.status", "ksp.tid", "ksp.seq", "ksp.con", "ksp.term",
          "ksp.graph_name", "ksp.prefix", "ksp.token", "ksp.option", "ksp.order",
          "ksp.order_var", "ksp.limit", "ksp.offset", "ksp.distinct", "ksp.max_response_size",
          "ksp.kp_id", "ksp.password", "ksp.echo", "ksp.epoch", "ksp.next_epoch", "ksp.trc",
          "ksp.rc", "ksp.vc", "ksp.ask", "ksp.ack_seq",
          "ksp.bind_var", "_ws.expert.message", "ksp.answers", "udp.port", "tcp.port"]


def term(t: dict | None) -> str:
    if t is None:
        return "UNDEF"
    kind = t["type"]
    if kind == "uri":
        return f"<{t['value']}>"
    if kind == "bnode":
        return f"_:{t['value']}"
    if kind == "var":
        return f"?v{t['index']}"
    value = t["value"]
    if isinstance(value, dict):  # the vectors' shorthand for a long string
        value = value["repeat"] * value["count"]
    text = '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if t.get("lang"):
        return f"{text}@{t['lang']}"
    return f"{text}^^<{t['datatype']}>"


def triples(graph: list) -> list[str]:
    return [term(tr[k]) for tr in graph for k in ("s", "p", "o")]


def token(t: dict) -> str:
    """A token as the dissector shows it: a variadic operator with its count, `CONCAT(3)`."""
    if t["type"] != "op":
        return term(t)
    return f"{t['op']}({t['count']})" if "count" in t else t["op"]


def expected(vector: dict) -> dict:
    """What the dissector must show, from the vector's decoded message."""
    m = vector.get("decoded") or vector["message"]  # `decoded`: what the bytes carry
    kind = m["type"]
    out: dict = {"ksp.tid": [str(m["tid"])]} if "tid" in m else {}
    if kind == "ack":
        out["ksp.msg"] = ["ACK"]
        if m.get("seq") is not None:
            out["ksp.ack_seq"] = [str(m["seq"])]
        return out
    if kind == "request":
        tx = Tx[m["tx"]]
        out.update({"ksp.msg": ["REQ"], "ksp.tx": [str(int(tx))],
                    "ksp.con": ["1" if m["confirmable"] else "0"]})
        terms, names = [], []
        for name, body in REQUEST_FIELDS[tx]:
            if body is Body.GRAPH:
                terms += triples(m.get(name) or [])
            elif body is Body.OPTIONAL:
                for g in m.get(name) or []:
                    terms += triples(g)
            elif body is Body.GRAPH_NAMES:
                names += [g or "DEFAULT" for g in m[name]]
            elif body is Body.IRI:
                names.append(m[name] or "DEFAULT")
            elif body is Body.PROJECTION:
                out["ksp.vc"] = [str(m[name])]
        o = m.get("options") or {}
        codes = []
        for code, key in enumerate(["prefixes", "delete_graphs", "insert_graphs", "query_graphs",
                                    "optional", "filters", "modifier", "binds",
                                    "max_response_size", "credentials", "echo", "epoch"]):
            if o.get(key) is None:
                continue
            codes.append(str(code))
            if key == "prefixes":
                if o[key]:
                    out["ksp.prefix"] = o[key]
            elif key.endswith("_graphs"):
                names += [g or "DEFAULT" for g in o[key]]
            elif key == "optional":
                for g in o[key]:
                    terms += triples(g)
            elif key == "filters":
                out.setdefault("ksp.token", []).extend(token(t) for e in o[key] for t in e)
            elif key == "binds":
                out["ksp.bind_var"] = [str(b["var"]) for b in o[key]]
                out.setdefault("ksp.token", []).extend(token(t) for b in o[key]
                                                       for t in b["expr"])
            elif key == "modifier":
                mod = o[key]
                out["ksp.order"] = [str(["NONE", "ASC", "DESC"].index(mod["order"]))]
                out["ksp.distinct"] = ["1" if mod["distinct"] else "0"]
                for field, name in (("order_var", "ksp.order_var"), ("limit", "ksp.limit"),
                                    ("offset", "ksp.offset")):
                    if mod.get(field) is not None:
                        out[name] = [str(mod[field])]
            elif key == "max_response_size":
                out["ksp.max_response_size"] = [str(o[key])]
            elif key == "credentials":
                out["ksp.kp_id"] = [o[key]["kp_id"]]
                if o[key]["password"]:
                    out["ksp.password"] = [o[key]["password"]]
            elif key == "echo":
                out["ksp.echo"] = [o[key]]
            elif key == "epoch":
                out["ksp.epoch"] = [str(o[key])]
        codes = codes if o.get("prefixes") != [] else codes[1:]
        if codes:
            out["ksp.option"] = codes
        if terms:
            out["ksp.term"] = terms
        if names:
            out["ksp.graph_name"] = names
        return out
    out["ksp.msg"] = ["IND" if m["indication"] else "RES"]
    out["ksp.status"] = [str(_status(m))]
    if m.get("seq") is not None:
        out["ksp.seq"] = [str(m["seq"])]
    if m.get("epoch") is not None:  # the epoch of the request a UDP RES answers
        out["ksp.epoch"] = [str(m["epoch"])]
    r = m.get("result")
    if r is not None:
        if r.get("type") == "echo":
            out["ksp.echo"] = [r["value"]]
        elif r.get("type") == "behind":
            out["ksp.epoch"] = [str(r["epoch"])]
            out["ksp.next_epoch"] = [str(r["next_epoch"])]
        elif "value" in r and "rows" not in r and "triples" not in r:
            out["ksp.ask"] = ["1" if r["value"] else "0"]
        else:
            if r.get("prefixes"):
                out["ksp.prefix"] = r["prefixes"]
            out["ksp.trc"] = [str(r["total"])]
            if "rows" in r:
                out["ksp.rc"] = [str(len(r["rows"]))]
                out["ksp.vc"] = [str(r["variables"])]
                terms = [term(t) for row in r["rows"] for t in row]
            else:
                out["ksp.rc"] = [str(len(r["triples"]))]
                terms = triples(r["triples"])
            if terms:
                out["ksp.term"] = terms
    return out


def _status(m: dict) -> int:
    from ksp import Status
    status = m["status"]
    if isinstance(status, str):
        return int(Status[status]) if status in Status.__members__ else int(status, 0)
    return int(status)


def context_request(vector: dict, transport) -> bytes | None:
    """The request a RES/IND vector answers (its type, its TID), for the dissector to match."""
    answers = vector.get("answers")
    if vector["direction"] != "sib_to_kp" or answers is None:
        return None
    tx = Tx[answers]
    ind = bool(bytes.fromhex(vector["hex"])[1] & 0x80)
    if ind and not tx.persistent:
        tx = Tx(int(tx) + 6)
    head = bytes([1, 0x80 | int(tx)]) + bytes.fromhex(vector["hex"])[2:4]
    if transport is TCP:  # a header is enough: the dissector notes the type before the body
        return head + (9).to_bytes(4, "little") + b"\0"
    return head + b"\0"


@pytest.fixture(scope="module")
def dissected(tmp_path_factory):
    """tshark's fields for every vector: {name: {field: [values]}} and the raw JSON."""
    path = tmp_path_factory.mktemp("ws") / "vectors.pcapng"
    plan = []
    with PcapWriter(path) as w:
        for i, vpath in enumerate(VECTORS):
            v = json.loads(vpath.read_text())
            tcp = v["transport"] == "tcp"
            kp, sib = ("10.0.0.2", 20000 + i), ("10.0.0.1", 7001 if tcp else 7000)
            data = bytes.fromhex(v["hex"])
            src, dst = (kp, sib) if v["direction"] == "kp_to_sib" else (sib, kp)
            ctx = context_request(v, TCP if tcp else UDP)
            if tcp:
                w.tcp_open(kp, sib)
            for who, what in (((kp, sib), ctx), ((src, dst), data)):
                if what is None:
                    continue
                if tcp:
                    w.tcp(*who, what)
                else:
                    w.udp(*who, what)
            plan.append((v, 20000 + i))
    proc = subprocess.run([TSHARK, "-X", f"lua_script:{LUA}", "-r", str(path), "-T", "json",
                           "-Y", "ksp", *[x for fld in FIELDS for x in ("-e", fld)]],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return plan, json.loads(proc.stdout)


def compare(plan: list, found: dict[str, dict[str, list[str]]]) -> list[str]:
    """Every vector's expected fields against what a run of the dissector recorded."""
    problems = []
    for v, _port in plan:
        if v["name"] in STREAM_ONLY:
            continue
        layers = found.get(v["name"])
        if layers is None:
            problems.append(f"{v['name']}: not dissected")
            continue
        got = {key: [str(int(x, 0)) if key in NUMERIC else x for x in val]
               for key, val in layers.items() if key != "_ws.expert.message"}
        experts = layers.get("_ws.expert.message", [])
        if "error" in v:
            want = f"status 0x{v['error']['status']:02x}"
            if not any(want in e for e in experts):
                problems.append(f"{v['name']}: expected expert info with {want}, got {experts}")
            continue
        if experts:
            problems.append(f"{v['name']}: unexpected expert info {experts}")
            continue
        for field, values in expected(v).items():
            if got.get(field) != values:
                problems.append(f"{v['name']}: {field} = {got.get(field)}, expected {values}")
    return problems


def test_every_vector_is_dissected_as_it_decodes(dissected):
    """tshark (Lua 5.2)."""
    plan, frames = dissected
    last: dict[int, dict] = {}  # the KP port of a vector's conversation -> its last frame
    for frame in frames:
        layers = frame["_source"]["layers"]
        ports = [int(p) for p in layers.get("udp.port", []) + layers.get("tcp.port", [])]
        last[next(p for p in ports if p >= 20000)] = layers
    found = {v["name"]: last[port] for v, port in plan if port in last}
    problems = compare(plan, found)
    assert not problems, "\n".join(problems[:40]) + f"\n({len(problems)} problems)"
    assert len(plan) == len(VECTORS) > 200


@pytest.mark.skipif(shutil.which("lua5.4") is None, reason="lua5.4: scripts/test installs it")
def test_the_dissector_runs_on_lua_5_4_too(tmp_path):
    """The same decoding on a plain Lua 5.4 (integers, string.unpack: what changed since 5.2),
    with Wireshark's API faked by tests/wireshark/fake_wireshark.lua: every vector again."""
    lines, plan = [], []
    for vpath in VECTORS:
        v = json.loads(vpath.read_text())
        transport = TCP if v["transport"] == "tcp" else UDP
        ctx = context_request(v, transport)
        lines.append("\t".join((v["name"], v["transport"], v["direction"],
                                ctx.hex() if ctx else "-", v["hex"])))
        plan.append((v, None))
    (tmp_path / "in.tsv").write_text("\n".join(lines) + "\n")
    proc = subprocess.run(["lua5.4", str(ROOT / "tests" / "wireshark" / "fake_wireshark.lua"),
                           str(LUA), str(tmp_path / "in.tsv")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    found: dict[str, dict[str, list[str]]] = {}
    for line in proc.stdout.splitlines():
        name, field, value = line.split("\t", 2)
        found.setdefault(name, {}).setdefault(field, []).append(value)
    problems = compare(plan, found)
    assert not problems, "\n".join(problems[:40]) + f"\n({len(problems)} problems)"


@pytest.mark.parametrize("name", ["greenhouse.pcapng", "script-udp.pcapng",
                                  "script-tcp.pcapng"])
def test_kept_captures_dissect_without_a_malformed_field(name):
    capture = ROOT / "tests" / "captures" / name
    proc = subprocess.run([TSHARK, "-X", f"lua_script:{LUA}", "-r", str(capture), "-T",
                           "fields", "-e", "ksp.msg", "-e", "ksp.answers", "-e",
                           "_ws.expert.message", "-Y", "ksp"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows = [line.split("\t") for line in proc.stdout.splitlines()]
    assert len(rows) > 20
    assert not [r for r in rows if len(r) > 2 and r[2]], rows
    # every RES and IND was matched to the request it answers
    assert all(r[1] for r in rows if r[0] in ("RES", "IND") or r[0].startswith(("RES", "IND")))


def test_ksp_inside_coap_payloads(tmp_path):
    """A CoAP POST to /ksp carrying a REQ (Content-Format 65000) and its 2.05 carrying the RES,
    on CoAP's port 5683: Wireshark's CoAP dissector hands both payloads to the KSP dissector."""
    req = json.loads((ROOT / "tests" / "vectors" / "req_select_con_udp.json").read_text())
    res = json.loads((ROOT / "tests" / "vectors" / "res_select_udp.json").read_text())
    tid = bytes.fromhex(req["hex"])[2:4]
    res_bytes = bytes.fromhex(res["hex"])
    res_bytes = res_bytes[:2] + tid + res_bytes[4:]  # the RES answers this request
    fmt = (65000).to_bytes(2, "big")
    post = bytes([0x41, 0x02, 0x12, 0x34, 0xAB, 0xB3]) + b"ksp" + bytes([0x12]) + fmt + b"\xff" \
        + bytes.fromhex(req["hex"])
    answer = bytes([0x61, 0x45, 0x12, 0x34, 0xAB, 0xC2]) + fmt + b"\xff" + res_bytes
    path = tmp_path / "coap.pcapng"
    kp, sib = ("10.0.0.2", 40000), ("10.0.0.1", 5683)
    with PcapWriter(path) as w:
        w.udp(kp, sib, post)
        w.udp(sib, kp, answer)
    proc = subprocess.run([TSHARK, "-X", f"lua_script:{LUA}", "-r", str(path), "-T", "fields",
                           "-e", "coap.code", "-e", "ksp.msg", "-e", "ksp.tx", "-e", "ksp.answers",
                           "-e", "ksp.rc", "-e", "_ws.expert.message"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows = [line.split("\t") for line in proc.stdout.splitlines()]
    want = expected(res)
    assert rows[0][1:3] == ["REQ", "0x07"] and rows[1][1] == "RES"
    assert rows[1][3] == "0x07" and rows[1][4] == want["ksp.rc"][0]
    assert not rows[0][5] and not rows[1][5]
