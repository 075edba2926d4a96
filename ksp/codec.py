"""Bytes ⇄ messages: the hot codec's public face (docs/wire-format.md is the spec it implements).

Each call goes to the C module (`ksp/_speedups.c`) first and to the pure-Python encoder
(`ksp.encode`) or decoder (`ksp.decode`) for whatever it declines; `ksp.wire` holds what both
directions share.

Written with `struct` and plain indexing because construct's compiled parsers cost 2.4 µs for
a 4-byte header (measured), more than the budget of a whole message; `ksp.reference.schema`
declares the same layouts in construct, and the tests check both agree on every vector.

Decoding never raises anything but `DecodeError` (with the status a SIB answers with).
Encoding produces the canonical encoding (§10) and raises `EncodeError` for messages the wire
cannot carry.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator

from .codes import RESERVED_CODE, VERSION, Op, Tx
from .decode import (
    NO_OPTIONS_DECODED, _ALLOW_VARS, _OPTS_ALLOWED, _RESULT_FORM, _decode_kp_message,
    _decode_sib_message,
)
from .encode import _compact_cache, _encode, retag
from .errors import EncodeError
from .layout import OPTION_FIELDS
from .literals import float_lexical, is_lang_tag
from .model import (
    Ack, AskResult, Behind, Bind, Call, ConstructResult, Credentials, Message, Options, Order,
    Request, Response, SelectResult, SolutionModifier,
)
from .terms import (
    RDF_LANGSTRING, XSD_BOOLEAN, XSD_DATETIME, XSD_DOUBLE, XSD_FLOAT, XSD_INTEGER, XSD_STRING,
    COMPACT_DATATYPES, BNode, IRI, Literal, Triple, Var,
)
from .wire import (
    LAYOUT, TCP, UDP, Transport, _FIELD_KIND, _OP_BY_CODE, _RESERVED_IRIS, _STATUS_BY_CODE,
    _TX_BY_CODE, _is_tcp, header_size, peek_tid, tcp_frame_length,
)

__all__ = [
    "Transport", "UDP", "TCP", "LAYOUT", "encode", "decode_kp_message", "decode_sib_message",
    "tcp_frame_length", "header_size", "peek_tid", "retag", "use_speedups", "speedups_enabled",
    "pure_python", "set_interning", "c_decode_kp_message", "c_decode_sib_message",
]


def encode(msg: Message, transport: Transport = UDP, *, max_size: int | None = None) -> bytes:
    """The canonical bytes of `msg` over `transport`.

    For a Response, `max_size` is the requester's MAX RESPONSE SIZE: results are cut to fit
    (RC < TRC), or the answer becomes status RESPONSE_TOO_LARGE (§6.4).
    """
    if _speedups is not None:
        data = _speedups.encode(msg, _is_tcp(transport))
        # Within the limit, cutting changes nothing (§6.4): only an answer over it needs the
        # Python encoder's cut. Every RES over UDP has a limit, one datagram.
        if data is not None and (max_size is None or len(data) <= max_size
                                 or type(msg) is not Response):
            return data
    try:
        if type(transport) is not Transport:
            transport = Transport(transport)
        return _encode(msg, transport, max_size)
    except UnicodeEncodeError as exc:
        raise EncodeError(f"text that UTF-8 cannot carry: {exc}") from None


def decode_kp_message(buf: bytes, transport: Transport = UDP) -> Request | Ack:
    """Decode what a SIB receives: a REQ, or (over UDP) an ACK."""
    if _speedups is not None:
        msg = _speedups.decode_request(buf, _is_tcp(transport))
        if msg is not None:
            return msg
    return _decode_kp_message(buf, transport)


def decode_sib_message(buf: bytes, transport: Transport = UDP, answers: Tx | None = None) -> Response:
    """Decode what a KP receives: a RES or IND.

    `answers` is the transaction type of the request it answers: a RES header does not say,
    and the Data field's layout depends on it. Without it, a Data field is an error.
    """
    if _speedups is not None:
        form = -1 if answers is None else _RESULT_FORM[answers]
        msg = _speedups.decode_response(buf, _is_tcp(transport), -1 if form is None else form)
        if msg is not None:
            return msg
    return _decode_sib_message(buf, transport, answers)


# ---------------------------------------------------------------------------------------------
# The C decoder (ksp/_speedups.c): same answers for valid bytes, None for anything else, which
# the Python decoders above then answer. KSP_PURE_PYTHON=1 in the environment turns it off.


def c_decode_kp_message(buf: bytes, transport: Transport = UDP) -> Request | Ack | None:
    """The C decoder's own answer, without the Python fallback: the message `decode_kp_message`
    returns, or None where the C module declines (bytes it does not vouch for). For the tools
    that compare the two decoders (`ksp bench fuzz`); RuntimeError without the built module."""
    return _built().decode_request(buf, _is_tcp(transport))


def c_decode_sib_message(buf: bytes, transport: Transport = UDP,
                         answers: Tx | None = None) -> Response | None:
    """As `c_decode_kp_message`, for what a KP receives (`decode_sib_message`)."""
    form = -1 if answers is None else _RESULT_FORM[answers]
    return _built().decode_response(buf, _is_tcp(transport), -1 if form is None else form)


def _built():
    if _BUILT is None:
        raise RuntimeError("ksp._speedups is not built or KSP_PURE_PYTHON=1 turned it off")
    return _BUILT


def _load_speedups():
    if os.environ.get("KSP_PURE_PYTHON"):
        return None
    try:
        from . import _speedups as c
    except ImportError:
        return None
    built_with = getattr(c, "MODEL_FIELDS", None)
    if (built_with != (Request._fields, Response._fields, Ack._fields)
            or Options._fields != tuple(name for name, _ in OPTION_FIELDS.values())):
        raise ImportError("ksp._speedups does not match ksp.model")  # a test guards this
    layout, slots = [], []
    for tx in _TX_BY_CODE:
        names = LAYOUT[tx] if tx else ()
        layout += [_FIELD_KIND[n] for n in names] + [-1] * (4 - len(names))
        slots += [Request._fields.index(n) for n in names] + [-1] * (4 - len(names))
    c.setup({
        "IRI": IRI, "Literal": Literal, "Var": Var, "BNode": BNode, "Triple": Triple,
        "Request": Request, "Response": Response, "Ack": Ack, "Options": Options,
        "Behind": Behind,
        "SelectResult": SelectResult, "ConstructResult": ConstructResult,
        "AskResult": AskResult, "SolutionModifier": SolutionModifier, "Bind": Bind, "Call": Call,
        "Credentials": Credentials, "float_lexical": float_lexical, "is_lang_tag": is_lang_tag,
        "xsd_integer": XSD_INTEGER, "xsd_float": XSD_FLOAT, "xsd_datetime": XSD_DATETIME,
        "xsd_boolean": XSD_BOOLEAN, "xsd_double": XSD_DOUBLE,
        "reserved_code": RESERVED_CODE, "compact_cache": _compact_cache,
        "compact_datatypes": COMPACT_DATATYPES,
        "xsd_string": XSD_STRING, "rdf_langstring": RDF_LANGSTRING,
        "no_options": NO_OPTIONS_DECODED,
        "tx_by_code": tuple(_TX_BY_CODE), "status_by_code": tuple(_STATUS_BY_CODE),
        "op_by_code": tuple(_OP_BY_CODE.get(i) for i in range(256)),
        "op_arity": tuple(_OP_BY_CODE[i].arity if i in _OP_BY_CODE else 0 for i in range(256)),
        "op_variadic": tuple(int(i in _OP_BY_CODE and _OP_BY_CODE[i].variadic)
                             for i in range(256)),
        "order": tuple(Order), "vars": tuple(Var(i) for i in range(256)),
        "reserved": _RESERVED_IRIS,
        "layout": tuple(layout), "layout_slot": tuple(slots),
        "allow_vars": tuple(int(a) for a in _ALLOW_VARS),
        "opts_allowed": tuple(sum(1 << o for o in allowed) if allowed else 0
                              for allowed in _OPTS_ALLOWED),
        "scalars": (Op.BOUND, Tx.CREATE, VERSION),
    })
    return c


_BUILT = _load_speedups()
_speedups = _BUILT  # what encode/decode call: the C module, or None for pure Python


def speedups_enabled() -> bool:
    """Whether encoding and decoding go through the C module (built, loaded and switched on)."""
    return _speedups is not None


def use_speedups(on: bool = True) -> bool:
    """Switch the C module on or off for the whole process; returns the previous setting.

    Off, every message takes the pure-Python codec (the C module's oracle), as with
    KSP_PURE_PYTHON=1 but at run time: for benchmarks and tests that compare the two. On
    without a built module stays off. Not thread-safe: switch before sharing the codec.
    """
    global _speedups
    was = _speedups is not None
    _speedups = _BUILT if on else None
    return was


@contextmanager
def pure_python() -> Iterator[None]:
    """`with pure_python():` the pure-Python codec inside, the previous setting after."""
    was = use_speedups(False)
    try:
        yield
    finally:
        use_speedups(was)


def _no_interning_without_c(on: bool) -> bool:
    return False


#: `set_interning(on) -> previous`: turn the C decoder's term interning on or off (on by
#: default; False and no effect without the C module). Off, decoding costs what it costs for
#: bytes never seen before, which the codec benchmark's `ksp_decode_nointern` measures. The C
#: function itself when built, so that timing around a decode adds no Python call.
set_interning = _BUILT.set_interning if _BUILT is not None else _no_interning_without_c
