"""Any SPARQL 1.1 Update → the exact delta of each of its operations, computed before writing.

The SIB writes only precomputed deltas (`sib.store`): that is what keeps a refused request from
changing anything and what feeds the pattern index. A SEPA update is full SPARQL 1.1 Update, so
its text is cut into operations here (a token scan, braces matched), and the store's own
engines do the rest: each WHERE is evaluated by pyoxigraph as `SELECT *`, and each template or
DATA block is parsed as TriG (variables stand in as placeholder IRIs), then instantiated over
the solutions in Python with SPARQL's rules (unbound or ill-formed quads skipped, template
blank nodes fresh per solution, deletions before insertions). Graph management (CLEAR, DROP,
CREATE, ADD, MOVE, COPY, with SILENT) becomes quad lists. LOAD is refused, since the SIB does
not fetch from the web; LOAD SILENT succeeds with no change, as SILENT says a failed LOAD
does. Relative IRIs resolve against the update's BASE, else the service's base IRI.

Operations are worked out one after another, each against the state the previous one left
(`sib.staging.Staged`), and written together once (`SepaBroker.apply`): parsing is done for
all of them first, so a syntax error changes nothing.
"""
from __future__ import annotations

import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field

import pyoxigraph as ox

from ksp.errors import SparqlSyntaxError
from ksp.sparql.lexer import _syntax, _Tok, _tokens, unescape_codepoints
from ksp.terms import DEFAULT_GRAPH, IRI

from ..budget import checked
from ..oxterms import Quad, canonical, quad_from_ox, resolve_iri
from ..staging import Staged
from ..store import Delta, QuadStore
from ..updates import GraphChange, emptied, net_delta, transfer

__all__ = ["UpdateRefused", "Operation", "parse_update", "Dataset"]

_VAR = f"urn:x-ksp-var-{secrets.token_hex(6)}:"  # placeholder IRIs no user writes


class UpdateRefused(Exception):
    """An update that is not applied: `status` is the HTTP status the gate answers."""

    def __init__(self, message: str, status: int = 400, error: str = "invalid_update") -> None:
        super().__init__(message)
        self.status, self.error = status, error


@dataclass(frozen=True)
class Dataset:
    """The default and named graphs a WHERE reads (None: the store's own)."""

    default: tuple[IRI, ...] | None = None
    named: tuple[IRI, ...] | None = None

    def for_store(self) -> dict:
        args: dict = {}
        if self.default is not None:
            args["default_graph"] = [ox.DefaultGraph() if g == DEFAULT_GRAPH else ox.NamedNode(g)
                                     for g in self.default]
        if self.named is not None:
            args["named_graphs"] = [ox.NamedNode(g) for g in self.named]
        return args


@dataclass
class Operation:
    """One operation of an update, parsed; `delta(store)` works out what it changes now."""

    kind: str
    silent: bool = False
    delete: list | None = None  # template quads (pyoxigraph, placeholders for variables)
    insert: list | None = None
    where: str | None = None  # SELECT * text of the WHERE
    dataset: Dataset = field(default_factory=Dataset)
    graphs: tuple = ()  # CLEAR/DROP/CREATE: IRIs, or "DEFAULT" / "NAMED" / "ALL"
    source: IRI | None = None
    target: IRI | None = None

    @property
    def reads(self) -> bool:
        return self.where is not None or self.kind in ("ADD", "MOVE", "COPY")

    def writes(self) -> tuple[IRI, ...] | None:
        """The graphs this operation may write, from its text alone (None: any graph), so that
        the access check says nothing about what the store holds: a refused INSERT DATA of a
        triple that is already there, or a CLEAR of a graph that does not exist, is refused
        all the same."""
        if self.kind in ("INSERT DATA", "DELETE DATA", "MODIFY"):
            graphs = set()
            for q in (*(self.delete or ()), *(self.insert or ())):
                g = q.graph_name
                if isinstance(g, ox.DefaultGraph):
                    graphs.add(DEFAULT_GRAPH)
                elif g.value.startswith(_VAR):
                    return None  # GRAPH ?g in a template
                else:
                    graphs.add(IRI(g.value))
            return tuple(graphs)
        if self.kind in ("ADD", "MOVE", "COPY"):
            return (self.target, self.source) if self.kind == "MOVE" else (self.target,)
        if self.kind == "LOAD":
            return ()
        (which,) = self.graphs
        if which == "DEFAULT":
            return (DEFAULT_GRAPH,)
        return None if which in ("NAMED", "ALL") else (IRI(which),)

    def change(self, store: QuadStore | Staged) -> GraphChange:
        """The quads this operation adds and removes on the store as it is (or as a request's
        earlier operations leave it: `Staged`), and the graphs it creates and drops."""
        if self.kind in ("INSERT DATA", "DELETE DATA", "MODIFY"):
            per_solution = self.where is not None  # template blank nodes: fresh per solution
            solutions = _solutions(store, self.where, self.dataset) if per_solution else [{}]
            removing = {q for q in _instances(self.delete or (), solutions, False)
                        if store.contains(q)}
            adding = list(_instances(self.insert or (), solutions, per_solution))
            return GraphChange(net_delta(store, removing, adding))
        if self.kind == "LOAD":
            return GraphChange(Delta())
        try:
            return _management(store, self)
        except UpdateRefused:
            if self.silent:
                return GraphChange(Delta())
            raise


