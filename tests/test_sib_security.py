"""Attacks on a SIB with access control, as someone on the same network would try them, through
real sockets (UDP, TCP, CoAP): a stranger who names a KP's ID with a wrong password must get
none of that KP's answers, must not move its exchanges and must not poison its transaction IDs
(the duplicate cache answers only after the credentials are proven, `sib.auth`); passwords are
verified off the request path, failures are limited, unknown KP IDs cost the same work."""
from __future__ import annotations

import asyncio
import contextlib
import hashlib
import threading

import aiocoap
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ksp import (
    UDP, TCP, Credentials, Literal, Options, Request, Status, Triple, Tx, Var, decode_sib_message,
    encode,
)
from sib import Sib
from sib.access import AccessPolicy, hash_password
from sib.auth import Authenticator
from sib.testing import ex
from transports import Server
from transports.client import kp_id_bytes
from transports.coap import CONTENT_FORMAT, RESOURCE

S, P, G1 = ex("s"), ex("p"), ex("g1")
HASH = hash_password("right")
WRITER = kp_id_bytes("writer")
CONFIG = {"anonymous": "none", "kp": [
    {"id": "writer", "password_hash": HASH, "read": ["*"], "write": ["*"]},
]}
SECRET = Literal("the writer's secret")


def creds(password: str = "right", kp_id: bytes = WRITER) -> Options:
    return Options(credentials=Credentials(kp_id, password))


def select(tid: int, options: Options, obj=None) -> Request:
    """SELECT ?o { s p ?o } — or, with `obj`, another query (a different body, same TID)."""
    where = (Triple(S, P, Var(0)),) if obj is None else (Triple(S, obj, Var(0)),)
    return Request(Tx.SELECT, tid, projection=1, where=where, options=options)


class Peer:
    """One KP socket speaking raw KSP (so the test chooses every TID and byte)."""

    def __init__(self, transport: str, port: int, local: str = "127.0.0.1") -> None:
        """`local`: the loopback address it sends from (UDP, TCP), another host's stand-in."""
        self.transport, self.port, self.local = transport, port, local
        self.received: asyncio.Queue[bytes] = asyncio.Queue()
        self._udp = self._tcp = self._coap = None

    async def open(self) -> "Peer":
        loop = asyncio.get_running_loop()
        if self.transport == "udp":
            peer = self

            class Proto(asyncio.DatagramProtocol):
                def datagram_received(self, data, addr):
                    peer.received.put_nowait(data)

            self._udp, _ = await loop.create_datagram_endpoint(
                Proto, local_addr=(self.local, 0), remote_addr=("127.0.0.1", self.port))
        elif self.transport == "tcp":
            self._tcp = await asyncio.open_connection("127.0.0.1", self.port,
                                                      local_addr=(self.local, 0))
        else:
            self._coap = await aiocoap.Context.create_client_context()
        return self

    def send(self, request: Request) -> None:
        data = encode(request, TCP if self.transport == "tcp" else UDP)
        if self.transport == "udp":
            self._udp.sendto(data)
        elif self.transport == "tcp":
            self._tcp[1].write(data)
        else:
            message = aiocoap.Message(code=aiocoap.POST, payload=data,
                                      uri=f"coap://127.0.0.1:{self.port}/{RESOURCE[0]}")
            message.opt.content_format = CONTENT_FORMAT
            pending = self._coap.request(message).response

            async def answered():
                self.received.put_nowait((await pending).payload)

            asyncio.get_running_loop().create_task(answered())

    async def answer(self, tx: Tx, timeout: float = 20.0):
        """The next RES, decoded as the answer to a `tx` request."""
        if self.transport == "tcp":
            reader = self._tcp[0]
            head = await asyncio.wait_for(reader.readexactly(8), timeout)
            length = int.from_bytes(head[4:8], "little")
            data = head + await reader.readexactly(length - 8)
            return decode_sib_message(data, TCP, answers=tx)
        data = await asyncio.wait_for(self.received.get(), timeout)
        return decode_sib_message(data, UDP, answers=tx)

    async def nothing(self, wait: float = 0.5) -> bool:
        """Whether nothing arrives within `wait` seconds (at the end of a test: it reads)."""
        if self.transport == "tcp":
            try:
                return not await asyncio.wait_for(self._tcp[0].read(1), wait)
            except TimeoutError:
                return True
        await asyncio.sleep(wait)
        return self.received.empty()

    async def close(self) -> None:
        if self._udp is not None:
            self._udp.close()
        if self._tcp is not None:
            self._tcp[1].close()
        if self._coap is not None:
            await self._coap.shutdown()


