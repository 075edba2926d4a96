"""Access control (sib/access.py): CREDENTIALS against configured KPs with hashed passwords,
per-graph permissions, the anonymous policy; denial is status 0x08 with nothing applied."""
from __future__ import annotations

import asyncio

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ksp import Credentials, DEFAULT_GRAPH, Literal, Options, Request, Status, Triple, Tx, Var
from sib import Sib
from sib.access import AccessPolicy, hash_password, needs, verify_password
from sib.testing import Client, ex
from transports import KspStatusError, Server, connect
from ksp.kpid import kp_id_bytes

from strategies import requests

S, P, G1, G2 = ex("s"), ex("p"), ex("g1"), ex("g2")
HASH = hash_password("right")  # once: scrypt is slow on purpose
WRITER = kp_id_bytes("writer")
READER = kp_id_bytes("reader")
CONFIG = {"anonymous": "none", "kp": [
    {"id": "writer", "password_hash": HASH, "read": ["*"], "write": [str(G1), "default"]},
    {"id": "reader", "password_hash": HASH, "read": [str(G1)]},
]}


def creds(kp_id: bytes = WRITER, password: str = "right") -> Options:
    return Options(credentials=Credentials(kp_id, password))


def insert(tid: int, options: Options, *graphs) -> Request:
    return Request(Tx.INSERT_DATA, tid, insert=(Triple(S, P, Literal.of(tid)),),
                   options=options._replace(insert_graphs=graphs or None))


def select(tid: int, options: Options, *graphs, tx: Tx = Tx.SELECT) -> Request:
    return Request(tx, tid, projection=1, where=(Triple(S, P, Var(0)),),
                   options=options._replace(query_graphs=graphs or None))


def scenario(body, config=CONFIG):
    async def go():
        sib = Sib(access=AccessPolicy.from_config(config))
        kp = Client(sib)
        await body(sib, kp)
        await sib.close()

    asyncio.run(go())


def test_password_hash_round_trip_and_salt():
    assert verify_password("right", HASH)
    assert not verify_password("wrong", HASH)
    assert hash_password("right") != HASH  # a fresh salt each time
    assert not verify_password("right", "not-a-hash")
    assert not verify_password("right", "bcrypt$1$2$3$00$00")


def test_writer_with_the_right_password_reads_and_writes_its_graphs():
    async def body(sib, kp):
        assert (await kp.call(insert(1, creds()))).status == Status.OK  # default graph
        assert (await kp.call(insert(2, creds(), G1))).status == Status.OK
        res = await kp.call(select(3, creds()))
        assert res.status == Status.OK and len(res.result.rows) == 2

    scenario(body)


@pytest.mark.parametrize("options", [
    creds(password="wrong"),         # wrong password
    creds(kp_id_bytes("nobody")),    # unknown KP
    Options(),                       # anonymous, policy none
], ids=["wrong-password", "unknown-kp", "anonymous-none"])
def test_denied_requests_apply_nothing(options):
    async def body(sib, kp):
        for req in (insert(1, options), insert(2, options, G1), select(3, options),
                    select(4, options, tx=Tx.SELECT_PERSISTENT),
                    Request(Tx.CREATE, 5, graphs=(G2,), options=options)):
            assert (await kp.call(req)).status == Status.ACCESS_DENIED
        assert len(sib.store) == 0 and not sib.store.graph_exists(G2)
        assert sib.core.persistent_count == 0
        assert sib.core.metrics.denied == 5

    scenario(body)


def test_per_graph_denial_in_a_pattern_update_touching_two_graphs_applies_nothing():
    async def body(sib, kp):
        assert (await kp.call(insert(1, creds(), G1))).status == Status.OK
        before = set(sib.store.match())
        # INSERT into G1 (allowed) and G2 (not): the whole request is refused.
        req = Request(Tx.INSERT, 2, insert=(Triple(Var(0), ex("copy"), Var(1)),),
                      where=(Triple(Var(0), P, Var(1)),),
                      options=creds()._replace(insert_graphs=(G1, G2)))
        assert (await kp.call(req)).status == Status.ACCESS_DENIED
        # DELETE without DELETE GRAPH deletes from every graph: needs write on "*".
        req = Request(Tx.DELETE, 3, delete=(Triple(Var(0), P, Var(1)),),
                      where=(Triple(Var(0), P, Var(1)),), options=creds())
        assert (await kp.call(req)).status == Status.ACCESS_DENIED
        assert set(sib.store.match()) == before
        ok = req._replace(tid=4, options=creds()._replace(delete_graphs=(G1,)))
        assert (await kp.call(ok)).status == Status.OK
        assert not set(sib.store.match())

    scenario(body)


