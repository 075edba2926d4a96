"""KSP requests as SPARQL 1.1 text, and KSP results as SPARQL 1.1 Query Results JSON.

The SIB runs requests on a SPARQL store and the SEPA bridge forwards them to a SPARQL broker,
so a request's SPARQL is its meaning written in a language both understand. The mapping is
in docs/sparql.md; the points that shape the code:

- Variable k is `?v{k}` unless a name table says otherwise; a SELECT with no projection
  (VC = 0) projects the never-bound `?_`, which gives one empty row per solution.
- A blank node in a WHERE or OPTIONAL pattern is a non-projected variable (§4.4). SPARQL forbids
  one blank-node label in two blocks, so such blank nodes are written as variables `?_b_<label>`;
  in templates and DATA they stay `_:<label>`. Labels that are not SPARQL names are spelled as
  `x_` + UTF-8 hex (`label_name` / `label_from_name` reverse it).
- The dataset: without graph options KSP reads the union of all graphs; the SPARQL is written for
  a store whose default graph is that union (pyoxigraph: `use_default_graph_as_union=True`).
  QUERY GRAPH is `FROM` / `USING`; QUERY GRAPH = (default) alone is no clause (the store's
  default graph, which is what SPARQL text without FROM reads); FROM cannot name the default
  graph beside others: callers that pass the dataset through an API ask for
  `dataset_clauses=False`. pyoxigraph's union flag
  overrides FROM, so it is set only when `reads_union(request)`.
- MAX RESPONSE SIZE and CREDENTIALS are transport matters with no SPARQL form; they are ignored.
"""
from __future__ import annotations

import itertools
import re
from typing import Iterable, Sequence

from ..codes import OPTION_APPLIES, OWL, RDF, RDFS, XSD, Op, Opt, Tx
from ..errors import NoSparqlEquivalent
from ..model import Bind, Call, Expression, Options, Order, Request
from ..terms import (
    DEFAULT_GRAPH, IRI, XSD_BOOLEAN, XSD_INTEGER, XSD_STRING, BNode, Graph, Literal, Term, Var,
)


#: Prefix names used for these namespaces when a request's prefix list holds them.
WELL_KNOWN_PREFIXES: dict[str, str] = {RDF: "rdf", RDFS: "rdfs", OWL: "owl", XSD: "xsd"}
#: The variable a SELECT with VC = 0 projects (never bound: one empty row per solution).
NO_PROJECTION = "_"
#: Union mode's own variables: the graph of a pattern's triple (`?_g{i}`), the graph a DELETE
#: template triple is in (`?_d{i}`), and copies of a template's variables (`?_c{i}_{name}`).
UNION_GRAPH_VAR = "_g"
#: The variables of a CONSTRUCT result in the Query Results JSON form (`results_json`).
CONSTRUCT_VARS = ("subject", "predicate", "object")
BNODE_VAR_PREFIX = "_b_"

# SPARQL's PN_CHARS_BASE without the planes above the BMP, which pyoxigraph 0.5 rejects in
# prefixed names (an IRI with such characters is written in full instead).
_PN_BASE = ("A-Za-z\u00C0-\u00D6\u00D8-\u00F6\u00F8-\u02FF\u0370-\u037D\u037F-\u1FFF"
            "\u200C-\u200D\u2070-\u218F\u2C00-\u2FEF\u3001-\uD7FF\uF900-\uFDCF\uFDF0-\uFFFD")
_PN_U = _PN_BASE + "_"
_PN = _PN_U + "\\-0-9\u00B7\u0300-\u036F\u203F-\u2040"
# PN_LOCAL without escapes, percent-encodings and dots; a local part outside it is written as
# <IRI>. SPARQL allows inner dots, but pyoxigraph 0.5 refuses some (`p:0.0.0`, seen by hypothesis),
# and a full IRI is always read the same.
_PN_LOCAL = re.compile(f"(?:[{_PN_U}:0-9](?:[{_PN}:]*[{_PN}:])?)?")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:")
_IRIREF_BAD = re.compile('[\x00-\x20<>"{}|^`\\\\]')
_VARNAME = re.compile(f"[{_PN_U}0-9][{_PN_U}0-9\u00B7\u0300-\u036F\u203F-\u2040]*")
_LANGTAG = re.compile(r"[a-zA-Z]+(?:-[a-zA-Z0-9]+)*")
_PLAIN_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9_]*")
_BARE_INTEGER = re.compile(r"0|[1-9][0-9]*")
_ECHAR = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b",
          "\f": "\\f"}