class GatedSib(Sib):
    """The real SIB whose requests wait at the door until `release()`: a slow request, still
    executing when a copy of it arrives."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.gate: list | None = []

    def submit(self, request, channel) -> None:
        if self.gate is None:
            super().submit(request, channel)
        else:
            self.gate.append((request, channel))

    def release(self) -> None:
        gate, self.gate = self.gate, None
        for request, channel in gate:
            super().submit(request, channel)


def run(coro):
    asyncio.run(asyncio.wait_for(coro, 120))


@contextlib.asynccontextmanager
async def attacked(transport: str, sib: Sib, peers: int | list[str] = 2):
    """`sib` holding the writer's secret, served on `transport`; `peers` raw KP sockets (a
    number of them from 127.0.0.1, or the loopback addresses they send from). Yields (server,
    peers); everything is closed on leaving."""
    sib.store.apply(__import__("sib").Delta(((S, P, SECRET, G1),), ()))
    server = await Server.start(sib, **{transport: 0})
    port = getattr(server, transport).port
    hosts = ["127.0.0.1"] * peers if isinstance(peers, int) else peers
    opened = [await Peer(transport, port, host).open() for host in hosts]
    try:
        yield server, opened
    finally:
        for peer in opened:
            await peer.close()
        await server.close()
        await sib.close()


TRANSPORTS = ["udp", "tcp", "coap"]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_wrong_password_gets_no_cached_answer(transport):
    """The KP's SELECT is answered and cached; a stranger with its KP ID, a wrong password and
    the same TID (even with another query in the body) gets ACCESS_DENIED, not the results."""
    async def go():
        sib = Sib(access=AccessPolicy.from_config(CONFIG))
        async with attacked(transport, sib) as (server, (kp, thief)):
            kp.send(select(7, creds()))
            res = await kp.answer(Tx.SELECT)
            assert res.status == Status.OK and res.result.rows == ((SECRET,),)
            for body in (select(7, creds("wrong")), select(7, creds("wrong"), obj=ex("q"))):
                thief.send(body)
                stolen = await thief.answer(Tx.SELECT)
                assert stolen.status == Status.ACCESS_DENIED and stolen.result is None
            # The KP's own copy is still answered from the cache over UDP and CoAP (TCP has no
            # retransmissions, hence no cache: executed again).
            executed = sib.core.metrics.requests["SELECT"]
            kp.send(select(7, creds()))
            again = await kp.answer(Tx.SELECT)
            assert again.result.rows == ((SECRET,),)
            assert sib.core.metrics.requests["SELECT"] == executed + (transport == "tcp")

    run(go())


@pytest.mark.slow
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_wrong_password_does_not_redirect_an_executing_request(transport):
    """While the KP's request executes, a copy with a wrong password from elsewhere: the answer
    still goes to the KP, the stranger gets ACCESS_DENIED and nothing else."""
    async def go():
        sib = GatedSib(access=AccessPolicy.from_config(CONFIG))
        async with attacked(transport, sib) as (server, (kp, thief)):
            # The password is proven once, so that the next request executes at once.
            sib.release()
            kp.send(select(1, creds()))
            assert (await kp.answer(Tx.SELECT)).status == Status.OK
            sib.gate = []
            kp.send(select(2, creds()))
            for _ in range(100):
                if sib.gate:
                    break
                await asyncio.sleep(0.01)
            assert len(sib.gate) == 1  # executing (waiting at the gate)
            thief.send(select(2, creds("wrong")))
            denied = await thief.answer(Tx.SELECT)
            assert denied.status == Status.ACCESS_DENIED and denied.result is None
            sib.release()
            res = await kp.answer(Tx.SELECT)
            assert res.status == Status.OK and res.result.rows == ((SECRET,),)
            assert await thief.nothing()

    run(go())


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_wrong_password_first_does_not_poison_the_transaction_id(transport):
    """A stranger uses the KP's next TID first, with a wrong password: the KP's own request
    with that TID is executed and answered, not refused from the cache."""
    async def go():
        sib = Sib(access=AccessPolicy.from_config(CONFIG))
        async with attacked(transport, sib) as (server, (kp, thief)):
            thief.send(select(9, creds("wrong")))
            assert (await thief.answer(Tx.SELECT)).status == Status.ACCESS_DENIED
            kp.send(select(9, creds()))
            res = await kp.answer(Tx.SELECT)
            assert res.status == Status.OK and res.result.rows == ((SECRET,),)

    run(go())


# -- brute force, enumeration, verification off the request path ------------------------------


def test_failures_are_limited_per_source_and_a_proven_password_still_works():
    async def go():
        sib = Sib(access=AccessPolicy.from_config(CONFIG),
                  auth_options={"max_failures": 3, "clock": lambda: 0.0})
        async with attacked("udp", sib) as (server, (kp, guesser)):
            kp.send(select(1, creds()))
            assert (await kp.answer(Tx.SELECT)).status == Status.OK
            statuses = []
            for tid in range(10, 16):
                guesser.send(select(tid, creds(f"guess{tid}")))
                statuses.append((await guesser.answer(Tx.SELECT)).status)
            assert statuses == [Status.ACCESS_DENIED] * 3 + [Status.LIMIT_EXCEEDED] * 3
            assert sib.authenticator.verified == 4  # the KP's password and 3 guesses, no more
            # Same host (loopback), proven password: still served during the lock-out.
            kp.send(select(2, creds()))
            res = await kp.answer(Tx.SELECT)
            assert res.status == Status.OK and res.result.rows == ((SECRET,),)
            # Whoever knows the proven password is served, from the locked-out socket too.
            guesser.send(select(20, creds()))
            assert (await guesser.answer(Tx.SELECT)).status == Status.OK

    run(go())


def test_failures_for_one_kp_id_hold_back_its_guessers_not_the_kp():
    """Guesses for one KP ID from several hosts: past `max_failures` for the ID, each failing
    host waits, longer with each failure (up to the cap), while a host that has not failed,
    with the right password, gets in at once; a host's wait ends."""
    now = [0.0]
    auth = Authenticator(AccessPolicy.from_config(CONFIG), max_failures=2, backoff_base=1,
                         backoff_cap=8, clock=lambda: now[0])

    async def guess(password, host):
        source = (host, 5000)
        if auth.verdict(WRITER, password, source) is None:
            await auth.verify(WRITER, password, source)
        return auth.verdict(WRITER, password, source)

    async def go():
        assert await guess("a", "10.0.0.1") == Status.ACCESS_DENIED
        assert await guess("b", "10.0.0.2") == Status.ACCESS_DENIED  # the ID's 2nd: .2 waits 1 s
        assert await guess("c", "10.0.0.2") == Status.LIMIT_EXCEEDED
        assert await guess("c", "10.0.0.3") == Status.ACCESS_DENIED  # 3rd: .3 waits 2 s
        assert await guess("right", "10.0.0.4") == Status.OK  # never failed: not held back
        now[0] = 1.5
        assert await guess("d", "10.0.0.3") == Status.LIMIT_EXCEEDED
        assert await guess("d", "10.0.0.2") == Status.ACCESS_DENIED  # its wait is over; 4 s now
        assert auth.guesses.wait(("10.0.0.2", 1)) == 4.0
        assert await guess("a", "10.0.0.1") == Status.ACCESS_DENIED  # remembered: no scrypt
        assert auth.verified == 5
        auth.close()

    run(go())