def _solutions(store: QuadStore | Staged, where: str, dataset: Dataset) -> list[dict]:
    try:
        found = store.query(where, **dataset.for_store())
    except (SyntaxError, ValueError, RuntimeError) as exc:  # RuntimeError: pyoxigraph refused
        raise UpdateRefused(f"WHERE: {exc}") from None       # to evaluate it (a function)
    names = [v.value for v in found.variables]
    # the time budget in force (`sib.budget`)
    return [{n: s[n] for n in names if s[n] is not None} for s in checked(found)]


def _instances(template: list, solutions: list[dict], fresh_bnodes: bool) -> Iterable[Quad]:
    for solution in solutions:
        fresh: dict = {}
        for q in template:
            terms = []
            for t in (q.subject, q.predicate, q.object, q.graph_name):
                if isinstance(t, ox.NamedNode) and t.value.startswith(_VAR):
                    t = solution.get(t.value[len(_VAR):])
                    if t is None:
                        break
                elif fresh_bnodes and isinstance(t, ox.BlankNode):
                    t = fresh.setdefault(t.value, ox.BlankNode())
                terms.append(t)
            else:
                try:
                    quad = ox.Quad(*terms)
                except TypeError:  # a literal as subject, a blank node as graph, ...
                    continue
                s, p, o, g = quad_from_ox(quad)
                yield (canonical(s), p, canonical(o), g)


def _management(store: QuadStore | Staged, op: Operation) -> GraphChange:
    kind = op.kind
    if kind == "CREATE":
        g = op.graphs[0]
        if store.graph_exists(g):
            raise UpdateRefused(f"CREATE GRAPH <{g}>: the graph exists")
        return GraphChange(Delta(), create=[g])
    if kind in ("CLEAR", "DROP"):
        (which,) = op.graphs
        if which == "DEFAULT":
            graphs = [DEFAULT_GRAPH]
        elif which == "NAMED":
            graphs = store.named_graphs()
        elif which == "ALL":
            graphs = [DEFAULT_GRAPH, *store.named_graphs()]
        else:
            if not store.graph_exists(which):
                raise UpdateRefused(f"{kind} GRAPH <{which}>: no such graph")
            graphs = [which]
        return emptied(store, graphs, drop=kind == "DROP")
    if not store.graph_exists(op.source):
        raise UpdateRefused(f"{kind} from <{op.source}>: no such graph")
    return transfer(store, kind, op.source, op.target)


# -- parsing ---------------------------------------------------------------------------------

