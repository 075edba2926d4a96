"""`ksp.reference.explain` and the `ksp decode` subcommand (run through `tools.cli.main`)."""
from __future__ import annotations

import io
import re

import pytest

from ksp.reference import explain
from ksp.codec import TCP, UDP, encode
from ksp.codes import RDF, XSD, Op, Status, Tx
from ksp.model import (
    Ack, AskResult, Credentials, Options, Order, Request, Response, SelectResult,
    SolutionModifier,
)
from ksp.terms import BNode, IRI, Literal, Triple, Var
from tools.cli import main

from test_schema import CASES, VECTORS, _load

EX = "http://example.org/"

INSERT = Request(Tx.INSERT_DATA, 7, True, insert=(
    Triple(IRI(EX + "s1"), IRI(RDF + "type"), IRI(EX + "Sensor")),
    Triple(IRI(EX + "s1"), IRI(EX + "temp"), Literal("21.5", XSD + "float")),
))
SELECT = Request(Tx.SELECT_PERSISTENT, 300, False, projection=2,
                 where=(Triple(Var(0), IRI(EX + "temp"), Var(1)),), optional=(),
                 options=Options(filters=((Var(1), Literal("20", XSD + "integer"), Op.GT),),
                                 modifier=SolutionModifier(Order.DESC, 1, limit=10,
                                                           distinct=True),
                                 credentials=Credentials(bytes(range(16)), "pw")))
ROWS = Response(300, result=SelectResult(2, ((IRI(EX + "s1"), None),
                                             (BNode("b0"), Literal("hi", lang="en"))), total=5),
                indication=True, seq=42)


def run(capsys, *argv: str) -> tuple[int, str]:
    code = main(["decode", *argv])
    return code, capsys.readouterr().out


def row(out: str, path: str) -> str:
    """The table line of field `path`."""
    for line in out.splitlines():
        if re.search(rf"\| {re.escape(path)} +\|", line):
            return line
    raise AssertionError(f"no row {path!r} in:\n{out}")


def test_decode_insert_data(capsys):
    code, out = run(capsys, encode(INSERT, UDP).hex())
    assert code == 0
    assert "0001  82" in row(out, "header.type")
    assert "1|0000010" in row(out, "header.type") and "CON, INSERT_DATA" in row(out, "header.type")
    assert "transaction ID 7" in row(out, "header.tid")
    assert "TC: 2 triples" in row(out, "data.insert.count")
    assert "001|10|001" in row(out, "data.insert[0].type")
    assert "S=URI P=Reserved O=URI" in row(out, "data.insert[0].type")
    assert "rdf:type" in row(out, "data.insert[0].p.word")
    assert "<http://example.org/Sensor>" in row(out, "data.insert[0].o.local")
    assert "S=Empty P=URI O=Literal" in row(out, "data.insert[1].type")
    assert "xsd:float" in row(out, "data.insert[1].o.littype")
    assert "00 00 ac 41" in row(out, "data.insert[1].o.payload")
    assert "21.5" in row(out, "data.insert[1].o.payload")
    assert "option 0x00: PREFIX" in row(out, "options[0].option")
    # then the message as ksp.codec decodes it
    assert "Request(" in out and "tx=Tx.INSERT_DATA" in out and "tid=7" in out
    assert "IRI('http://example.org/Sensor')" in out


def test_decode_tcp_select_with_options(capsys):
    code, out = run(capsys, encode(SELECT, TCP).hex(" "), "--tcp")
    assert code == 0
    buf = encode(SELECT, TCP)
    assert f"TCP Length {len(buf)}" in row(out, "header.length")
    assert "0|0001101" in row(out, "header.type") and "NON, SELECT_PERSISTENT" in row(
        out, "header.type")
    assert "2c 01" in row(out, "header.tid")
    assert "VC: 2 projected variables" in row(out, "data.projection")
    assert "OC: 3 options" in row(out, "options.count")  # no PREFIX: no IRI worth one
    assert "S=Var P=URI O=Var" in row(out, "data.where[0].type")
    assert "?v1" in row(out, "data.where[0].o.var")
    assert "FC: 1 expression" in row(out, "options[0].body.count")
    assert "> (GT, 2-ary)" in row(out, "options[0].body[0][2].token")
    flags = row(out, "options[1].body.flags")
    assert "000|1|0|1|10" in flags and "DESC, Limit, Distinct" in flags
    assert "ORDER BY ?v1" in row(out, "options[1].body.order_var")
    assert "LIMIT 10" in row(out, "options[1].body.limit")
    assert "00010203-0405-0607-0809-0a0b0c0d0e0f" in row(out, "options[2].body.kp_id")
    assert "SolutionModifier(order=<Order.DESC: 2>" in out


def test_decode_ind_select_result(capsys):
    code, out = run(capsys, encode(ROWS, UDP).hex(), "--from-sib", "--answers",
                    "select_persistent")
    assert code == 0
    assert "IND, OK" in row(out, "header.type")
    assert "sequence number 42" in row(out, "header.seq")
    assert "TRC: 5 results in total" in row(out, "data.trc")
    assert "RC: 2 in this message" in row(out, "data.rc")
    assert "Empty (unbound)" in row(out, "data.rows[0][1].member")
    assert "_:b0" in row(out, "data.rows[1][0].value.label")
    assert "@en" in row(out, "data.rows[1][1].value.payload.tag")
    assert "SelectResult(" in out and "seq=42" in out


