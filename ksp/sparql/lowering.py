"""SPARQL 1.1 text → KSP requests, for the subset KSP can say (docs/sparql.md).

A hand-written tokenizer and recursive-descent parser rather than rdflib's pyparsing grammar:
rdflib's parser takes 26–180 times as long for the same texts (tools/bench/sparql.py; 0.16–0.5
ms here against 4–46 ms), and since this one knows the subset it names what is outside it
("UNION is not supported") where it occurs, with line and column, where a full parser would
accept the query and leave the feature to be dug out of its parse tree.
Everything is checked while parsing: valid SPARQL outside the subset raises
`UnsupportedSparql(feature)`, text that is not SPARQL raises `SparqlSyntaxError(line,
column)`; nothing else escapes.

Variables: SELECT's projected variables are 0 … VC−1 in order; a variable named `v<k>` keeps
index k when that is free (so `compile(render(r))` keeps the indexes `render` wrote); the
others take the lowest free indexes in order of first appearance. `?_` projected alone is
VC = 0, and `?_b_<name>` is the blank node `label_from_name(name)` (both as `render` writes
them). `compile_named` also returns the variables' names, for results.
"""
from __future__ import annotations

import re

from ..codes import Tx
from ..errors import EncodeError, SparqlError, SparqlSyntaxError, UnsupportedSparql
from ..model import Bind, Options, Request, SolutionModifier
from ..terms import DEFAULT_GRAPH, IRI, Literal, Triple, Var
from .render import NO_PROJECTION
from .lexer import _IRI_BAD, _SCHEME, unescape_codepoints
from .parser import _Parsed, _Parser, _V


# -- variables → indexes -------------------------------------------------------------------

def _assign(p: _Parsed, seen: list[str]) -> dict[str, int]:
    """Projected variables 0 … VC−1; `v<k>` keeps k when free; the rest lowest free first."""
    index: dict[str, int] = {}
    for k, name in enumerate(p.projection or ()):
        index[name] = k
    taken = set(index.values())
    for name in seen:
        m = re.fullmatch(r"v(0|[1-9][0-9]{0,2})", name)
        if name not in index and m and int(m.group(1)) <= 255 and int(m.group(1)) not in taken:
            index[name] = int(m.group(1))
            taken.add(index[name])
    free = (k for k in range(256) if k not in taken)
    for name in seen:
        if name not in index:
            k = next(free, None)
            if k is None:
                raise UnsupportedSparql("more than 256 variables",
                                        "more than 256 variables are not supported")
            index[name] = k
    return index


def _resolve(obj, index: dict[str, int]):
    if isinstance(obj, _V):
        return Var(index[obj.name])
    if isinstance(obj, Triple):
        return Triple(*(_resolve(m, index) for m in obj))
    return obj


def _graph(items, index, what: str) -> tuple:
    out = tuple(_resolve(t, index) for t in items)
    if len(out) > 255:
        raise UnsupportedSparql("more than 255 triples in one graph",
                                f"more than 255 triples in one graph ({what}) are not "
                                "supported by KSP")
    return out


def _expr(tokens, index) -> tuple:
    out = tuple(_resolve(t, index) for t in tokens)
    if len(out) > 255:
        raise UnsupportedSparql("expressions of more than 255 tokens",
                                "expressions of more than 255 tokens are not supported")
    return out


def _limit(items, what: str):
    if items is not None and len(items) > 255:
        raise UnsupportedSparql(f"more than 255 {what}", f"more than 255 {what} are not "
                                                         "supported by KSP")
    return items