class _Scan:
    """Tokens of an update, with its prologue as it stands at each operation."""

    def __init__(self, text: str, base: str | None = None) -> None:
        """`base`: the service's base IRI, in force until the text says BASE."""
        self.text = unescape_codepoints(text)
        self.toks: list[_Tok] = _tokens(self.text)
        self.i = 0
        self.base: str | None = base
        self.prefixes: dict[str, str] = {}

    @property
    def tok(self) -> _Tok:
        return self.toks[self.i]

    def word(self, k: int = 0) -> str:
        t = self.toks[self.i + k]
        return t.text.upper() if t.kind == "name" else ""

    def error(self, message: str) -> SparqlSyntaxError:
        return _syntax(self.text, self.tok.pos, message)

    def accept(self, *words: str) -> bool:
        if self.word() in words:
            self.i += 1
            return True
        return False

    def expect(self, word: str) -> None:
        if not self.accept(word):
            raise self.error(f"expected {word}")

    def prologue_text(self) -> str:
        lines = [f"BASE <{self.base}>"] if self.base else []
        lines += [f"PREFIX {p}: <{iri}>" for p, iri in self.prefixes.items()]
        return "\n".join(lines) + "\n"

    def prologue(self) -> None:
        while True:
            if self.accept("BASE"):
                self.base = self.iri_text(self.tok, "BASE")
                self.i += 1
            elif self.accept("PREFIX"):
                tok = self.tok
                if tok.kind != "pname" or not tok.text.endswith(":"):
                    raise self.error("expected a prefix name ending in ':'")
                self.i += 1
                self.prefixes[tok.text[:-1]] = self.iri_text(self.tok, "PREFIX")
                self.i += 1
            else:
                return

    def iri_text(self, tok: _Tok, where: str) -> str:
        """An IRIREF resolved against the BASE in force (RFC 3986); without one, it must be
        absolute."""
        if tok.kind != "iri":
            raise self.error(f"expected an IRI after {where}")
        text = tok.text[1:-1]
        try:
            if self.base is None:
                return ox.NamedNode(text).value  # refused unless absolute
            return resolve_iri(self.base, text)
        except ValueError as exc:
            against = f"BASE <{self.base}>" if self.base is not None else "no BASE"
            raise self.error(f"<{text}> ({against}): {exc}") from None

    def iri(self) -> IRI:
        tok = self.tok
        if tok.kind == "iri":
            value = self.iri_text(tok, "it")
        elif tok.kind == "pname":
            prefix, _, local = tok.text.partition(":")
            if prefix not in self.prefixes:
                raise self.error(f"undeclared prefix {prefix!r}")
            value = self.prefixes[prefix] + local.replace("\\", "")
        else:
            raise self.error("expected an IRI")
        self.i += 1
        return IRI(value)

    def block(self) -> tuple[int, int]:
        """The token range of a `{ … }` block, braces included; moves past it."""
        if self.tok.text != "{" or self.tok.kind != "op":
            raise self.error("expected '{'")
        start, depth = self.i, 0
        while True:
            tok = self.tok
            if tok.kind == "eof":
                raise self.error("expected '}'")
            if tok.kind == "op" and tok.text in "{}":
                depth += 1 if tok.text == "{" else -1
            self.i += 1
            if depth == 0:
                return start, self.i

    def source(self, start: int, end: int) -> str:
        return self.text[self.toks[start].pos:self.toks[end - 1].pos + 1]


def _template(scan: _Scan, span: tuple[int, int], variables: bool, bnodes: bool,
              what: str) -> list:
    """The quads of a template or DATA block, parsed as TriG (variables as placeholders)."""
    start, end = span
    parts: list[str] = []
    prev = None
    depth = 0
    for tok in scan.toks[start + 1:end - 1]:
        if tok.kind == "op" and tok.text == "{":
            depth += 1
        elif tok.kind == "op" and tok.text == "}":
            depth -= 1
        if depth == 0 and tok.kind == "name" and tok.text.upper() == "GRAPH" and prev \
                and prev.text not in (".", "}"):
            parts.append(".")  # SPARQL allows triples without '.' before GRAPH; TriG not
        if tok.kind == "var":
            if not variables:
                raise scan.error(f"variables are not allowed in {what}")
            parts.append(f"<{_VAR}{tok.text[1:]}>")
        else:
            parts.append(tok.text)
        prev = tok
    if prev is not None and prev.text not in (".", "}"):
        parts.append(".")
    text = scan.prologue_text() + " ".join(parts)
    try:
        quads = list(ox.parse(text, format=ox.RdfFormat.TRIG, base_iri=scan.base))
    except (SyntaxError, ValueError) as exc:
        raise UpdateRefused(f"{what}: {exc}") from None
    if not bnodes and any(isinstance(t, ox.BlankNode) for q in quads
                          for t in (q.subject, q.object)):
        raise UpdateRefused(f"blank nodes are not allowed in {what}")
    return quads


def _graph_ref(scan: _Scan, allow_default: bool = True) -> IRI:
    if allow_default and scan.accept("DEFAULT"):
        return DEFAULT_GRAPH
    scan.accept("GRAPH")
    return scan.iri()