_ECHAR_RE = re.compile('[\\\\"\n\r\t\b\f]')

# Operator precedence in SPARQL's grammar (higher binds tighter).
_PREC = {Op.OR: 1, Op.AND: 2, Op.EQ: 3, Op.NE: 3, Op.LT: 3, Op.GT: 3, Op.LE: 3, Op.GE: 3,
         Op.ADD: 4, Op.SUB: 4, Op.MUL: 5, Op.DIV: 5, Op.NOT: 6, Op.NEG: 6}
_PRIMARY = 7


def label_name(label: str) -> str:
    """A blank-node label as a SPARQL name: itself when it is one, else `x_` + UTF-8 hex."""
    if _PLAIN_LABEL.fullmatch(label) and not label.startswith("x_"):
        return label
    return "x_" + label.encode("utf-8", "surrogatepass").hex()


def label_from_name(name: str) -> str:
    """Inverse of `label_name` (names it never produces are labels as they stand)."""
    if name.startswith("x_") and len(name) > 2:
        try:
            return bytes.fromhex(name[2:]).decode("utf-8")
        except ValueError:
            pass
    return name


def var_name(index: int, names: Sequence[str] | None = None) -> str:
    """The SPARQL name (without `?`) of variable `index`."""
    if names is not None and index < len(names):
        return names[index]
    return f"v{index}"


