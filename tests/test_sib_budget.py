"""No request stalls the SIB: one-shot queries run beside the writes on reader
threads, and every evaluation has a time budget (`sib.budget`, `sib.readers`).

Through real sockets: a cross product of four patterns over 40 triples (2.56 million rows,
which held the SIB 28.7 s) is answered LIMIT_EXCEEDED at its budget while another KP's update
is answered and its subscriber told meanwhile. Assertions are on what is answered and in which
order, never on elapsed time.
"""
from __future__ import annotations

import asyncio
import contextlib
import threading
import time

import pytest

from ksp import IRI, Literal, Request, Status, Triple, Tx, Var
from sib import Sib
from sib.budget import Budgets, Deadline, OverBudget, timed, within
from sib.readers import Readers, ReadersBusy
from sib.testing import ex
from transports import Server, connect
from transports.errors import KspStatusError

from transport_helpers import until

P = ex("p")
A, B, C, D, E, F, G, H, I, J, K, L = (Var(n) for n in range(12))
CROSS = Request(Tx.SELECT, 0, projection=12, where=(
    Triple(A, B, C), Triple(D, E, F), Triple(G, H, I), Triple(J, K, L)))


def triples(n: int, start: int = 0) -> tuple[Triple, ...]:
    return tuple(Triple(ex(f"s{i}"), P, Literal.of(i)) for i in range(start, start + n))


@contextlib.asynccontextmanager
async def kps_of(sib: Sib, count: int = 1, scheme: str = "udp"):
    """`count` KPs connected to `sib` over real loopback sockets; all closed after."""
    await sib.start()
    server = await Server.start(sib, udp=0, tcp=0)
    port = server.udp.port if scheme == "udp" else server.tcp.port
    kps = []
    try:
        for _ in range(count):
            kps.append(await connect(f"{scheme}://127.0.0.1:{port}"))
        yield kps
    finally:
        for kp in kps:
            await kp.close()
        await server.close()
        await sib.close()


def run(coro):
    return asyncio.run(coro)


async def status(request) -> str:
    """The status name of a request's answer (the client raises on one that is not OK)."""
    try:
        return Status((await request).status).name
    except KspStatusError as exc:
        return Status(exc.status).name


@pytest.mark.parametrize("scheme", ["udp", "tcp"])
def test_a_query_past_its_budget_is_refused_while_another_kps_update_goes_through(scheme):
    sib = Sib(budgets=Budgets(query=1.0))
    order: list[str] = []

    async def scenario():
        async with kps_of(sib, 3, scheme) as (heavy, sensor, watcher):
            await sensor.request(Request(Tx.INSERT_DATA, 0, insert=triples(40)))
            sub = watcher.subscribe(Request(Tx.SELECT_PERSISTENT, 0, projection=1,
                                            where=(Triple(ex("fan"), P, A),)))
            async with sub:
                async def query():
                    order.append(f"query {await status(heavy.request(CROSS))}")

                async def update():
                    await until(lambda: sib.readers.running,  # the query is being evaluated
                                what="the cross product on a reader thread")
                    fan = Request(Tx.INSERT_DATA, 0,
                                  insert=(Triple(ex("fan"), P, Literal.of(1)),))
                    order.append(f"update {await status(sensor.request(fan))}")
                    async for state in sub:
                        if state.result.rows:
                            order.append("IND")
                            return

                await asyncio.wait_for(asyncio.gather(query(), update()), 120)

    run(scenario())
    assert order == ["update OK", "IND", "query LIMIT_EXCEEDED"]
    assert sib.readers.over_budget == 1


def test_a_kp_reads_what_it_wrote_before():
    """Reads start in arrival order with the writes: a query pipelined behind an update (one
    TCP stream, no wait for the OK) sees it."""
    sib = Sib()

    async def scenario():
        async with kps_of(sib, scheme="tcp") as (kp,):
            answers = await asyncio.gather(*(
                kp.request(r) for k in range(50) for r in (
                    Request(Tx.INSERT_DATA, 0, insert=triples(1, k)),
                    Request(Tx.ASK, 0, where=(Triple(ex(f"s{k}"), P, A),)))))
            return [a.result.value for a in answers[1::2]]

    assert run(scenario()) == [True] * 50


