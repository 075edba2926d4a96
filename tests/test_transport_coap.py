"""The CoAP binding (docs/coap-binding.md), checked with a plain aiocoap client that follows
the document rather than `transports.coap`'s own client."""
from __future__ import annotations

import asyncio
import contextlib

import aiocoap
from aiocoap.numbers.codes import Code
from hypothesis import HealthCheck, given, settings, strategies as st
import pytest

from ksp import (
    UDP, IRI, Literal, Options, Request, Status, Triple, Tx, Var, decode_sib_message, encode,
)
from ksp.secure import MAGIC
from ksp.session import SessionOptions
from sib import Sib
from transports import CoapServer

from lengths import examples
from memory_service import MemoryService
from strategies import kp_bytes, sent_tx
from transport_helpers import run, until

EX = "http://example.org/"
KSP_CF = 65000
SUB = Request(Tx.SELECT_PERSISTENT, 40, projection=1,
              where=(Triple(Var(0), IRI(EX + "p"), Var(1)),))


def insert(tid: int, value: str) -> Request:
    return Request(Tx.INSERT_DATA, tid, insert=(Triple(IRI(EX + value), IRI(EX + "p"),
                                                       Literal(value)),))


async def post(ctx, base: str, payload: bytes, content_format: int | None = KSP_CF):
    """POST `payload` as an RFC 9175 client does: a 4.01 with an Echo option (the SIB
    validating this address, docs/coap-binding.md) is followed by the same POST with it."""
    answer = None
    for _ in range(2):
        msg = aiocoap.Message(code=Code.POST, uri=base + "/ksp", payload=payload)
        if content_format is not None:
            msg.opt.content_format = content_format
        if answer is not None:
            msg.opt.echo = answer.opt.echo
        answer = await asyncio.wait_for(ctx.request(msg).response, 30)
        if answer.code != Code.UNAUTHORIZED or answer.opt.echo is None:
            break
    return answer


@contextlib.asynccontextmanager
async def serving(service, **server_args):
    """A `CoapServer` for `service` and a plain aiocoap client: (server, client, base URI)."""
    server = await CoapServer.start(service, **server_args)
    ctx = await aiocoap.Context.create_client_context(transports=["udp6"])
    try:
        yield server, ctx, f"coap://127.0.0.1:{server.port}"
    finally:
        await ctx.shutdown()
        await server.close()


async def peer(scenario, **server_args):
    service = MemoryService()
    async with serving(service, **server_args) as (_, ctx, base):
        return service, await scenario(service, ctx, base)


class Holding(MemoryService):
    """Answers only when told, so copies overlap the first."""

    def __init__(self) -> None:
        super().__init__()
        self.held: list = []

    def submit(self, request, channel) -> None:
        self.requests.append((channel.transport, request))
        self.held.append((request, channel))

    def release(self) -> None:
        held, self.held = self.held, []
        for request, channel in held:
            self._execute(request, channel)


def test_requests_errors_and_coap_level_codes():
    async def scenario(service, ctx, base):
        answer = await post(ctx, base, encode(insert(1, "a"), UDP))
        assert answer.code == Code.CONTENT and answer.opt.content_format == KSP_CF
        assert decode_sib_message(answer.payload, UDP).status == Status.OK
        # a KSP decoding error is a KSP status in a 2.05 payload
        answer = await post(ctx, base, bytes.fromhex("0197020000"))  # tx 0x17
        res = decode_sib_message(answer.payload, UDP)
        assert answer.code == Code.CONTENT and (res.tid, res.status) == (
            2, Status.INVALID_TRANSACTION_TYPE)
        # CoAP-level problems are CoAP codes
        assert (await post(ctx, base, b"\x01\x82")).code == Code.BAD_REQUEST  # no TID
        assert (await post(ctx, base, encode(insert(3, "b"), UDP), 0)).code == \
            Code.UNSUPPORTED_CONTENT_FORMAT
        get = aiocoap.Message(code=Code.GET, uri=base + "/ksp")
        assert (await ctx.request(get).response).code == Code.METHOD_NOT_ALLOWED
        get = aiocoap.Message(code=Code.GET, uri=base + "/ksp/p/nothing")
        assert (await ctx.request(get).response).code == Code.NOT_FOUND
        # a NON request that succeeds without a result: 2.04 without payload
        msg = aiocoap.Message(code=Code.POST, uri=base + "/ksp", mtype=aiocoap.NON,
                              payload=encode(insert(4, "c")._replace(confirmable=False), UDP),
                              content_format=KSP_CF)
        answer = await asyncio.wait_for(ctx.request(msg).response, 30)
        assert answer.code == Code.CHANGED and answer.payload == b""

    service, _ = run(peer(scenario))
    assert [r.tid for _, r in service.requests] == [1, 4]


