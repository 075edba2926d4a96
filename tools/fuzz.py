"""Fuzzing the decoders and the SPARQL compiler: the targets, the seed corpus and a mutator.

Two targets, each a function of one input (bytes) that returns the findings it made:

- `check_decode`: the input's first byte chooses the case (bit 0: what a KP receives, else what
  a SIB receives; bit 1: TCP, else UDP; bit 2: over TCP, write the real length into the header;
  bits 3-7: the transaction type a RES answers, `ANSWERS`), the rest is the message. The C
  decoder (`ksp.codec.c_decode_*`), the pure-Python decoder and the construct reference
  (`ksp.reference.schema`) must agree: the same accept or reject, the same decoded message
  (a RES's status in it), and where the reference's failing field names the status a SIB
  answers with (`reference_status`), Python's status. A REQ rejected over one framing is
  rejected with the same status over the other (`framing_twin`).
- `check_sparql`: any text (UTF-8, bad bytes replaced) compiles to a typed `SparqlError` or to a
  request that encodes, renders, and compiles back from its rendering to the same request.

A decoder that raises anything but its own error is a finding ("crash"), not a stop: a run
counts its findings.

`python -m tools.fuzz` runs `mutate_inputs` through a target in this process (the suite's short
run; under the C module built with the sanitizers: `python -m tools.sanitized FILE tools.fuzz`);
`ksp bench fuzz` (tools/bench/fuzz.py) runs the coverage-guided one.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import random
import sys
import time
from collections import Counter
from typing import Callable, Iterable, Iterator

from construct import ConstructError

from ksp import codec
from ksp.codes import Status, Tx
from ksp.errors import DecodeError, SparqlError
from ksp.model import Request, Response

ROOT = pathlib.Path(__file__).resolve().parent.parent
VECTORS = ROOT / "tests" / "vectors"
CORPUS = ROOT / "tests" / "fuzz_corpus"

KP_TO_SIB, SIB_TO_KP = "kp_to_sib", "sib_to_kp"
#: What a RES answers, by bits 3-7 of the selector byte (modulo its length).
ANSWERS: tuple[Tx | None, ...] = (None, *Tx)
_FIX_LENGTH = 4


@dataclasses.dataclass(frozen=True)
class Case:
    """One decoding: the message bytes, its framing and direction, what a RES answers."""
    buf: bytes
    transport: codec.Transport
    direction: str
    answers: Tx | None = None

    def input(self) -> bytes:
        """The fuzz input that gives this case (`case_of` inverts it)."""
        selector = ((self.direction == SIB_TO_KP) | (self.transport is codec.TCP) << 1
                    | ANSWERS.index(self.answers) << 3)
        return bytes((selector,)) + self.buf


def case_of(data: bytes) -> Case:
    selector, buf = (data[0], data[1:]) if data else (0, b"")
    transport = codec.TCP if selector & 2 else codec.UDP
    if transport is codec.TCP and selector & _FIX_LENGTH and len(buf) >= 8:
        buf = buf[:4] + len(buf).to_bytes(4, "little") + buf[8:]
    if selector & 1:
        return Case(buf, transport, SIB_TO_KP, ANSWERS[(selector >> 3) % len(ANSWERS)])
    return Case(buf, transport, KP_TO_SIB)


@dataclasses.dataclass(frozen=True)
class Finding:
    """A disagreement or a crash: `kind` (accept, value, status, crash), what differs, and the
    input that shows it."""
    target: str
    kind: str
    detail: str
    data: bytes

    def signature(self) -> tuple[str, str, str]:
        """What groups findings of one cause: target, kind and the detail's first line."""
        return self.target, self.kind, self.detail.splitlines()[0][:160]

    def to_json(self) -> dict:
        return {"target": self.target, "kind": self.kind, "detail": self.detail,
                "hex": self.data.hex()}


# ---------------------------------------------------------------------------------------------
# The decoders


def python_decode(case: Case):
    """The pure-Python decoder's message, or its DecodeError."""
    with codec.pure_python():
        try:
            if case.direction == KP_TO_SIB:
                return codec.decode_kp_message(case.buf, case.transport)
            return codec.decode_sib_message(case.buf, case.transport, case.answers)
        except DecodeError as exc:
            return exc


def c_decode(case: Case):
    """The C decoder's message, or None where it declines."""
    if case.direction == KP_TO_SIB:
        return codec.c_decode_kp_message(case.buf, case.transport)
    return codec.c_decode_sib_message(case.buf, case.transport, case.answers)


