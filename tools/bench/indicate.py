"""IND fan-out in the SIB's UDP session: µs per IND when every subscriber of one result gets
it (`SIBSession.indicate`: the transaction layer's numbering and shared encoding, the UDP
message layer's retransmission state), sockets left out. Run from each of two checkouts, it
compares their session code; the bare cost is its own baseline.

Run as ``python -m tools.bench.indicate [--quick] [--markdown]`` from the tree to measure.
"""
from __future__ import annotations

import sys
import time

from ksp import UDP, Literal, Request, Response, Status, Triple, Tx, Var, encode
from ksp.model import SelectResult
from ksp.session import SessionOptions, SIBSession
from ksp.terms import IRI

from .report import bench_parser, command_line, markdown_table

MODULE = "tools.bench.indicate"


def per_ind(subscribers: int, rounds: int, repeats: int) -> float:
    """Best of `repeats`: µs per IND over `rounds` new results sent to every subscriber."""
    session = SIBSession(UDP, options=SessionOptions(amplification_factor=0))  # no validation
    sub = Request(Tx.SELECT_PERSISTENT, 0, projection=1,
                  where=(Triple(IRI("http://example.org/s"), IRI("http://example.org/p"),
                                Var(0)),))
    ops = []
    for i in range(subscribers):
        session.receive_datagram(encode(sub._replace(tid=i), UDP), ("10.0.0.1", 1024 + i), 0.0)
        event = session.next_event()
        tid = event.request.tid
        session.respond(event.kp, tid, Response(tid, Status.OK, SelectResult(1, ())), 0.0)
        ops.append((event.kp, tid))
    session.datagrams_to_send(0.0)
    best = float("inf")
    for rep in range(repeats):
        start = time.perf_counter()
        for r in range(rounds):
            result = SelectResult(1, ((Literal.of(rep * rounds + r),),))
            for kp, tid in ops:
                session.indicate(kp, tid, Response(tid, Status.OK, result, indication=True),
                                 0.0)
            session.datagrams_to_send(0.0)
        best = min(best, (time.perf_counter() - start) / (rounds * subscribers))
    return best * 1e6


def main(argv: list[str] | None = None, prog: str | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = bench_parser(MODULE, __doc__, prog, "fewer subscribers and rounds").parse_args(argv)
    subscribers, rounds = (200, 3) if args.quick else (2000, 10)
    us = per_ind(subscribers, rounds, 5)
    if args.markdown:
        print(markdown_table(["subscribers", "µs per IND (best of 5)"],
                             [[f"{subscribers:,}", f"{us:.2f}"]]))
        print(f"\nCommand: `{command_line(MODULE, prog, argv)}`")
    else:
        print(f"{subscribers} subscribers: {us:.2f} µs per IND (best of 5)")


if __name__ == "__main__":
    main()