def test_an_update_whose_where_is_past_its_budget_changes_nothing():
    sib = Sib(budgets=Budgets(update=0.5))

    async def scenario():
        async with kps_of(sib) as (kp,):
            await kp.request(Request(Tx.INSERT_DATA, 0, insert=triples(40)))
            answer = await status(kp.request(Request(
                Tx.INSERT, 0, insert=(Triple(A, ex("q"), D),), where=CROSS.where)))
            count = await kp.request(Request(Tx.SELECT, 0, projection=1,
                                             where=(Triple(A, ex("q"), B),)))
            return answer, count.result.rows

    answer, rows = run(scenario())
    assert answer == "LIMIT_EXCEEDED" and rows == ()


def test_a_persistent_query_past_its_budget_after_a_write_ends_with_an_ind_saying_so():
    sib = Sib(budgets=Budgets(persistent=0.5))

    async def scenario():
        async with kps_of(sib) as (kp,):
            await kp.request(Request(Tx.INSERT_DATA, 0, insert=triples(3)))
            sub = kp.subscribe(CROSS._replace(tx=Tx.SELECT_PERSISTENT))
            states = []
            with pytest.raises(Exception) as ended:
                async with sub:
                    first = sub.latest()
                    states.append(first.result.total if first else None)
                    states.append(await status(kp.request(Request(
                        Tx.INSERT_DATA, 0, insert=triples(40, 3)))))
                    async for state in sub:
                        states.append(state.result.total)
            return states, ended.value

    states, ended = asyncio.run(asyncio.wait_for(scenario(), 120))
    assert states == [81, "OK"]  # the write itself went through; no state of 43⁴ rows came
    assert getattr(ended, "status", None) == Status.LIMIT_EXCEEDED, ended


def test_readers_answer_at_the_deadline_even_when_a_step_cannot_be_stopped():
    """A step that never looks at the clock (as a pyoxigraph sort): the caller is answered at
    its deadline, the thread is held until the step ends, and a read waiting behind it is
    given up at its own deadline without running."""
    readers = Readers(threads=1, max_waiting=2)
    release = threading.Event()
    ran = []

    def stuck():
        release.wait(60)
        return "late"

    async def scenario():
        first = asyncio.ensure_future(readers.run(stuck, 0.2))
        second = asyncio.ensure_future(readers.run(lambda: ran.append(1), 0.2))
        for task in (first, second):
            with pytest.raises(OverBudget):
                await task
        behind = [asyncio.ensure_future(readers.run(lambda: "behind", 30)) for _ in range(3)]
        with pytest.raises(ReadersBusy):  # one waits (the first is held), two more may
            await behind[2]
        release.set()
        assert await asyncio.gather(*behind[:2]) == ["behind", "behind"]
        return await readers.run(lambda: "fresh", 30)

    assert run(scenario()) == "fresh"
    assert ran == [] and readers.over_budget == 2


def test_a_budget_stops_a_loop_at_its_next_look_and_timed_refuses_a_late_finish():
    with pytest.raises(OverBudget):
        with within(Deadline(0.0, "the loop")):
            from sib.budget import checked
            for _ in checked(range(10_000)):
                pass
    with pytest.raises(OverBudget, match="the step"):
        with timed(0.01, "the step"):
            time.sleep(0.05)  # finished, but past its budget
    with timed(None, "unbounded"):
        pass


