"""The less used REQ options, loaded by `codec.request` only when a request has one: DELETE /
INSERT / QUERY GRAPH (graph names), FILTER (RPN expressions, §8) and SOLUTION MODIFIER (§7.3).
Keeping them out of `codec` keeps a board's heap small when it only sends data."""
import struct

from .codec import _count, _literal, _uri


def _expression(out, expr, prefixes):
    """FILTER expression: a list of tokens, each a term or an operator code (int 0x07-0x17,
    given as `Op(code)` so it differs from a variable)."""
    _count(out, expr)
    for tok in expr:
        if isinstance(tok, Op):
            out.append(tok.code)
        elif isinstance(tok, int):
            out.append(5)
            out.append(tok)
        elif isinstance(tok, str):
            out.append(6)
            _uri(out, tok, prefixes)
        else:
            _literal(out, tok, prefixes, True)


class Op:
    """An operator token of a FILTER expression (§8.2 code)."""


    def __init__(self, code):
        self.code = code


def put(out, code, value, prefixes):
    """The body of option `code` (1-3, 5 or 6)."""
    if code < 4:
        _count(out, value)
        for g in value:
            _uri(out, g, prefixes)
    elif code == 5:
        _count(out, value)
        for expr in value:
            _expression(out, expr, prefixes)
    else:
        order, var, limit, offset, distinct = value
        out.append(order | (limit is not None) << 2 | (offset is not None) << 3
                   | bool(distinct) << 4)
        if order:
            out.append(var)
        for n in (limit, offset):
            if n is not None:
                out.extend(struct.pack("<H", n))
