"""A SEPA update that fails changes nothing, through the gate over real sockets: the store's
quads, its graph set (which named graphs exist, empty ones included) and what every subscriber
(SEPA over WebSocket, KSP over UDP) has been told are exactly as before, smart and naive."""
from __future__ import annotations

import asyncio

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from transports.client import connect

from test_sepa_gate import EX, PRE, Lab, receive, rows, run, values

GRAPHS = "SELECT DISTINCT ?g WHERE { GRAPH ?g {} }"
QUADS = "SELECT ?s ?p ?o ?g WHERE { { ?s ?p ?o } UNION { GRAPH ?g { ?s ?p ?o } } }"
SETUP = PRE + ("INSERT DATA { ex:a ex:p 1 . GRAPH ex:full { ex:b ex:p 2 . ex:c ex:p 3 } } ; "
               "CREATE GRAPH ex:empty")
FAILS = " ; CREATE GRAPH ex:empty"  # it exists: 400
CAP = 10  # [limits] max_quads: the setup's 3 and what the failing updates add fit

#: Updates whose last operation fails, by what comes before it, with their status.
FAILING = {
    "insert into a new graph": (f"INSERT DATA {{ GRAPH ex:leak {{ ex:a ex:b ex:c }} }}{FAILS}",
                                400),
    "modify into a new graph": ("INSERT { GRAPH ex:made { ?s ?p ?o } } "
                                f"WHERE {{ GRAPH ex:full {{ ?s ?p ?o }} }}{FAILS}", 400),
    "create": (f"CREATE GRAPH ex:new{FAILS}", 400),
    "drop": (f"DROP GRAPH ex:full{FAILS}", 400),
    "drop an empty graph": ("DROP GRAPH ex:empty ; CREATE GRAPH ex:full", 400),
    "drop all": ("DROP ALL ; DROP GRAPH ex:full", 400),
    "move": (f"MOVE ex:full TO ex:moved{FAILS}", 400),
    "copy": (f"COPY ex:full TO ex:copied{FAILS}", 400),
    "add": (f"ADD DEFAULT TO ex:added{FAILS}", 400),
    "the cap after a create": ("CREATE GRAPH ex:capped ; INSERT DATA { GRAPH ex:capped { "
                               + " ".join(f"ex:q{i} ex:p {i} ." for i in range(CAP)) + " } }",
                               507),
}
#: The graphs the failed updates would have made: each can be created afterwards.
MADE = ("leak", "made", "new", "moved", "copied", "added", "capped")


async def state(lab: Lab) -> tuple:
    graphs = values(await lab.select(GRAPHS), "g")
    return graphs, rows({"results": {"bindings": await lab.select(QUADS)}})


@pytest.mark.parametrize("smart", [True, False], ids=["smart", "naive"])
def test_a_failed_update_leaves_store_graphs_and_subscribers_as_before(smart):
    async def main():
        async with Lab(ksp=True, smart=smart, sib_options={"max_quads": CAP}) as lab, \
                lab.http.ws_connect(lab.ws_url) as ws, \
                connect(f"udp://127.0.0.1:{lab.server.udp.port}") as kp:
            await lab.update(SETUP)
            alias = {}
            for name, query in (("graphs", GRAPHS), ("quads", QUADS)):
                alias[(await lab.subscribe(ws, query, name))["notification"]["spuid"]] = name
            async with kp.subscribe(PRE + "SELECT ?s ?o FROM ex:full WHERE { ?s ex:p ?o }") as sub:
                first = await asyncio.wait_for(sub.__anext__(), 10)
                assert len(first.result.rows) == 2
                before = await state(lab)
                for name, (text, status) in FAILING.items():
                    await lab.update(PRE + text, status=status)
                    assert await state(lab) == before, name
                # The first notifications after the failed updates are this change's own.
                await lab.update(PRE + "INSERT DATA { GRAPH ex:marker { ex:m ex:p 9 } "
                                 "GRAPH ex:full { ex:d ex:p 4 } }")
                by_alias = {}
                for _ in range(2):
                    note = (await receive(ws))["notification"]
                    by_alias[alias[note["spuid"]]] = note
                    assert note["sequence"] == 1
                    assert note["removedResults"]["results"]["bindings"] == []
                added = by_alias["graphs"]["addedResults"]["results"]["bindings"]
                assert values(added, "g") == [EX + "marker"]
                added = by_alias["quads"]["addedResults"]["results"]["bindings"]
                assert values(added, "s") == [EX + "d", EX + "m"]
                ind = await asyncio.wait_for(sub.__anext__(), 10)
                assert sorted(str(r[0]) for r in ind.result.rows) == [
                    EX + "b", EX + "c", EX + "d"]
            for name in MADE:  # none of them was left behind
                await lab.update(PRE + f"CREATE GRAPH ex:{name}")
    run(main())


_NAMES = ("full", "empty", "g1", "g2")
_GRAPH_OPS = st.lists(st.one_of(
    st.tuples(st.just("insert"), st.sampled_from(_NAMES), st.integers(0, 2)),
    st.tuples(st.sampled_from(["create", "drop", "clear", "delete"]), st.sampled_from(_NAMES),
              st.integers(0, 2)),
    st.tuples(st.sampled_from(["move", "copy", "add", "modify"]), st.sampled_from(_NAMES),
              st.sampled_from(_NAMES)),
    st.tuples(st.sampled_from(["drop-all", "clear-all"]), st.just(""), st.just(0)),
), min_size=1, max_size=6)


def _graph_op(op: str, g: str, x) -> str:
    return {
        "insert": f"INSERT DATA {{ GRAPH ex:{g} {{ ex:s{x} ex:p {x} }} }}",
        "delete": f"DELETE DATA {{ GRAPH ex:{g} {{ ex:s{x} ex:p {x} }} }}",
        "create": f"CREATE SILENT GRAPH ex:{g}",
        "drop": f"DROP SILENT GRAPH ex:{g}",
        "clear": f"CLEAR SILENT GRAPH ex:{g}",
        "move": f"MOVE SILENT ex:{g} TO ex:{x}",
        "copy": f"COPY SILENT ex:{g} TO ex:{x}",
        "add": f"ADD SILENT ex:{g} TO ex:{x}",
        "modify": (f"INSERT {{ GRAPH ex:{x} {{ ?s ?p ?o }} }} "
                   f"WHERE {{ GRAPH ex:{g} {{ ?s ?p ?o }} }}"),
        "drop-all": "DROP ALL",
        "clear-all": "CLEAR ALL",
    }[op]


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(ops=_GRAPH_OPS, smart=st.booleans())
def test_graph_operations_ending_in_a_failure_change_nothing(ops, smart):
    """Any sequence of graph operations, then one that fails (DROP of a graph that does not
    exist): the graph set, the quads and the subscriber's view are as before."""
    async def main():
        async with Lab(smart=smart) as lab, lab.http.ws_connect(lab.ws_url) as ws:
            await lab.update(SETUP)
            await lab.subscribe(ws, GRAPHS, "graphs")
            before = await state(lab)
            text = " ; ".join(_graph_op(*op) for op in ops) + " ; DROP GRAPH ex:nothing"
            await lab.update(PRE + text, status=400)
            assert await state(lab) == before
            await lab.update(PRE + "CREATE GRAPH ex:marker")
            note = (await receive(ws))["notification"]
            assert note["sequence"] == 1
            assert values(note["addedResults"]["results"]["bindings"], "g") == [EX + "marker"]
            assert note["removedResults"]["results"]["bindings"] == []
    run(main())