class _Writer:
    """Writes terms of one request: its prefix names, variable names and blank-node mode."""

    def __init__(self, prefixes: Iterable[str] | None, names: Sequence[str] | None,
                 bare_literals: bool = True):
        self.names = names
        self.bare = bare_literals  # `42`, `true` (N-Triples has no such short forms)
        #: Patterns read the union of all graphs in the text itself (`render(union=True)`).
        self.union = False
        self.graph_vars = itertools.count()
        self.declared: list[tuple[str, str]] = []  # (name, namespace) in list order
        taken: set[str] = set()
        for k, ns in enumerate(prefixes or (), 1):
            if _IRIREF_BAD.search(ns) or not _SCHEME.match(ns):
                continue  # not an absolute IRI SPARQL can write: only an encoding hint, dropped
            name = WELL_KNOWN_PREFIXES.get(ns, f"p{k}")
            if name in taken:
                name = f"p{k}"
            taken.add(name)
            self.declared.append((name, ns))
        # Longest namespace first (§10.2's rule), earliest on a tie.
        self.by_length = sorted(self.declared, key=lambda e: -len(e[1]))

    def prologue(self) -> str:
        return "".join(f"PREFIX {name}: <{ns}>\n" for name, ns in self.declared)

    def iri(self, iri: str, what: str = "IRI") -> str:
        if _IRIREF_BAD.search(iri) or not _SCHEME.match(iri):
            raise NoSparqlEquivalent(
                what, f"{what} {iri!r} cannot be written in SPARQL: not an absolute IRI (no "
                      "scheme), or a space, control character or one of <>\"{}|^`\\ that an "
                      "IRIREF cannot hold")
        for name, ns in self.by_length:
            if iri.startswith(ns) and _PN_LOCAL.fullmatch(iri, len(ns)):
                return f"{name}:{iri[len(ns):]}"
        return f"<{iri}>"

    def var(self, index: int) -> str:
        name = var_name(index, self.names)
        if not _VARNAME.fullmatch(name):
            raise NoSparqlEquivalent("variable name", f"{name!r} is not a SPARQL variable name")
        return "?" + name

    def literal(self, lit: Literal) -> str:
        lex = lit.lexical
        if lit.lang is not None:
            if not _LANGTAG.fullmatch(lit.lang):
                raise NoSparqlEquivalent("language tag",
                                         f"language tag {lit.lang!r} is not a SPARQL LANGTAG")
            return f"{_quote(lex)}@{lit.lang}"
        dt = lit.datatype
        if dt == XSD_STRING:
            return _quote(lex)
        if self.bare and ((dt == XSD_INTEGER and _BARE_INTEGER.fullmatch(lex))
                          or (dt == XSD_BOOLEAN and lex in ("true", "false"))):
            return lex
        return f"{_quote(lex)}^^{self.iri(dt, 'datatype IRI')}"

    def term(self, t: Term, in_pattern: bool) -> str:
        """`in_pattern`: a WHERE/OPTIONAL pattern, where blank nodes are variables (§4.4)."""
        if isinstance(t, Var):
            return self.var(t.index)
        if isinstance(t, IRI):
            return self.iri(t)
        if isinstance(t, Literal):
            return self.literal(t)
        if isinstance(t, BNode):
            name = label_name(t.label)
            return f"?{BNODE_VAR_PREFIX}{name}" if in_pattern else f"_:{name}"
        if isinstance(t, str):  # a plain str where an IRI was meant
            return self.iri(t)
        raise NoSparqlEquivalent("term", f"{t!r} is not a KSP term")

    def triples(self, graph: Graph | None, in_pattern: bool, indent: str, *,
                vars_ok: bool = True, bnodes_ok: bool = True) -> list[str]:
        """Triples, refusing what SPARQL's grammar (and KSP, §3.3, §4.4, §5.2) rules out."""
        for t in graph or ():
            if isinstance(t.s, Literal):
                raise NoSparqlEquivalent("literal subject", f"a literal subject in {t!r}")
            if not isinstance(t.p, (str, Var)):
                raise NoSparqlEquivalent("predicate", f"a predicate that is not an IRI or a "
                                                      f"variable in {t!r}")
            if not vars_ok and any(isinstance(m, Var) for m in t):
                raise NoSparqlEquivalent("variable in DATA", f"a variable in DATA: {t!r}")
            if not bnodes_ok and any(isinstance(m, BNode) for m in t):
                raise NoSparqlEquivalent("blank node in a delete graph",
                                         f"a blank node in what is deleted: {t!r}")
        return [f"{indent}{self.term(s, in_pattern)} {self.term(p, in_pattern)} "
                f"{self.term(o, in_pattern)} ." for s, p, o in graph or ()]

    def pattern(self, graph: Graph | None, indent: str) -> list[str]:
        """A WHERE or OPTIONAL pattern's triples; in union mode each one reads every graph:
        `{ t } UNION { GRAPH ?_g{i} { t } }`, a graph variable of its own per triple. Like the
        SIB's store in union mode (pyoxigraph's union default graph), a triple held by k graphs
        matches k times: the union is of the graphs' contents, not a merge into one set (§7.6;
        docs/sparql.md, "The dataset")."""
        lines = self.triples(graph, True, indent)
        if not self.union:
            return lines
        out = []
        for line in lines:
            body = line.strip()[:-2]  # "s p o"
            out.append(f"{indent}{{ {body} }} UNION "
                       f"{{ GRAPH ?{UNION_GRAPH_VAR}{next(self.graph_vars)} {{ {body} }} }}")
        return out

    def graph_name(self, name: IRI) -> str:
        return "DEFAULT" if name == DEFAULT_GRAPH else "GRAPH " + self.iri(name, "graph name")

    # -- expressions -----------------------------------------------------------------------

    def expression(self, expr: Expression) -> str:
        """RPN (§8) → infix SPARQL with the parentheses precedence needs, and no more."""
        stack: list[tuple[int, str]] = []  # (precedence, text)
        prev: object = None
        for token in expr:
            if isinstance(token, (Op, Call)):
                n = token.arity
                if len(stack) < n:
                    raise NoSparqlEquivalent("expression", f"malformed RPN expression {expr!r}: "
                                                           f"{token.name} lacks operands")
                args = stack[len(stack) - n:]
                del stack[len(stack) - n:]
                stack.append(self._apply(token, args, prev))
            else:
                stack.append((_PRIMARY, self.term(token, True)))
            prev = token
        if len(stack) != 1:
            raise NoSparqlEquivalent("expression", f"malformed RPN expression {expr!r}: "
                                                   f"leaves {len(stack)} values")
        return stack[0][1]

    @staticmethod
    def _apply(token: Op | Call, args: list[tuple[int, str]], prev: object) -> tuple[int, str]:
        op = token.op if isinstance(token, Call) else token
        if op is Op.IN or op is Op.NOT_IN:  # `x IN (…)`: x is an additive expression
            (lp, left), rest = args[0], args[1:]
            return 3, (f"{left if lp > 3 else f'({left})'} {op.symbol} "
                       f"({', '.join(text for _, text in rest)})")
        if op >= Op.STR:  # a function call of SPARQL 1.1 §17.4
            return _PRIMARY, f"{op.symbol}({', '.join(text for _, text in args)})"
        if op is Op.BOUND:
            if not isinstance(prev, Var):
                raise NoSparqlEquivalent("expression", "bound() must follow a variable (§8.2)")
            return _PRIMARY, f"bound({args[0][1]})"
        if op is Op.REGEX or op is Op.REGEX_FLAGS:
            return _PRIMARY, f"regex({', '.join(text for _, text in args)})"
        prec = _PREC[op]
        if op.arity == 1:
            (p, text), = args
            # `-5` would read back as the literal -5, not as minus applied to 5.
            bare = p == _PRIMARY and not text[0].isdigit()
            return prec, f"{op.symbol}{text if bare else f'({text})'}"
        (lp, left), (rp, right) = args
        # Left-associative operators keep a left operand of equal precedence bare; relational
        # ones are not associative in SPARQL, so an equal-precedence operand needs parentheses.
        if lp < prec or (lp == prec and prec == 3):
            left = f"({left})"
        if rp <= prec:
            right = f"({right})"
        return prec, f"{left} {op.symbol} {right}"