def test_reader_reads_only_its_graph_and_persistent_ops_are_checked_at_subscribe():
    async def body(sib, kp):
        sib.store.apply(__import__("sib").Delta(((S, P, Literal.of(1), G1),
                                                 (S, P, Literal.of(2), DEFAULT_GRAPH)), ()))
        r = creds(READER)
        assert (await kp.call(select(1, r, G1))).result.rows == ((Literal.of(1),),)
        assert (await kp.call(select(2, r))).status == Status.ACCESS_DENIED  # union: "*"
        assert (await kp.call(select(3, r, G1, DEFAULT_GRAPH))).status == Status.ACCESS_DENIED
        assert (await kp.call(select(4, r, DEFAULT_GRAPH, tx=Tx.SELECT_PERSISTENT))
                ).status == Status.ACCESS_DENIED
        assert sib.core.persistent_count == 0
        assert (await kp.call(select(5, r, G1, tx=Tx.SELECT_PERSISTENT))).status == Status.OK
        assert (await kp.call(insert(6, r, G1))).status == Status.ACCESS_DENIED
        # a rule writing where its owner may not is refused at registration
        rule = Request(Tx.INSERT_PERSISTENT, 7, insert=(Triple(Var(0), ex("q"), Var(1)),),
                       where=(Triple(Var(0), P, Var(1)),), options=r._replace(query_graphs=(G1,)))
        assert (await kp.call(rule)).status == Status.ACCESS_DENIED
        assert sib.core.persistent_count == 1

    scenario(body)


def test_graph_management_needs_the_right_mix():
    async def body(sib, kp):
        w = creds()
        assert (await kp.call(Request(Tx.CREATE, 1, graphs=(G1,), options=w))).status == 0
        assert (await kp.call(Request(Tx.CREATE, 2, graphs=(G2,), options=w))
                ).status == Status.ACCESS_DENIED
        # COPY G1 → default: read G1, write default: allowed
        assert (await kp.call(Request(Tx.COPY, 3, source=G1, target=DEFAULT_GRAPH,
                                      options=w))).status == Status.OK
        # ADD/MOVE into G2: no write on G2
        for tid, tx in ((4, Tx.ADD), (5, Tx.MOVE)):
            assert (await kp.call(Request(tx, tid, source=G1, target=G2, options=w))
                    ).status == Status.ACCESS_DENIED
        # MOVE needs write on the source: the reader has read on G1 only
        assert (await kp.call(Request(Tx.MOVE, 6, source=G1, target=DEFAULT_GRAPH,
                                      options=creds(READER)))).status == Status.ACCESS_DENIED
        assert sib.store.graph_exists(G1) and not sib.store.graph_exists(G2)

    scenario(body)


def test_anonymous_read_policy():
    async def body(sib, kp):
        assert (await kp.call(select(1, Options()))).status == Status.OK
        assert (await kp.call(insert(2, Options()))).status == Status.ACCESS_DENIED
        assert (await kp.call(Request(Tx.RESET, 3))).status == Status.OK
        assert len(sib.store) == 0

    scenario(body, {"anonymous": "read"})


@settings(max_examples=200, deadline=None)
@given(tx=st.sampled_from(list(Tx)), graphs=st.lists(st.sampled_from([G1, G2, DEFAULT_GRAPH]),
                                                       max_size=3))
def test_needs_names_every_graph_a_request_can_touch(tx, graphs):
    """A request with insert and delete templates and graph lists: what `needs` names covers
    the graphs the request's options and fields name, and "*" whenever a list is missing."""
    g = tuple(graphs) or None
    opts = Options(insert_graphs=g, delete_graphs=g, query_graphs=g)
    req = Request(tx, 1, insert=(Triple(S, P, S),), delete=(Triple(S, P, S),),
                  where=(Triple(S, P, Var(0)),), graphs=g, source=G1, target=G2, options=opts)
    reads, writes = needs(req)
    names = {"default" if x == DEFAULT_GRAPH else str(x) for x in graphs} or {"*"}
    if tx in (Tx.TERMINATE, Tx.RESET):
        return
    if tx in (Tx.COPY, Tx.MOVE, Tx.ADD):
        assert str(G2) in writes and str(G1) in reads
        assert (str(G1) in writes) == (tx is Tx.MOVE)
    elif tx in (Tx.CREATE, Tx.DROP):
        assert writes == names
    else:
        assert reads == names
        if not tx.is_query:
            assert names <= writes