@pytest.mark.parametrize("transport", ["udp", "tcp"])
def test_a_device_that_never_proved_its_password_is_not_locked_out_by_guessers(transport):
    """Twelve wrong passwords for the writer's KP ID from one host, then more from another:
    each guesser is held back (LIMIT_EXCEEDED), and the writer, which has never proved its
    password, gets in from its own address with its right one."""
    now = [0.0]
    sib = Sib(access=AccessPolicy.from_config(CONFIG), auth_options={"clock": lambda: now[0]})

    async def go():
        hosts = ["127.0.0.1", "127.0.0.3", "127.0.0.2"]
        async with attacked(transport, sib, hosts) as (server, (one, other, kp)):
            statuses = []
            for tid in range(10, 22):
                one.send(select(tid, creds(f"guess{tid}")))
                statuses.append((await one.answer(Tx.SELECT)).status)
            assert statuses == [Status.ACCESS_DENIED] * 10 + [Status.LIMIT_EXCEEDED] * 2
            other.send(select(10, creds("another guess")))  # the ID's 11th: held back after
            assert (await other.answer(Tx.SELECT)).status == Status.ACCESS_DENIED
            other.send(select(11, creds("and another")))
            assert (await other.answer(Tx.SELECT)).status == Status.LIMIT_EXCEEDED
            kp.send(select(1, creds()))
            res = await kp.answer(Tx.SELECT)
            assert res.status == Status.OK and res.result.rows == ((SECRET,),)

    run(go())