def test_sepa_query_and_update_past_their_budgets_answer_503_while_a_board_writes():
    """Over the gate: a COUNT over 60⁴ rows (one pyoxigraph step: it is not stopped, its
    reader thread answers late) is answered 503 `timeout` at its budget while a board's
    update over KSP is answered; an update whose WHERE is past its budget changes nothing;
    a subscription whose evaluation after a write is past its budget gets an error frame
    with its spuid and ends."""
    from test_sepa_gate import EX, Lab

    many = " ".join(f"<{EX}s{i}> <{EX}p> {i} ." for i in range(60))
    cross = "?a ?b ?c . ?d ?e ?f . ?g ?h ?i . ?j ?k ?l"

    async def scenario():
        async with Lab(ksp=True, sib_options={"budgets": Budgets(0.3, 0.3, 0.3)}) as lab:
            await lab.update(f"INSERT DATA {{ <{EX}x> <{EX}p> 1 }}")
            async with lab.http.ws_connect(lab.ws_url) as ws:
                first = await lab.subscribe(ws, f"SELECT * WHERE {{ {cross} }}")
                spuid = first["notification"]["spuid"]
                await lab.update(f"INSERT DATA {{ {many} }}")  # the write itself goes through
                ended = await asyncio.wait_for(ws.receive_json(), 60)
            order = []

            async def query():
                async with lab.http.post(lab.base + "/query", data={
                        "query": f"SELECT (COUNT(*) AS ?n) WHERE {{ {cross} }}"}) as r:
                    order.append(("query", r.status, (await r.json())["error"]))

            async def board():
                await until(lambda: lab.sib.readers.running,
                            what="the SEPA query on a reader thread")
                async with await connect(f"udp://127.0.0.1:{lab.server.udp.port}") as kp:
                    await kp.request(Request(Tx.INSERT_DATA, 0, insert=triples(1, 100)))
                order.append(("board", "OK"))

            await asyncio.gather(query(), board())
            async with lab.http.post(lab.base + "/update", headers={
                    "Content-Type": "application/sparql-update"},
                    data=f"INSERT {{ ?a <{EX}q> ?d }} WHERE {{ {cross} }}") as r:
                update = (r.status, (await r.json())["error"])
            rows = await lab.select(f"SELECT * WHERE {{ ?s <{EX}q> ?o }}")
            return ended, spuid, order, update, rows

    ended, spuid, order, update, rows = asyncio.run(asyncio.wait_for(scenario(), 180))
    assert ended["status_code"] == 503 and ended["error"] == "timeout"
    assert ended["spuid"] == spuid
    assert order == [("board", "OK"), ("query", 503, "timeout")]
    assert update == (503, "timeout") and rows == []


@pytest.mark.parametrize("max_size", [None, 200, 5_000])
@pytest.mark.parametrize("ordered", [False, True])
def test_a_one_shot_select_keeps_only_what_its_res_can_carry_and_encodes_the_same(
        max_size, ordered):
    """`evaluate_once` (a read keeps at most the rows one RES can carry) against `evaluate`
    (every row): the same RES, cut to the datagram and to MAX RESPONSE SIZE, TRC the true
    count — here 8,000 rows of 9 columns, of which one datagram holds 7,278 at most. (The
    bytes may differ in the PREFIX table, which the encoder picks from the rows it is given.)"""
    from ksp import UDP, Options, Response, decode_sib_message, encode
    from ksp.delivery import MAX_UDP_PAYLOAD
    from ksp.model import Order, SolutionModifier
    from sib.pattern import Pattern
    from sib.query import evaluate, evaluate_once
    from sib.store import QuadStore
    from sib.updates import data_delta

    store = QuadStore()
    store.apply(data_delta(store, Request(Tx.INSERT_DATA, 0, insert=triples(20)), None))
    modifier = SolutionModifier(order=Order.DESC, order_var=8) if ordered else None
    request = Request(Tx.SELECT, 1, projection=9, where=CROSS.where[:3],
                      options=Options(max_response_size=max_size, modifier=modifier))
    full = evaluate(store, request, Pattern(request))
    once = evaluate_once(store, request, Pattern(request), MAX_UDP_PAYLOAD)
    assert len(full.rows) == 8000 and len(once.rows) < 8000
    cap = MAX_UDP_PAYLOAD if max_size is None else min(max_size, MAX_UDP_PAYLOAD)  # as sent
    sent = [decode_sib_message(encode(Response(1, result=r), UDP, max_size=cap), UDP,
                               answers=Tx.SELECT).result for r in (once, full)]
    assert sent[0].rows == sent[1].rows and sent[0].total == sent[1].total == 8000
    assert 0 < len(sent[0].rows) < 8000 or max_size == 200