def reference_decode(case: Case):
    """The construct reference's message, or its ConstructError."""
    from ksp.reference import schema

    try:
        if case.direction == KP_TO_SIB:
            return schema.to_model(schema.parse_request(case.buf, case.transport))
        return schema.to_model(schema.parse_response(case.buf, case.transport, case.answers))
    except ConstructError as exc:
        return exc


def reference_status(case: Case, exc: ConstructError) -> Status | None:
    """The status a SIB answers a REQ with, from the field the reference grammar failed in (its
    construct path): data 0x04, options 0x06, an unknown or inapplicable option code 0x05.
    None for the header (the grammar reads it in another order than a SIB checks it) and where
    the path does not say (trailing bytes, to_model's resolution checks)."""
    from construct import StreamError

    path = (getattr(exc, "path", None) or "").replace("(parsing) -> ", "").split(" -> ")
    if case.direction != KP_TO_SIB or path[0] not in ("data", "options"):
        return None
    if path[0] == "data":
        if "transaction type" in str(exc):
            return None  # the type byte, read as the data's switch
        return Status.INVALID_DATA_FORMAT
    if not isinstance(exc, StreamError) and path in (["options", "items", "option"],
                                                     ["options", "items"]):
        return Status.INVALID_OPTION_TYPE  # the code's validator, then its Check(applies)
    return Status.INVALID_OPTION_FORMAT


def framing_twin(case: Case) -> Case | None:
    """The same REQ over the other transport (header rewritten), for a REQ whose header
    decodes: the status of a bad body does not depend on its framing."""
    if case.direction != KP_TO_SIB:
        return None
    size = 8 if case.transport is codec.TCP else 4
    if len(case.buf) < size or not case.buf[1] & 0x7F:  # no header, or an ACK (UDP only)
        return None
    if case.transport is codec.TCP:
        return Case(case.buf[:4] + case.buf[8:], codec.UDP, KP_TO_SIB)
    body = case.buf[4:]
    return Case(case.buf[:4] + (len(body) + 8).to_bytes(4, "little") + body, codec.TCP,
                KP_TO_SIB)


def _call(decode: Callable[[Case], object], case: Case):
    try:
        return decode(case), None
    except Exception as exc:  # noqa: BLE001 - a decoder's unexpected exception is the finding
        return None, f"{decode.__name__} raised {type(exc).__name__}: {exc}"


def _differences(a, b, path: str = "message") -> str | None:
    """Where two decoded messages differ, types included (== alone lets IRI pass for str)."""
    if type(a) is not type(b):
        return f"{path}: {type(a).__name__} vs {type(b).__name__}"
    if isinstance(a, tuple):
        if len(a) != len(b):
            return f"{path}: {len(a)} vs {len(b)} items"
        names = getattr(type(a), "_fields", None) or range(len(a))
        for name, x, y in zip(names, a, b):
            found = _differences(x, y, f"{path}.{name}")
            if found:
                return found
        return None
    if dataclasses.is_dataclass(a):
        for f in dataclasses.fields(a):
            found = _differences(getattr(a, f.name), getattr(b, f.name), f"{path}.{f.name}")
            if found:
                return found
        return None
    return None if a == b else f"{path}: {a!r} != {b!r}"


#: Python's reasons whose status depends on which of two errors a decoder reports first (wire
#: format 3.2's passes: a prefix index beyond the list in the late pass, a repeated option where
#: it repeats): a disagreement of these is reported apart, as error precedence, and counts as
#: one like any other.
PRECEDENCE_REASONS = ("beyond the", "appears twice")


def _status_kind(py: DecodeError) -> str:
    """"precedence" for a status that stems from the order of two errors (see
    `PRECEDENCE_REASONS`), else "status"."""
    return "precedence" if any(r in str(py) for r in PRECEDENCE_REASONS) else "status"


