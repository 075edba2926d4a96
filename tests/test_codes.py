"""The code registry (ksp.codes) says what the normative spec's tables say, read from the spec."""
from __future__ import annotations

import ast
import pathlib
import re

import pytest

from ksp.codes import (
    OPTION_APPLIES, RES_EPOCH, RESERVED_WORDS, LiteralType, Member, Op, Opt, Status, Tx,
    res_status,
)

ROOT = pathlib.Path(__file__).resolve().parents[1]
SPEC = (ROOT / "docs" / "wire-format.md").read_text(encoding="utf-8")


def spec_table(heading: str) -> list[list[str]]:
    """Rows (cells stripped) of the first Markdown table after `heading` in the spec."""
    start = SPEC.index(heading)
    rows = []
    for line in SPEC[start:].splitlines()[1:]:
        if line.startswith("|"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            if not set("".join(cells)) <= set("-: "):
                rows.append(cells)
        elif rows:
            break
    return rows[1:]  # without the header row


def codes_named(rows, name_col: int) -> dict[int, str]:
    out = {}
    for row in rows:
        m = re.fullmatch(r"0x([0-9a-f]{2})", row[0])
        if m:
            out[int(m.group(1), 16)] = row[name_col]
    return out


def norm(name: str) -> str:
    name = re.sub(r"\*\*\[ext\]\*\*|\(.*?\)", "", name).replace("ERROR:", "")
    return re.sub(r"[^A-Z0-9]+", "_", name.upper()).strip("_")


def test_transaction_types_match_spec():
    spec = codes_named(spec_table("### 3.1 Transaction types"), 1)
    spec.pop(0x00)  # the ACK row
    assert {code: norm(n) for code, n in spec.items()} == {t.value: t.name for t in Tx}


def test_the_res_epoch_bit_matches_spec():
    """Table 3.2's ranges: reserved statuses up to the bit a UDP RES names its epoch with."""
    ranges = [row[0] for row in spec_table("### 3.2 Status codes") if "–" in row[0]]
    assert ranges == [f"{max(Status) + 1:#04x}–{RES_EPOCH - 1:#04x}", f"{RES_EPOCH:#04x}–0x7f"]


@pytest.mark.parametrize("status", [Status.OK, Status.LIMIT_EXCEEDED, Status.UNKNOWN_TRANSACTION])
@pytest.mark.parametrize("epoch", [None, 1, 2**32 - 1])
def test_res_status_reads_a_res_type_byte_with_or_without_its_epoch(status, epoch):
    """What the tools that read only a RES's header take for its status: the codec's own
    status, also when the RES names its request's epoch (bit 6, §2.1)."""
    from ksp.codec import UDP, decode_sib_message, encode
    from ksp.model import Response

    data = encode(Response(7, status, epoch=epoch), UDP)
    assert bool(data[1] & RES_EPOCH) == (epoch is not None)
    assert res_status(data[1]) == decode_sib_message(data, UDP).status == status


def test_status_codes_match_spec():
    spec = codes_named(spec_table("### 3.2 Status codes"), 1)
    aliases = {"KSP_VERSION_NOT_SUPPORTED": "VERSION_NOT_SUPPORTED",
               "INVALID_DATA_FIELD_FORMAT": "INVALID_DATA_FORMAT",
               "SIB_INTERNAL_ERROR": "INTERNAL_ERROR"}
    assert {c: aliases.get(norm(n), norm(n)) for c, n in spec.items()} == {
        s.value: s.name for s in Status}


def test_member_types_match_spec():
    spec = codes_named(spec_table("### 3.3 Triple member types"), 1)
    aliases = {"RESERVED_WORD": "RESERVED", "BLANK_NODE": "BNODE"}
    assert {c: aliases.get(norm(n), norm(n)) for c, n in spec.items()} == {
        m.value: m.name for m in Member}


def test_literal_types_match_spec():
    spec = codes_named(spec_table("### 3.4 Literal types"), 1)
    expected = {0: "XSD_STRING", 1: "XSD_INTEGER", 2: "XSD_FLOAT", 3: "XSD_DATETIME",
                4: "XSD_BOOLEAN", 5: "LANGUAGE_TAGGED_STRING",
                6: "LITERAL_OF_ANY_OTHER_DATATYPE", 7: "XSD_DOUBLE"}
    assert {c: norm(n) for c, n in spec.items()} == expected
    assert sorted(spec) == [t.value for t in LiteralType]


def test_reserved_words_match_spec():
    rows = spec_table("### 3.5 Reserved words")
    spec = {int(r[0], 16): r[2].strip("`").split("`")[0] for r in rows if r[0].startswith("0x") and "–" not in r[0]}
    assert spec == dict(enumerate(RESERVED_WORDS))


def test_option_types_and_applicability_match_spec():
    rows = spec_table("### 7.1 Option types and where they apply")
    spec = codes_named(rows, 1)
    assert {c: norm(n) for c, n in spec.items()} == {o.value: o.name for o in Opt}
    applies = {int(r[0], 16): r[3] for r in rows if re.fullmatch(r"0x0[0-9a-f]", r[0])}
    for opt in Opt:
        text = applies[opt.value]
        allowed = OPTION_APPLIES[opt]
        if text == "every REQ":
            assert allowed == frozenset(Tx)
        elif text == "every REQ with a Data field":
            assert allowed == frozenset(Tx) - {Tx.TERMINATE, Tx.RESET}
        elif text.startswith("every REQ but "):
            assert allowed == frozenset(Tx) - {Tx[text.removeprefix("every REQ but ")]}
        else:
            named = set()
            for word, group in (("queries", lambda t: t.is_query), ("pattern updates", lambda t: t.is_pattern_update)):
                if word in text:
                    named |= {t for t in Tx if group(t) and not t.persistent}
            for t in Tx:
                if not t.persistent and re.search(rf"\b{t.name.replace('_', ' ')}\b", text):
                    named.add(t)
            if "SELECT, CONSTRUCT" in text:
                named = {Tx.SELECT, Tx.CONSTRUCT}
            if "DELETE, INSERT, UPDATE" in text and "pattern updates" in text:
                named = {Tx.DELETE, Tx.INSERT, Tx.UPDATE}
            if "+ persistent" in text:
                named |= {Tx(t + 6) for t in named
                          if t.value + 6 in {int(x) for x in Tx} and Tx(t + 6).persistent}
            assert allowed == frozenset(named), opt.name


def test_token_types_match_spec():
    rows = spec_table("### 8.2 Token types")
    spec = {int(r[0], 16): (r[1], r[3]) for r in rows if re.fullmatch(r"0x[0-9a-f]{2}", r[0])}
    ops = {op.value: op for op in Op}
    for code, (name, arity) in spec.items():
        if code in ops:
            op = ops[code]
            fixed = f"n + {op.arity}" if op.arity else "n"
            assert arity == (fixed if op.variadic else str(op.arity)), op
            symbol = re.search(r"`([^`]+)`", name).group(1).replace("\\|", "|")
            assert symbol.split("(")[0] == op.symbol, op
        else:
            assert (arity == "push" and code in (0, 1, 2, 3, 4, 5, 6, 0x18)
                    or name.startswith("invalid")), hex(code)
    assert set(ops) <= set(spec)


def test_protocol_core_does_no_io():
    """ksp/ is sans-I/O: no sockets, no asyncio, no clock."""
    forbidden = {"socket", "asyncio", "time", "selectors", "threading"}
    for path in (ROOT / "ksp").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [(node.module or "").split(".")[0]]
            assert not forbidden & set(names), f"{path.name} imports {forbidden & set(names)}"


@pytest.mark.parametrize("tx", list(Tx))
def test_persistent_forms_pair_with_their_base(tx):
    if tx.persistent:
        assert tx.base.name + "_PERSISTENT" == tx.name
    else:
        assert tx.base is tx