def test_persistent_operation_as_observation_then_terminate():
    async def scenario(service, ctx, base):
        answer = await post(ctx, base, encode(SUB, UDP))
        assert answer.code == Code.CREATED
        path = answer.opt.location_path
        assert path[:2] == ("ksp", "p") and len(path) == 3
        res = decode_sib_message(answer.payload, UDP, answers=SUB.tx)
        assert res.status == Status.OK and res.result.rows == ()
        obs = ctx.request(aiocoap.Message(code=Code.GET, uri=f"{base}/{'/'.join(path)}",
                                          observe=0))
        first = await asyncio.wait_for(obs.response, 30)
        assert first.code == Code.CONTENT and first.payload == b""  # no IND yet
        notifications = aiter(obs.observation)
        await post(ctx, base, encode(insert(1, "a"), UDP))
        ind = decode_sib_message((await anext(notifications)).payload, UDP, answers=SUB.tx)
        assert ind.indication and ind.seq == 1 and ind.result.rows == ((IRI(EX + "a"),),)
        await post(ctx, base, encode(insert(2, "b"), UDP))
        ind = decode_sib_message((await anext(notifications)).payload, UDP, answers=SUB.tx)
        assert ind.seq == 2 and len(ind.result.rows) == 2
        # TERMINATE (same TID): OK, and the observation ends with 4.04
        answer = await post(ctx, base, encode(Request(Tx.TERMINATE, SUB.tid), UDP))
        assert decode_sib_message(answer.payload, UDP).status == Status.OK
        try:  # aiocoap ends the observation on the 4.04
            await anext(notifications)
            raise AssertionError("the observation went on after TERMINATE")
        except StopAsyncIteration:
            pass
        assert not service.subs
        again = await ctx.request(aiocoap.Message(code=Code.GET,
                                                  uri=f"{base}/{'/'.join(path)}")).response
        assert again.code == Code.NOT_FOUND

    run(peer(scenario))


def test_final_ind_ends_the_observation_and_lingers():
    async def scenario(service, ctx, base):
        answer = await post(ctx, base, encode(SUB, UDP))
        uri = f"{base}/{'/'.join(answer.opt.location_path)}"
        service.end_all(Status.TERMINATED)  # before anyone observes
        obs = ctx.request(aiocoap.Message(code=Code.GET, uri=uri, observe=0))
        first = await asyncio.wait_for(obs.response, 30)
        final = decode_sib_message(first.payload, UDP, answers=SUB.tx)
        assert final.indication and final.status == Status.TERMINATED
        assert first.opt.observe is None  # not observable any more

    run(peer(scenario))


@pytest.mark.slow
def test_observe_deregistration_reports_the_kp_unreachable_after_twice_max_age():
    """Nobody observes any more and nobody registers again within twice Max-Age (1 s here):
    the service is told the KP is unreachable."""
    async def scenario(service, ctx, base):
        answer = await post(ctx, base, encode(SUB, UDP))
        uri = f"{base}/{'/'.join(answer.opt.location_path)}"
        obs = ctx.request(aiocoap.Message(code=Code.GET, uri=uri, observe=0))
        await asyncio.wait_for(obs.response, 30)
        # aiocoap 0.4.17 deregisters lazily: it still ACKs the next notification and answers
        # the one after with RST, which ends the observation at the server
        obs.observation.cancel()
        await post(ctx, base, encode(insert(1, "a"), UDP))
        await post(ctx, base, encode(insert(2, "b"), UDP))
        await asyncio.wait_for(service.lost.wait(), 30)
        assert service.unreachable[0][1] == SUB.tid and not service.subs

    run(peer(scenario, max_age=1))


