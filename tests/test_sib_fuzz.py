"""Any valid request (the codec's hypothesis strategies) against the SIB: exactly one RES, never
an internal error, and a refused request leaves the store and the persistent operations as they
were."""
from __future__ import annotations

import asyncio

from hypothesis import HealthCheck, given, settings
import pytest

from ksp import DEFAULT_GRAPH, IRI, Literal, Status
from sib import Delta, Sib
from sib.testing import Client
from strategies import requests

SEED = tuple((IRI(f"http://example.org/s{i}"), IRI("http://example.org/"), Literal.of(i),
              DEFAULT_GRAPH) for i in range(3))


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests(small=True))
def test_any_valid_request_gets_one_answer_and_refusals_change_nothing(request):
    async def go():
        sib = Sib(rule_firing_limit=3, cascade_limit=10)
        sib.store.apply(Delta(SEED, ()))
        kp = Client(sib)
        before = set(sib.store.match()), set(sib.store.named_graphs())
        kp.submit(request)
        await sib.drain()
        answers = [r for kind, _, tid, r in kp.log if kind == "res"]
        assert len(answers) == 1 and answers[0].tid == request.tid
        status = answers[0].status
        assert status != Status.INTERNAL_ERROR
        if status != Status.OK:
            assert answers[0].result is None
            assert (set(sib.store.match()), set(sib.store.named_graphs())) == before
            assert sib.core.persistent_count == 0
        await sib.close()
    asyncio.run(go())