def _quote(text: str) -> str:
    return '"' + _ECHAR_RE.sub(lambda m: _ECHAR[m.group()], text) + '"'


def render_term(term: Term, prefixes: Iterable[str] | None = None,
                names: Sequence[str] | None = None) -> str:
    """One term as SPARQL (a blank node as `_:label`)."""
    return _Writer(prefixes, names).term(term, False)


# -- requests ------------------------------------------------------------------------------

def render(request: Request, *, names: Sequence[str] | None = None,
           dataset_clauses: bool = True, union: bool = False) -> str:
    """SPARQL 1.1 text with the meaning of `request` (docs/sparql.md has the mapping).

    `names[k]` names variable k (default `v{k}`). `dataset_clauses=False` leaves out FROM /
    USING for a caller that gives the store the QUERY GRAPH dataset itself. `union=True`
    writes KSP's reading of a request without graph options (§7.6: match the union of all
    graphs, DELETE from every graph) into the text, for a store whose default graph is only
    the default graph (a SEPA broker): see docs/sparql.md, "The dataset". Raises
    `NoSparqlEquivalent` for TERMINATE and RESET, options the transaction does not take, and
    terms SPARQL cannot write.
    """
    tx = Tx(request.tx)
    if tx in (Tx.TERMINATE, Tx.RESET):
        raise NoSparqlEquivalent(tx.name, f"{tx.name} ends persistent transactions of a KP "
                                          "session and has no SPARQL 1.1 equivalent")
    opts = request.options
    for opt, value in zip(Opt, opts):
        if value is not None and opt is not Opt.PREFIX and tx not in OPTION_APPLIES[opt]:
            raise NoSparqlEquivalent(opt.name, f"option {opt.name} does not apply to {tx.name}")
    w = _Writer(opts.prefixes, names)
    w.union = union and reads_union(request)
    base = tx.base
    if tx.is_query:
        body = _query(w, request, base, dataset_clauses)
    elif tx.is_pattern_update:
        body = _pattern_update(w, request, base, dataset_clauses,
                               every_graph=union and not opts.delete_graphs)
    elif tx.is_data_update:
        body = _data_update(w, request, tx, every_graph=union and not opts.delete_graphs)
    else:
        body = _management(w, request, tx)
    return w.prologue() + body


