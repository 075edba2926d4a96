"""`ksp decode`: prints a message's annotated field table (`ksp.reference.explain`), then the
decoded message (`ksp.codec`), and what the reference grammar thinks of the bytes."""
from __future__ import annotations

import sys
from typing import TextIO

from construct import ConstructError

from ksp.codec import TCP, UDP, decode_kp_message, decode_sib_message
from ksp.codes import Tx
from ksp.errors import DecodeError
from ksp.reference import schema
from ksp.reference.explain import Explained, explain_partial, format_message, render


def parse_answers(text: str | None) -> Tx | None:
    """A transaction type by name (`SELECT`, `select_persistent`) or code (`7`, `0x0d`)."""
    if text is None:
        return None
    try:
        return Tx[text.strip().upper().replace("-", "_")]
    except KeyError:
        pass
    try:
        return Tx(int(text, 0))
    except ValueError:
        raise ValueError(f"unknown transaction type {text!r}") from None


def _hex(text: str) -> bytes:
    """The bytes of a message given in hexadecimal (white space between digits allowed); a
    ValueError that names the first wrong character, or the odd count."""
    digits = "".join(text.split())
    for i, c in enumerate(digits):
        if c not in "0123456789abcdefABCDEF":
            raise ValueError(f"{digits[:24]!r}{'…' if len(digits) > 24 else ''}: {c!r} (digit "
                             f"{i + 1}) is not hexadecimal: a message is given as hex digits, "
                             "two a byte")
    if len(digits) % 2:
        raise ValueError(f"{len(digits)} hex digits: a message is two a byte, an even number")
    return bytes.fromhex(digits)


def decode_command(hex_text: str, *, tcp: bool = False, from_sib: bool = False,
                   answers: str | None = None, out: TextIO | None = None) -> int:
    """`ksp decode`: the annotated field table, then the decoded message (`ksp.codec`).
    Returns the exit code: 0, or 2 for invalid input (the DecodeError is printed)."""
    out = out or sys.stdout
    try:
        buf = _hex(hex_text)
        answers_tx = parse_answers(answers)
    except ValueError as exc:
        print(f"error: {exc}", file=out)
        return 2
    transport = TCP if tcp else UDP
    direction = "sib_to_kp" if from_sib else "kp_to_sib"
    result = explain_partial(buf, transport, direction, answers_tx)
    title = "SIB → KP (RES or IND)" if from_sib else "KP → SIB (REQ or ACK)"
    print(f"{len(buf)} bytes, {transport.value.upper()}, {title}"
          + (f", answering {answers_tx.name}" if answers_tx is not None else ""), file=out)
    print(render(result.rows, buf), file=out)
    print(file=out)
    try:
        if from_sib:
            msg = decode_sib_message(buf, transport, answers_tx)
        else:
            msg = decode_kp_message(buf, transport)
    except DecodeError as exc:
        print(f"DecodeError: status {exc.status:#04x} {exc.status.name} at {exc.path or 'message'}",
              file=out)
        print(f"  {exc}", file=out)
        if result.error is None:
            print("note: the reference grammar (ksp.reference.schema) accepts these bytes",
                  file=out)
        else:
            print(f"  grammar: {_grammar_error(result)}", file=out)
        return 2
    print(format_message(msg), file=out)
    if result.error is not None:
        print(f"note: the reference grammar (ksp.reference.schema) rejects these bytes: "
              f"{_grammar_error(result)}", file=out)
    else:
        try:
            schema.to_model(result.container)
        except ConstructError as exc:
            print(f"note: the reference grammar (ksp.reference.schema) rejects these bytes: {exc}",
                  file=out)
    return 0


def _grammar_error(result: Explained) -> str:
    text = str(result.error)
    message = text.splitlines()[-1] if text else type(result.error).__name__
    where = f" at {result.failed_path}" if result.failed_path else ""
    return f"{type(result.error).__name__}{where}: {message}"