def parse_update(text: str, using: Dataset | None = None,
                 base: str | None = None) -> list[Operation]:
    """The operations of an update text (SparqlSyntaxError or UpdateRefused when it is not
    one); `using`: the protocol's using-graph-uri / using-named-graph-uri; `base`: the
    service's base IRI for relative IRIs (None: they are refused)."""
    scan = _Scan(text, base)
    ops: list[Operation] = []
    while True:
        scan.prologue()
        if scan.tok.kind == "eof":
            break
        ops.append(_operation(scan, using))
        if not (scan.tok.kind == "op" and scan.tok.text == ";"):
            break
        scan.i += 1
    if scan.tok.kind != "eof":
        raise scan.error("expected ';' or the end of the update")
    return ops


def _operation(scan: _Scan, using: Dataset | None) -> Operation:
    word = scan.word()
    if word == "LOAD":
        scan.i += 1
        if not scan.accept("SILENT"):
            raise UpdateRefused("LOAD is not supported: the SIB does not fetch from the web",
                                501, "not_implemented")
        scan.iri()
        if scan.accept("INTO"):
            scan.expect("GRAPH")
            scan.iri()
        return Operation("LOAD", True)  # its failure silenced: no change
    if word in ("INSERT", "DELETE") and scan.word(1) == "DATA":
        scan.i += 2
        what = f"{word} DATA"
        quads = _template(scan, scan.block(), False, word == "INSERT", what)
        if word == "INSERT":
            return Operation(what, insert=quads)
        return Operation(what, delete=quads)
    if word in ("CLEAR", "DROP", "CREATE", "ADD", "MOVE", "COPY"):
        scan.i += 1
        silent = scan.accept("SILENT")
        if word == "CREATE":
            scan.expect("GRAPH")
            return Operation(word, silent, graphs=(scan.iri(),))
        if word in ("CLEAR", "DROP"):
            if scan.word() in ("DEFAULT", "NAMED", "ALL"):
                which = scan.word()
                scan.i += 1
            else:
                scan.expect("GRAPH")
                which = scan.iri()
            return Operation(word, silent, graphs=(which,))
        src = _graph_ref(scan)
        scan.expect("TO")
        return Operation(word, silent, source=src, target=_graph_ref(scan))
    if word in ("WITH", "DELETE", "INSERT"):
        return _modify(scan, using)
    raise scan.error("expected an update operation")


def _modify(scan: _Scan, using: Dataset | None) -> Operation:
    with_graph = scan.iri() if scan.accept("WITH") else None
    op = Operation("MODIFY")
    if scan.accept("DELETE"):
        if scan.word() == "WHERE":
            if with_graph is not None:
                raise scan.error("DELETE WHERE does not take WITH")
            scan.i += 1
            span = scan.block()
            op.delete = _template(scan, span, True, False, "DELETE WHERE")
            op.where = scan.prologue_text() + "SELECT * WHERE " + scan.source(*span)
            op.dataset = using or Dataset()
            return op
        op.delete = _template(scan, scan.block(), True, False, "a DELETE template")
    if scan.accept("INSERT"):
        op.insert = _template(scan, scan.block(), True, True, "an INSERT template")
    if op.delete is None and op.insert is None:
        raise scan.error("expected DELETE or INSERT")
    default: list[IRI] = []
    named: list[IRI] = []
    while scan.accept("USING"):
        (named if scan.accept("NAMED") else default).append(scan.iri())
    scan.expect("WHERE")
    span = scan.block()
    op.where = scan.prologue_text() + "SELECT * WHERE " + scan.source(*span)
    if (default or named or with_graph is not None) and using is not None:
        raise UpdateRefused("using-graph-uri/using-named-graph-uri with USING or WITH in the "
                            "update (SPARQL 1.1 Protocol §2.2.3)")
    if default or named:
        op.dataset = Dataset(tuple(default), tuple(named))
    elif using is not None:
        op.dataset = using
    elif with_graph is not None:
        op.dataset = Dataset((with_graph,), None)
    if with_graph is not None:  # the graph of template triples outside GRAPH
        target = ox.NamedNode(with_graph)
        for name in ("delete", "insert"):
            quads = getattr(op, name)
            if quads is not None:
                setattr(op, name, [ox.Quad(q.subject, q.predicate, q.object, target)
                                   if isinstance(q.graph_name, ox.DefaultGraph) else q
                                   for q in quads])
    return op
