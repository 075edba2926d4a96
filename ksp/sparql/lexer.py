"""SPARQL text → tokens: the tokenizer of the compiler (`ksp.sparql.lowering`),
and the unescaping of IRIs and strings.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import SparqlSyntaxError


# -- tokens --------------------------------------------------------------------------------

_PN_BASE = ("A-Za-z\u00C0-\u00D6\u00D8-\u00F6\u00F8-\u02FF\u0370-\u037D\u037F-\u1FFF"
            "\u200C-\u200D\u2070-\u218F\u2C00-\u2FEF\u3001-\uD7FF\uF900-\uFDCF\uFDF0-\uFFFD"
            "\U00010000-\U000EFFFF")
_PN_U = _PN_BASE + "_"
_PN = _PN_U + "\\-0-9\u00B7\u0300-\u036F\u203F-\u2040"
_PLX = r"%[0-9A-Fa-f]{2}|\\[_~.\-!$&'()*+,;=/?#@%]"
_PN_PREFIX = f"[{_PN_BASE}](?:[{_PN}.]*[{_PN}])?"
_PN_LOCAL = f"(?:[{_PN_U}:0-9]|{_PLX})(?:(?:[{_PN}.:]|{_PLX})*(?:[{_PN}:]|{_PLX}))?"
_VARNAME = f"[{_PN_U}0-9][{_PN_U}0-9\u00B7\u0300-\u036F\u203F-\u2040]*"
_ECHARS = {"t": "\t", "b": "\b", "n": "\n", "r": "\r", "f": "\f", '"': '"', "'": "'",
           "\\": "\\"}

_TOKEN = re.compile(
    r"""(?P<ws>(?:\s|\#[^\n\r]*)+)
    |(?P<iri><[^<>"{}|^`\\\x00-\x20]*>)
    |(?P<str>'''(?:(?:'|'')?(?:[^'\\]|\\.))*'''|\"\"\"(?:(?:"|"")?(?:[^"\\]|\\.))*\"\"\"
        |'(?:[^'\\\n\r]|\\.)*'|"(?:[^"\\\n\r]|\\.)*")
    |(?P<var>[?$]""" + _VARNAME + r""")
    |(?P<bnode>_:[""" + _PN_U + r"""0-9](?:[""" + _PN + r""".]*[""" + _PN + r"""])?)
    |(?P<pname>(?:""" + _PN_PREFIX + r""")?:(?:""" + _PN_LOCAL + r""")?)
    |(?P<lang>@[a-zA-Z]+(?:-[a-zA-Z0-9]+)*)
    |(?P<num>[0-9]+\.[0-9]*[eE][+-]?[0-9]+|\.[0-9]+[eE][+-]?[0-9]+|[0-9]+[eE][+-]?[0-9]+
        |[0-9]*\.[0-9]+|[0-9]+)
    |(?P<name>[A-Za-z_][A-Za-z0-9_]*)
    |(?P<op>\^\^|&&|\|\||!=|<=|>=|[{}()\[\];,.=<>!+\-*/^|?])""",
    re.VERBOSE)
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:")
_IRI_BAD = re.compile('[\x00-\x20<>"{}|^`\\\\]')
_UESCAPE = re.compile(r"\\u([0-9A-Fa-f]{4})|\\U([0-9A-Fa-f]{8})")


@dataclass(slots=True)
class _Tok:
    kind: str
    text: str
    pos: int
    spaced: bool  # whitespace (or the start) before it


# What codepoint escapes are not processed in: string literals, which unescape their own
# (`_string_value`), and comments. Outside them an escape may stand for any character of
# the query (SPARQL 1.1 Query §19.2: they are processed before parsing). IRIs are matched
# whole, so that a '#' in one does not start a comment.
_ESCAPE_SCAN = re.compile(
    r"""(?P<str>'''(?:(?:'|'')?(?:[^'\\]|\\.))*'''|\"\"\"(?:(?:"|"")?(?:[^"\\]|\\.))*\"\"\"
        |'(?:[^'\\\n\r]|\\.)*'|"(?:[^"\\\n\r]|\\.)*")
    |(?P<iri><[^<>"{}|^`\x00-\x20]*>)
    |(?P<comment>\#[^\n\r]*)
    |(?P<esc>\\u[0-9A-Fa-f]{4}|\\U[0-9A-Fa-f]{8})""", re.VERBOSE)


def unescape_codepoints(text: str) -> str:
    """`\\uXXXX` and `\\UXXXXXXXX` outside string literals and comments replaced by their
    characters (IRIs included), as SPARQL processes them before parsing."""
    if "\\u" not in text and "\\U" not in text:
        return text

    def one(m: re.Match) -> str:
        if m.lastgroup in ("str", "comment"):
            return m.group()
        try:
            return _unescape_uchar(m.group())
        except ValueError as e:
            raise _syntax(text, m.start(), str(e)) from None

    return _ESCAPE_SCAN.sub(one, text)


def _tokens(text: str) -> list[_Tok]:
    out: list[_Tok] = []
    pos, spaced = 0, True
    n = len(text)
    while pos < n:
        m = _TOKEN.match(text, pos)
        if m is None:
            raise _syntax(text, pos, f"unexpected character {text[pos]!r}")
        kind = m.lastgroup
        if kind == "ws":
            spaced = True
        else:
            out.append(_Tok(kind, m.group(), pos, spaced))
            spaced = False
        pos = m.end()
    out.append(_Tok("eof", "", n, True))
    return out


def _syntax(text: str, pos: int, message: str) -> SparqlSyntaxError:
    line = text.count("\n", 0, pos) + 1
    column = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return SparqlSyntaxError(message, line, column)


def _unescape_uchar(s: str) -> str:
    def one(m: re.Match) -> str:
        code = int(m.group(1) or m.group(2), 16)
        if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
            raise ValueError(f"\\u escape of an invalid code point {code:#x}")
        return chr(code)
    return _UESCAPE.sub(one, s)


def _string_value(raw: str) -> str:
    body = raw[3:-3] if raw[:3] in ("'''", '"""') else raw[1:-1]
    out, i, n = [], 0, len(body)
    while i < n:
        c = body[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        nxt = body[i + 1] if i + 1 < n else ""
        if nxt in _ECHARS:
            out.append(_ECHARS[nxt])
            i += 2
        elif nxt in "uU":
            width = 4 if nxt == "u" else 8
            esc = body[i:i + 2 + width]
            if len(esc) != 2 + width:
                raise ValueError(f"short escape {esc!r}")
            out.append(_unescape_uchar(esc))
            if out[-1] == esc:
                raise ValueError(f"bad escape {esc!r}")
            i += 2 + width
        else:
            raise ValueError(f"unknown escape \\{nxt}")
    return "".join(out)
