"""Checks on a decoded request that only the SIB can make, in the spec's fault order (§3.2):
Data fields first (status 0x04), then options in ascending type code (0x05 not applicable,
0x06 malformed). The codec already rejects what bytes alone show; requests built in-process
(tests, bridge) arrive here unchecked, so the wire rules are checked again."""
from __future__ import annotations

from ksp.codes import OPTION_APPLIES, Opt, Status, Tx
from ksp.model import UNSET_OPTIONS, Order, Request
from ksp.terms import DEFAULT_GRAPH, IRI, BNode, Literal, Var

from .errors import RequestError

# A graph field that is None is an empty Graph (TC = 0) and valid; these fields have no
# empty form.
_REQUIRED: dict[Tx, tuple[str, ...]] = {
    Tx.CREATE: ("graphs",), Tx.DROP: ("graphs",),
    Tx.COPY: ("source", "target"), Tx.MOVE: ("source", "target"), Tx.ADD: ("source", "target"),
}


_OPTS = tuple(Opt)  # iterating the enum itself costs a call per member


def _bad_data(message: str) -> RequestError:
    return RequestError(Status.INVALID_DATA_FORMAT, message)


def _check_graph(graph, *, variables: bool, bnodes: bool, what: str) -> None:
    for t in graph:
        s, p, o = t
        if isinstance(s, Literal):
            raise _bad_data(f"{what}: a literal subject")
        if not isinstance(p, (IRI, Var)):
            raise _bad_data(f"{what}: a predicate must be an IRI or a variable")
        for term in t:
            if isinstance(term, Var) and not variables:
                raise _bad_data(f"{what}: a variable in a DATA operation")
            if isinstance(term, BNode) and not bnodes:
                raise _bad_data(f"{what}: a blank node in DELETE DATA")
            if not isinstance(term, (IRI, Var, BNode, Literal)):
                raise _bad_data(f"{what}: {term!r} is not an RDF term")


def check_request(req: Request) -> None:
    """Raise RequestError with the status of the first fault of `req`, if any."""
    tx = req.tx
    for name in _REQUIRED.get(tx.base, ()):
        if getattr(req, name) is None:
            raise _bad_data(f"{tx.name} without its {name} field")
    data = tx.is_data_update
    if req.delete is not None:
        _check_graph(req.delete, variables=not data, bnodes=not data, what="delete graph")
    if req.insert is not None:
        _check_graph(req.insert, variables=not data, bnodes=True, what="insert graph")
    for name in ("template", "where"):
        if getattr(req, name) is not None:
            _check_graph(getattr(req, name), variables=True, bnodes=True, what=name)
    for g in req.optional or ():
        _check_graph(g, variables=True, bnodes=True, what="optional graph")
    if tx in (Tx.CREATE, Tx.DROP):
        if not req.graphs:
            raise _bad_data("GC = 0")
        if tx is Tx.CREATE and DEFAULT_GRAPH in req.graphs:
            raise _bad_data("CREATE of the default graph")
    _check_options(req)


def _check_options(req: Request) -> None:
    opts = req.options
    if opts[1:] == UNSET_OPTIONS:  # no option but PREFIX: nothing to check
        return
    for code, value in zip(_OPTS, opts):
        if value is None or code is Opt.PREFIX:
            continue  # prefixes were resolved by the decoder (which gives () for none)
        if req.tx not in OPTION_APPLIES[code]:
            raise RequestError(Status.INVALID_OPTION_TYPE,
                               f"option {code.name} does not apply to {req.tx.name}")
        if isinstance(value, tuple) and not value:
            raise RequestError(Status.INVALID_OPTION_FORMAT, f"option {code.name} is empty")
    if opts.optional is not None:
        for g in opts.optional:
            try:
                _check_graph(g, variables=True, bnodes=True, what="optional pattern")
            except RequestError as exc:
                raise RequestError(Status.INVALID_OPTION_FORMAT, str(exc)) from None
    mod = opts.modifier
    if mod is not None and (mod.order is not Order.NONE) != (mod.order_var is not None):
        raise RequestError(Status.INVALID_OPTION_FORMAT, "ORDER needs exactly one variable")