def test_a_flood_of_guesses_from_one_source_is_refused_without_being_tried():
    """Forty wrong passwords from one socket at once: at most `max_pending_per_source` are in
    flight, and past `max_failures` the rest are refused LIMIT_EXCEEDED untried; the writer
    from another address is served meanwhile."""
    now = [0.0]
    sib = Sib(access=AccessPolicy.from_config(CONFIG), auth_options={"clock": lambda: now[0]})

    async def go():
        async with attacked("udp", sib, ["127.0.0.1", "127.0.0.2"]) as (server, (flood, kp)):
            for tid in range(100, 140):
                flood.send(select(tid, creds(f"guess{tid}")))
            statuses = [(await flood.answer(Tx.SELECT)).status for _ in range(40)]
            assert set(statuses) == {Status.ACCESS_DENIED, Status.LIMIT_EXCEEDED}
            tried = sib.authenticator.verified
            assert statuses.count(Status.ACCESS_DENIED) == tried <= 10 + 4 - 1
            kp.send(select(1, creds()))
            assert (await kp.answer(Tx.SELECT)).status == Status.OK

    run(go())


def test_unknown_kp_ids_cost_the_same_password_work(monkeypatch):
    """Known and unknown KP IDs with a wrong password run the same scrypt (parameters and
    count), so they cannot be told apart by timing."""
    runs = []
    real = hashlib.scrypt

    def counting(password, **kw):
        runs.append((kw["n"], kw["r"], kw["p"], kw["dklen"]))
        return real(password, **kw)

    monkeypatch.setattr(hashlib, "scrypt", counting)
    auth = Authenticator(AccessPolicy.from_config(CONFIG))

    async def go():
        outcome = {}
        for name, kp_id in (("known", WRITER), ("unknown", kp_id_bytes("nobody"))):
            before = len(runs)
            assert auth.verdict(kp_id, "wrong", ("10.0.0.9", 1)) is None
            await auth.verify(kp_id, "wrong", ("10.0.0.9", 1))
            assert auth.verdict(kp_id, "wrong", ("10.0.0.9", 1)) == Status.ACCESS_DENIED
            outcome[name] = runs[before:]
        assert outcome["known"] == outcome["unknown"] and len(outcome["known"]) == 1
        auth.close()

    run(go())