def test_large_results_and_inds_travel_block_wise():
    """A RES and INDs over one CoAP block (1024 B): Block2 on the POST response, and for a
    notification a GET of the whole resource (RFC 7959 §2.6) by the Python client."""
    from pathlib import Path

    from transport_helpers import client_of

    async def scenario():
        async with client_of("coap", Path("/unused")) as (svc, server, kp):
            for i in range(200):
                svc.store.add(Triple(IRI(f"{EX}s{i}"), IRI(EX + "p"), Literal("v" * 20)))
            assert len((await kp.query(SUB._replace(tx=Tx.SELECT))).rows) == 200
            async with kp.subscribe(SUB) as sub:
                assert len((await anext(sub)).result.rows) == 200
                for n in (201, 202):
                    await kp.insert_data([(IRI(f"{EX}new{n}"), IRI(EX + "p"), Literal("x"))])
                    ind = await anext(sub)
                    assert ind.seq is not None and len(ind.result.rows) == n

    run(scenario())


def test_same_ksp_transaction_in_new_coap_messages_is_executed_once():
    """A KP (here a plain aiocoap client) sends the same KSP bytes in new CoAP messages (new
    message IDs, so CoAP's deduplication does not see them): within EXCHANGE_LIFETIME they
    are answered as the first copy was and executed once, concurrent copies included; another
    transaction type with the same TID is a new request; after the lifetime, so is the TID."""
    from ksp import Timing

    lifetime = 0.5

    async def go():
        service = MemoryService()
        server = await CoapServer.start(service, timing=Timing(exchange_lifetime=lifetime))
        ctx = await aiocoap.Context.create_client_context(transports=["udp6"])
        base = f"coap://127.0.0.1:{server.port}"
        try:
            data = encode(insert(7, "a"), UDP)
            answers = await asyncio.gather(*(post(ctx, base, data) for _ in range(3)))
            answers.append(await post(ctx, base, data))  # after the first was answered
            assert len({(a.code, a.payload) for a in answers}) == 1
            assert decode_sib_message(answers[0].payload, UDP).status == Status.OK
            assert [r.tid for _, r in service.requests] == [7]
            # a persistent request sent again: the same resource, one subscription
            sub = encode(SUB, UDP)
            first, again = await post(ctx, base, sub), await post(ctx, base, sub)
            assert first.code == again.code == Code.CREATED
            assert first.opt.location_path == again.opt.location_path
            assert first.payload == again.payload and len(service.subs) == 1
            # same TID, another transaction type: a new request
            answer = await post(ctx, base, encode(Request(Tx.TERMINATE, SUB.tid), UDP))
            assert decode_sib_message(answer.payload, UDP).status == Status.OK
            assert not service.subs
            stats = server.session.stats
            assert stats.res_retransmissions_answered + stats.duplicates_ignored == 4
            # the lifetime is over, the entry gone: a copy still never executes (its number is
            # under the KP's floor, wire format 15); the KP's next request under TID 7 does
            await asyncio.sleep(lifetime * 1.5)
            late = await post(ctx, base, data)
            assert decode_sib_message(late.payload, UDP).status == Status.NUMBER_BEHIND
            renewed = insert(7, "a")
            await post(ctx, base, encode(renewed._replace(options=renewed.options._replace(
                epoch=1)), UDP))
            assert [r.tid for _, r in service.requests].count(7) == 2
        finally:
            await ctx.shutdown()
            await server.close()

    run(go())