@pytest.mark.slow
def test_sigterm_stops_a_sib_busy_with_heavy_work_at_once():
    """A real `ksp-sib` with 100 updates queued whose WHERE is the cross product (5 s of
    budget each: minutes of work) and a heavy read running: SIGTERM ends the evaluation in
    progress and answers the queued requests 0x07 unexecuted; the process exits 0 having
    flushed its store (before, it finished the queue first)."""
    from sib.testing import SibProcess

    async def load(port: int, sib: SibProcess) -> list[str]:
        async with await connect(f"tcp://127.0.0.1:{port}") as kp:
            await kp.request(Request(Tx.INSERT_DATA, 0, insert=triples(40)))
            heavy = Request(Tx.INSERT, 0, insert=(Triple(A, ex("q"), D),), where=CROSS.where)
            answers = [asyncio.ensure_future(status(kp.request(r)))
                       for r in [CROSS] + [heavy] * 100]
            await until(lambda: any("took longer" in line or "LIMIT_EXCEEDED" in line
                                    for line in sib.lines),  # the first heavy update is under way
                        timeout=60, what="a request past its time budget in the SIB's log")
            stopping = asyncio.get_running_loop().run_in_executor(None, sib.stop)
            done, _ = await asyncio.wait(answers, timeout=60)
            assert await stopping == 0
            return [task.result() for task in done]

    with SibProcess("--memory", "--udp-port", "-1", "--tcp-port", "0", "--coap-port", "-1",
                    "--log-level", "info") as sib:
        answers = asyncio.run(load(sib.ports["tcp"], sib))
        log = sib.log()
    assert "store flushed" in log and "stopped" in log
    assert answers.count("INTERNAL_ERROR") >= 90
    assert "OK" not in answers


@pytest.mark.slow
@pytest.mark.parametrize("form", ["count", "select"])
def test_sigterm_gives_up_a_gate_query_under_way_and_answers_no_result(tmp_path, form):
    """A real `ksp-sib` whose query budget is ten minutes, a gate query of the six-pattern
    cross product under way (COUNT: one pyoxigraph step that cannot be stopped; SELECT *: rows
    turned into JSON): SIGTERM ends the process well before the query could end (the test's
    deadline is a minute), exit 0, store flushed, and the query gets no result — a 503 or a
    closed connection, never a 200."""
    import aiohttp

    from sib.testing import SibProcess

    config = tmp_path / "sib.toml"
    config.write_text("[limits]\nquery_seconds = 600.0\n")
    pattern = " . ".join(f"?s{i} ?p{i} ?o{i}" for i in range(6))
    query = (f"SELECT (COUNT(*) AS ?n) WHERE {{ {pattern} }}" if form == "count"
             else f"SELECT * WHERE {{ {pattern} }}")

    async def main(sib: SibProcess) -> object:
        async with await connect(f"udp://127.0.0.1:{sib.ports['udp']}") as kp:
            await kp.request(Request(Tx.INSERT_DATA, 0, insert=triples(40)))
        async with aiohttp.ClientSession() as http:
            asking = asyncio.ensure_future(http.get(
                f"http://127.0.0.1:{sib.ports['http']}/query", params={"query": query},
                timeout=aiohttp.ClientTimeout(total=120)))
            await asyncio.sleep(1)  # the query under way
            assert not asking.done()
            stopping = asyncio.get_running_loop().run_in_executor(
                None, lambda: sib.stop(timeout=60))
            try:
                response = await asking
            except aiohttp.ClientError as exc:  # closed unanswered: no result either
                outcome = type(exc).__name__
            else:
                outcome = response.status, await response.text()
            assert await stopping == 0
            return outcome

    with SibProcess("--memory", "--config", str(config), "--udp-port", "0", "--tcp-port", "-1",
                    "--coap-port", "-1", "--metrics-port", "-1", "--sepa-http-port", "0",
                    "--sepa-ws-port", "0") as sib:
        outcome = asyncio.run(main(sib))
        log = sib.log()
    assert "store flushed" in log and "stopped" in log
    assert outcome == "ServerDisconnectedError" or outcome[0] == 503, outcome
