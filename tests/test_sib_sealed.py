"""The authenticated mode (wire format 13) against a real SIB over real UDP sockets: sealed
requests are executed with the KP's grant and answered sealed; a replayed datagram (re-sent from
another address), a tampered one or one sealed with a wrong key is dropped before the duplicate
cache, executes nothing and does not move the KP's INDs; a `require_auth` KP's clear password
is refused."""
from __future__ import annotations

import asyncio
import time

import pytest

from ksp import UDP, Options, Request, Status, Triple, Tx, Var, decode_sib_message, encode
from ksp.model import Ack
from ksp.secure import OVERHEAD, Sealer, initial_counter
from sib import Sib
from sib.access import AccessPolicy
from sib.testing import ex
from transports import KspStatusError, Server
from transports.client import kp_id_bytes

from transport_helpers import until
from test_sib_security import G1, HASH, SECRET, P, S, Peer, creds, select

KEY = bytes(range(32))
SENSOR = kp_id_bytes("sensor")
LOCKED = kp_id_bytes("locked")
CONFIG = {"anonymous": "none", "kp": [
    {"id": "sensor", "key": KEY.hex(), "read": ["*"], "write": ["*"]},
    {"id": "locked", "password_hash": HASH, "key": KEY.hex(), "require_auth": True,
     "read": ["*"]},
    {"id": "open", "password_hash": HASH, "read": ["*"]},
]}


class SealedPeer(Peer):
    """A raw UDP KP socket that seals what it sends and opens what it receives."""

    def __init__(self, port: int, key: bytes = KEY, kp_id: bytes = SENSOR) -> None:
        super().__init__("udp", port)
        self.sealer = Sealer(key, kp_id, sib=False)
        self.sent: list[bytes] = []

    def send_raw(self, data: bytes) -> None:
        self._udp.sendto(data)

    def send(self, message) -> None:
        data = self.sealer.seal(encode(message, UDP))
        self.sent.append(data)
        self.send_raw(data)

    async def opened(self, timeout: float = 20.0) -> bytes:
        return self.sealer.open(await asyncio.wait_for(self.received.get(), timeout))

    async def answer(self, tx: Tx, timeout: float = 20.0):
        return decode_sib_message(await self.opened(timeout), UDP, answers=tx)

    async def prove(self) -> None:
        """Prove freshness to a SIB that keeps no replay windows (13.5): a sealed request draws
        a sealed ECHO REQUIRED, whose value the next one carries back; the window opens."""
        probe = Request(Tx.ASK, 0xFFF0, where=(Triple(S, P, Var(0)),), options=Options())
        self.send_raw(self.sealer.seal(encode(probe, UDP)))
        echo = await self.answer(Tx.ASK)
        assert echo.status == Status.ECHO_REQUIRED and isinstance(echo.result, bytes)
        retry = probe._replace(tid=0xFFF1, options=Options(echo=echo.result))
        self.send_raw(self.sealer.seal(encode(retry, UDP)))
        assert (await self.answer(Tx.ASK)).tid == 0xFFF1


async def serving():
    sib = Sib(access=AccessPolicy.from_config(CONFIG))
    server = await Server.start(sib, udp=0)
    sib.store.apply(__import__("sib").Delta(((S, P, SECRET, G1),), ()))
    return sib, server, server.udp.port


def test_sealed_request_is_answered_sealed_with_the_kps_grant():
    async def go():
        sib, server, port = await serving()
        kp = await SealedPeer(port).open()
        try:
            await kp.prove()
            kp.send(select(7, Options()))
            raw = await asyncio.wait_for(kp.received.get(), 20)
            assert raw[0] == 0xA1
            res = decode_sib_message(kp.sealer.open(raw), UDP, answers=Tx.SELECT)
            assert res.status == Status.OK and res.result.rows == ((SECRET,),)
            plain = encode(res, UDP)
            assert len(raw) == len(plain) + OVERHEAD
            assert await kp.nothing()
        finally:
            await kp.close()
            await server.close()
    asyncio.run(go())


