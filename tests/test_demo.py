"""The main job (`ksp demo`) runs, round-trips every message and says what it showed."""
from __future__ import annotations

from ksp import UDP, decode_kp_message, decode_sib_message, encode
from tools.cli import main
from tools.demo import greenhouse_messages


def test_demo_prints_every_message_annotated(capsys):
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    for title, msg, _answers, _text in greenhouse_messages():
        assert f"== {title}" in out
    assert "header.type" in out and "reserved word 0x00: rdf:type" in out
    assert "Empty (unbound)" in out  # fan2 has no state in the IND
    assert "Every message decoded back to the same bytes." in out


def test_demo_messages_are_shorter_than_their_sparql():
    for title, msg, answers, text in greenhouse_messages():
        wire = encode(msg, UDP)
        back = (decode_kp_message(wire, UDP) if answers is None
                else decode_sib_message(wire, UDP, answers))
        assert encode(back, UDP) == wire, title
        assert len(wire) < len(text.encode()), title