def check_decode(data: bytes, *, reference: bool = True, c: bool = True) -> list[Finding]:
    """The differential of one input (see the module docstring); `reference=False` leaves the
    construct reference out (the sanitized run, which is about the C module), `c=False` the C
    decoder (a build without it)."""
    case = case_of(data)
    found: list[Finding] = []

    def finding(kind: str, detail: str) -> None:
        found.append(Finding("decode", kind, detail, data))

    py, crash = _call(python_decode, case)
    if crash:
        finding("crash", crash)
        return found
    answers = {}
    if c:
        got, crash = _call(c_decode, case)
        if crash:
            finding("crash", crash)
        elif got is not None or not isinstance(py, DecodeError):
            answers["C"] = got
    if reference:
        got, crash = _call(reference_decode, case)
        if crash:
            finding("crash", crash)
        else:
            answers["reference"] = got
    py_accepts = not isinstance(py, DecodeError)
    for who, got in answers.items():
        accepts = got is not None and not isinstance(got, ConstructError)
        if accepts != py_accepts:
            finding("accept", f"{who} {'accepts' if accepts else 'rejects'}, Python "
                              f"{'accepts' if py_accepts else 'rejects'}: "
                              f"{py if not py_accepts else got}")
        elif accepts:
            # C's objects are Python's, type for type; the reference's compare equal
            differs = (_differences(got, py) if who == "C" else
                       None if got == py else _differences(got, py) or "values differ")
            if differs:
                finding("value", f"{who} vs Python: {differs}")
        elif who == "reference" and not py.path.startswith("header") and not (
                py.path.startswith("data") and (got.path or "").startswith("(parsing) -> options")):
            # (Python's data error that the grammar let by is one of the checks the reference
            # leaves to to_model, after the options: no status to compare)
            want = reference_status(case, got)
            if want is not None and want != py.status:
                finding(_status_kind(py), f"reference {want.name} (at {got.path}), Python "
                                  f"{py.status.name} ({py})")
    if not py_accepts and not py.path.startswith("header"):
        twin = framing_twin(case)
        if twin is not None:
            other = python_decode(twin)
            status = getattr(other, "status", None)
            if status != py.status:
                finding(_status_kind(py), f"{case.transport.value} {py.status.name}, "
                                  f"{twin.transport.value} {status and status.name}: {py}")
    return found


# ---------------------------------------------------------------------------------------------
# The SPARQL compiler


def check_sparql(data: bytes) -> list[Finding]:
    """Typed error, or a request that encodes, renders and compiles back to itself."""
    from ksp.sparql import compile, render

    text = data.decode("utf-8", "replace")

    def finding(kind: str, detail: str) -> list[Finding]:
        return [Finding("sparql", kind, detail, data)]

    try:
        req = compile(text, every_graph=True)
    except SparqlError:
        return []
    except Exception as exc:  # noqa: BLE001
        return finding("crash", f"compile raised {type(exc).__name__}: {exc}")
    try:
        codec.encode(req)
        rendered = render(req)
        back = compile(rendered, persistent=req.tx.persistent, every_graph=True)
    except Exception as exc:  # noqa: BLE001 - compiled, so it must encode, render and compile
        return finding("crash", f"{type(exc).__name__} after compile: {exc}")
    back, req = _comparable(back), _comparable(req)
    if back != req:  # == as the project compares requests: a datatype IRI equals its str
        differs = _differences(back, req) or "values differ"
        return finding("value", f"compile(render(r)) != r: {differs}\n{rendered}")
    return []


def _comparable(req: Request) -> Request:
    """What a rendering keeps: not the prefix entries (the encoder's business), nor a graph
    option of an empty DELETE or INSERT (`GRAPH <g> {}` writes nothing anywhere)."""
    o = req.options
    return req._replace(options=o._replace(
        prefixes=None, delete_graphs=o.delete_graphs if req.delete else None,
        insert_graphs=o.insert_graphs if req.insert else None))


TARGETS: dict[str, Callable[..., list[Finding]]] = {"decode": check_decode,
                                                    "sparql": check_sparql}


# ---------------------------------------------------------------------------------------------
# Seeds and mutations


def vector_cases() -> list[Case]:
    """Every golden vector (tests/vectors/*.json) as it is decoded."""
    cases = []
    for path in sorted(VECTORS.glob("*.json")):
        v = json.loads(path.read_text(encoding="utf-8"))
        answers = Tx[v["answers"]] if "answers" in v else None
        cases.append(Case(bytes.fromhex(v["hex"]), codec.Transport(v["transport"]),
                          v["direction"], answers))
    return cases


def seeds(target: str) -> list[bytes]:
    """The seed corpus: for `decode` every golden vector, then the kept inputs of
    tests/fuzz_corpus/decode/; for `sparql` tests/fuzz_corpus/sparql/."""
    kept = sorted((CORPUS / target).glob("*"))
    found = [p.read_bytes() for p in kept if p.is_file() and p.name != "README.md"]
    if target == "decode":
        return [case.input() for case in vector_cases()] + found
    return found


_INTERESTING = (0x00, 0x01, 0x7F, 0x80, 0xFF, 0x3F, 0x40, 0x0F, 0x10, 0x20)


