"""Every transaction type through real sockets: one script of requests — all 22 transaction
types, every option, persistent queries and rules, TERMINATE and RESET — sent to a SIB over
loopback UDP and TCP (`transports.Server`, the KP side's `KPSession` links) gives the same RESs
and the same last IND of every persistent query as the same script submitted in-process
(`sib.testing.Client`, which the detailed SIB tests use)."""
from __future__ import annotations

import asyncio

import pytest

from ksp import (
    DEFAULT_GRAPH, UDP, Literal, Options, Request, Response, Status, Transport, Triple, Tx,
    Var, decode_sib_message, encode,
)
from ksp.codes import Op
from ksp.model import Bind, Order, SolutionModifier
from sib import Sib
from sib.testing import Client, ex
from transports import Server
from transports.tcp import open_tcp_link
from transports.udp import open_udp_link

S, T, P, Q, R, G1, G2 = ex("s"), ex("t"), ex("p"), ex("q"), ex("r"), ex("g1"), ex("g2")
X, Y, Z = Var(0), Var(1), Var(2)


def lit(v) -> Literal:
    return Literal.of(v)


# (name, request); a TERMINATE names the persistent request it ends by that request's name.
SCRIPT: list[tuple[str, Request | str]] = [
    ("data", Request(Tx.INSERT_DATA, 0, insert=(Triple(S, P, lit(1)), Triple(T, P, lit(5)),
                                                Triple(S, R, lit("a"))))),
    ("data_g1", Request(Tx.INSERT_DATA, 0, insert=(Triple(S, P, lit(7)),),
                        options=Options(insert_graphs=(G1,)))),
    ("sub_select", Request(Tx.SELECT_PERSISTENT, 0, projection=2, where=(Triple(X, P, Y),),
                           options=Options(filters=((Y, lit(2), Op.GT),)))),
    ("sub_ask", Request(Tx.ASK_PERSISTENT, 0, where=(Triple(S, Q, X),))),
    ("sub_construct", Request(Tx.CONSTRUCT_PERSISTENT, 0, template=(Triple(X, R, Y),),
                              where=(Triple(X, R, Y),))),
    ("rule_insert", Request(Tx.INSERT_PERSISTENT, 0, insert=(Triple(X, Q, Y),),
                            where=(Triple(X, P, Y),),
                            options=Options(filters=((Y, lit(10), Op.GT),)))),
    ("rule_delete", Request(Tx.DELETE_PERSISTENT, 0, delete=(Triple(X, R, lit("gone")),),
                            where=(Triple(X, R, lit("gone")),))),
    ("rule_update", Request(Tx.UPDATE_PERSISTENT, 0, delete=(Triple(X, R, lit("old")),),
                            insert=(Triple(X, R, lit("new")),), where=(Triple(X, R, lit("old")),))),
    ("more", Request(Tx.INSERT_DATA, 0, insert=(Triple(T, P, lit(11)), Triple(T, R, lit("old")),
                                                Triple(T, R, lit("gone"))))),
    ("delete_data", Request(Tx.DELETE_DATA, 0, delete=(Triple(S, P, lit(1)),))),
    ("update_data", Request(Tx.UPDATE_DATA, 0, delete=(Triple(T, P, lit(5)),),
                            insert=(Triple(T, P, lit(6)),))),
    ("insert", Request(Tx.INSERT, 0, insert=(Triple(X, Z, lit(True)),), where=(Triple(X, R, Y),))),
    ("delete", Request(Tx.DELETE, 0, delete=(Triple(X, Z, lit(True)),),
                       where=(Triple(X, Z, lit(True)),))),
    ("update", Request(Tx.UPDATE, 0, delete=(Triple(X, P, Y),), insert=(Triple(X, P, Z),),
                       where=(Triple(X, P, Y),),
                       options=Options(binds=(Bind(2, (Y, lit(1), Op.ADD)),),
                                       delete_graphs=(DEFAULT_GRAPH,),
                                       insert_graphs=(DEFAULT_GRAPH,)))),
    ("select", Request(Tx.SELECT, 0, projection=3, where=(Triple(X, P, Y),),
                       optional=((Triple(X, R, Z),),),
                       options=Options(modifier=SolutionModifier(Order.ASC, 1, limit=5)))),
    ("select_g1", Request(Tx.SELECT, 0, projection=1, where=(Triple(S, P, X),),
                          options=Options(query_graphs=(G1,)))),
    ("select_small", Request(Tx.SELECT, 0, projection=2, where=(Triple(X, Y, Var(2)),),
                             options=Options(max_response_size=40))),
    ("ask", Request(Tx.ASK, 0, where=(Triple(T, Q, X),))),
    ("construct", Request(Tx.CONSTRUCT, 0, template=(Triple(X, Q, Y),),
                          where=(Triple(X, Q, Y),))),
    ("create", Request(Tx.CREATE, 0, graphs=(G2,))),
    ("create_again", Request(Tx.CREATE, 0, graphs=(G2,))),
    ("copy", Request(Tx.COPY, 0, source=G1, target=G2)),
    ("add", Request(Tx.ADD, 0, source=DEFAULT_GRAPH, target=G2)),
    ("move", Request(Tx.MOVE, 0, source=G2, target=G1)),
    ("drop", Request(Tx.DROP, 0, graphs=(G1,))),
    ("terminate_select", "sub_select"),
    ("after_terminate", Request(Tx.INSERT_DATA, 0, insert=(Triple(S, P, lit(42)),))),
    ("terminate_unknown", Request(Tx.TERMINATE, 0)),
    ("reset", Request(Tx.RESET, 0)),
    ("after_reset", Request(Tx.INSERT_DATA, 0, insert=(Triple(S, R, lit("late")),))),
    ("everything", Request(Tx.SELECT, 0, projection=3, where=(Triple(X, Y, Z),))),
]