def test_password_checks_run_off_the_request_path_with_bounded_concurrency():
    """With the verification worker busy, a guesser's request waits in the session while a KP
    whose password is proven is served; past `max_pending` passwords in flight, new ones are
    refused at once with LIMIT_EXCEEDED."""
    async def go():
        sib = Sib(access=AccessPolicy.from_config(CONFIG), auth_options={"max_pending": 2})
        busy = threading.Event()
        async with attacked("udp", sib, peers=4) as (server, (kp, *guessers)):
            kp.send(select(1, creds()))
            assert (await kp.answer(Tx.SELECT)).status == Status.OK
            sib.authenticator._pool.submit(busy.wait, 30)  # busy from now on (30 s at most)
            guessers[0].send(select(10, creds("g0")))
            guessers[1].send(select(10, creds("g1")))
            for _ in range(100):
                if sib.authenticator.pending == 2:
                    break
                await asyncio.sleep(0.01)
            assert sib.authenticator.pending == 2 and server.udp.session.held == 2
            guessers[2].send(select(10, creds("g2")))  # a third password in flight: refused
            assert (await guessers[2].answer(Tx.SELECT)).status == Status.LIMIT_EXCEEDED
            kp.send(select(2, creds()))  # served while two checks wait for the worker
            res = await kp.answer(Tx.SELECT)
            assert res.status == Status.OK and res.result.rows == ((SECRET,),)
            assert await guessers[0].nothing(0.1) and await guessers[1].nothing(0.1)
            busy.set()
            for g in guessers[:2]:
                assert (await g.answer(Tx.SELECT)).status == Status.ACCESS_DENIED

    run(go())


# -- persistent operations under a changed policy (restart, SIGHUP) ---------------------------


def _config(path, data: str, port: int, reader_reads: list[str]) -> None:
    reads = ", ".join(f'"{g}"' for g in reader_reads)
    path.write_text(
        f'[sib]\ndata_dir = "{data}"\nudp_port = {port}\ntcp_port = -1\ncoap_port = -1\n'
        f'[access]\nanonymous = "none"\n'
        f'[[access.kp]]\nid = "writer"\npassword_hash = "{HASH}"\nread = ["*"]\nwrite = ["*"]\n'
        f'[[access.kp]]\nid = "reader"\npassword_hash = "{HASH}"\nread = [{reads}]\n')


SUB_G1 = f"SELECT ?o FROM <{G1}> WHERE {{ <{S}> <{P}> ?o }}"