def render_where(request: Request, *, names: Sequence[str] | None = None,
                 dataset_clauses: bool = True, union: bool = False) -> str:
    """The WHERE part of a pattern update as a SELECT of variables 0 … n−1 (every variable the
    request uses), with its optional groups, FILTERs, BINDs and QUERY GRAPH.

    SPARQL Update has no "match the union of all graphs" nor "delete from every graph", which
    KSP's updates without graph options mean (§7.6): a SIB runs this query in union mode and
    instantiates the templates itself.
    """
    tx = Tx(request.tx)
    if not tx.is_pattern_update:
        raise NoSparqlEquivalent(tx.name, f"{tx.name} is not a pattern update")
    return render(solutions_query(request), names=names, dataset_clauses=dataset_clauses,
                  union=union)


def solutions_query(request: Request) -> Request:
    """The SELECT of variables 0 … n−1 (every variable the request uses: its patterns,
    templates and BINDs) over the request's pattern, optional groups, QUERY GRAPH, FILTERs,
    BINDs and solution modifier: the solutions whose rows a SIB instantiates a pattern update's
    or a CONSTRUCT's templates from (`render_where`; the SEPA bridge)."""
    o = request.options
    optional = request.optional or o.optional or ()
    used = _pattern_vars(request.where, optional)
    for g in (request.delete, request.insert, request.template):
        used |= _pattern_vars(g, ())
    used.update(b.var for b in o.binds or ())
    return Request(Tx.SELECT, request.tid, where=request.where, optional=optional or None,
                   projection=max(used, default=-1) + 1,
                   options=Options(prefixes=o.prefixes, query_graphs=o.query_graphs,
                                   filters=o.filters, binds=o.binds,
                                   # an update has none: SOLUTION MODIFIER is for queries
                                   modifier=o.modifier if Tx(request.tx).is_query else None))


def _group(w: _Writer, request: Request, optional: Sequence[Graph], indent: str = "  "
           ) -> list[str]:
    """The inside of a WHERE group: triples, OPTIONAL groups, BINDs, FILTERs."""
    lines = w.pattern(request.where, indent)
    for g in optional:
        lines.append(indent + _block("OPTIONAL", w.pattern(g, indent + "  "), indent))
    opts = request.options
    if opts.binds:
        in_scope = _pattern_vars(request.where, optional)
        for b in opts.binds:
            lines.append(f"{indent}BIND({w.expression(b.expr)} AS {w.var(b.var)})")
            _check_bind(b, in_scope)
            in_scope.add(b.var)
    for f in opts.filters or ():
        lines.append(f"{indent}FILTER({w.expression(f)})")
    return lines


def reads_union(request: Request) -> bool:
    """Does the request match against the union of all graphs (no QUERY GRAPH option)?"""
    return not request.options.query_graphs


def _pattern_vars(where: Graph | None, optional: Sequence[Graph]) -> set[int]:
    found = set()
    for g in (where or (), *optional):
        for t in g:
            found.update(m.index for m in t if isinstance(m, Var))
    return found


def _check_bind(b: Bind, in_scope: set[int]) -> None:
    if b.var in in_scope:
        raise NoSparqlEquivalent(
            "BIND", f"BIND to variable {b.var}, which the pattern or an earlier BIND already "
                    "binds: SPARQL only binds a new variable")


def _where(w: _Writer, request: Request, optional: Sequence[Graph]) -> str:
    return _block("WHERE", _group(w, request, optional))