def test_the_script_covers_every_transaction_type():
    covered = {req.tx for _, req in SCRIPT if isinstance(req, Request)} | {Tx.TERMINATE}
    assert covered == set(Tx)


def _normal(response: Response) -> tuple:
    """What must agree: status and result (TIDs and sequence numbers are the transport's)."""
    result = response.result
    if result is not None and hasattr(result, "rows"):
        result = (result.variables, sorted(map(repr, result.rows)), result.total)
    elif result is not None and hasattr(result, "triples"):
        result = (sorted(map(repr, result.triples)), result.total)
    return Status(response.status), result


def _wire(response: Response, request: Request, transport: Transport) -> Response:
    """The answer as a KP receives it: encoded under the request's MAX RESPONSE SIZE (which the
    transport's session applies, not the SIB; it counts the whole message, header included)
    and decoded."""
    seq = 1 if response.indication and transport is UDP else None
    data = encode(response._replace(seq=seq), transport,
                  max_size=request.options.max_response_size)
    return decode_sib_message(data, transport, answers=request.tx)


def tidded(script):
    """The script's requests with TIDs (the step number); a TERMINATE names the TID of the
    request it ends, the unknown one 999."""
    tids = {}
    for i, (name, req) in enumerate(script, start=1):
        if isinstance(req, str):
            req = Request(Tx.TERMINATE, tids[req])
        elif req.tx is Tx.TERMINATE:
            req = req._replace(tid=999)
        else:
            req = req._replace(tid=i)
        tids[name] = req.tid
        yield name, req


async def in_process(transport: Transport, script=SCRIPT) -> tuple[dict, dict]:
    """RESs by name, and the last IND of every persistent request, of `script` in a SIB."""
    sib = Sib()
    kp = Client(sib)
    res, tids, reqs = {}, {}, {}
    for name, req in tidded(script):
        tids[name] = req.tid
        res[name] = _normal(_wire(await kp.call(req), req, transport))
        reqs[name] = req
    last = {name: _normal(_wire(kp.inds(req.tid)[-1], req, transport))
            for name, req in reqs.items() if req.tx.persistent and kp.inds(req.tid)}
    await sib.close()
    return res, last


class _Sink:
    def __init__(self) -> None:
        self.inds: list[Response] = []
        self.ended: int | None = None
        self.failed: BaseException | None = None

    def deliver(self, response: Response) -> None:
        self.inds.append(response)

    def end(self, status) -> None:
        self.ended = status

    def fail(self, exc: BaseException) -> None:  # the link closing at the end of the test
        self.failed = exc


async def send_script(link, script, expected: dict | None = None, between=None
                      ) -> tuple[dict, dict]:
    """`script` sent on a KP `link`, each request after the last one's RES (a TERMINATE names
    the TID the link gave the request it ends). Returns the RESs by name, and the last IND of
    every persistent request once they equal `expected` (they may still be in flight on
    loopback when the last RES arrives; after 30 s, as they are: the caller's assertion shows
    the difference). `between`: awaited after each RES."""
    res, tids, sinks = {}, {}, {}
    for name, req in script:
        if isinstance(req, str):
            req = Request(Tx.TERMINATE, tids[req])
        elif req.tx is Tx.TERMINATE:
            req = req._replace(tid=999)
        sink = _Sink() if req.tx.persistent else None
        response = await asyncio.wait_for(link.request(req, sink), 30)
        tids[name] = response.tid
        if sink is not None:
            sinks[name] = sink
        res[name] = _normal(response)
        if between is not None:
            await between()

    def last() -> dict:  # a persistent request ended by the SIB: its last IND is the end's
        return {n: (Status(s.ended), None) if s.ended not in (None, Status.OK)
                else _normal(s.inds[-1]) for n, s in sinks.items()
                if s.inds or s.ended not in (None, Status.OK)}

    if expected is not None:  # up to 30 s for the last INDs to arrive; the caller compares
        deadline = asyncio.get_running_loop().time() + 30
        while last() != expected and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
    return res, last()


async def over_sockets(transport: str, expected: dict) -> tuple[dict, dict]:
    """The script over real sockets; `expected`: the last INDs to wait for."""
    sib = Sib()
    server = await Server.start(sib, **{transport: 0})
    port = getattr(server, transport).port
    opener = open_udp_link if transport == "udp" else open_tcp_link
    link = await opener("127.0.0.1", port)
    try:
        # as the in-process client does: the SIB idle before the next request
        return await send_script(link, SCRIPT, expected, between=sib.drain)
    finally:
        await link.close()
        await server.close()
        await sib.close()


@pytest.mark.parametrize("transport", ["udp", "tcp"])
def test_every_transaction_over_real_sockets_matches_in_process(transport):
    expected_res, expected_last = asyncio.run(in_process(Transport(transport)))
    res, last = asyncio.run(over_sockets(transport, expected_last))
    assert res == expected_res
    assert last == expected_last
    # the script means something: statuses and INDs that only a working SIB gives
    assert expected_res["create_again"][0] == Status.GRAPH_EXISTS
    assert expected_res["terminate_unknown"][0] == Status.UNKNOWN_TRANSACTION
    assert expected_res["select_small"][1][2] > len(expected_res["select_small"][1][1])  # TRC > RC
    assert set(expected_last) >= {"sub_select", "sub_ask", "sub_construct"}
    assert expected_last["sub_ask"][1].value is True  # the rule inserted gh:q, the ASK saw it
