"""Tokens → a parse with variables by name: the recursive-descent parser of the subset.

Valid SPARQL outside the subset raises `UnsupportedSparql(feature)` where it occurs;
text that is not SPARQL raises `SparqlSyntaxError(line, column)`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

from ..codes import RDF, Op, Tx
from ..errors import SparqlSyntaxError, UnsupportedSparql
from ..model import Call, Order
from ..terms import (
    DEFAULT_GRAPH, IRI, RDF_LANGSTRING, XSD_BOOLEAN, XSD_DECIMAL, XSD_DOUBLE, XSD_INTEGER, BNode,
    Literal, Triple,
)
from .render import BNODE_VAR_PREFIX, label_from_name
from .lexer import (
    _IRI_BAD, _SCHEME, _Tok, _string_value, _syntax, _tokens, _unescape_uchar, unescape_codepoints,
)


# -- the parse result before variables get their indexes ----------------------------------

@dataclass(frozen=True, slots=True)
class _V:
    name: str


@dataclass
class _Parsed:
    tx: Tx | None = None
    projection: list[str] | None = None  # SELECT's names; None: SELECT *
    where: list = field(default_factory=list)
    optional: list[list] = field(default_factory=list)
    template: list | None = None
    delete: list | None = None
    insert: list | None = None
    delete_graphs: tuple | None = None
    insert_graphs: tuple | None = None
    query_graphs: list[IRI] = field(default_factory=list)
    filters: list[list] = field(default_factory=list)
    binds: list[tuple[str, list]] = field(default_factory=list)
    order: Order = Order.NONE
    order_var: str | None = None
    limit: int | None = None
    offset: int | None = None
    distinct: bool = False
    graphs: list[IRI] = field(default_factory=list)
    source: IRI | None = None
    target: IRI | None = None
    var_order: list[str] = field(default_factory=list)  # every variable, first appearance


_AGGREGATES = {"COUNT", "SUM", "MIN", "MAX", "AVG", "SAMPLE", "GROUP_CONCAT"}
_BUILTINS = {
    "STR", "LANG", "LANGMATCHES", "DATATYPE", "IRI", "URI", "BNODE", "RAND", "ABS", "CEIL",
    "FLOOR", "ROUND", "CONCAT", "STRLEN", "UCASE", "LCASE", "ENCODE_FOR_URI", "CONTAINS",
    "STRSTARTS", "STRENDS", "STRBEFORE", "STRAFTER", "YEAR", "MONTH", "DAY", "HOURS", "MINUTES",
    "SECONDS", "TIMEZONE", "TZ", "NOW", "UUID", "STRUUID", "MD5", "SHA1", "SHA256", "SHA384",
    "SHA512", "COALESCE", "IF", "STRLANG", "STRDT", "SAMETERM", "ISIRI", "ISURI", "ISBLANK",
    "ISLITERAL", "ISNUMERIC", "SUBSTR", "REPLACE", "LANGDIR", "STRLANGDIR", "HASLANG",
    "HASLANGDIR", "ISTRIPLE", "TRIPLE", "SUBJECT", "PREDICATE", "OBJECT",
}
#: SPARQL built-in name → {argument count: operator token} (table 8.2, 0x19 and up).
_FUNCTIONS: dict[str, dict[int, Op]] = {}
for _op in Op:
    if _op >= Op.STR and not _op.variadic:
        _FUNCTIONS.setdefault(_op.symbol.upper(), {})[_op.arity] = _op
_FUNCTIONS["URI"] = _FUNCTIONS["IRI"]
_FUNCTIONS["ISURI"] = _FUNCTIONS["ISIRI"]
_VARIADIC = {"CONCAT": Op.CONCAT, "COALESCE": Op.COALESCE}
_REL_OPS = {"=": Op.EQ, "!=": Op.NE, "<": Op.LT, ">": Op.GT, "<=": Op.LE, ">=": Op.GE}
_MAX_U16 = 0xFFFF


class _Parser:
    def __init__(self, text: str, prefixes: dict[str, str] | None):
        self.text = text = unescape_codepoints(text)
        self.toks = _tokens(text)
        self.i = 0
        self.prefixes: dict[str, str] = dict(prefixes or {})
        self.declared: list[str] = []
        self.declared_names: set[str] = set()
        self.anon = 0
        self.labels: list[str] = []  # blank node labels written as `_:x`, in order
        self.used_default_prefixes: list[str] = []
        self.p = _Parsed()
        self.seen_vars: dict[str, None] = {}

    # -- token helpers ---------------------------------------------------------------------

    @property
    def tok(self) -> _Tok:
        return self.toks[self.i]

    def peek(self, k: int = 1) -> _Tok:
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def error(self, message: str, tok: _Tok | None = None) -> SparqlSyntaxError:
        tok = tok or self.tok
        found = repr(tok.text) if tok.kind != "eof" else "the end of the text"
        return _syntax(self.text, tok.pos, f"{message}, found {found}")

    def is_kw(self, *words: str) -> bool:
        return self.tok.kind == "name" and self.tok.text.upper() in words

    def take(self, present: bool) -> bool:
        """Consume the current token when `present` (the result of an is_… test)."""
        self.i += present
        return present

    def accept_kw(self, word: str) -> bool:
        return self.take(self.is_kw(word))

    def expect_kw(self, word: str) -> None:
        if not self.accept_kw(word):
            raise self.error(f"expected {word}")

    def is_op(self, *ops: str) -> bool:
        return self.tok.kind == "op" and self.tok.text in ops

    def accept_op(self, op: str) -> bool:
        return self.take(self.is_op(op))

    def expect_op(self, op: str) -> None:
        if not self.accept_op(op):
            raise self.error(f"expected {op!r}")

    # SPARQL's '.' rule inside braces: a '.' ends a triple pattern (at most one each) or may
    # follow an OPTIONAL, FILTER, BIND or GRAPH block; two triple patterns need one between
    # them. `after` is what came last: "start", "triples", "dot" or "block".

    def dot(self, after: str) -> bool:
        """Consume a '.' where one may stand; False when there is none."""
        if not self.is_op("."):
            return False
        if after not in ("triples", "block"):
            raise self.error("expected a triple pattern or '}'")
        self.i += 1
        return True

    def triples_may_start(self, after: str) -> None:
        if after == "triples":
            raise self.error("expected '.' between triple patterns, or '}'")

    # -- prologue and terms ----------------------------------------------------------------

    def prologue(self) -> None:
        while True:
            if self.accept_kw("PREFIX"):
                tok = self.tok
                if tok.kind != "pname" or tok.text.count(":") != 1 or not tok.text.endswith(":"):
                    raise self.error("expected a prefix name such as 'ex:'")
                self.i += 1
                ns = self.iri_ref()
                self.prefixes[tok.text[:-1]] = ns
                self.declared_names.add(tok.text[:-1])
                self.declared.append(ns)
            elif self.is_kw("BASE"):
                raise UnsupportedSparql("BASE", "BASE is not supported: KSP IRIs are absolute")
            else:
                return

    def iri_ref(self) -> IRI:
        tok = self.tok
        if tok.kind != "iri":
            raise self.error("expected an <IRI>")
        self.i += 1
        try:
            value = _unescape_uchar(tok.text[1:-1])
        except ValueError as e:
            raise _syntax(self.text, tok.pos, str(e)) from None
        if _IRI_BAD.search(value):
            raise _syntax(self.text, tok.pos, "an \\u escape gives a character IRIs cannot hold")
        if not _SCHEME.match(value):
            raise UnsupportedSparql("relative IRIs", f"relative IRIs (<{value}>) are not "
                                                     "supported: KSP IRIs are absolute")
        return IRI(value)

    def iri(self) -> IRI:
        tok = self.tok
        if tok.kind == "iri":
            return self.iri_ref()
        if tok.kind == "pname":
            self.i += 1
            prefix, _, local = tok.text.partition(":")
            ns = self.prefixes.get(prefix)
            if ns is None:
                raise _syntax(self.text, tok.pos, f"undeclared prefix {prefix + ':'!r}")
            if prefix not in self.declared_names and ns not in self.used_default_prefixes:
                self.used_default_prefixes.append(ns)
            local = re.sub(r"\\(.)", r"\1", local)  # PN_LOCAL_ESC; %XX stays as written
            return IRI(ns + local)
        raise self.error("expected an IRI")

    def var(self) -> _V:
        tok = self.tok
        if tok.kind != "var":
            raise self.error("expected a variable")
        self.i += 1
        name = tok.text[1:]
        self.seen_vars.setdefault(name, None)
        return _V(name)

    def literal_or_none(self):
        """A literal at the cursor (string, number, boolean), or None."""
        tok = self.tok
        if tok.kind == "str":
            self.i += 1
            try:
                lex = _string_value(tok.text)
            except ValueError as e:
                raise _syntax(self.text, tok.pos, str(e)) from None
            if self.tok.kind == "lang":
                tag = self.tok.text[1:]
                if len(tag) > 255:  # KSP gives a tag a 1-byte length (§4.2)
                    raise UnsupportedSparql("language tags over 255 characters",
                                            f"a language tag of {len(tag)} characters; KSP "
                                            "carries at most 255")
                self.i += 1
                return Literal(lex, RDF_LANGSTRING, tag)
            if self.is_op("^^"):
                self.i += 1
                dt = self.iri()
                if dt == RDF_LANGSTRING:
                    raise _syntax(self.text, tok.pos, "rdf:langString needs a language tag")
                return Literal(lex, dt)
            return Literal(lex)
        if tok.kind == "num":
            self.i += 1
            return _number(tok.text)
        if self.is_op("+", "-") and self.peek().kind == "num" and not self.peek().spaced:
            sign = tok.text
            self.i += 2
            return _number(sign + self.toks[self.i - 1].text)
        if tok.kind == "name" and tok.text.lower() in ("true", "false"):
            self.i += 1
            return Literal(tok.text.lower(), XSD_BOOLEAN)
        return None

    def term(self, position: str, triples: list, ctx: "_Ctx"):
        """A subject or object term; blank-node property lists add their triples."""
        tok = self.tok
        if tok.kind == "var":
            if not ctx.vars_ok:
                raise self.error(f"variables are not allowed in {ctx.where}")
            if tok.text[1:].startswith(BNODE_VAR_PREFIX) and len(tok.text) > 1 + len(
                    BNODE_VAR_PREFIX):  # render's spelling of a blank node
                self.i += 1
                return self.bnode(label_from_name(tok.text[1 + len(BNODE_VAR_PREFIX):]), ctx, tok)
            return self.var()
        if tok.kind in ("iri", "pname"):
            return self.iri()
        if tok.kind == "bnode":
            self.i += 1
            node = self.bnode(label_from_name(tok.text[2:]), ctx, tok)
            self.labels.append(node.label)  # written `_:x`: scoped to one basic graph pattern
            return node
        if self.is_op("["):
            self.i += 1
            self.anon += 1
            node = self.bnode(f"_anon{self.anon}", ctx, tok)
            if not self.accept_op("]"):
                self.property_list(node, triples, ctx)
                self.expect_op("]")
            return node
        if self.is_op("("):
            raise UnsupportedSparql("RDF collections ( … )",
                                    "RDF collections ( … ) are not supported")
        lit = self.literal_or_none()
        if lit is not None:
            if position == "subject":
                raise UnsupportedSparql("literal subjects",
                                        "literal subjects are not supported: KSP triples "
                                        "cannot carry them (§3.3)")
            return lit
        raise self.error(f"expected an RDF term as {position}")

    def bnode(self, label: str, ctx: "_Ctx", tok: _Tok) -> BNode:
        if not ctx.bnodes_ok:
            raise _syntax(self.text, tok.pos, f"blank nodes are not allowed in {ctx.where}")
        return BNode(label)

    def verb(self, ctx: "_Ctx"):
        tok = self.tok
        if self.is_op("^", "!", "("):
            raise _path_error()
        if tok.kind == "name" and tok.text == "a":
            self.i += 1
            v = IRI(RDF + "type")
        elif tok.kind == "var":
            v = self.term("predicate", [], ctx)
        elif tok.kind in ("iri", "pname"):
            v = self.iri()
        else:
            raise self.error("expected a predicate (IRI, variable or 'a')")
        if self.is_op("/", "|", "*", "+", "?", "^"):
            raise _path_error()
        return v

    def property_list(self, subject, triples: list, ctx: "_Ctx") -> None:
        while True:
            pred = self.verb(ctx)
            while True:
                nested: list = []
                obj = self.term("object", nested, ctx)
                triples.append(Triple(subject, pred, obj))
                triples.extend(nested)
                if not self.accept_op(","):
                    break
            if not self.accept_op(";"):
                return
            while self.accept_op(";"):
                pass
            tok = self.tok
            if not (tok.kind in ("iri", "pname", "var") or (tok.kind == "name" and tok.text == "a")
                    or self.is_op("^", "!", "(")):
                return  # a trailing ';' (before '.', ']', '}', OPTIONAL, FILTER, …)

    def triples_same_subject(self, triples: list, ctx: "_Ctx") -> None:
        start = self.tok
        nested: list = []
        subject = self.term("subject", nested, ctx)
        if start.kind == "op" and start.text == "[" and (self.is_op(".", "}")):
            if not nested:  # `[]` is a blank node like `_:b`: it needs a predicate
                raise self.error("expected a predicate (IRI, variable or 'a')")
            triples.extend(nested)  # `[ p o ] .` alone
            return
        own: list = []
        self.property_list(subject, own, ctx)
        triples.extend(own[:1] + nested + own[1:] if own else nested)

    # -- expressions -----------------------------------------------------------------------

    def expression(self) -> list:
        out = self.and_expr()
        while self.accept_op("||"):
            out = out + self.and_expr() + [Op.OR]
        return out

    def and_expr(self) -> list:
        out = self.relational()
        while self.accept_op("&&"):
            out = out + self.relational() + [Op.AND]
        return out

    def relational(self) -> list:
        out = self.additive()
        tok = self.tok
        if tok.kind == "op" and tok.text in _REL_OPS:
            self.i += 1
            out = out + self.additive() + [_REL_OPS[tok.text]]
        elif self.is_kw("IN") or (self.is_kw("NOT") and self.peek().text.upper() == "IN"):
            op = Op.IN if self.tok.text.upper() == "IN" else Op.NOT_IN
            self.i += 1 if op is Op.IN else 2
            args = self.expression_list()
            out = out + [t for a in args for t in a] + [Call(op, self.count(args, op))]
        return out

    def expression_list(self) -> list[list]:
        """`( e1, …, en )` or NIL: the arguments of CONCAT, COALESCE, IN and NOT IN."""
        self.expect_op("(")
        if self.accept_op(")"):
            return []
        args = [self.expression()]
        while self.accept_op(","):
            args.append(self.expression())
        self.expect_op(")")
        return args

    @staticmethod
    def count(args: list, op: Op) -> int:
        if len(args) > 255:
            raise UnsupportedSparql(f"{op.symbol} of more than 255 operands",
                                    f"{op.symbol} of more than 255 operands is not supported "
                                    "(its count is a u8)")
        return len(args)

    def additive(self) -> list:
        out = self.multiplicative()
        while True:
            if self.is_op("+", "-"):
                op = Op.ADD if self.tok.text == "+" else Op.SUB
                self.i += 1
                out = out + self.multiplicative() + [op]
            else:
                return out

    def multiplicative(self) -> list:
        out = self.unary()
        while self.is_op("*", "/"):
            op = Op.MUL if self.tok.text == "*" else Op.DIV
            self.i += 1
            out = out + self.unary() + [op]
        return out

    def unary(self) -> list:
        if self.is_op("!"):
            self.i += 1
            return self.primary() + [Op.NOT]
        if self.is_op("-", "+"):
            nxt = self.peek()
            if nxt.kind == "num" and not nxt.spaced:
                return self.primary()  # a signed number
            if self.tok.text == "+":
                raise UnsupportedSparql("unary +", "unary + is not supported")
            self.i += 1
            return self.primary() + [Op.NEG]
        return self.primary()

    def primary(self) -> list:
        tok = self.tok
        if self.accept_op("("):
            out = self.expression()
            self.expect_op(")")
            return out
        if tok.kind == "var":
            v = self.var()
            return [v]
        if tok.kind in ("iri", "pname"):
            iri = self.iri()
            if self.is_op("("):
                raise UnsupportedSparql("function calls", f"function calls (<{iri}>(…)) "
                                                          "are not supported")
            return [iri]
        lit = self.literal_or_none()
        if lit is not None:
            return [lit]
        if tok.kind == "name":
            return self.builtin()
        raise self.error("expected an expression")

    def builtin(self) -> list:
        tok = self.tok
        name = tok.text.upper()
        if name == "REGEX":
            self.i += 1
            self.expect_op("(")
            args = [self.expression()]
            while self.accept_op(","):
                args.append(self.expression())
            self.expect_op(")")
            if len(args) not in (2, 3):
                raise _syntax(self.text, tok.pos, "regex takes 2 or 3 arguments")
            return [t for a in args for t in a] + [Op.REGEX if len(args) == 2 else Op.REGEX_FLAGS]
        if name == "BOUND":
            self.i += 1
            self.expect_op("(")
            v = self.var()
            self.expect_op(")")
            return [v, Op.BOUND]
        if name in _AGGREGATES:
            raise UnsupportedSparql(f"aggregates ({name})",
                                    f"aggregates ({name}) are not supported")
        if name in ("EXISTS", "NOT"):
            raise UnsupportedSparql("EXISTS", "EXISTS and NOT EXISTS are not supported")
        if name in _VARIADIC:
            self.i += 1
            args = self.expression_list()
            op = _VARIADIC[name]
            return [t for a in args for t in a] + [Call(op, self.count(args, op))]
        if name in _FUNCTIONS:
            self.i += 1
            args = self.expression_list()
            op = _FUNCTIONS[name].get(len(args))
            if op is None:
                counts = " or ".join(str(n) for n in sorted(_FUNCTIONS[name]))
                raise _syntax(self.text, tok.pos, f"{name} takes {counts} arguments")
            return [t for a in args for t in a] + [op]
        if name in _BUILTINS:
            raise UnsupportedSparql(f"function {name}",
                                    f"the function {name}() is not supported "
                                    "(KSP has SPARQL 1.1's functions; this one is 1.2's)")
        raise self.error("expected an expression")

    # -- group patterns --------------------------------------------------------------------

    def where_group(self, ctx: "_Ctx") -> None:
        """`{ triples OPTIONAL{…}* BIND* FILTER* }` into self.p (the one WHERE group)."""
        self.expect_op("{")
        if self.is_kw("SELECT"):
            raise UnsupportedSparql("subqueries", "subqueries are not supported")
        p = self.p
        opening = self.toks[self.i - 1]
        bgps: list[set[str]] = [set()]  # the `_:x` labels of each basic graph pattern
        stage = 0  # 0: triples, 1: OPTIONAL groups, 2: BINDs
        after = "start"
        while not self.accept_op("}"):
            tok = self.tok
            if self.dot(after):
                after = "dot"
                continue
            previous, after = after, "block"
            if self.accept_kw("OPTIONAL"):
                if stage > 1:
                    raise UnsupportedSparql("OPTIONAL after BIND",
                                            "an OPTIONAL group after a BIND is not supported: "
                                            "KSP binds after all optional groups")
                stage = 1
                mark = len(self.labels)
                p.optional.append(self.optional_group(ctx))
                bgps.append(set(self.labels[mark:]))
            elif self.accept_kw("FILTER"):
                p.filters.append(self.constraint())
            elif self.accept_kw("BIND"):
                stage = 2
                self.expect_op("(")
                expr = self.expression()
                self.expect_kw("AS")
                at = self.tok
                v = self.var()
                self.expect_op(")")
                if v.name in _vars_in(p.where, *p.optional) or any(
                        v.name == name for name, _ in p.binds):
                    # SPARQL 1.1 Query §18.2.1: BIND may not bind a variable already in scope
                    raise _syntax(self.text, at.pos, f"BIND to ?{v.name}, which the group "
                                                     "already binds before it")
                p.binds.append((v.name, expr))
            elif self.is_op("{"):
                raise self.nested_group_error()
            elif tok.kind == "name" and tok.text.upper() in _GROUP_FEATURES:
                raise _GROUP_FEATURES[tok.text.upper()]()
            elif tok.kind == "eof":
                raise self.error("expected '}'")
            else:
                if stage:
                    raise UnsupportedSparql(
                        "triple patterns after OPTIONAL or BIND",
                        "triple patterns after OPTIONAL or BIND are not supported: KSP "
                        "applies its optional groups and binds after the whole pattern")
                self.triples_may_start(previous)
                mark = len(self.labels)
                self.triples_same_subject(p.where, ctx)
                bgps[0].update(self.labels[mark:])
                after = "triples"
        _one_bgp_per_label(self.text, opening, bgps)

    def nested_group_error(self) -> UnsupportedSparql:
        depth, j = 0, self.i
        while j < len(self.toks) - 1:
            t = self.toks[j]
            if t.kind == "op" and t.text == "{":
                depth += 1
            elif t.kind == "op" and t.text == "}":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        after = self.toks[min(j + 1, len(self.toks) - 1)]
        if after.kind == "name" and after.text.upper() == "UNION":
            return UnsupportedSparql("UNION", "UNION is not supported")
        if self.peek().kind == "name" and self.peek().text.upper() == "SELECT":
            return UnsupportedSparql("subqueries", "subqueries are not supported")
        return UnsupportedSparql("nested group patterns",
                                 "nested group patterns { … } are not supported")

    def optional_group(self, ctx: "_Ctx") -> list:
        self.expect_op("{")
        triples: list = []
        after = "start"
        while not self.accept_op("}"):
            tok = self.tok
            if self.dot(after):
                after = "dot"
                continue
            if tok.kind == "name" and tok.text.upper() in ("OPTIONAL", "FILTER", "BIND"):
                word = tok.text.upper()
                feature = "nested OPTIONAL" if word == "OPTIONAL" else f"{word} inside OPTIONAL"
                raise UnsupportedSparql(feature, f"{feature} is not supported: a KSP optional "
                                                 "group holds triple patterns only")
            if self.is_op("{"):
                raise self.nested_group_error()
            if tok.kind == "name" and tok.text.upper() in _GROUP_FEATURES:
                raise _GROUP_FEATURES[tok.text.upper()]()
            if tok.kind == "eof":
                raise self.error("expected '}'")
            self.triples_may_start(after)
            self.triples_same_subject(triples, ctx)
            after = "triples"
        return triples

    def constraint(self) -> list:
        if self.is_op("("):
            self.i += 1
            out = self.expression()
            self.expect_op(")")
            return out
        if self.tok.kind not in ("name", "iri", "pname"):  # a variable or a literal
            raise self.error("expected '(', a built-in call or a function call after FILTER")
        return self.primary()  # a built-in or function call

    def triples_block(self, ctx: "_Ctx", closing: str = "}") -> list:
        """Triples up to `closing` (CONSTRUCT templates)."""
        triples: list = []
        self.expect_op("{")
        after = "start"
        while not self.accept_op(closing):
            if self.dot(after):
                after = "dot"
                continue
            if self.tok.kind == "eof":
                raise self.error("expected '}'")
            if self.is_kw("GRAPH"):
                raise UnsupportedSparql("GRAPH in a CONSTRUCT template",
                                        "GRAPH in a CONSTRUCT template is not supported")
            self.triples_may_start(after)
            self.triples_same_subject(triples, ctx)
            after = "triples"
        return triples

    def quads(self, ctx: "_Ctx") -> tuple[list, tuple | None]:
        """`{ triples GRAPH <g> { triples } … }`: the one graph and the graphs it goes to."""
        self.expect_op("{")
        chunks: list[tuple[IRI, list]] = []
        after = "start"
        while not self.accept_op("}"):
            if self.dot(after):
                after = "dot"
                continue
            if self.tok.kind == "eof":
                raise self.error("expected '}'")
            if self.accept_kw("GRAPH"):
                if self.tok.kind == "var":
                    raise UnsupportedSparql("GRAPH with a variable",
                                            "GRAPH with a variable is not supported")
                name = self.iri()
                inner: list = []
                self.expect_op("{")
                inner_after = "start"
                while not self.accept_op("}"):
                    if self.dot(inner_after):
                        inner_after = "dot"
                        continue
                    if self.tok.kind == "eof":
                        raise self.error("expected '}'")
                    self.triples_may_start(inner_after)
                    self.triples_same_subject(inner, ctx)
                    inner_after = "triples"
                chunks.append((name, inner))
                after = "block"
                continue
            if not chunks or chunks[-1][0] != DEFAULT_GRAPH:  # bare triples after a GRAPH block
                chunks.append((DEFAULT_GRAPH, []))
            self.triples_may_start(after)
            self.triples_same_subject(chunks[-1][1], ctx)
            after = "triples"
        if not chunks:
            return [], None
        graph = chunks[0][1]
        if any(c[1] != graph for c in chunks):
            raise UnsupportedSparql(
                "different triples for different graphs",
                "different triples for different graphs are not supported: KSP writes one "
                "graph of triples into every graph its DELETE/INSERT GRAPH option lists")
        targets = tuple(c[0] for c in chunks)
        return graph, None if targets == (DEFAULT_GRAPH,) else targets

    # -- queries -------------------------------------------------------------------------

    def solution_modifiers(self, allowed: bool) -> None:
        p = self.p
        if self.is_kw("GROUP"):
            raise UnsupportedSparql("GROUP BY", "GROUP BY is not supported")
        if self.is_kw("HAVING"):
            raise UnsupportedSparql("HAVING", "HAVING is not supported")
        if self.accept_kw("ORDER"):
            self.expect_kw("BY")
            p.order, p.order_var = self.order_condition()
            if self.is_kw("ASC", "DESC") or self.tok.kind == "var" or self.is_op("("):
                raise UnsupportedSparql("ORDER BY more than one key",
                                        "ORDER BY more than one key is not supported")
        for _ in range(2):
            if self.accept_kw("LIMIT"):
                if p.limit is not None:
                    raise self.error("LIMIT given twice")
                p.limit = self.u16("LIMIT")
            elif self.accept_kw("OFFSET"):
                if p.offset is not None:
                    raise self.error("OFFSET given twice")
                p.offset = self.u16("OFFSET")
        if self.is_kw("VALUES"):
            raise UnsupportedSparql("VALUES", "VALUES is not supported")
        if not allowed and (p.order or p.limit is not None or p.offset is not None):
            raise UnsupportedSparql("solution modifiers on ASK",
                                    "solution modifiers on ASK are not supported")

    def order_condition(self) -> tuple[Order, str]:
        if self.is_kw("ASC", "DESC"):
            order = Order.ASC if self.tok.text.upper() == "ASC" else Order.DESC
            self.i += 1
            self.expect_op("(")
            if self.tok.kind != "var" or not self.peek().text == ")":
                raise UnsupportedSparql("ORDER BY an expression",
                                        "ORDER BY an expression is not supported (order by "
                                        "one variable)")
            v = self.var()
            self.expect_op(")")
            return order, v.name
        if self.tok.kind == "var":
            return Order.ASC, self.var().name
        if self.is_op("(") or self.tok.kind in ("name", "iri", "pname"):
            raise UnsupportedSparql("ORDER BY an expression",
                                    "ORDER BY an expression is not supported (order by one "
                                    "variable)")
        raise self.error("expected an order condition")

    def u16(self, what: str) -> int:
        tok = self.tok
        if tok.kind != "num" or not tok.text.isdigit():
            raise self.error(f"expected an integer after {what}")
        self.i += 1
        value = int(tok.text)
        if value > _MAX_U16:
            raise UnsupportedSparql(f"{what} above 65535",
                                    f"{what} above 65535 is not supported (KSP's is 16 bits)")
        return value

    def dataset(self, keyword: str) -> None:
        while self.accept_kw(keyword):
            if self.accept_kw("NAMED"):
                raise UnsupportedSparql(f"{keyword} NAMED", f"{keyword} NAMED is not supported")
            self.p.query_graphs.append(self.iri())

    def query(self) -> None:
        p = self.p
        tok = self.tok
        word = tok.text.upper() if tok.kind == "name" else ""
        pattern = _Ctx("a WHERE pattern", True, True)
        if word == "SELECT":
            self.i += 1
            p.tx = Tx.SELECT
            if self.accept_kw("DISTINCT"):
                p.distinct = True
            else:
                self.accept_kw("REDUCED")  # may drop duplicates: keeping them is allowed
            if self.accept_op("*"):
                p.projection = None
            else:
                p.projection = []
                while self.tok.kind == "var" or self.is_op("("):
                    if self.is_op("("):
                        self.i += 1
                        self.expression()
                        raise UnsupportedSparql("projection expressions (expr AS ?var)",
                                                "projection expressions (expr AS ?var) are not "
                                                "supported; use BIND")
                    name = self.var().name
                    if name in p.projection:
                        raise self.error(f"?{name} projected twice")
                    p.projection.append(name)
                if not p.projection:
                    raise self.error("expected variables or '*' after SELECT")
            self.dataset("FROM")
            self.accept_kw("WHERE")
            self.where_group(pattern)
            self.solution_modifiers(True)
        elif word == "ASK":
            self.i += 1
            p.tx = Tx.ASK
            self.dataset("FROM")
            self.accept_kw("WHERE")
            self.where_group(pattern)
            self.solution_modifiers(False)
        elif word == "CONSTRUCT":
            self.i += 1
            p.tx = Tx.CONSTRUCT
            if self.is_op("{"):
                p.template = self.triples_block(_Ctx("a CONSTRUCT template", True, True))
                self.dataset("FROM")
                self.accept_kw("WHERE")
                self.construct_where(pattern)
            else:  # CONSTRUCT WHERE { triples }: the pattern is the template
                self.dataset("FROM")
                self.expect_kw("WHERE")
                p.where = self.triples_block(pattern)
                p.template = list(p.where)
                self.solution_modifiers(True)
        elif word == "DESCRIBE":
            raise UnsupportedSparql("DESCRIBE", "DESCRIBE is not supported")
        else:
            raise self.error("expected SELECT, ASK, CONSTRUCT or an update")
        if self.is_kw("VALUES"):
            raise UnsupportedSparql("VALUES", "VALUES is not supported")

    def construct_where(self, pattern: "_Ctx") -> None:
        """The WHERE of CONSTRUCT, with `render`'s form of DISTINCT: `{ SELECT DISTINCT * … }`."""
        if self.is_op("{") and self.peek().kind == "name" and self.peek().text.upper() == "SELECT":
            save = self.i
            self.i += 2
            if self.accept_kw("DISTINCT") and self.accept_op("*"):
                self.accept_kw("WHERE")
                self.where_group(pattern)
                self.solution_modifiers(True)
                self.expect_op("}")
                self.p.distinct = True
                if self.is_kw("ORDER", "LIMIT", "OFFSET", "GROUP", "HAVING"):
                    raise UnsupportedSparql("subqueries", "subqueries are not supported (KSP "
                                            "reads CONSTRUCT … { SELECT DISTINCT * { … } … } "
                                            "only as a whole)")
                return
            self.i = save
            raise UnsupportedSparql("subqueries", "subqueries are not supported")
        self.where_group(pattern)
        self.solution_modifiers(True)

    # -- updates -------------------------------------------------------------------------

    def update(self) -> None:
        ops: list[tuple[str, _Tok]] = []
        while True:
            self.prologue()
            if self.tok.kind == "eof":
                if not ops:  # valid SPARQL (a prologue at most), but no KSP request says it
                    raise UnsupportedSparql("updates with no operation",
                                            "updates with no operation are not supported: "
                                            "KSP has no empty request")
                break
            ops.append((self.operation(), self.tok))
            if not self.accept_op(";"):
                break
        if self.tok.kind != "eof":
            raise self.error("expected ';' or the end of the update")
        kinds = [k for k, _ in ops]
        if len(kinds) > 1 and not (kinds == ["DELETE DATA", "INSERT DATA"]
                                   or set(kinds) in ({"CREATE"}, {"DROP"})):
            raise UnsupportedSparql(
                "more than one update operation",
                "more than one update operation is not supported (except DELETE DATA ; "
                "INSERT DATA, and a list of CREATE or of DROP)")
        if kinds == ["DELETE DATA", "INSERT DATA"]:
            self.p.tx = Tx.UPDATE_DATA

    def operation(self) -> str:
        p = self.p
        tok = self.tok
        word = tok.text.upper() if tok.kind == "name" else ""
        data = _Ctx("DATA", False, True)
        if word in ("LOAD", "CLEAR"):
            raise UnsupportedSparql(word, f"{word} is not supported")
        if word in ("INSERT", "DELETE") and self.peek().text.upper() == "DATA":
            self.i += 2
            if word == "INSERT":
                p.insert, p.insert_graphs = self.quads(data)
                p.tx = Tx.INSERT_DATA
            else:
                p.delete, p.delete_graphs = self.quads(_Ctx("DELETE DATA", False, False))
                p.tx = Tx.DELETE_DATA
            return f"{word} DATA"
        if word in ("CREATE", "DROP"):
            self.i += 1
            self.no_silent()
            if word == "CREATE":
                self.expect_kw("GRAPH")
                p.graphs.append(self.iri())
            elif self.accept_kw("DEFAULT"):
                p.graphs.append(DEFAULT_GRAPH)
            elif self.is_kw("NAMED", "ALL"):
                raise UnsupportedSparql(f"DROP {self.tok.text.upper()}",
                                        f"DROP {self.tok.text.upper()} is not supported")
            else:
                self.expect_kw("GRAPH")
                p.graphs.append(self.iri())
            p.tx = Tx[word]
            return word
        if word in ("COPY", "MOVE", "ADD"):
            self.i += 1
            self.no_silent()
            p.source = self.graph_or_default()
            self.expect_kw("TO")
            p.target = self.graph_or_default()
            p.tx = Tx[word]
            return word
        if word in ("WITH", "DELETE", "INSERT"):
            self.modify()
            return "MODIFY"
        raise self.error("expected an update operation")

    def no_silent(self) -> None:
        if self.is_kw("SILENT"):
            raise UnsupportedSparql("SILENT", "SILENT is not supported: KSP reports the error")

    def graph_or_default(self) -> IRI:
        if self.accept_kw("DEFAULT"):
            return DEFAULT_GRAPH
        self.accept_kw("GRAPH")
        return self.iri()

    def modify(self) -> None:
        p = self.p
        with_graph = self.iri() if self.accept_kw("WITH") else None
        pattern = _Ctx("a WHERE pattern", True, True)
        if self.accept_kw("DELETE"):
            if self.accept_kw("WHERE"):  # DELETE WHERE { triples }
                if with_graph is not None:
                    raise self.error("DELETE WHERE does not take WITH")
                p.where = self.triples_block(_Ctx("DELETE WHERE", True, False))
                p.delete, p.tx = list(p.where), Tx.DELETE
                return
            p.delete, p.delete_graphs = self.quads(_Ctx("a DELETE template", True, False))
            p.tx = Tx.DELETE
        if self.accept_kw("INSERT"):
            p.insert, p.insert_graphs = self.quads(_Ctx("an INSERT template", True, True))
            p.tx = Tx.UPDATE if p.tx is Tx.DELETE else Tx.INSERT
        if p.tx is None:
            raise self.error("expected DELETE or INSERT")
        self.dataset("USING")
        self.expect_kw("WHERE")
        self.where_group(pattern)
        if with_graph is not None:
            # WITH names the graph of templates without GRAPH and of a WHERE without USING.
            if p.delete is not None and p.delete_graphs is None:
                p.delete_graphs = (with_graph,)
            if p.insert is not None and p.insert_graphs is None:
                p.insert_graphs = (with_graph,)
            if not p.query_graphs:
                p.query_graphs = [with_graph]

    # -- entry -----------------------------------------------------------------------------

    def parse(self) -> None:
        self.prologue()
        tok = self.tok
        word = tok.text.upper() if tok.kind == "name" else ""
        if word in ("SELECT", "ASK", "CONSTRUCT", "DESCRIBE"):
            self.query()
            if self.tok.kind != "eof":
                raise self.error("expected the end of the query")
        else:
            self.update()


