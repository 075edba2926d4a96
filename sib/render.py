"""Interim KSP-pattern → SPARQL text rendering, for evaluating patterns on pyoxigraph.

SWAP POINT: `ksp/to_sparql.py` (branch `sparql`) is the project's renderer; when it lands,
`render_select` becomes a thin call to `ksp.to_sparql.render` of a SELECT request built from the
pattern. Only this module would change: `sib.pattern` calls nothing else for SPARQL text.

Variables are `?v{k}`; a blank node in a pattern is a non-projected variable `?b{i}` (§4.4).
"""
from __future__ import annotations

from ksp.codes import Op
from ksp.model import Expression, Order, SolutionModifier
from ksp.terms import IRI, BNode, Literal, Triple, Var

from .oxterms import to_ox


class RenderError(ValueError):
    """The pattern or an expression cannot be expressed (malformed RPN, bad term position)."""


_BINARY = {Op.EQ, Op.NE, Op.LT, Op.GT, Op.LE, Op.GE, Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.OR,
           Op.AND}


class _Names:
    def __init__(self) -> None:
        self.bnodes: dict[str, str] = {}

    def term(self, t) -> str:
        if isinstance(t, Var):
            return f"?v{t.index}"
        if isinstance(t, BNode):
            name = self.bnodes.get(t.label)
            if name is None:
                name = self.bnodes[t.label] = f"?b{len(self.bnodes)}"
            return name
        if isinstance(t, (IRI, Literal)):
            return str(to_ox(t))
        raise RenderError(f"{t!r} is not a pattern term")


def expression(expr: Expression, names: _Names) -> str:
    """SPARQL text of an RPN expression (§8)."""
    stack: list[str] = []
    try:
        for tok in expr:
            if isinstance(tok, Op):
                n = tok.arity
                if len(stack) < n:
                    raise RenderError("RPN expression pops an empty stack")
                args = stack[len(stack) - n:]
                del stack[len(stack) - n:]
                if tok in _BINARY:
                    stack.append(f"({args[0]} {tok.symbol} {args[1]})")
                elif tok in (Op.REGEX, Op.REGEX_FLAGS):
                    stack.append(f"regex({', '.join(args)})")
                elif tok is Op.BOUND:
                    if not args[0].startswith("?"):
                        raise RenderError("bound() needs a variable")
                    stack.append(f"bound({args[0]})")
                else:
                    stack.append(f"({tok.symbol}{args[0]})")
            else:
                stack.append(names.term(tok))
    except TypeError as exc:
        raise RenderError(str(exc)) from None
    if len(stack) != 1:
        raise RenderError(f"RPN expression leaves {len(stack)} values")
    return stack[0]


def _group(graph, names: _Names) -> str:
    return " ".join(f"{names.term(t.s)} {names.term(t.p)} {names.term(t.o)} ." for t in graph)


def render_select(where: tuple[Triple, ...], optional: tuple[tuple[Triple, ...], ...],
                  filters: tuple[Expression, ...], binds, projection: tuple[int, ...],
                  modifier: SolutionModifier | None) -> str:
    """`SELECT <projection> WHERE { where OPTIONAL{..}* BIND* FILTER* } <modifiers>`."""
    names = _Names()
    body = [_group(where, names)]
    body += [f"OPTIONAL {{ {_group(g, names)} }}" for g in optional]
    body += [f"BIND({expression(b.expr, names)} AS ?v{b.var})" for b in binds]
    body += [f"FILTER({expression(f, names)})" for f in filters]
    head = " ".join(f"?v{k}" for k in projection) or "(1 AS ?_)"
    distinct = "DISTINCT " if modifier is not None and modifier.distinct else ""
    text = f"SELECT {distinct}{head} WHERE {{ {' '.join(body)} }}"
    if modifier is not None:
        if modifier.order is not Order.NONE and modifier.order_var is not None:
            word = "ASC" if modifier.order is Order.ASC else "DESC"
            text += f" ORDER BY {word}(?v{modifier.order_var})"
        if modifier.limit is not None:
            text += f" LIMIT {modifier.limit}"
        if modifier.offset is not None:
            text += f" OFFSET {modifier.offset}"
    return text