def test_an_ack_a_non_copy_and_a_kp_that_moved_mid_request():
    """Three cases of the shared session under CoAP: a KSP ACK POSTed to /ksp is answered 0x03
    (CoAP confirms notifications itself); a NON request sent again in a new message gets 2.04
    again, executed once; a KP (its KP ID) whose copy comes from a new address while the first
    still executes: both POSTs get the one answer, executed once."""
    from ksp import Ack, Credentials, Options

    async def go():
        service = Holding()
        server = await CoapServer.start(service)
        ctxs = [await aiocoap.Context.create_client_context(transports=["udp6"])
                for _ in range(2)]
        base = f"coap://127.0.0.1:{server.port}"
        try:
            res = decode_sib_message((await post(ctxs[0], base, encode(Ack(5, 1), UDP))).payload)
            assert (res.tid, res.status) == (5, Status.INVALID_MESSAGE_TYPE)

            non = encode(insert(6, "n")._replace(confirmable=False), UDP)
            first = asyncio.ensure_future(post(ctxs[0], base, non))
            await until(lambda: service.held)
            service.release()
            again = await post(ctxs[0], base, non)  # a new CoAP message, the same KP
            assert (await first).code == again.code == Code.CHANGED and again.payload == b""

            kp = Options(credentials=Credentials(b"K" * 16, "pw"))
            data = encode(insert(7, "m")._replace(options=kp), UDP)
            ignored = server.session.stats.duplicates_ignored
            first = asyncio.ensure_future(post(ctxs[0], base, data))
            await until(lambda: service.held)
            moved = asyncio.ensure_future(post(ctxs[1], base, data))
            await until(lambda: server.session.stats.duplicates_ignored == ignored + 1)
            service.release()
            answers = await asyncio.gather(first, moved)
            assert {(a.code, a.payload) for a in answers} == {(Code.CONTENT, answers[0].payload)}
            assert decode_sib_message(answers[0].payload, UDP).status == Status.OK
            assert [r.tid for _, r in service.requests] == [6, 7]
        finally:
            for ctx in ctxs:
                await ctx.shutdown()
            await server.close()

    run(go())


def test_a_persistent_request_for_an_active_tid_replaces_it_on_the_same_resource():
    """R12 as over UDP and TCP: a persistent request of another type with the TID of an active
    one replaces it at the SIB; over CoAP it keeps the resource, its observers and numbering."""
    async def scenario(service, ctx, base):
        first = await post(ctx, base, encode(SUB, UDP))
        path = first.opt.location_path
        obs = ctx.request(aiocoap.Message(code=Code.GET, uri=f"{base}/{'/'.join(path)}",
                                          observe=0))
        await asyncio.wait_for(obs.response, 30)
        notifications = aiter(obs.observation)
        await post(ctx, base, encode(insert(1, "a"), UDP))
        assert decode_sib_message((await anext(notifications)).payload, UDP,
                                  answers=SUB.tx).seq == 1
        ask = Request(Tx.ASK_PERSISTENT, SUB.tid, where=SUB.where,
                      options=Options(epoch=1))  # the TID's next number
        again = await post(ctx, base, encode(ask, UDP))
        assert again.code == Code.CREATED and again.opt.location_path == path
        assert decode_sib_message(again.payload, UDP, answers=ask.tx).result.value is True
        assert len(service.subs) == 1 and next(iter(service.subs.values()))[0].tx is ask.tx
        # numbered after the ASK's (wire format 15): the SUB's number 40 is under the floor
        await post(ctx, base, encode(insert(41, "b"), UDP))
        ind = decode_sib_message((await anext(notifications)).payload, UDP, answers=ask.tx)
        assert ind.seq == 2 and ind.result.value is True

    run(peer(scenario))


def test_an_evicted_delivery_keeps_its_resource_until_its_operation_ends():
    """Over `max_entries` the session evicts the oldest delivery; its resource and channel keep
    it, so its INDs go on, numbered on, and ending the operation removes the resource."""
    async def go():
        one = SessionOptions(max_entries=1)
        async with serving(MemoryService(), options=one) as (server, ctx, base):
            uris = []
            for tid in (40, 41):
                answer = await post(ctx, base, encode(SUB._replace(tid=tid), UDP))
                assert answer.code == Code.CREATED
                uris.append(f"{base}/{'/'.join(answer.opt.location_path)}")
            assert [k[1] for k in server.session.transactions.deliveries] == [41]
            obs = ctx.request(aiocoap.Message(code=Code.GET, uri=uris[0], observe=0))
            await asyncio.wait_for(obs.response, 30)
            notifications = aiter(obs.observation)
            for n, value in enumerate("ab", 1):  # numbered after the subscriptions (15)
                await post(ctx, base, encode(insert(41 + n, value), UDP))
                ind = decode_sib_message((await anext(notifications)).payload, UDP,
                                         answers=SUB.tx)
                assert ind.tid == 40 and ind.seq == n
            answer = await post(ctx, base, encode(Request(Tx.TERMINATE, 40), UDP))
            assert decode_sib_message(answer.payload, UDP).status == Status.OK
            assert [k[1] for k in server._persistent] == [41]
            get = aiocoap.Message(code=Code.GET, uri=uris[0])
            assert (await ctx.request(get).response).code == Code.NOT_FOUND

    run(go())


