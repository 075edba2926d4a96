"""Messages the wire cannot carry raise `ksp.EncodeError` (never another exception, never bytes)
with a message that says what is wrong."""
from __future__ import annotations

import pytest

from ksp import (
    IRI, TCP, UDP, Ack, Bind, BNode, Credentials, EncodeError, KspError, Literal, Op, Options,
    Request, Response, SelectResult, SolutionModifier, Order, Status, Triple, Tx, Var, encode,
)
from ksp.terms import RDF_LANGSTRING, XSD_INTEGER

S, P, O = IRI("urn:s"), IRI("urn:p"), IRI("urn:o")
T = Triple(S, P, O)
NO_PREFIXES = Options(prefixes=())


def _many(n: int) -> tuple[Triple, ...]:
    return tuple(Triple(S, P, IRI(f"urn:o{i}")) for i in range(n))


def _select(**options) -> Request:
    return Request(Tx.SELECT, 1, projection=1, where=(Triple(Var(0), P, O),),
                   options=Options(**options))


def _insert_data(*triples: Triple, **options) -> Request:
    return Request(Tx.INSERT_DATA, 1, insert=triples, options=Options(**options))


# (id, message, regex the error message must match)
CASES = [
    # -- the brief's list ---------------------------------------------------------------------
    ("256-triples-in-a-graph", _insert_data(*_many(256)), r"256 triples.*at most 255"),
    ("256-triples-in-where",
     Request(Tx.SELECT, 1, projection=0, where=_many(256)), r"256 triples.*at most 255"),
    ("256-triples-in-optional-pattern",
     Request(Tx.DELETE, 1, delete=(T,), where=(T,), options=Options(optional=(_many(256),))),
     r"256 triples.*at most 255"),
    ("variable-in-insert-data", _insert_data(Triple(Var(0), P, O)), r"variable"),
    ("variable-in-delete-data-object",
     Request(Tx.DELETE_DATA, 1, delete=(Triple(S, P, Var(3)),)), r"variable"),
    ("variable-in-update-data-insert",
     Request(Tx.UPDATE_DATA, 1, delete=(T,), insert=(Triple(S, Var(1), O),)), r"variable"),
    ("literal-subject", _insert_data(Triple(Literal("x"), P, O)), r"Literal.*subject"),
    ("literal-subject-in-where",
     Request(Tx.ASK, 1, where=(Triple(Literal("1", XSD_INTEGER), P, Var(0)),)),
     r"Literal.*subject"),
    ("32768-byte-uri-graph-name",
     Request(Tx.DROP, 1, graphs=(IRI("u" * 32768),)), r"32768 bytes.*32767"),
    ("32768-byte-uri-in-a-triple",
     _insert_data(Triple(S, P, IRI("é" * 16384)), prefixes=()), r"32768 bytes.*32767"),
    ("tid-65536", Request(Tx.RESET, 65536), r"transaction ID 65536"),
    ("tid-negative", Request(Tx.RESET, -1), r"transaction ID -1"),
    ("solution-modifier-on-ask",
     Request(Tx.ASK, 1, where=(T,), options=Options(modifier=SolutionModifier(limit=1))),
     r"SOLUTION_MODIFIER does not apply to ASK"),
    ("optional-pattern-on-select",
     _select(optional=((T,),)), r"OPTIONAL_PATTERN does not apply to SELECT"),
    ("insert-graph-on-delete",
     Request(Tx.DELETE, 1, delete=(T,), where=(T,), options=Options(insert_graphs=(S,))),
     r"INSERT_GRAPH does not apply to DELETE"),
    ("filter-on-insert-data",
     _insert_data(T, filters=((Literal("true", "http://www.w3.org/2001/XMLSchema#boolean"),),)),
     r"FILTER does not apply to INSERT_DATA"),
    ("query-graph-on-create",
     Request(Tx.CREATE, 1, graphs=(S,), options=Options(query_graphs=(S,))),
     r"QUERY_GRAPH does not apply to CREATE"),
    ("prefix-on-terminate",
     Request(Tx.TERMINATE, 1, options=Options(prefixes=("urn:",))),
     r"PREFIX does not apply to TERMINATE"),
    ("rpn-stack-underflow", _select(filters=((Var(0), Op.ADD),)), r"ADD needs 2 operands, has 1"),
    ("rpn-underflow-ternary",
     _select(filters=((Literal("a"), Literal("b"), Op.REGEX_FLAGS),)),
     r"REGEX_FLAGS needs 3 operands, has 2"),
    ("rpn-underflow-in-bind",
     _select(binds=(Bind(1, (Op.NOT,)),)), r"NOT needs 1 operands, has 0"),
    ("rpn-leaves-two-values",
     _select(filters=((Var(0), Var(1)),)), r"leaves 2 values"),
    ("bound-not-after-variable",
     _select(filters=((Literal("x"), Op.BOUND),)), r"bound\(\) must follow a variable"),
    ("empty-expression", _select(filters=((),)), r"1\.\.255 tokens"),
    ("256-token-expression",
     _select(filters=((Var(0),) + (Var(1), Op.ADD) * 127 + (Op.NOT,),)), r"1\.\.255 tokens"),
    ("langstring-without-tag",
     _insert_data(Triple(S, P, Literal("chat", RDF_LANGSTRING))), r"langString.*language tag"),
    ("invalid-language-tag", _insert_data(Triple(S, P, Literal.lang_string("chat", "en_US"))),
     r"invalid language tag 'en_US'"),
    ("empty-language-tag", _insert_data(Triple(S, P, Literal.lang_string("chat", ""))),
     r"invalid language tag ''"),
    ("non-ascii-language-tag", _insert_data(Triple(S, P, Literal.lang_string("chat", "fé"))),
     r"invalid language tag 'fé'"),
    ("256-byte-language-tag",
     _insert_data(Triple(S, P, Literal.lang_string("chat", "a" * 256))),
     r"invalid language tag"),
    ("invalid-language-tag-in-filter",
     _select(filters=((Var(0), Literal.lang_string("x", "en us"), Op.EQ),)),
     r"invalid language tag 'en us'"),
    # -- more of the same kind ------------------------------------------------------------------
    ("create-default-graph",
     Request(Tx.CREATE, 1, graphs=(S, IRI(""))), r"CREATE cannot name the default graph"),
    ("create-no-graph", Request(Tx.CREATE, 1, graphs=()), r"graphs: 0 items"),
    ("256-graph-names",
     Request(Tx.DROP, 1, graphs=tuple(IRI(f"urn:g{i}") for i in range(256))), r"256 items"),
    ("empty-prefix-entry", _insert_data(T, prefixes=("urn:", "")), r"prefix.*empty"),
    ("empty-datatype-iri", _insert_data(Triple(S, P, Literal("x", ""))), r"datatype IRI"),
    ("256-prefixes",
     _insert_data(T, prefixes=tuple(f"urn:{i}:" for i in range(256))), r"256 prefixes"),
    ("empty-list-option", _select(query_graphs=()), r"QUERY_GRAPH: 0 items"),
    ("bnode-predicate", _insert_data(Triple(S, BNode("b"), O)), r"BNode.*predicate"),
    ("literal-predicate", _insert_data(Triple(S, Literal("p"), O)), r"Literal.*predicate"),
    ("empty-bnode-label", _insert_data(Triple(BNode(""), P, O)), r"blank node needs a label"),
    ("variable-index-256", _select(filters=((Var(256), Op.BOUND),)), r"variable index 256"),
    ("data-field-not-in-layout",
     Request(Tx.ASK, 1, where=(T,), template=(T,)), r"ASK has no template field"),
    ("select-without-projection", Request(Tx.SELECT, 1, where=(T,)), r"projection"),
    ("copy-without-target", Request(Tx.COPY, 1, source=S), r"COPY needs a target graph"),
    ("order-without-variable",
     _select(modifier=SolutionModifier(order=Order.ASC)), r"needs a variable index"),
    ("limit-65536", _select(modifier=SolutionModifier(limit=65536)), r"limit/offset 65536"),
    ("max-response-size-2^32", _select(max_response_size=2**32), r"max response size"),
    ("kp-id-15-bytes",
     Request(Tx.RESET, 1, options=Options(credentials=Credentials(b"k" * 15))), r"16 bytes"),
    ("password-256-bytes",
     Request(Tx.RESET, 1, options=Options(credentials=Credentials(b"k" * 16, "é" * 128))),
     r"password is at most 255 bytes"),
    ("unknown-transaction-type", Request(0x17, 1), r"unknown transaction type"),
    ("ind-seq-65536", Response(1, indication=True, seq=65536), r"sequence number 65536"),
    ("status-128", Response(1, status=128), r"status 128"),
    ("error-status-with-result",
     Response(1, status=Status.INTERNAL_ERROR, result=SelectResult(0)), r"carries no result"),
    ("row-length-not-vc", Response(1, result=SelectResult(2, ((S,),))), r"1 terms, VC is 2"),
    ("total-below-rows",
     Response(1, result=SelectResult(1, ((S,), (O,)), total=1)), r"total 1.*2 results"),
    ("variable-in-a-result", Response(1, result=SelectResult(1, ((Var(0),),))), r"variable"),
    ("variable-in-a-construct-result",
     Response(1, result=__import__("ksp").ConstructResult((Triple(Var(0), P, O),))),
     r"variable"),
    ("ack-seq-65536", Ack(1, 65536), r"sequence number 65536"),
]