def _build(parser: _Parser, persistent: bool, every_graph: bool
           ) -> tuple[Request, tuple[str, ...]]:
    p = parser.p
    tx = p.tx
    assert tx is not None
    seen = list(parser.seen_vars)
    if tx is Tx.SELECT and p.projection is None:  # SELECT *: the variables of the pattern
        in_scope = _pattern_names(p) | {name for name, _ in p.binds}
        p.projection = [n for n in seen if n in in_scope]
    no_projection = (tx is Tx.SELECT and p.projection == [NO_PROJECTION]
                     and NO_PROJECTION not in _pattern_names(p))
    if no_projection:
        p.projection = []
        seen = [n for n in seen if n != NO_PROJECTION]
    if len(p.projection or ()) > 255:
        raise UnsupportedSparql("more than 255 projected variables",
                                "more than 255 projected variables are not supported")
    index = _assign(p, seen)
    names = [""] * (max(index.values()) + 1 if index else 0)
    for name, k in index.items():
        names[k] = name
    if persistent:
        if not (tx.is_query or tx.is_pattern_update):
            raise UnsupportedSparql(f"persistent {tx.name}",
                                    f"a persistent {tx.name} is not supported: only queries "
                                    "and pattern updates have persistent forms")
        tx = Tx(tx + 6)
    optional = tuple(_graph(g, index, "OPTIONAL") for g in _limit(p.optional, "OPTIONAL groups"))
    modifier = None
    if p.order or p.limit is not None or p.offset is not None or p.distinct:
        modifier = SolutionModifier(p.order, index[p.order_var] if p.order else None, p.limit,
                                    p.offset, p.distinct)
    declared = tuple(parser.declared) + tuple(
        ns for ns in parser.used_default_prefixes if ns not in parser.declared)
    query_graphs, delete_graphs = ((p.query_graphs, p.delete_graphs) if every_graph
                                   else _sparql_dataset(tx, p))
    opts = Options(
        prefixes=declared or None,
        delete_graphs=_limit(delete_graphs, "graphs"),
        insert_graphs=_limit(p.insert_graphs, "graphs"),
        query_graphs=tuple(_limit(query_graphs, "graphs")) or None,
        optional=optional or None if tx.is_pattern_update else None,
        filters=tuple(_expr(f, index) for f in _limit(p.filters, "FILTER expressions")) or None,
        modifier=modifier,
        binds=tuple(Bind(index[v], _expr(e, index))
                    for v, e in _limit(p.binds, "BIND expressions")) or None,
    )
    kw: dict = {}
    base = tx.base
    if base in (Tx.SELECT, Tx.ASK, Tx.CONSTRUCT):
        kw["where"] = _graph(p.where, index, "WHERE")
        kw["optional"] = optional or None
        if base is Tx.SELECT:
            kw["projection"] = len(p.projection or ())
        if base is Tx.CONSTRUCT:
            kw["template"] = _graph(p.template or (), index, "CONSTRUCT")
    elif base in (Tx.DELETE, Tx.INSERT, Tx.UPDATE):
        kw["where"] = _graph(p.where, index, "WHERE")
    if base in (Tx.DELETE, Tx.UPDATE, Tx.DELETE_DATA, Tx.UPDATE_DATA):
        kw["delete"] = _graph(p.delete or (), index, "DELETE")
    if base in (Tx.INSERT, Tx.UPDATE, Tx.INSERT_DATA, Tx.UPDATE_DATA):
        kw["insert"] = _graph(p.insert or (), index, "INSERT")
    if base in (Tx.CREATE, Tx.DROP):
        kw["graphs"] = tuple(_limit(p.graphs, "graphs"))
    if base in (Tx.COPY, Tx.MOVE, Tx.ADD):
        kw["source"], kw["target"] = p.source, p.target
    return _useful_prefixes(Request(tx, 0, True, options=opts, **kw)), tuple(names)


