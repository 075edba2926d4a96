"""`ksp bench wire` (tools/bench/wire.py): exact sizes of the greenhouse workload; the paper's
figures are met (persistent updates ≤ 165 bytes on average, update RES 4 bytes over UDP)."""
from __future__ import annotations

from ksp import UDP, decode_kp_message
from tools.bench import wire


def test_greenhouse_workload_sizes_and_the_papers_figures(capsys):
    rows = wire.messages()
    kinds = {r[0] for r in rows}
    assert {"persistent update", "ASK subscription", "update", "update RES", "ASK IND",
            "SELECT IND"} <= kinds
    for kind, _, udp, tcp, text, sepa in rows:
        # TCP's 8-byte header against UDP's 4; an IND over TCP has no sequence number (2 bytes)
        assert len(tcp) == len(udp) + (2 if kind.endswith("IND") else 4)
        if kind in ("persistent update", "ASK subscription", "update", "query"):
            decode_kp_message(udp, UDP)  # real requests
            assert len(udp) < text  # shorter than the SPARQL text
    assert wire.main([], prog="ksp bench wire") == 0
    out = capsys.readouterr().out
    assert "(the paper: 165): met" in out and "(the paper: 4): met" in out