def test_credentials_over_real_udp_and_tcp():
    async def go():
        sib = Sib(access=AccessPolicy.from_config(CONFIG))
        async with await Server.start(sib, udp=0, tcp=0) as server:
            for url in (f"udp://127.0.0.1:{server.udp.port}",
                        f"tcp://127.0.0.1:{server.tcp.port}"):
                async with await connect(url, kp_id="writer", password="right") as kp:
                    await kp.update(f"INSERT DATA {{ <{S}> <{P}> 1 }}")
                for kw in ({"kp_id": "writer", "password": "wrong"}, {"kp_id": "x"}, {}):
                    async with await connect(url, **kw) as kp:
                        with pytest.raises(KspStatusError) as err:
                            await kp.update(f"INSERT DATA {{ <{S}> <{P}> 2 }}")
                        assert err.value.status is Status.ACCESS_DENIED
        await sib.close()
        assert len(sib.store) == 1

    asyncio.run(asyncio.wait_for(go(), 120))


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(request=requests(small=True),
       read=st.lists(st.sampled_from(["*", "default", "http://example.org/g1",
                                      "http://example.org/"]), max_size=2),
       write=st.lists(st.sampled_from(["*", "default", "http://example.org/g1"]), max_size=2))
def test_any_request_under_any_grant_is_denied_whole_or_checked_as_usual(request, read, write):
    """Any valid request, sent with the writer's CREDENTIALS under a random grant: denied with
    nothing applied, or answered exactly as the same request under an open policy."""
    creds_ = Credentials(WRITER, "right")
    request = request._replace(options=request.options._replace(credentials=creds_))
    config = {"anonymous": "none", "kp": [{"id": "writer", "password_hash": HASH,
                                           "read": read, "write": write}]}

    async def answer(policy):
        labels = iter(range(10 ** 6))  # the same fresh blank-node labels in both runs
        sib = Sib(access=policy, rule_firing_limit=3, cascade_limit=10,
                  fresh=lambda: f"b{next(labels)}")
        kp = Client(sib)
        kp.submit(request)
        await sib.drain()
        (res,) = [r for kind, _, _, r in kp.log if kind == "res"]
        state = set(sib.store.match()), set(sib.store.named_graphs()), sib.core.persistent_count
        await sib.close()
        return res, state

    async def go():
        guarded, state = await answer(AccessPolicy.from_config(config))
        if guarded.status == Status.ACCESS_DENIED:
            assert state == (set(), set(), 0)
        else:
            assert (guarded, state) == await answer(AccessPolicy.open())

    asyncio.run(go())


def test_per_graph_anonymous_policy():
    """`anonymous = { read = [...], write = [...] }`: anonymous KPs get those graphs only;
    a request without graph options reads every graph, which they may not (§7.6)."""
    async def body(sib, kp):
        sib.store.apply(__import__("sib").Delta(((S, P, Literal.of(1), G1),
                                                 (S, P, Literal.of(2), G2)), ()))
        anon = Options()
        assert (await kp.call(select(1, anon, G1))).result.rows == ((Literal.of(1),),)
        for req in (select(2, anon), select(3, anon, G2), select(4, anon, G1, G2),
                    insert(5, anon), insert(6, anon, G2)):
            assert (await kp.call(req)).status == Status.ACCESS_DENIED
        assert (await kp.call(insert(7, anon, G1))).status == Status.OK

    scenario(body, {"anonymous": {"read": [str(G1)], "write": [str(G1)]}})


def test_anonymous_policy_table_in_the_configuration_file(tmp_path):
    from sib.config import ConfigError, load

    good = tmp_path / "good.toml"
    good.write_text(f'[access]\nanonymous = {{ read = ["{G1}", "default"] }}\n')
    policy = load(good).access_policy()
    assert policy.anonymous_grant().read == {str(G1), "default"} and not policy.is_open
    bad = tmp_path / "bad.toml"
    for text in ('anonymous = { read = "x" }', 'anonymous = { delete = ["x"] }',
                 'anonymous = "everything"'):
        bad.write_text(f"[access]\n{text}\n")
        with pytest.raises(ConfigError):
            load(bad)