def _sparql_dataset(tx: Tx, p: _Parsed) -> tuple[list[IRI], tuple[IRI, ...] | None]:
    """QUERY GRAPH and DELETE GRAPH as the text means them. SPARQL reads and deletes the
    default graph where the text names no graph (no FROM/USING/WITH, no GRAPH block); KSP's
    option-less form means every graph (wire format 7.6), so the default graph is named:
    QUERY GRAPH = (default) for a query's or a pattern update's WHERE, DELETE GRAPH =
    (default) for a DELETE. INSERT without INSERT GRAPH already writes the default graph."""
    base = tx.base
    query_graphs = list(p.query_graphs)
    if not query_graphs and (base.is_query or base.is_pattern_update):
        query_graphs = [DEFAULT_GRAPH]
    delete_graphs = p.delete_graphs
    if delete_graphs is None and p.delete is not None:
        delete_graphs = (DEFAULT_GRAPH,)
    return query_graphs, delete_graphs


def _useful_prefixes(req: Request) -> Request:
    """`req` with only the PREFIX entries that shorten its encoding: an entry that nothing uses,
    or that costs more than its uses save, is dropped, one at a time, the most costly first;
    and if the encoder's automatic list (§10) is shorter still, that one (prefixes None). The
    encoder itself is the judge, so this stays true to every rule of the wire format."""
    from ..codec import encode

    current = req.options.prefixes
    if not current:
        return req
    spelled = set(_strings(req))  # an entry that begins none of these is used nowhere
    current = tuple(p for p in current if any(s.startswith(p) for s in spelled))

    def size(prefixes) -> int:
        return len(encode(req._replace(options=req.options._replace(prefixes=prefixes))))

    try:
        best = size(current)
        while current:
            smallest, fewer = min(((size(t), t) for i in range(len(current))
                                   if (t := current[:i] + current[i + 1:]) is not None),
                                  key=lambda trial: trial[0])
            if smallest > best:
                break
            best, current = smallest, fewer
        if size(None) < best:  # the encoder's own choice does better still
            current = None
    except EncodeError:  # not encodable as it is: the caller's encode says why
        return req
    return req._replace(options=req.options._replace(prefixes=current or None))


