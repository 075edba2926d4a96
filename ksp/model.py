"""The typed message model: what `ksp.codec` turns bytes into and back.

Hot messages are NamedTuples (immutable, 0.4 µs to build against 2.1 µs for a frozen
dataclass of the same fields, measured); rarely built parts are frozen dataclasses.
A `Request` has one flat set of data fields named by their role (`delete`, `insert`, `where`,
`optional`, `template`, `projection`, `graphs`, `source`, `target`); `codec.LAYOUT` says which
ones each transaction type carries, in wire order.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import NamedTuple, Union

from .codes import Op, Status, Tx, VERSION
from .terms import Graph, IRI, Term


@dataclass(frozen=True, slots=True)
class Call:
    """A variadic operator token (§8.2: CONCAT, COALESCE, IN, NOT IN) and its count n, the
    u8 that follows its code: it pops n operands (IN and NOT IN: n + 1, the tested value first)."""

    op: Op
    count: int

    @property
    def arity(self) -> int:
        return self.op.arity + self.count


Token = Union[Term, Op, Call]
Expression = tuple[Token, ...]


class Order(IntEnum):
    NONE = 0
    ASC = 1
    DESC = 2


@dataclass(frozen=True, slots=True)
class SolutionModifier:
    order: Order = Order.NONE
    order_var: int | None = None
    limit: int | None = None
    offset: int | None = None
    distinct: bool = False


@dataclass(frozen=True, slots=True)
class Bind:
    var: int
    expr: Expression


@dataclass(frozen=True, slots=True)
class Credentials:
    kp_id: bytes  # 16 bytes
    password: str = ""


class Options(NamedTuple):
    """The options of a REQ. `prefixes=None` lets the encoder choose a prefix list."""

    prefixes: tuple[str, ...] | None = None
    delete_graphs: tuple[IRI, ...] | None = None
    insert_graphs: tuple[IRI, ...] | None = None
    query_graphs: tuple[IRI, ...] | None = None
    optional: tuple[Graph, ...] | None = None
    filters: tuple[Expression, ...] | None = None
    modifier: SolutionModifier | None = None
    binds: tuple[Bind, ...] | None = None
    max_response_size: int | None = None
    credentials: Credentials | None = None
    echo: bytes | None = None  # ECHO (§7.7): the value of the SIB's ECHO REQUIRED, 1…10 bytes
    epoch: int | None = None  # EPOCH (§15): 1 … 2^32 − 1; None is epoch 0, written as no option


NO_OPTIONS = Options()
# `options[1:] == UNSET_OPTIONS`: no option but (perhaps) PREFIX, the encoders' fast path.
UNSET_OPTIONS = (None,) * (len(Options._fields) - 1)


class Request(NamedTuple):
    """A KP's request. `tid` may be left out where a client assigns it (`transports`)."""

    tx: Tx
    tid: int = 0
    confirmable: bool = True
    delete: Graph | None = None
    insert: Graph | None = None
    where: Graph | None = None
    optional: tuple[Graph, ...] | None = None
    template: Graph | None = None
    projection: int | None = None
    graphs: tuple[IRI, ...] | None = None
    source: IRI | None = None
    target: IRI | None = None
    options: Options = NO_OPTIONS
    version: int = VERSION


class SelectResult(NamedTuple):
    """`rows[i][k]` is the binding of variable k (None = unbound); `total` is TRC."""

    variables: int
    rows: tuple[tuple[Term | None, ...], ...] = ()
    total: int | None = None
    prefixes: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class AskResult:
    value: bool


class ConstructResult(NamedTuple):
    triples: Graph = ()
    total: int | None = None
    prefixes: tuple[str, ...] | None = None


Result = Union[SelectResult, AskResult, ConstructResult]


class Behind(NamedTuple):
    """The Data field of a NUMBER_BEHIND RES (§15): the epoch of the request refused, and
    the first epoch whose every number the SIB takes as new (the KP's count moves there)."""

    epoch: int
    next_epoch: int


class Response(NamedTuple):
    """A RES, or an IND when `indication` is set (`seq` travels over UDP only).

    `result` is a query result; for an ECHO_REQUIRED RES the echo value (bytes, §7.7); for a
    NUMBER_BEHIND RES a `Behind` (§15).

    `epoch` names the epoch (1 … 2^32 − 1) of the request a RES over UDP answers (§15.6), so
    that a KP does not take a late copy's answer for a newer request's under the same TID;
    None for a request of epoch 0, and always on an IND, over TCP and on NUMBER_BEHIND."""

    tid: int
    status: Status | int = Status.OK
    result: Result | bytes | Behind | None = None
    indication: bool = False
    seq: int | None = None
    version: int = VERSION
    epoch: int | None = None


class Ack(NamedTuple):
    """Acknowledges IND `seq` and every older IND of transaction `tid` (R10)."""

    tid: int
    seq: int | None = None
    version: int = VERSION


Message = Union[Request, Response, Ack]