def test_decode_ask_and_ack_from_stdin(capsys, monkeypatch):
    hexed = encode(Response(9, result=AskResult(False)), TCP).hex()
    spaced = "\n".join(hexed[i:i + 4] for i in range(0, len(hexed), 4)) + "\n"
    monkeypatch.setattr("sys.stdin", io.StringIO(spaced))
    code, out = run(capsys, "-", "--tcp", "--from-sib", "--answers", "8")
    assert code == 0
    assert "ASK: false" in row(out, "data.answer")
    assert "AskResult(value=False)" in out

    code, out = run(capsys, encode(Ack(12, 3), UDP).hex())
    assert code == 0
    assert "0|0000000  ACK" in row(out, "header.type")
    assert "sequence number 3" in row(out, "data.seq")
    assert "Ack(" in out and "seq=3" in out


@pytest.mark.parametrize("hexstr,argv,status,path,rows", [
    ("02820100 00 00", [], "VERSION_NOT_SUPPORTED", "header.version", []),
    ("01990100 00", [], "INVALID_TRANSACTION_TYPE", "header.type", ["header.tid"]),
    ("01800100", [], "INVALID_MESSAGE_TYPE", "header.type", ["header.tid"]),
    ("01820100 01 69 0003753a61 0003753a62 03 00 00", [], "INVALID_DATA_FORMAT",
     "data.insert", ["data.insert[0].type", "data.insert[0].p.local"]),
    ("01820100 01 89 0003753a61 0003753a62 00 4000 00", [], "INVALID_DATA_FORMAT",
     "data.insert", ["data.insert[0].o.littype"]),
    ("01910100 01 0c", [], "INVALID_OPTION_TYPE", "options", ["options.count"]),
    ("01880100 00 00 01 05 01 02 0500 0501", [], "INVALID_OPTION_FORMAT", "options.FILTER",
     ["options[0].body[0][1].operand"]),
    ("0100010009000000", ["--tcp", "--from-sib"], "INVALID_DATA_FORMAT", "header.length",
     ["header.length"]),
    ("01040100 00", ["--from-sib", "--answers", "ASK"], "INVALID_DATA_FORMAT", "data",
     ["header.type"]),
])
def test_decode_invalid(capsys, hexstr, argv, status, path, rows):
    code, out = run(capsys, hexstr, *argv)
    assert code == 2
    assert f"DecodeError: status 0x{Status[status]:02x} {status} at {path}" in out
    for field in rows:  # the fields read before the error are still explained
        row(out, field)
    assert "grammar:" in out  # and the reference grammar rejects the bytes too


def test_decode_bad_arguments(capsys):
    assert main(["decode", "01 8"]) == 2
    assert "error:" in capsys.readouterr().out
    assert main(["decode", "01820100", "--from-sib", "--answers", "FOO"]) == 2
    assert "unknown transaction type 'FOO'" in capsys.readouterr().out
    assert main(["decode", "01820100", "--answers", "SELECT"]) == 2
    assert "--from-sib" in capsys.readouterr().err


def test_version_still_there(capsys):
    assert main(["version"]) == 0
    assert capsys.readouterr().out.strip()


# ---------------------------------------------------------------------------------------------
# explain(): rows cover every byte, in order, with no gaps or overlaps.

def _check_rows(buf: bytes, rows) -> None:
    pos = 0
    for offset, length, path, meaning in rows:
        assert offset == pos, (path, offset, pos)
        assert meaning and path and ".items" not in path
        pos = offset + length
    assert pos == len(buf)


SMALL = [c for c in CASES if len(c[1]) < 5000]


@pytest.mark.parametrize("name,buf,transport,direction,answers", SMALL, ids=[c[0] for c in SMALL])
def test_rows_cover_every_byte(name, buf, transport, direction, answers):
    rows = explain.explain(buf, transport, direction, answers)
    _check_rows(buf, rows)
    assert rows[0][2] == "header.version"
    text = explain.render(rows, buf)
    assert len(text.splitlines()) == len(rows) + 1


@pytest.mark.skipif(not VECTORS, reason="no golden vectors yet")
def test_rows_cover_every_vector():
    for path in VECTORS:
        v = _load(path)
        if "error" in v or len(v["hex"]) > 20_000:
            continue
        answers = v.get("answers")
        answers = Tx[answers] if isinstance(answers, str) else answers
        buf = bytes.fromhex(v["hex"])
        _check_rows(buf, explain.explain(buf, v["transport"], v["direction"], answers))


def test_explain_raises_for_invalid_bytes():
    from construct import ConstructError

    with pytest.raises(ConstructError):
        explain.explain(bytes.fromhex("01820100 01 08".replace(" ", "")), UDP, "kp_to_sib")
    partial = explain.explain_partial(bytes.fromhex("0182010001 08"), UDP, "kp_to_sib")
    assert [r[2] for r in partial.rows] == ["header.version", "header.type", "header.tid",
                                            "data.insert.count", "data.insert[0].type"]
    assert partial.failed_path == "data.insert[0]"