def _dataset(w: _Writer, graphs: Sequence[IRI] | None, keyword: str, enabled: bool) -> str:
    if not graphs or not enabled or tuple(graphs) == (DEFAULT_GRAPH,):
        return ""  # the default graph alone: the store's own, since `reads_union` is false
    if DEFAULT_GRAPH in graphs:
        raise NoSparqlEquivalent(
            "QUERY GRAPH", "QUERY GRAPH naming the default graph has no SPARQL form: FROM and "
                           "USING cannot name the store's default graph (render with "
                           "dataset_clauses=False and give the store the dataset)")
    return "".join(f"{keyword} {w.iri(g, 'graph name')}\n" for g in graphs)


def _query(w: _Writer, request: Request, base: Tx, dataset_clauses: bool) -> str:
    opts = request.options
    mod = opts.modifier
    head = ""
    if base is Tx.SELECT:
        vc = request.projection or 0
        projected = " ".join(w.var(k) for k in range(vc)) if vc else "?" + NO_PROJECTION
        head = f"SELECT {'DISTINCT ' if mod and mod.distinct else ''}{projected}\n"
    elif base is Tx.ASK:
        head = "ASK\n"
    else:
        head = _block("CONSTRUCT", w.triples(request.template, False, "  ")) + "\n"
    from_ = _dataset(w, opts.query_graphs, "FROM", dataset_clauses)
    where = _where(w, request, request.optional or ())
    if base is Tx.CONSTRUCT and mod and mod.distinct:
        # CONSTRUCT has no DISTINCT: distinct solutions (before OFFSET/LIMIT) by a subquery.
        sub = _group(w, request, request.optional or (), "    ")
        return (head + from_ + "WHERE {\n  SELECT DISTINCT * WHERE {\n" + "\n".join(sub)
                + "\n  }" + _modifiers(w, mod, "\n  ") + "\n}")
    return head + from_ + where + _modifiers(w, mod, "\n")


def _modifiers(w: _Writer, mod, sep: str) -> str:
    if mod is None:
        return ""
    parts = []
    if mod.order != Order.NONE:
        if mod.order_var is None:
            raise NoSparqlEquivalent("SOLUTION MODIFIER", "an order without a variable")
        parts.append(f"ORDER BY {'ASC' if mod.order == Order.ASC else 'DESC'}"
                     f"({w.var(mod.order_var)})")
    if mod.limit is not None:
        parts.append(f"LIMIT {mod.limit}")
    if mod.offset is not None:
        parts.append(f"OFFSET {mod.offset}")
    return "".join(sep + p for p in parts)


def _quads(w: _Writer, graph: Graph | None, targets: Sequence[IRI] | None, **checks: bool
           ) -> list[str]:
    """`graph` written into each target graph (the default graph without a graph option)."""
    lines: list[str] = []
    if not graph:
        return lines
    for target in dict.fromkeys(targets or (DEFAULT_GRAPH,)):  # each graph once
        if target == DEFAULT_GRAPH:
            lines += w.triples(graph, False, "  ", **checks)
        else:
            lines.append(f"  GRAPH {w.iri(target, 'graph name')} {{")
            lines += w.triples(graph, False, "    ", **checks)
            lines.append("  }")
    return lines


def _block(keyword: str, lines: list[str], indent: str = "") -> str:
    """`keyword { lines }`, the closing brace at `indent`."""
    return f"{keyword} {{\n" + "\n".join(lines) + f"\n{indent}}}" if lines else f"{keyword} {{ }}"


def _delete_insert(w: _Writer, request: Request, base: Tx, suffix: str) -> list[str]:
    """The DELETE and INSERT parts (`suffix` " DATA" for DATA updates) the transaction has."""
    opts = request.options
    parts = []
    if base not in (Tx.INSERT, Tx.INSERT_DATA):
        parts.append(_block("DELETE" + suffix, _quads(
            w, request.delete, opts.delete_graphs, vars_ok=not suffix, bnodes_ok=False)))
    if base not in (Tx.DELETE, Tx.DELETE_DATA):
        parts.append(_block("INSERT" + suffix, _quads(
            w, request.insert, opts.insert_graphs, vars_ok=not suffix)))
    return parts