@dataclass
class _Ctx:
    where: str
    vars_ok: bool
    bnodes_ok: bool


def _number(text: str) -> Literal:
    body = text.lstrip("+-")
    if "e" in body or "E" in body:
        return Literal(text, XSD_DOUBLE)
    if "." in body:
        return Literal(text, XSD_DECIMAL)
    return Literal(text, XSD_INTEGER)


def _vars_in(*triple_lists: list) -> set[str]:
    return {t.name for triples in triple_lists for triple in triples for t in triple
            if type(t) is _V}


def _one_bgp_per_label(text: str, where: _Tok, bgps: list[set[str]]) -> None:
    """SPARQL 1.1 Query §4.1.4: a blank node label is scoped to one basic graph pattern, so
    the WHERE's triples and an OPTIONAL group's (two patterns) may not share one. `bgps`: the
    labels written `_:x` in each (`render` spells a KSP blank node that spans both as a
    variable, which is not a label)."""
    seen: set[str] = set()
    for labels in bgps:
        shared = seen & labels
        if shared:
            raise _syntax(text, where.pos, f"the blank node label _:{min(shared)} is used in "
                                           "two basic graph patterns")
        seen |= labels


def _path_error() -> UnsupportedSparql:
    return UnsupportedSparql("property paths", "property paths are not supported")


def _feature(name: str, feature: str | None = None) -> Callable[[], UnsupportedSparql]:
    return lambda: UnsupportedSparql(feature or name, f"{feature or name} is not supported")


_GROUP_FEATURES: dict[str, Callable[[], UnsupportedSparql]] = {
    "UNION": _feature("UNION"),
    "MINUS": _feature("MINUS"),
    "SERVICE": _feature("SERVICE"),
    "VALUES": _feature("VALUES"),
    "GRAPH": lambda: UnsupportedSparql(
        "GRAPH patterns", "GRAPH patterns are not supported in WHERE (use FROM or USING)"),
    "LATERAL": _feature("LATERAL"),
}