@pytest.mark.parametrize("transport", [UDP, TCP])
@pytest.mark.parametrize("msg,pattern", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_encode_error(msg, pattern, transport):
    if isinstance(msg, Ack) and transport is TCP:
        pytest.skip("covered by test_ack_over_tcp")
    if isinstance(msg, Response) and msg.seq is not None and transport is TCP:
        pytest.skip("a TCP IND carries no sequence number (R11), so any seq is dropped")
    with pytest.raises(EncodeError, match=pattern):
        encode(msg, transport)


@pytest.mark.parametrize("seq", [None, 0, 7])
def test_ack_over_tcp(seq):
    with pytest.raises(EncodeError, match=r"no ACKs over TCP"):
        encode(Ack(1, seq), TCP)


def test_encode_error_is_a_ksp_error_and_a_value_error():
    assert issubclass(EncodeError, KspError) and issubclass(EncodeError, ValueError)


@pytest.mark.parametrize("msg", [
    _insert_data(Triple(S, P, IRI("urn:\ud800"))),
    _insert_data(Triple(S, P, Literal("lone \udfff surrogate"))),
    Request(Tx.DROP, 1, graphs=(IRI("urn:\ud800"),)),
], ids=["iri", "literal", "graph-name"])
def test_text_that_is_not_utf8_encodable(msg):
    """§1: text is UTF-8; a string with a lone surrogate has no UTF-8 form."""
    with pytest.raises(EncodeError):
        encode(msg, UDP)