def test_replayed_datagram_from_another_address_is_not_executed_and_moves_no_ind():
    async def go():
        sib, server, port = await serving()
        kp, thief = await SealedPeer(port).open(), await SealedPeer(port).open()
        try:
            await kp.prove()
            kp.send(Request(Tx.SELECT_PERSISTENT, 9, projection=1,
                            where=(Triple(S, P, Var(0)),), options=Options()))
            first = await kp.answer(Tx.SELECT_PERSISTENT)
            assert first.status == Status.OK
            executed = sib.core.metrics.requests["SELECT_PERSISTENT"]
            thief.send_raw(kp.sent[0])  # captured bytes, from another address
            assert await thief.nothing()
            assert sib.core.metrics.requests["SELECT_PERSISTENT"] == executed
            assert server.udp.session.stats.sealed_dropped == 1
            # A change: the IND goes to the KP, sealed, not to the replayer.
            kp.send(Request(Tx.INSERT_DATA, 10, insert=((S, P, ex("new")),),
                            options=Options(insert_graphs=(G1,))))
            got = {}
            for _ in range(2):
                data = await kp.opened()
                msg = decode_sib_message(data, UDP, answers=Tx.SELECT_PERSISTENT) \
                    if data[1] & 0x80 else decode_sib_message(data, UDP, answers=Tx.INSERT_DATA)
                got[msg.indication] = msg
            assert got[True].tid == 9 and got[False].tid == 10
            kp.send(Ack(9, got[True].seq))
            assert await thief.nothing()
        finally:
            await kp.close()
            await thief.close()
            await server.close()
    asyncio.run(go())


@pytest.mark.parametrize("harm", ["tampered", "wrong key", "no key for that KP"])
def test_bad_sealed_datagram_is_dropped(harm):
    async def go():
        sib, server, port = await serving()
        kp = await SealedPeer(port, key=bytes(32) if harm == "wrong key" else KEY,
                              kp_id=kp_id_bytes("open") if harm == "no key for that KP"
                              else SENSOR).open()
        try:
            data = kp.sealer.seal(encode(select(3, Options()), UDP))
            if harm == "tampered":
                data = data[:-12] + bytes([data[-12] ^ 1]) + data[-11:]
            kp.send_raw(data)
            assert await kp.nothing()
            assert server.udp.session.stats.sealed_dropped == 1
            assert sib.core.metrics.requests["SELECT"] == 0
            kp.sealer = Sealer(KEY, SENSOR, sib=False)  # the right key still works after it
            await kp.prove()
            kp.send(select(4, Options()))
            assert (await kp.answer(Tx.SELECT)).status == Status.OK
        finally:
            await kp.close()
            await server.close()
    asyncio.run(go())


def test_counters_across_the_window():
    async def go():
        sib, server, port = await serving()
        kp = await SealedPeer(port).open()
        try:
            await kp.prove()  # counters 0 and 1: the window is closed at 1
            late = [kp.sealer.seal(encode(select(tid, Options()), UDP)) for tid in range(1, 66)]
            kp.send_raw(late[-1])  # counter 66 first
            assert (await kp.answer(Tx.SELECT)).tid == 65
            kp.send_raw(late[1])  # counter 3: 63 below, inside the window
            assert (await kp.answer(Tx.SELECT)).tid == 2
            kp.send_raw(late[0])  # counter 2: 64 below, too old
            kp.send_raw(late[1])  # counter 3 again: a replay
            assert await kp.nothing()
            assert server.udp.session.stats.sealed_dropped == 2
        finally:
            await kp.close()
            await server.close()
    asyncio.run(go())


def test_require_auth_refuses_a_clear_right_password_and_a_sealed_request_with_credentials():
    async def go():
        sib, server, port = await serving()
        clear = await Peer("udp", port).open()
        kp = await SealedPeer(port, kp_id=LOCKED).open()
        try:
            await kp.prove()
            clear.send(select(5, creds("right", LOCKED)))
            assert (await clear.answer(Tx.SELECT)).status == Status.ACCESS_DENIED
            clear.send(select(6, creds("right", kp_id_bytes("open"))))  # same password elsewhere
            assert (await clear.answer(Tx.SELECT)).status == Status.OK
            kp.send(select(7, creds("right", LOCKED)))
            assert (await kp.answer(Tx.SELECT)).status == Status.ACCESS_DENIED
            kp.send(select(8, Options()))
            res = await kp.answer(Tx.SELECT)
            assert res.status == Status.OK and res.result.rows == ((SECRET,),)
        finally:
            await kp.close()
            await clear.close()
            await server.close()
    asyncio.run(go())


def test_a_sib_without_the_mode_answers_version_not_supported():
    """A session with no key table reads 0xA1 as a KSP version (wire format 13.2)."""
    from ksp import SIBSession
    session = SIBSession(UDP)
    session.receive_datagram(Sealer(KEY, SENSOR, sib=False).seal(encode(select(3, Options()),
                                                                        UDP)), ("h", 1), 0.0)
    (data, addr), = session.datagrams_to_send(0.0)
    assert data[0] == 0x01 and data[1] == Status.VERSION_NOT_SUPPORTED and addr == ("h", 1)