def mutate(data: bytes, rng: random.Random, others: list[bytes]) -> bytes:
    """One to four random edits: flip a bit, set an interesting byte, insert, delete, cut,
    repeat a piece, splice another seed in."""
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(7)
        i = rng.randrange(len(buf) + 1)
        if op == 0 and buf and i < len(buf):
            buf[i] ^= 1 << rng.randrange(8)
        elif op == 1 and i < len(buf):
            buf[i] = rng.choice(_INTERESTING)
        elif op == 2:
            buf[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 4)))
        elif op == 3 and i < len(buf):
            del buf[i:i + rng.randint(1, 8)]
        elif op == 4:
            del buf[i:]
        elif op == 5 and buf:
            j = rng.randrange(len(buf))
            buf[i:i] = buf[j:j + rng.randint(1, 16)]
        elif op == 6 and others:
            other = rng.choice(others)
            j = rng.randrange(len(other) + 1)
            buf[i:] = other[j:]
    return bytes(buf)


def mutate_inputs(target: str, count: int, seed: int = 0) -> Iterator[bytes]:
    """The seeds themselves, then mutations of them (one in eight random bytes), `count` in
    all."""
    rng = random.Random(seed)
    pool = seeds(target) or [b""]
    for n in range(count):
        if n < len(pool):
            yield pool[n]
        elif rng.random() < 0.125:
            yield bytes(rng.randrange(256) for _ in range(rng.randint(0, 48)))
        else:
            yield mutate(rng.choice(pool), rng, pool)


@dataclasses.dataclass
class Tally:
    """What a run found: inputs, findings by signature (with one input each)."""
    inputs: int = 0
    findings: Counter = dataclasses.field(default_factory=Counter)
    examples: dict = dataclasses.field(default_factory=dict)

    def add(self, found: Iterable[Finding]) -> None:
        for f in found:
            key = f.signature()
            self.findings[key] += 1
            self.examples.setdefault(key, f)

    @property
    def disagreements(self) -> int:
        return sum(n for (_, kind, _), n in self.findings.items() if kind != "crash")

    @property
    def precedence(self) -> int:
        """Of the disagreements, those of error precedence (`PRECEDENCE_REASONS`)."""
        return sum(n for (_, kind, _), n in self.findings.items() if kind == "precedence")

    @property
    def crashes(self) -> int:
        return sum(n for (_, kind, _), n in self.findings.items() if kind == "crash")

    def to_json(self) -> dict:
        return {"inputs": self.inputs, "disagreements": self.disagreements,
                "precedence": self.precedence, "crashes": self.crashes,
                "findings": [dict(self.examples[key].to_json(), count=n)
                             for key, n in self.findings.most_common()]}


def run(target: str, inputs: Iterable[bytes], **options) -> Tally:
    check = TARGETS[target]
    tally = Tally()
    for data in inputs:
        tally.inputs += 1
        tally.add(check(data, **options))
    return tally


# ---------------------------------------------------------------------------------------------
# Command line: python -m tools.fuzz


def every_way(case: Case) -> list[bytes]:
    """A vector's input and the same bytes in every other case (framing, direction,
    answers): each decoder meets every message in every role."""
    out = []
    for transport in (codec.UDP, codec.TCP):
        for direction, answers in [(KP_TO_SIB, None)] + [(SIB_TO_KP, a) for a in ANSWERS]:
            out.append(dataclasses.replace(case, transport=transport, direction=direction,
                                           answers=answers).input())
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.fuzz", description=__doc__.split(
        "\n\n")[0])
    parser.add_argument("--target", choices=sorted(TARGETS), default="decode")
    parser.add_argument("--inputs", type=int, default=2000, help="mutated inputs (after seeds)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--vectors", action="store_true",
                        help="first every golden vector in every case (decode)")
    parser.add_argument("--no-reference", action="store_true",
                        help="leave the construct reference out (decode)")
    args = parser.parse_args(argv)
    options = {}
    if args.target == "decode":
        options = {"reference": not args.no_reference, "c": codec.speedups_enabled()}
    inputs: Iterable[bytes] = mutate_inputs(args.target, args.inputs, args.seed)
    if args.vectors and args.target == "decode":
        inputs = (*(i for case in vector_cases() for i in every_way(case)), *inputs)
    start = time.perf_counter()
    tally = run(args.target, inputs, **options)
    report = dict(tally.to_json(), target=args.target, seconds=time.perf_counter() - start,
                  c=codec.speedups_enabled())
    print(json.dumps(report))
    return 1 if tally.crashes or tally.disagreements > tally.precedence else 0


if __name__ == "__main__":
    sys.exit(main())