@pytest.mark.slow
@pytest.mark.parametrize("how", ["restart", "sighup"])
def test_a_revoked_read_permission_ends_the_persistent_query(tmp_path, how):
    """The reader subscribes to G1; its read permission on G1 is revoked (in the configuration
    file, then a restart or SIGHUP): its subscription ends with an ACCESS_DENIED IND, and what
    is inserted after the revocation never reaches it."""
    import signal

    from rdflib import Literal as RLiteral, URIRef

    from ksp import Timing
    from sib.testing import SibProcess, free_port
    from transports import KspStatusError, connect

    fast = Timing(ack_timeout=0.5, max_retransmit=6)
    data, port, conf = str(tmp_path / "data"), free_port(), tmp_path / "sib.toml"
    _config(conf, data, port, [str(G1)])
    url = f"udp://127.0.0.1:{port}"
    s, p, g1 = URIRef(str(S)), URIRef(str(P)), URIRef(str(G1))
    procs: list[SibProcess] = []

    async def scenario():
        procs.append(SibProcess("--config", str(conf)))
        async with await connect(url, kp_id="reader", password="right", timing=fast) as reader:
            async with reader.subscribe(SUB_G1) as sub:
                assert (await anext(sub)).result.rows == ()
                async with await connect(url, kp_id="writer", password="right",
                                         timing=fast) as writer:
                    await writer.insert_data([(s, p, RLiteral(1))], graph=g1)
                assert [r[0] for r in (await asyncio.wait_for(anext(sub), 60)).result.rows
                        ] == [RLiteral(1)]
                _config(conf, data, port, [])  # the reader may read nothing now
                if how == "restart":
                    assert await asyncio.to_thread(procs[0].stop) == 0
                    procs.append(await asyncio.to_thread(SibProcess, "--config", str(conf)))
                    log = procs[-1]
                else:
                    procs[0].proc.send_signal(signal.SIGHUP)
                    log = procs[0]
                with pytest.raises(KspStatusError) as ended:
                    await asyncio.wait_for(anext(sub), 60)
                assert ended.value.status is Status.ACCESS_DENIED
                async with await connect(url, kp_id="writer", password="right",
                                         timing=fast) as writer:
                    await writer.insert_data([(s, p, RLiteral(2))], graph=g1)
                await asyncio.sleep(1.0)
                assert sub.latest() is None  # nothing after the revocation
                with pytest.raises(KspStatusError) as denied:
                    await reader.query(SUB_G1)
                assert denied.value.status is Status.ACCESS_DENIED
        text = log.log()
        assert ("not restored" if how == "restart" else "ended by the new access policy") in text
        assert "persistent operations restored" not in text  # the only one was not
        if how == "sighup":
            assert "SIGHUP: access policy reloaded" in text

    try:
        run(scenario())
    finally:
        for proc in procs:
            proc.__exit__()


# -- TLS in the shipped server ----------------------------------------------------------------


@pytest.mark.slow
def test_ksp_sib_serves_tls_and_refuses_plain_clients_and_clients_without_a_certificate(
        tmp_path):
    """`ksp-sib --tls-cert/--tls-key` makes the TCP listener TLS; a plain KSP client gets a
    clean connection error, not an answer or a hang. With `--tls-client-ca` (mutual TLS) only a
    client with a certificate signed by that CA gets in."""
    import ssl

    from rdflib import Literal as RLiteral, URIRef

    from sib.testing import SibProcess
    from transport_helpers import certificate
    from transports import ClientError, connect

    cert, key = certificate(tmp_path)
    s, p = URIRef(str(S)), URIRef(str(P))
    trust = ssl.create_default_context(cafile=str(cert))
    with_cert = ssl.create_default_context(cafile=str(cert))
    with_cert.load_cert_chain(cert, key)  # self-signed: its own CA

    async def talk(port: int, context: ssl.SSLContext) -> set:
        async with await connect(f"tcps://127.0.0.1:{port}", ssl=context) as kp:
            await kp.insert_data([(s, p, RLiteral(1))])
            return {row[0] for row in (await kp.query(
                f"SELECT ?o WHERE {{ <{s}> <{p}> ?o }}")).rows}

    async def refused(url: str, **kw) -> None:
        with pytest.raises((ClientError, ConnectionError, ssl.SSLError)):
            async with await connect(url, **kw) as kp:
                await asyncio.wait_for(kp.query(f"ASK {{ <{s}> <{p}> ?o }}"), 30)

    base = ("--memory", "--udp-port", "-1", "--coap-port", "-1", "--tcp-port", "0",
            "--tls-cert", str(cert), "--tls-key", str(key))
    with SibProcess(*base) as sib:
        port = sib.ports["tcps"]
        assert run_value(talk(port, trust)) == {RLiteral(1)}
        run(refused(f"tcp://127.0.0.1:{port}"))
        assert sib.stop() == 0
    with SibProcess(*base, "--tls-client-ca", str(cert)) as sib:
        port = sib.ports["tcps"]
        run(refused(f"tcps://127.0.0.1:{port}", ssl=trust))  # no client certificate
        assert run_value(talk(port, with_cert)) == {RLiteral(1)}
        assert sib.stop() == 0


