"""The compact-form rule for literals (docs/wire-format.md §4.3).

A literal travels in a compact binary form only when decoding that form gives back the very
same lexical form; everything else uses the lossless extension forms. These functions decide
which, and produce the lexical forms decoders must give.
"""
from __future__ import annotations

import math
import re
import struct
from fractions import Fraction

from .codes import LiteralType
from .terms import (
    RDF_LANGSTRING, XSD_BOOLEAN, XSD_DATETIME, XSD_DOUBLE, XSD_FLOAT, XSD_INTEGER, XSD_STRING,
    Literal, double_lexical,
)

_F32 = struct.Struct("<f")
_DATETIME = re.compile(
    r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]"
)
_LANG = re.compile(r"[A-Za-z0-9-]{1,255}")
I32_MIN, I32_MAX = -(2**31), 2**31 - 1

_float_lex_cache: dict[float, str] = {}


def float_lexical(value: float) -> str:
    """Lexical form of an xsd:float: the shortest decimal that reads back as the same binary32."""
    cached = _float_lex_cache.get(value) if value else None  # 0.0 == -0.0: never cached
    if cached is not None:
        return cached
    if not math.isfinite(value):
        text = double_lexical(value)
    else:
        text = _shortest_f32(_F32.unpack(_F32.pack(value))[0])
    if len(_float_lex_cache) >= 4096:
        _float_lex_cache.clear()
    _float_lex_cache[value] = text
    return text


def _shortest_f32(f32: float) -> str:
    """The fewest digits that read back as `f32`; among equally short ones the closest (a tie:
    the even last digit).

    Rounding to n digits is not enough: at a power of two the interval of values that read
    back is lopsided, and the nearest n-digit decimal may fall outside it while its neighbour
    falls inside. So both neighbours of the rounded mantissa are tried too.
    """
    for digits in range(1, 10):
        mantissa, _, exp = f"{f32:.{digits - 1}e}".partition("e")
        sign = "-" if mantissa.startswith("-") else ""
        m = int(mantissa.lstrip("-").replace(".", ""))
        fits = []
        for cand in (m, m - 1, m + 1):
            if cand <= 0:
                continue
            decimal = f"{sign}{cand}e{int(exp) - digits + 1}"
            value = float(decimal)
            try:
                if _F32.unpack(_F32.pack(value))[0] == f32:
                    fits.append((abs(Fraction(decimal) - Fraction(f32)), cand % 2, value))
            except OverflowError:  # rounded past binary32's largest value
                continue
        if fits:  # the closest; of two equally close (a tie), the even last digit
            return repr(min(fits)[2])
    return repr(f32)


def is_datetime19(lexical: str) -> bool:
    return len(lexical) == 19 and _DATETIME.fullmatch(lexical) is not None


def is_lang_tag(tag: str) -> bool:
    return _LANG.fullmatch(tag) is not None


def compact_type(lit: Literal) -> LiteralType:
    """The literal type (table 3.4) the canonical encoding uses for `lit`."""
    if lit.lang is not None:
        return LiteralType.LANG_STRING
    dt, lex = lit.datatype, lit.lexical
    if dt == XSD_STRING:
        return LiteralType.STRING
    if dt == XSD_INTEGER:
        if _canonical_int(lex):
            return LiteralType.INTEGER
    elif dt == XSD_FLOAT:
        value = _parse_float(lex)
        if value is not None:
            try:
                if float_lexical(value) == lex:
                    return LiteralType.FLOAT
            except OverflowError:  # a double beyond binary32's range
                pass
    elif dt == XSD_DATETIME:
        if is_datetime19(lex):
            return LiteralType.DATETIME
    elif dt == XSD_BOOLEAN:
        if lex in ("true", "false"):
            return LiteralType.BOOLEAN
    elif dt == XSD_DOUBLE:
        value = _parse_float(lex)
        if value is not None and double_lexical(value) == lex:
            return LiteralType.DOUBLE
    elif dt == RDF_LANGSTRING:
        raise ValueError("an rdf:langString literal needs a language tag")
    return LiteralType.TYPED


def _canonical_int(lex: str) -> bool:
    if not lex or not (lex.isascii() and (lex.isdigit() or (lex[0] == "-" and lex[1:].isdigit()))):
        return False
    value = int(lex)
    return str(value) == lex and I32_MIN <= value <= I32_MAX


def _parse_float(lex: str) -> float | None:
    if not lex.isascii() or "_" in lex:
        return None
    try:
        return float(lex)
    except ValueError:
        return None
