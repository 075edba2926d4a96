"""A persistent operation the SIB ends reaches its KP as an end, over every transport; a CoAP
subscriber on a lossy link converges or is told, never silently stale (docs/coap-binding.md,
"When notifications go unacknowledged")."""
from __future__ import annotations

import asyncio

import pytest

from ksp import IRI, KPIdentity, Literal, Request, Status, Timing, Triple, Tx, Var
from ksp.kpid import kp_id_bytes
from sib import Sib
from sib.access import AccessPolicy, Grant, KPEntry, hash_password
from transports import CoapServer, KspStatusError, Server, SubscriptionLost, connect

from lossy_proxy import LossyProxy
from memory_service import MemoryService
from transport_helpers import run, until

EX = "http://example.org/"
VALUE = IRI(EX + "value")
ALL = Request(Tx.SELECT_PERSISTENT, 0, projection=0, where=(Triple(Var(0), VALUE, Var(1)),))

KP_TIMING = Timing(ack_timeout=0.05, ack_random_factor=1.5, max_retransmit=12, max_latency=1.0)
"""The KPs' CON requests (and observation GETs): 13 attempts through 36 % loss per round trip
all fail with p ≈ 2·10⁻⁶."""
SIB_TIMING = Timing(ack_timeout=0.05, ack_random_factor=1.5, max_retransmit=2, max_latency=1.0)
"""The SIB's CON notifications: 3 attempts, all lost with p = 0.36³ ≈ 5 %: among a hundred
notifications the SIB gives up on its observer several times."""


def item(i: int) -> Triple:
    return Triple(IRI(f"{EX}item{i}"), VALUE,
                  Literal(str(i), "http://www.w3.org/2001/XMLSchema#integer"))


@pytest.mark.slow
def test_a_coap_subscriber_on_a_lossy_link_converges_or_is_told():
    """A writer inserts items one by one (the count is the counter) through a proxy that drops
    20 % of the datagrams and duplicates and reorders 10 %; a subscriber counts them. At the
    end its last state is the final count, or its iteration ended or raised saying why."""
    n = 150

    async def scenario():
        sib = await Sib().start()
        server = await CoapServer.start(sib, timing=SIB_TIMING, max_age=1)
        proxy = await LossyProxy.start(("127.0.0.1", server.port), loss=0.2, duplicate=0.1,
                                       reorder=0.1, seed=7)
        url = f"coap://127.0.0.1:{proxy.port}"
        seen: list[int] = []
        ended: list = []  # the iteration's end: its status, or what it raised
        try:
            async with connect(url, kp_id="writer", timing=KP_TIMING) as writer, \
                    connect(url, kp_id="watcher", timing=KP_TIMING) as watcher:
                async with watcher.subscribe(ALL) as sub:
                    async def watch():
                        try:
                            async for ind in sub:
                                seen.append(len(ind.result.rows))
                            ended.append(sub.status)
                        except Exception as exc:
                            ended.append(exc)

                    watching = asyncio.create_task(watch())
                    try:
                        for i in range(n):
                            await writer.insert_data([item(i)])
                        final = len((await writer.query(ALL._replace(tx=Tx.SELECT))).rows)
                        await until(lambda: ended or (seen and seen[-1] == final), 60,
                                    "the subscriber current, or told it ended")
                    finally:
                        watching.cancel()
                        await asyncio.gather(watching, return_exceptions=True)
        finally:
            await proxy.close()
            await server.close()
            await sib.close()
        return final, seen, ended, proxy.stats, server

    final, seen, ended, stats, server = run(scenario(), timeout=180)
    assert final == n  # every insert answered OK is there, once
    assert ended or seen[-1] == final
    if ended:  # told: a status or an error naming why
        assert ended[0] is not None
    assert stats["dropped"] > 100 and stats["duplicated"] > 20
    assert server.observers_lost >= 1  # the SIB did give up on a notification


G = IRI(EX + "g")
IN_G = "SELECT ?s FROM <http://example.org/g> WHERE { ?s ?p ?o }"