@pytest.mark.slow
def test_posts_waiting_for_an_answer_are_bounded():
    """Copies of one transaction in new CoAP messages wait for its answer, at most MAX_COPIES
    at once: the oldest over it get 5.03. Transactions waiting are at most `max_entries` (the
    session's table of executing requests): the oldest's POSTs get 5.03. The others get their
    answer, each request executed once."""
    from transports.coap import MAX_COPIES

    async def go():
        service = Holding()
        async with serving(service, options=SessionOptions(max_entries=4)) as (server, ctx, base):
            data = encode(insert(7, "a"), UDP)
            copies = []
            for _ in range(MAX_COPIES + 3):
                copies.append(asyncio.ensure_future(post(ctx, base, data)))
                await until(lambda: server.session.stats.duplicates_ignored
                            == len(copies) - 1)
            await until(lambda: sum(c.done() for c in copies) == 3)
            assert [c.result().code for c in copies[:3]] == [Code.SERVICE_UNAVAILABLE] * 3
            service.release()
            for answer in await asyncio.gather(*copies[3:]):
                assert answer.code == Code.CONTENT
                assert decode_sib_message(answer.payload, UDP).status == Status.OK

            posts = []
            for tid in range(10, 16):
                posts.append(asyncio.ensure_future(post(ctx, base, encode(insert(tid, "b"),
                                                                          UDP))))
                await until(lambda: len(service.held) == len(posts))
            await until(lambda: sum(p.done() for p in posts) == 2)
            assert [p.result().code for p in posts[:2]] == [Code.SERVICE_UNAVAILABLE] * 2
            assert server.sizes()["posts waiting"] == 4
            service.release()
            for answer in await asyncio.gather(*posts[2:]):
                assert decode_sib_message(answer.payload, UDP).status == Status.OK
            assert [r.tid for _, r in service.requests] == [7, *range(10, 16)]
            assert not server.sizes()["posts waiting"]

    run(go())


def test_resources_lingering_with_a_final_ind_are_bounded():
    """An ended operation's resource answers GET with its final IND for FINAL_LINGER seconds;
    at most `max_lingering` at once, the oldest unlinked first, so a KP that makes the SIB end
    operations quickly (say, subscribing to a graph and dropping it, again and again) cannot
    pile up resources for a minute each."""
    async def go():
        service = MemoryService()
        async with serving(service, max_lingering=2) as (server, ctx, base):
            uris = []
            for tid in range(40, 45):
                answer = await post(ctx, base, encode(SUB._replace(tid=tid), UDP))
                assert answer.code == Code.CREATED
                uris.append(f"{base}/{'/'.join(answer.opt.location_path)}")
            service.end_all(Status.TERMINATED)
            await until(lambda: not server.sizes()["resources"])
            assert server.sizes()["lingering"] == 2
            codes = []
            for uri in uris:
                answer = await ctx.request(aiocoap.Message(code=Code.GET, uri=uri)).response
                codes.append(answer.code)
                if answer.code == Code.CONTENT:
                    final = decode_sib_message(answer.payload, UDP, answers=SUB.tx)
                    assert final.indication and final.status == Status.TERMINATED
            assert codes == [Code.NOT_FOUND] * 3 + [Code.CONTENT] * 2
            assert server.sizes()["lingering"] == 2 and len(server.site._resources) == 1 + 2
        assert not server.sizes()["lingering"]

    run(go())


@pytest.mark.slow
@settings(max_examples=examples(25, 60), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(kp_bytes(UDP), st.sampled_from([KSP_CF, None])), min_size=1,
                max_size=6))
