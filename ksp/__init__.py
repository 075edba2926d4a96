"""ksp — the Knowledge Sharing Protocol core: codes, terms, messages and the codec (sans-I/O).

Nothing in this package opens a socket, reads a clock or imports asyncio.
"""
import importlib

from .codec import (
    LAYOUT, TCP, UDP, Transport, decode_kp_message, decode_sib_message, encode, header_size,
    peek_tid, tcp_frame_length,
)
from .codes import VERSION, LiteralType, Member, Op, Opt, Status, Tx
from .errors import (
    DecodeError, EncodeError, KspError, NoSparqlEquivalent, SparqlError, SparqlSyntaxError,
    UnsupportedSparql,
)
from .model import (
    Ack, AskResult, Behind, Bind, Call, ConstructResult, Credentials, Expression, Message, Options,
    Order, Request, Response, Result, SelectResult, SolutionModifier,
)
from .seqnum import is_newer, next_seq
from .session import (
    AckReceived, CredentialsPending, Event, IndicationReceived, KPIdentity, KPSession,
    KPUnreachable, PersistentEnded, ProtocolError, RequestReceived, RequestRefused,
    RequestTimedOut, ResponseReceived, SessionError, SIBSession, TidsBusy, Timing,
)
from .terms import DEFAULT_GRAPH, IRI, BNode, Literal, Term, Triple, Var

# The SPARQL translation (ksp.sparql) loads on first use of one of these names (PEP 562), so
# `import ksp.codec` and the other codec-only users do not load the SPARQL parser.
_SPARQL_NAMES = {
    "compile_sparql": "compile", "compile_sparql_named": "compile_named",
    "from_results_json": "from_results_json", "reads_union": "reads_union",
    "render_sparql": "render", "render_sparql_where": "render_where",
    "results_json": "results_json",
}


def __getattr__(name: str):
    if name == "sparql" or name in _SPARQL_NAMES:
        sparql = importlib.import_module(f"{__name__}.sparql")  # sets ksp.sparql
        if name == "sparql":
            return sparql
        value = globals()[name] = getattr(sparql, _SPARQL_NAMES[name])
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_SPARQL_NAMES))


__all__ = [
    "LAYOUT", "TCP", "UDP", "Transport", "decode_kp_message", "decode_sib_message", "encode",
    "header_size", "peek_tid", "tcp_frame_length", "VERSION", "LiteralType", "Member", "Op", "Opt",
    "Status", "Tx", "DecodeError", "EncodeError", "KspError", "Ack", "AskResult", "Behind", "Bind",
    "Call", "ConstructResult", "Credentials", "Expression", "Message", "Options", "Order", "Request",
    "Response", "Result", "SelectResult", "SolutionModifier", "is_newer", "next_seq",
    "DEFAULT_GRAPH", "IRI", "BNode", "Literal", "Term", "Triple", "Var",
    "AckReceived", "CredentialsPending", "RequestRefused", "Event", "IndicationReceived",
    "KPIdentity", "KPSession", "KPUnreachable",
    "PersistentEnded", "ProtocolError", "RequestReceived", "RequestTimedOut", "ResponseReceived",
    "SessionError", "SIBSession", "TidsBusy", "Timing",
    "NoSparqlEquivalent", "SparqlError", "SparqlSyntaxError", "UnsupportedSparql",
    "render_sparql", "render_sparql_where", "compile_sparql", "compile_sparql_named", "results_json",
    "from_results_json", "reads_union",
]