@pytest.mark.parametrize("transport", ["udp", "tcp", "coap"])
def test_each_end_the_sib_decides_ends_the_iteration_with_its_reason(transport):
    """Over each transport, the SIB ends four subscriptions four ways; each iteration ends
    (TERMINATED: `sub.status`) or raises (ACCESS_DENIED) at once, none hangs: its graph
    dropped, the SIB giving up on its KP as unreachable (the KP alive: the final IND reaches
    it), the access policy revoked, the SIB shutting down."""

    async def scenario():
        sib = await Sib().start()
        server = await Server.start(sib, **{transport: 0}, timing=KP_TIMING)
        url = f"{transport}://127.0.0.1:{getattr(server, transport).port}"
        outcomes: dict[str, object] = {}

        async def follow(name: str, sub) -> None:
            try:
                async for _ in sub:
                    pass
                outcomes[name] = sub.status
            except KspStatusError as exc:
                outcomes[name] = exc

        try:
            async with connect(url, kp_id="admin") as admin, \
                    connect(url, kp_id="graph") as graph, \
                    connect(url, kp_id="gone") as gone, \
                    connect(url, kp_id="denied") as denied, \
                    connect(url, kp_id="stays") as stays:
                await admin.create(G)
                subs = {"graph": graph.subscribe(IN_G), "gone": gone.subscribe(ALL),
                        "denied": denied.subscribe(ALL), "stays": stays.subscribe(ALL)}
                for sub in subs.values():
                    await sub.__aenter__()
                tasks = [asyncio.create_task(follow(n, s)) for n, s in subs.items()]
                try:
                    await admin.drop(G)
                    await until(lambda: "graph" in outcomes, 30, "the graph's end")
                    sib.kp_unreachable(KPIdentity(kp_id_bytes("gone")), subs["gone"].tid)
                    await until(lambda: "gone" in outcomes, 30, "the unreachable KP's end")
                    stays_id = kp_id_bytes("stays")  # the only KP the new policy knows
                    sib.set_access(AccessPolicy({stays_id: KPEntry(
                        stays_id, hash_password("-"), Grant.of(["*"]))}, anonymous="none"))
                    await until(lambda: "denied" in outcomes, 30, "the denied KP's end")
                    await sib.close()
                    await until(lambda: "stays" in outcomes, 30, "the end at shutdown")
                finally:
                    for task in tasks:
                        task.cancel()
                    await asyncio.gather(*tasks, return_exceptions=True)
                    for sub in subs.values():
                        await sub.__aexit__(None, None, None)
        finally:
            await server.close()
            await sib.close()
        return outcomes

    outcomes = run(scenario(), timeout=120)
    assert outcomes["graph"] == Status.TERMINATED
    assert outcomes["gone"] == Status.TERMINATED
    denied = outcomes["denied"]
    assert isinstance(denied, KspStatusError) and denied.status == Status.ACCESS_DENIED
    assert outcomes["stays"] == Status.TERMINATED


def test_a_coap_resource_gone_without_a_final_ind_raises_subscription_lost():
    """A service that drops an operation without a final IND (as `MemoryService` does for an
    unreachable KP): its resource is gone, its observer gets 4.04, and the client, which did
    not end it, raises `SubscriptionLost` rather than stop as if it had."""

    async def scenario():
        service = MemoryService()
        server = await CoapServer.start(service)
        try:
            async with connect(f"coap://127.0.0.1:{server.port}", kp_id="w") as kp:
                async with kp.subscribe(ALL) as sub:
                    await anext(sub)  # the initial state
                    service.kp_unreachable(KPIdentity(kp_id_bytes("w")), sub.tid)
                    try:
                        await asyncio.wait_for(anext(sub), 30)
                    except KspStatusError as exc:
                        return exc
        finally:
            await server.close()

    lost = run(scenario())
    assert isinstance(lost, SubscriptionLost) and lost.status == Status.UNKNOWN_TRANSACTION


def test_a_udp_kp_away_past_the_final_inds_retries_is_told_when_it_comes_back():
    """The SIB gives up on a UDP KP and ends its subscription with a final TERMINATED IND while
    the KP is away for longer than that IND's own retries: nothing reaches it then, but the KP's
    next request, on anything, brings the final IND back and its iteration ends TERMINATED."""

    async def drain(sub) -> None:
        async for _ in sub:
            pass

    async def scenario():
        sib = await Sib().start()
        server = await Server.start(sib, udp=0, timing=SIB_TIMING)
        session = server.udp.session
        proxy = await LossyProxy.start(("127.0.0.1", server.udp.port), loss=0.0,
                                       duplicate=0.0, reorder=0.0)
        try:
            async with connect(f"udp://127.0.0.1:{proxy.port}", kp_id="away",
                               timing=KP_TIMING) as kp:
                async with kp.subscribe(ALL) as sub:
                    proxy.loss = 1.0  # the KP is away: every datagram lost, both ways
                    sib.kp_unreachable(KPIdentity(kp_id_bytes("away")), sub.tid)
                    await until(lambda: session.stats.kp_unreachable >= 1
                                and session.get_timer() is None, 30,
                                "the SIB giving up on the final IND")
                    before = sub.status
                    proxy.loss = 0.0  # back: one unrelated request
                    await kp.query(ALL._replace(tx=Tx.SELECT))
                    await asyncio.wait_for(drain(sub), 30)  # the initial state, then the end
                    return before, sub.status, session
        finally:
            await proxy.close()
            await server.close()
            await sib.close()

    before, status, session = run(scenario(), timeout=120)
    assert before is None and status == Status.TERMINATED
    assert session.stats.ends_resent == 1 and session.sizes()["tombstones"] == 0