def test_random_payloads_get_an_answer_and_never_stop_the_server(posts):
    """Whatever a POST carries, it is answered: a KSP status in a decodable RES, or a CoAP
    error code when there is no KSP transaction to answer; and the server and the SIB behind it
    serve on."""
    query = Request(Tx.SELECT, 0xFFFF, projection=1, where=SUB.where)

    async def go():
        sib = await Sib().start()  # the real SIB: any request the codec takes may come
        try:
            async with serving(sib) as (server, ctx, base):
                for payload, content_format in posts:
                    answer = await post(ctx, base, payload, content_format)
                    if payload[:1] == bytes((MAGIC,)):  # a sealed envelope (no key opens it)
                        assert answer.code == Code.UNAUTHORIZED and not answer.payload
                    elif len(payload) < 4:  # no Transaction ID: no KSP answer can name it
                        assert answer.code == Code.BAD_REQUEST
                    elif answer.payload:
                        assert answer.code in (Code.CONTENT, Code.CREATED)
                        res = decode_sib_message(answer.payload, UDP, answers=sent_tx(payload))
                        assert res.tid == int.from_bytes(payload[2:4], "little")
                    else:  # a NON request that needs no RES (the NON rule)
                        assert answer.code == Code.CHANGED and payload[1] & 0x80 == 0
                answer = await post(ctx, base, encode(query, UDP))
                res = decode_sib_message(answer.payload, UDP, answers=Tx.SELECT)
                if res.status == Status.NUMBER_BEHIND:
                    # A random POST had a higher request number under this TID (wire format
                    # 15): the query goes again from the epoch the SIB names, as a KP's would.
                    again = query._replace(
                        options=query.options._replace(epoch=res.result.next_epoch))
                    answer = await post(ctx, base, encode(again, UDP))
                    res = decode_sib_message(answer.payload, UDP, answers=Tx.SELECT)
                assert res.status == Status.OK, res
                assert not server.sizes()["posts waiting"]
        finally:
            await sib.close()

    run(go())


async def observed(ctx, base: str) -> tuple[list, asyncio.Future]:
    """Start SUB and observe its resource: the INDs it notifies (decoded), and the task that
    ends with the observation."""
    answer = await post(ctx, base, encode(SUB, UDP))
    uri = f"{base}/{'/'.join(answer.opt.location_path)}"
    obs = ctx.request(aiocoap.Message(code=Code.GET, uri=uri, observe=0))
    await asyncio.wait_for(obs.response, 30)
    got: list = []

    async def observe():
        async for message in obs.observation:
            if message.payload:
                got.append(decode_sib_message(message.payload, UDP, answers=SUB.tx))
    return got, asyncio.ensure_future(observe())


@pytest.mark.slow
def test_notifications_over_the_message_id_budget_wait_and_only_the_newest_goes():
    """At most `notification_budget` notifications in a window (aiocoap's one 16-bit Message ID
    counter, NOTIFICATION_BUDGET): over it an operation's newest IND waits, superseding the
    older ones, and goes when the window frees; a final IND waits the same way and still ends
    the observation. An observer so never takes a new notification for a duplicate."""
    async def go():
        service = MemoryService()
        async with serving(service, notification_budget=(3, 1.5)) as (server, ctx, base):
            got, observing = await observed(ctx, base)
            for n in range(1, 9):
                await post(ctx, base, encode(insert(n, f"v{n}"), UDP))
            await until(lambda: len(got) == 3)
            assert [i.seq for i in got] == [1, 2, 3] and len(server.pacer) == 1
            await asyncio.sleep(0.3)
            assert len(got) == 3  # the window is not over: INDs 4-8 wait as one, the newest
            await until(lambda: len(got) == 4)
            assert got[3].seq == 8 and len(got[3].result.rows) == 8 and not server.pacer
            # 3 left the window: 9 and 10 go at once, the final IND waits, then ends the
            # observation
            for n in range(9, 11):
                await post(ctx, base, encode(insert(n, f"v{n}"), UDP))
            await until(lambda: len(got) == 6)
            service.end_all(Status.TERMINATED)
            assert len(server.pacer) == 1
            await asyncio.wait_for(observing, 30)
            assert [i.seq for i in got] == [1, 2, 3, 8, 9, 10, 11]
            assert got[-1].status == Status.TERMINATED and not server.pacer

    run(go())