@pytest.mark.slow
def test_a_bad_tls_configuration_stops_startup_with_one_line(tmp_path):
    import subprocess
    import sys

    for args, words in ((["--tls-cert", str(tmp_path / "missing.pem")], "needs both"),
                        (["--tls-cert", str(tmp_path / "c"), "--tls-key", str(tmp_path / "k")],
                         "[tls]")):
        out = subprocess.run([sys.executable, "-m", "sib.cli", "--memory", *args],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 2 and words in out.stderr and "Traceback" not in out.stderr


def run_value(coro):
    return asyncio.run(asyncio.wait_for(coro, 120))


@pytest.mark.slow
def test_metrics_stay_on_loopback_unless_exposed():
    """The KSP listeners on another address; the metrics endpoint stays on 127.0.0.1 by
    default, and `--metrics-host` moves it."""
    from sib.testing import SibProcess, scrape

    args = ("--memory", "--host", "127.0.0.2", "--udp-port", "0", "--tcp-port", "-1",
            "--coap-port", "-1", "--metrics-port", "0")
    with SibProcess(*args) as sib:
        assert "listening on udp://127.0.0.2:" in sib.log()
        assert "metrics on http://127.0.0.1:" in sib.log()
        assert "ksp_requests_total" in run_value(scrape(sib.ports["metrics"]))
        assert sib.stop() == 0
    with SibProcess(*args, "--metrics-host", "127.0.0.3") as sib:
        assert "metrics on http://127.0.0.3:" in sib.log()
        text = run_value(scrape(sib.ports["metrics"], host="127.0.0.3"))
        assert "ksp_password_verifications_total 0.0" in text
        assert sib.stop() == 0


# -- the authenticator's rules under any sequence of attempts ---------------------------------


@pytest.mark.slow
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(attempts=st.lists(st.tuples(st.sampled_from(["writer", "nobody"]),
                                   st.sampled_from(["right", "a", "b", "c"]),
                                   st.sampled_from(["10.0.0.1", "10.0.0.2", "10.0.0.3"]),
                                   st.floats(0, 30)), max_size=25))
def test_authenticator_invariants(attempts):
    """Whatever the order of attempts: the right password, once proven, is always accepted; a
    wrong one or an unknown KP ID never is; only an address that has guessed wrong is ever held
    back (LIMIT_EXCEEDED); each (KP ID, password) is hashed at most once; no verification is
    left pending."""
    now = [0.0]
    auth = Authenticator(AccessPolicy.from_config(FAST_CONFIG), max_failures=3,
                         backoff_base=1, backoff_cap=60, clock=lambda: now[0])

    async def go():
        proven, hashed, guessers = False, set(), set()
        for name, password, host, dt in attempts:
            now[0] += dt
            kp_id, source = kp_id_bytes(name), (host, 1)
            verdict = auth.verdict(kp_id, password, source)
            if verdict is None:
                hashed.add((name, password))
                await auth.verify(kp_id, password, source)
                verdict = auth.verdict(kp_id, password, source)
            good = name == "writer" and password == "right"
            if good and proven:
                assert verdict == Status.OK
            if good and verdict == Status.OK:
                proven = True
            if not good:
                assert verdict in (Status.ACCESS_DENIED, Status.LIMIT_EXCEEDED)
            if verdict == Status.LIMIT_EXCEEDED:
                assert host in guessers
            if not good:
                guessers.add(host)
            assert verdict is not None
            assert auth.pending == 0
        assert auth.verified == len(hashed)
        auth.close()

    run(go())


FAST_CONFIG = {"anonymous": "none", "kp": [{"id": "writer", "read": ["*"], "password_hash": (
    "scrypt$16$8$1$" + bytes(16).hex() + "$"
    + hashlib.scrypt(b"right", salt=bytes(16), n=16, r=8, p=1, dklen=32).hex())}]}
