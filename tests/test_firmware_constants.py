"""The firmware's copies of the protocol's constants (device_firmware/kspfw/*.py, which cannot
import ksp) against ksp/codes.py and ksp/terms.py: every module-level constant named after a
transaction type, a status, a namespace, a datatype, the reserved words or the RES epoch bit must
say what ksp says.
Read with ast, so a board module that only MicroPython can import is checked too."""
from __future__ import annotations

import ast
import pathlib

import pytest

from ksp import terms
from ksp.codes import OWL, RDF, RDFS, RES_EPOCH, RESERVED_WORDS, VERSION, XSD, Status, Tx

FIRMWARE = pathlib.Path(__file__).resolve().parent.parent / "device_firmware" / "kspfw"
#: Firmware names that abbreviate a ksp name.
ALIASES = {"BAD_DATA": Status.INVALID_DATA_FORMAT, "RESERVED": RESERVED_WORDS}
STRINGS = {"XSD": XSD, "RDF": RDF, "RDFS": RDFS, "OWL": OWL}


def constants(path: pathlib.Path) -> dict[str, object]:
    """Module-level `NAME = value` and `NAME = const(value)`, evaluated over the names bound
    before them (string concatenation, tuples); other assignments are skipped."""
    values: dict[str, object] = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)):
            continue
        expr = node.value
        if (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name)
                and expr.func.id == "const" and len(expr.args) == 1):
            expr = expr.args[0]
        try:
            code = compile(ast.Expression(expr), str(path), "eval")
            scope = {"__builtins__": {}}
            values[node.targets[0].id] = eval(code, scope, dict(values))  # noqa: S307
        except Exception:  # calls, attributes of imports: not a protocol constant
            continue
    return values


def expected(name: str):
    """What ksp says `name` is, or None when it names nothing of the protocol."""
    bare = name.lstrip("_")
    if bare in ALIASES:
        return ALIASES[bare]
    if bare in STRINGS:
        return STRINGS[bare]
    if bare == "VERSION":
        return VERSION
    if bare == "RES_EPOCH":
        return RES_EPOCH
    if bare in Tx.__members__:
        return Tx[bare]
    if bare in Status.__members__:
        return Status[bare]
    if bare.startswith(("XSD_", "RDF_")) and hasattr(terms, bare):
        return getattr(terms, bare)
    return None


MODULES = sorted(FIRMWARE.glob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_firmware_constants_match_ksp(path):
    for name, value in constants(path).items():
        want = expected(name)
        if want is not None:
            assert value == want, f"{path.name}: {name} = {value!r}, ksp says {want!r}"


def test_the_check_covers_the_firmware_codes():
    """The codec's transaction types, version, status, namespaces and reserved words are all
    found (else the test above would pass vacuously)."""
    found = {name for path in MODULES for name, value in constants(path).items()
             if expected(name) is not None}
    assert {"VERSION", "SELECT", "ASK", "TERMINATE", "RESET", "_CONSTRUCT", "_BAD_DATA",
            "RESERVED", "XSD", "RDF", "RDFS", "XSD_FLOAT", "RDF_LANGSTRING", "UPDATE_DATA",
            "SELECT_PERSISTENT", "ASK_PERSISTENT", "_RES_EPOCH"} <= found