def _strings(value):
    """Every IRI and literal datatype in a request's fields and options, however nested."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Literal):
        yield value.datatype
    elif isinstance(value, tuple):
        for item in value:
            yield from _strings(item)


def _pattern_names(p: _Parsed) -> set[str]:
    found = set()
    for t in list(p.where) + [t for g in p.optional for t in g]:
        found.update(m.name for m in t if isinstance(m, _V))
    return found


def compile_named(text: str, *, persistent: bool = False, prefixes: dict[str, str] | None = None,
                  every_graph: bool = False) -> tuple[Request, tuple[str, ...]]:
    """`compile`, also returning `names[k]`: the SPARQL name of variable k."""
    if not isinstance(text, str):
        raise SparqlSyntaxError(f"SPARQL text must be a str, not {type(text).__name__}")
    for name, ns in (prefixes or {}).items():
        if not isinstance(ns, str) or not _SCHEME.match(ns) or _IRI_BAD.search(ns):
            raise SparqlError(f"prefix {name!r} must map to an absolute IRI, not {ns!r}")
    parser = _Parser(text, prefixes)
    try:
        parser.parse()
    except RecursionError:
        raise SparqlSyntaxError("the text nests too deeply") from None
    except UnsupportedSparql as exc:
        refusal = _refusal(text, prefixes)
        if refusal is not None:  # not SPARQL at all: say so, not that KSP lacks a feature
            raise refusal from exc
        raise
    # Parsed whole, the text is SPARQL: a limit `_build` meets (more than 256 variables...) is
    # KSP's alone, with no full parser to ask (pyoxigraph plans a query it parses, which for
    # hundreds of patterns takes a minute).
    try:
        return _build(parser, persistent, every_graph)
    except RecursionError:
        raise SparqlSyntaxError("the text nests too deeply") from None


#: Text pyoxigraph may not be shown, as it parses only to execute: LOAD fetches, SERVICE asks
#: another endpoint. rdflib's parser (parse only) judges it instead.
_RUNS_REMOTELY = re.compile(r"\b(?:LOAD|SERVICE)\b", re.I)


def _refusal(text: str, prefixes: dict[str, str] | None) -> SparqlSyntaxError | None:
    """What a complete SPARQL 1.1 parser says against `text`, which KSP's subset parser
    stopped at a feature it lacks; None when it accepts the text or none is installed
    (pyoxigraph comes with the SIB's extra, rdflib always). Only on that error path: the
    subset parser decides everything it reads."""
    try:  # SPARQL's codepoint escapes (section 19.2), which pyoxigraph does not replace in IRIs
        text = unescape_codepoints(text)  # and names: as the subset parser reads them
    except SparqlSyntaxError as exc:  # one beyond U+10FFFF or a surrogate: not SPARQL
        return exc
    if _RUNS_REMOTELY.search(text):
        return _rdflib_refusal(text, prefixes)
    try:
        import pyoxigraph as ox
    except ImportError:
        return _rdflib_refusal(text, prefixes)
    store, args = ox.Store(), {"base_iri": "http://ksp.invalid/", "prefixes": prefixes or {}}
    try:
        store.query(text, **args)  # parsed now; evaluated (on an empty store) only if read
        return None
    except SyntaxError as exc:
        as_query = str(exc)
    except Exception:  # noqa: BLE001 - parsed, then failed at evaluating: it is SPARQL
        return None
    try:
        store.update(text, **args)  # an empty, throwaway store: nothing is written
        return None
    except SyntaxError as exc:
        as_update = str(exc)
    except Exception:  # noqa: BLE001
        return None
    update = re.search(r"\b(?:INSERT|DELETE|CLEAR|DROP|CREATE|ADD|COPY|MOVE|WITH)\b", text,
                       re.I) and not re.search(r"\b(?:SELECT|ASK|CONSTRUCT|DESCRIBE)\b", text,
                                               re.I)
    said = as_update if update else as_query
    m = re.match(r"error at (\d+):(\d+): (.*)", said, re.S)
    line, column, said = (int(m[1]), int(m[2]), m[3]) if m else (None, None, said)
    said = said.split(" [", 1)[0].split("\n", 1)[0].rstrip(", ")  # not its character classes
    return SparqlSyntaxError(f"not SPARQL 1.1: {said[:200]}", line, column)


def _rdflib_refusal(text: str, prefixes: dict[str, str] | None) -> SparqlSyntaxError | None:
    """rdflib's grammar (it accepts more than SPARQL does, so it refuses less)."""
    from pyparsing import ParseException
    from rdflib.plugins.sparql.parser import parseQuery, parseUpdate

    head = "".join(f"PREFIX {name}: <{ns}>\n" for name, ns in (prefixes or {}).items())
    try:
        parseQuery(head + text)
        return None
    except ParseException:
        pass
    try:
        parseUpdate(head + text)
        return None
    except ParseException as exc:
        return SparqlSyntaxError(f"not SPARQL 1.1: {exc.msg}")


def compile(text: str, *, persistent: bool = False,  # noqa: A001 - the task's public name
            prefixes: dict[str, str] | None = None, every_graph: bool = False) -> Request:
    """The KSP request a SPARQL 1.1 query or update means (tid 0, confirmable).

    `persistent` gives the persistent form (queries and pattern updates only); `prefixes`
    declares prefix names (name → namespace) the text may use without PREFIX lines. Text that
    names no graph reads and deletes the default graph, as in SPARQL (graph options naming it);
    `every_graph=True` gives KSP's option-less form instead, which reads the union of all
    graphs and deletes from every graph (wire format 7.6, the paper's reading). Raises
    `UnsupportedSparql` for SPARQL outside the subset of docs/sparql.md and
    `SparqlSyntaxError` for text that is not SPARQL.
    """
    return compile_named(text, persistent=persistent, prefixes=prefixes,
                         every_graph=every_graph)[0]