class HoldingSome(Holding):
    """Holds the TIDs in `hold` until told (so answered late: a separate response), answers
    others at once (piggybacked)."""

    def __init__(self, hold) -> None:
        super().__init__()
        self.hold = set(hold)

    def submit(self, request, channel) -> None:
        if request.tid in self.hold:
            super().submit(request, channel)
        else:
            MemoryService.submit(self, request, channel)


def test_separate_responses_and_ends_of_observations_count_in_the_budget():
    """Every message aiocoap numbers anew takes from the one Message ID counter, so the budget
    counts separate responses and the 4.04 that ends an observation as they go (piggybacked
    answers reuse the request's ID and count nothing): after one separate response, a budget
    of 3 lets two INDs go and the third waits."""
    async def go():
        service = HoldingSome(hold={9})
        async with serving(service, notification_budget=(3, 4.0)) as (server, ctx, base):
            now = server.loop.time
            await post(ctx, base, encode(insert(1, "a"), UDP))  # piggybacked
            assert server.pacer.spent(now()) == 0
            late = asyncio.ensure_future(post(ctx, base, encode(insert(9, "late"), UDP)))
            await asyncio.sleep(0.4)  # past EMPTY_ACK_DELAY: an empty ACK went, then ...
            service.release()
            answer = await late  # ... the separate response, numbered anew
            assert decode_sib_message(answer.payload, UDP).status == Status.OK
            assert server.pacer.spent(now()) == 1
            got, observing = await observed(ctx, base)
            for n in range(2, 5):
                await post(ctx, base, encode(insert(n, f"v{n}"), UDP))
            await until(lambda: len(got) == 2)
            assert len(server.pacer) == 1 and server.pacer.spent(now()) == 3
            await post(ctx, base, encode(Request(Tx.TERMINATE, SUB.tid), UDP))
            await asyncio.wait_for(observing, 30)  # the 4.04 ended it
            assert not server.pacer and server.pacer.spent(now()) == 4

    run(go())


@pytest.mark.slow
def test_a_flood_of_malformed_coap_is_answered_and_logged_a_few_lines_a_minute():
    """A real `ksp-sib`: 4,000 CoAP datagrams of four malformed kinds — a Uri-Path that is not
    UTF-8, a header cut short, a request for no resource, an option past the end — each kind a
    thousand times. The bad Uri-Path is answered 4.00 Bad Request (same message ID, same
    token); the log holds a few lines of each kind, and no traceback."""
    import socket

    from sib.testing import SibProcess

    kinds = {
        "not utf-8": lambda mid: bytes([0x42, 0x02]) + mid + b"tk" + bytes([0xB1, 0xFF]),
        "cut short": lambda mid: bytes([0x48, 0x02]) + mid + b"tok",
        "no resource": lambda mid: bytes([0x40, 0x01]) + mid + bytes([0xB3]) + b"abc",
        "option past the end": lambda mid: bytes([0x40, 0x02]) + mid + bytes([0xB9]) + b"ksp",
    }
    with SibProcess("--memory", "--udp-port", "-1", "--tcp-port", "-1", "--coap-port", "0",
                    "--metrics-port", "-1") as sib:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(30)
            address = ("127.0.0.1", sib.ports["coap"])
            for i in range(1000):
                for make in kinds.values():
                    s.sendto(make((i % 65536).to_bytes(2, "big")), address)
            # the not-UTF-8 request once more, alone, and its answer
            s.settimeout(1)
            with contextlib.suppress(OSError):
                while True:
                    s.recv(2048)  # what the flood drew
            s.settimeout(30)
            s.sendto(kinds["not utf-8"](b"\x12\x34"), address)
            answer = s.recv(2048)
            while answer[2:4] != b"\x12\x34":
                answer = s.recv(2048)
        assert answer[:6] == bytes([0x62, 0x80, 0x12, 0x34]) + b"tk", answer.hex()
        assert sib.stop() == 0
        log = sib.log()
    assert "Traceback" not in log
    coap_lines = [line for line in log.splitlines()
                  if "CoAP" in line or "ksp.coap" in line or "coap-server" in line]
    assert 0 < len(coap_lines) <= 12, coap_lines