def _data_update(w: _Writer, request: Request, tx: Tx, every_graph: bool = False) -> str:
    # UPDATE DATA is two operations of one request, applied atomically (as KSP's).
    parts = _delete_insert(w, request, tx, " DATA")
    if every_graph and tx.base is not Tx.INSERT_DATA and request.delete:
        # DELETE DATA removes from the default graph; each triple leaves the named graphs too.
        parts[1:1] = [f"DELETE WHERE {{ GRAPH ?{UNION_GRAPH_VAR}0 {{ {line.strip()} }} }}"
                      for line in w.triples(request.delete, False, "")]
    return " ;\n".join(parts)


def _pattern_update(w: _Writer, request: Request, base: Tx, dataset_clauses: bool,
                    every_graph: bool = False) -> str:
    opts = request.options
    using = _dataset(w, opts.query_graphs, "USING", dataset_clauses)
    parts = _delete_insert(w, request, base, "")
    group = _group(w, request, opts.optional or ())
    if every_graph and base is not Tx.INSERT and request.delete:
        parts[0], found = _every_graph_delete(w, request)
        group += found
    return "\n".join(parts) + "\n" + using + _block("WHERE", group)


def _every_graph_delete(w: _Writer, request: Request) -> tuple[str, list[str]]:
    """KSP's DELETE template without DELETE GRAPH removes each instance from every graph that
    holds it; SPARQL's bare template only from the default graph. So each template triple is
    also deleted in `GRAPH ?_d{i}`, bound by an OPTIONAL match of the instance: the triple with
    copies of its variables, each the same term as the solution's (a copy, so the match never
    binds a variable the solution left unbound; then sameTerm fails, no graph is bound, and
    the template triple is skipped, as KSP skips it)."""
    if any(isinstance(m, BNode) for t in request.insert or () for m in t):
        # The matches multiply the solutions, and each would make its own blank nodes.
        raise NoSparqlEquivalent("DELETE from every graph", "a DELETE without DELETE GRAPH "
                                 "and an INSERT template with blank nodes in one request")
    lines = w.triples(request.delete, False, "  ", bnodes_ok=False)
    found = []
    for i, t in enumerate(request.delete):
        terms, same = [], []
        for m in t:
            if isinstance(m, Var):
                copy = f"?_c{i}_{w.var(m.index)[1:]}"
                terms.append(copy)
                same.append(f"sameTerm({copy}, {w.var(m.index)})")
            else:
                terms.append(w.term(m, False))
        graph = f"?_d{i}"
        lines.append(f"  GRAPH {graph} {{ {w.term(t[0], False)} {w.term(t[1], False)} "
                     f"{w.term(t[2], False)} }}")
        check = f" FILTER({' && '.join(dict.fromkeys(same))})" if same else ""
        found.append(f"  OPTIONAL {{ GRAPH {graph} {{ {' '.join(terms)} }}{check} }}")
    return _block("DELETE", lines), found


def _management(w: _Writer, request: Request, tx: Tx) -> str:
    if tx in (Tx.CREATE, Tx.DROP):
        graphs = request.graphs or ()
        if not graphs:
            raise NoSparqlEquivalent(tx.name, f"{tx.name} of no graph (GC = 0)")
        if tx is Tx.CREATE and DEFAULT_GRAPH in graphs:
            raise NoSparqlEquivalent("CREATE", "CREATE of the default graph (§5.3)")
        return " ;\n".join(f"{tx.name} {w.graph_name(g)}" for g in graphs)
    if request.source is None or request.target is None:
        raise NoSparqlEquivalent(tx.name, f"{tx.name} needs a source and a target graph")
    return f"{tx.name} {_default_or(w, request.source)} TO {_default_or(w, request.target)}"


def _default_or(w: _Writer, name: IRI) -> str:
    return "DEFAULT" if name == DEFAULT_GRAPH else w.iri(name, "graph name")