def test_python_client_speaks_sealed_and_new_key_makes_keys(capsys):
    from sib.cli import main
    from ksp.secure import parse_key
    from transports import connect
    from transports.errors import KspTimeout
    from ksp import Timing

    assert main(["new-key"]) == 0
    printed = capsys.readouterr().out.strip()
    assert len(parse_key(printed)) == 32

    async def go():
        sib, server, port = await serving()
        kp = await connect(f"udp://127.0.0.1:{port}", kp_id="sensor", key=KEY.hex())
        stranger = await connect(f"udp://127.0.0.1:{port}", kp_id="sensor", key=bytes(32),
                                 timing=Timing(ack_timeout=0.05, max_retransmit=1))
        try:
            rows = await kp.query(select(0, Options()))
            assert [str(r[0]) for r in rows.rows] == [SECRET.lexical]
            assert server.udp.session.stats.sealed_dropped == 0
            with pytest.raises(KspTimeout):  # its datagrams are dropped, unanswered
                await asyncio.wait_for(stranger.query(select(0, Options())), 10)
            assert server.udp.session.stats.sealed_dropped >= 1
        finally:
            await kp.close()
            await stranger.close()
            await server.close()
    asyncio.run(go())


async def coap_post(port: int, payload: bytes):
    """One raw CoAP POST to the SIB's /ksp (a KP or an attacker speaking aiocoap directly)."""
    import aiocoap
    from aiocoap.numbers.codes import Code
    from transports.coap import CONTENT_FORMAT

    ctx = await aiocoap.Context.create_client_context(transports=["udp6"])
    try:
        msg = aiocoap.Message(code=Code.POST, uri=f"coap://127.0.0.1:{port}/ksp",
                              payload=payload, content_format=CONTENT_FORMAT)
        return await asyncio.wait_for(ctx.request(msg).response, 30)
    finally:
        await ctx.shutdown()


def test_sealed_over_coap_client_subscribes_and_attacks_get_401():
    """The sealed mode on the CoAP binding: `connect("coap://…", key=)` queries and subscribes
    (its INDs, notifications the client only believes sealed, arrive); a replayed POST payload,
    a sealed UDP datagram replayed over CoAP (one window per KP for every transport), a
    tampered one and a sealed request that also carries CREDENTIALS are refused, and nothing
    of them executes."""
    from transports import connect

    async def go():
        sib = Sib(access=AccessPolicy.from_config(CONFIG))
        server = await Server.start(sib, udp=0, coap=0)
        sib.store.apply(__import__("sib").Delta(((S, P, SECRET, G1),), ()))
        cport, uport = server.coap.port, server.udp.port
        try:
            async with connect(f"coap://127.0.0.1:{cport}", kp_id="sensor", key=KEY) as kp:
                rows = await kp.query(f"SELECT ?o FROM <{G1}> WHERE {{ <{S}> <{P}> ?o }}")
                assert [str(r[0]) for r in rows.rows] == [SECRET.lexical]
                text = f"SELECT ?o FROM <{G1}> WHERE {{ <{S}> <{P}> ?o }}"
                async with kp.subscribe(text) as sub:
                    first = await asyncio.wait_for(anext(sub), 30)
                    assert [str(r[0]) for r in first.result.rows] == [SECRET.lexical]
                    await kp.update(f"INSERT DATA {{ GRAPH <{G1}> {{ <{S}> <{P}> "
                                    f"<{ex('new')}> }} }}")  # GRAPH: ok in DATA
                    ind = await asyncio.wait_for(anext(sub), 30)
                    assert {str(r[0]) for r in ind.result.rows} == {SECRET.lexical,
                                                                    str(ex("new"))}

            # above the counters `connect` took (from the clock, 13.5)
            peer = Sealer(KEY, SENSOR, sib=False, counter=initial_counter(time.time()) + 10**6)
            payload = peer.seal(encode(Request(Tx.INSERT_DATA, 40, insert=((S, P, ex("a")),),
                                               options=Options(insert_graphs=(G1,)),
                                               confirmable=True), UDP))
            first = await coap_post(cport, payload)
            answer = decode_sib_message(peer.open(first.payload), UDP, answers=Tx.INSERT_DATA)
            assert first.payload[0] == 0xA1 and answer.status == Status.OK
            executed = sib.core.metrics.requests["INSERT_DATA"]
            dropped = server.coap.session.stats.sealed_dropped
            assert str((await coap_post(cport, payload)).code) == "4.01 Unauthorized"
            # the same KP over UDP: a datagram taken there, replayed over CoAP
            udp = await SealedPeer(uport).open()
            try:
                udp.sealer.counter = peer.counter + 10**6
                udp.send(select(41, Options()))
                assert (await udp.answer(Tx.SELECT)).status == Status.OK
                replay = await coap_post(cport, udp.sent[0])
                assert str(replay.code) == "4.01 Unauthorized"
            finally:
                await udp.close()
            bad = bytearray(peer.seal(encode(select(42, Options()), UDP)))
            bad[25] ^= 1
            assert str((await coap_post(cport, bytes(bad))).code) == "4.01 Unauthorized"
            assert server.coap.session.stats.sealed_dropped == dropped + 3
            assert server.sealed_dropped == server.coap.session.stats.sealed_dropped
            assert sib.core.metrics.requests["INSERT_DATA"] == executed

            peer.counter += 10**7  # above the UDP peer's: the window is one per KP
            with_password = peer.seal(encode(select(43, creds("x", SENSOR)), UDP))
            refused = decode_sib_message(peer.open((await coap_post(cport, with_password))
                                                   .payload), UDP, answers=Tx.SELECT)
            assert refused.status == Status.ACCESS_DENIED
        finally:
            await server.close()
    asyncio.run(go())


