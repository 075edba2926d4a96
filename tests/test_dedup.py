"""The SIB's duplicate cache (ksp/session/dedup.py) full, as one KP at full rate keeps it: its
answered entries are nothing the garbage collector tracks, so a full collection of an aged SIB
walks no more than a fresh one's (`ksp bench soak --ab`), and copies are still answered from
them."""
from __future__ import annotations

import gc
import random

from ksp import Status
from ksp.session import SessionOptions

from test_exactly_once import answers, executed, numbered
from test_session import KP_ADDR, SIBSession, encode


def tracked() -> int:
    gc.collect()
    return len(gc.get_objects())


def test_answered_entries_add_nothing_for_the_collector_and_still_answer_copies():
    sib = SIBSession(rng=random.Random(0), options=SessionOptions(max_entries=4096))
    sent = [encode(numbered(tid, 1, None)) for tid in range(1, 4097)]
    for data in sent[:64]:  # the first few: whatever a session makes once
        sib.receive_datagram(data, KP_ADDR, 0.0)
        executed(sib)
        answers(sib)
    before = tracked()
    for data in sent[64:]:
        # an address tuple of its own each, as recvfrom gives
        sib.receive_datagram(data, (KP_ADDR[0], KP_ADDR[1]), 1.0)
        assert len(executed(sib)) == 1
        answers(sib)
    assert sib.sizes()["recent requests"] == 4096
    assert tracked() - before < 400  # 4,032 more entries: none tracked (objects were ~5 each)
    sib.receive_datagram(sent[100], KP_ADDR, 2.0)  # a copy: the cached RES, not executed
    assert executed(sib) == [] and [r.status for r in answers(sib)] == [Status.OK]