@pytest.mark.slow
def test_coap_ind_waiting_when_the_kps_key_is_removed_ends_its_observation_401():
    """A sealed KP's key removed (a reloaded configuration) while its IND waits for the CoAP
    notification budget: nothing of the IND reaches the KP; a GET of its resource answers 4.01,
    so does the notification or the client's re-registration, and the client raises
    ACCESS_DENIED; the SIB drops the operation as one nobody listens to. The SIB goes on
    serving."""
    import aiocoap
    from aiocoap.numbers.codes import Code

    from transports import connect
    from transports.coap import CoapServer

    async def go():
        sib = Sib(access=AccessPolicy.from_config(CONFIG))
        # Max-Age 1 s: nobody observing, the SIB gives the KP up after 2 s
        server = await CoapServer.start(sib, "127.0.0.1", 0, notification_budget=(2, 6.0),
                                        max_age=1)
        base = f"coap://127.0.0.1:{server.port}"
        ctx = await aiocoap.Context.create_client_context(transports=["udp6"])
        try:
            kp = await connect(base, kp_id="sensor", key=KEY)
            text = f"SELECT ?o FROM <{G1}> WHERE {{ <{S}> <{P}> ?o }}"
            got = []
            async with kp.subscribe(text) as sub:
                await until(lambda: any(r._observations for r in server._persistent.values()))
                for n in range(3):  # two INDs go, the third waits for the window
                    await kp.update(f"INSERT DATA {{ GRAPH <{G1}> {{ <{S}> <{P}> "
                                    f"<{ex(f'v{n}')}> }} }}")
                await until(lambda: len(server.pacer) == 1)
                resource = next(iter(server._persistent.values()))
                no_key = {**CONFIG, "kp": [{"id": "sensor", "password_hash": HASH,
                                            "read": ["*"], "write": ["*"]}]}
                sib.set_access(AccessPolicy.from_config(no_key))
                await sib.drain()
                uri = f"{base}/{'/'.join(resource.path)}"
                get = await asyncio.wait_for(
                    ctx.request(aiocoap.Message(code=Code.GET, uri=uri)).response, 30)
                assert str(get.code) == "4.01 Unauthorized" and not get.payload

                async def rest() -> None:
                    async for ind in sub:  # raises when the 4.01 comes
                        got.append(ind)
                with pytest.raises(KspStatusError) as denied:
                    await asyncio.wait_for(rest(), 30)
                assert denied.value.status == Status.ACCESS_DENIED
            # the RES's state and the two INDs sent; nothing of the third
            assert [(i.seq, len(i.result.rows)) for i in got] == [(None, 0), (1, 1), (2, 2)]
            await until(lambda: not server.pacer)  # the window frees: nothing waits
            await until(lambda: not sib.core.registry.ops)
            await until(lambda: server.sizes()["resources"] == 0)
            await kp.close()
            # the SIB goes on serving: the KP, with its new password in the clear, is answered
            async with connect(base, kp_id="sensor", password="right") as other:
                rows = await other.query(text)
                assert {str(r[0]) for r in rows.rows} == {str(ex(f"v{n}")) for n in range(3)}
        finally:
            await ctx.shutdown()
            await server.close()
            await sib.close()
    asyncio.run(go())
