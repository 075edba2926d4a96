"""Which fault a decoder reports (wire format 3.2) does not depend on the order of a REQ's
options, and every reader of the spec reports the same one.

A REQ is cut into its header and Data field and one byte string per option; the options are put
back in every order hypothesis draws, with faults added: PREFIX cut short (so prefix indexes of
the Data field and of option bodies point beyond the list, faults of the late pass), an option
body with a prefix index beyond the list, and one option with a fault of the options pass (a
type ≥ 0x0c, an option that does not apply, a repeated option, EPOCH 0, ECHO of length 0).
Every order must get the same status from the pure-Python decoder; the C module must decode
exactly the messages Python accepts, to the same message; and the Wireshark dissector, a reader
written apart from the codec (run on Lua 5.4 with tests/wireshark/fake_wireshark.lua), must
report the same status. The same three, and the firmware codec, are compared on what a KP
receives: short RES and IND datagrams whose header (size, Version, type byte) is what varies.
"""
from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from firmware import harness
from ksp import codec
from ksp.codec import LAYOUT, TCP, UDP, encode
from ksp.codes import OPTION_APPLIES, Opt, Tx
from ksp.errors import DecodeError
from ksp.layout import OPTION_FIELDS
from ksp.model import Options, Request
from strategies import requests
from test_speedups import agree, needs_c

harness.import_path()
from kspfw import codec as fw_codec  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
LUA = ROOT / "tools" / "wireshark" / "ksp.lua"
FAKE = ROOT / "tests" / "wireshark" / "fake_wireshark.lua"
LUA54 = shutil.which("lua5.4")
needs_lua = pytest.mark.skipif(LUA54 is None, reason="lua5.4: scripts/test installs it")
_HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]


def examples(n: int):
    return settings(max_examples=n, deadline=None, suppress_health_check=_HEALTH)


# ---------------------------------------------------------------------------------------------
# The readers: each gives a status (None: a valid message)


def python_status(buf: bytes, transport, kp_to_sib: bool, answers: Tx | None = None):
    with codec.pure_python():
        try:
            if kp_to_sib:
                codec.decode_kp_message(buf, transport)
            else:
                codec.decode_sib_message(buf, transport, answers)
        except DecodeError as exc:
            return int(exc.status)
    return None


def _context(answers: Tx, tid: bytes, tcp: bool) -> str:
    """A request of type `answers` under `tid`, for the dissector to know what a RES answers."""
    head = bytes((1, 0x80 | int(answers))) + tid
    return (head + struct.pack("<I", 9) + b"\0" if tcp else head + b"\0").hex()


def dissector_statuses(items: list[tuple[bytes, bool, bool, Tx | None]],
                       tmp: Path) -> list[int | None]:
    """The dissector's status for each (bytes, tcp, KP → SIB, answers), in one Lua run."""
    lines = []
    for i, (buf, tcp, kp_to_sib, answers) in enumerate(items):
        ctx = "-" if answers is None or len(buf) < 4 else _context(answers, buf[2:4], tcp)
        lines.append("\t".join((f"m{i}", "tcp" if tcp else "udp",
                                "kp_to_sib" if kp_to_sib else "sib_to_kp", ctx, buf.hex())))
    path = tmp / "in.tsv"
    path.write_text("\n".join(lines) + "\n")
    proc = subprocess.run([LUA54, str(FAKE), str(LUA), str(path)], capture_output=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    out: list[int | None] = [None] * len(items)
    for line in proc.stdout.split(b"\n"):  # bytes: a term's text may hold a \r
        if not line:
            continue
        name, field, value = line.decode("utf-8", "replace").split("\t", 2)
        if field == "_ws.expert.message":
            assert value.startswith("status 0x"), value  # a Lua error is no status
            out[int(name[1:])] = int(value[len("status "):len("status 0x00")], 16)
    return out


# ---------------------------------------------------------------------------------------------
# A REQ as parts: header and Data field, and one chunk per option


def _uri_length(n: int) -> bytes:
    return bytes((n,)) if n < 0x80 else bytes((0x80 | (n & 0x7F), n >> 7))


def prefix_chunk(prefixes: tuple[str, ...]) -> bytes:
    """The PREFIX option (7.2), written here from the spec."""
    entries = b"".join(b"\0" + _uri_length(len(p.encode())) + p.encode() for p in prefixes)
    return bytes((Opt.PREFIX, len(prefixes))) + entries


def split(request: Request) -> tuple[bytes, list[bytes]]:
    """(header and Data field, [option chunk, ...]) of `request`'s canonical UDP bytes, its
    prefix list given (not chosen by the encoder), so the Data field is the same whatever other
    options go with it."""
    prefixes = request.options.prefixes or ()
    bare = request._replace(options=Options(prefixes=prefixes))
    base = encode(bare, UDP)
    pfx = prefix_chunk(prefixes) if prefixes else b""
    assert base.endswith(pfx)
    head = base[:len(base) - len(pfx) - 1]  # without the OC byte
    chunks = [pfx] if pfx else []
    for code, (name, _) in OPTION_FIELDS.items():
        value = getattr(request.options, name)
        if code is Opt.PREFIX or value is None:
            continue
        with_one = encode(bare._replace(options=bare.options._replace(**{name: value})), UDP)
        chunks.append(with_one[len(base):])  # ascending type order: it follows PREFIX
    return head, chunks


def join(head: bytes, chunks: list[bytes], tcp: bool) -> bytes:
    buf = head + bytes((len(chunks),)) + b"".join(chunks)
    if tcp:
        buf = buf[:4] + struct.pack("<I", len(buf) + 4) + buf[4:]
    return buf


def _pass3_fault(draw, tx: Tx, chunks: list[bytes]) -> bytes:
    """One option whose fault the options pass finds without reading past it (so that it is
    the same fault wherever it stands): 0x05 or 0x06."""
    kinds = ["type", "epoch_0", "echo_0"]
    if chunks:
        kinds.append("repeated")
    foreign = [o for o in Opt if tx not in OPTION_APPLIES[o]]
    if foreign:
        kinds.append("not_applicable")
    kind = draw(st.sampled_from(kinds))
    if kind == "type":
        return bytes((draw(st.integers(0x0C, 0xFF)),))
    if kind == "not_applicable":
        return bytes((draw(st.sampled_from(foreign)),))
    if kind == "repeated":
        return draw(st.sampled_from(chunks))
    if kind == "epoch_0":
        return bytes((Opt.EPOCH,)) + bytes(4)
    return bytes((Opt.ECHO, 0))


@st.composite
def reordered(draw):
    """(request's chunks in two orders, header, TCP?): the same options, faults and all."""
    request = draw(requests(small=True))
    head, chunks = split(request)
    prefixes = request.options.prefixes or ()
    if prefixes and draw(st.booleans()):  # cut the list: late faults where indexes go past it
        kept = prefixes[:draw(st.integers(0, len(prefixes) - 1))]
        chunks = [prefix_chunk(kept)] * bool(kept) + chunks[1:]
    free = [o for o in (Opt.DELETE_GRAPH, Opt.INSERT_GRAPH, Opt.QUERY_GRAPH)
            if request.tx in OPTION_APPLIES[o] and not any(c[0] == o for c in chunks)]
    if free and draw(st.booleans()):
        # a graph option naming a graph by a prefix index beyond the list (late, 0x06), where it
        # is the only fault of its option
        index = draw(st.integers(len(prefixes) + 1, 255))
        chunks.append(bytes((draw(st.sampled_from(free)), 1, index, 1)) + b"g")
    if draw(st.booleans()):
        chunks.append(_pass3_fault(draw, request.tx, chunks))
    chunks = chunks[:255]
    first = draw(st.permutations(chunks))
    second = draw(st.permutations(chunks))
    return head, list(first), list(second), draw(st.booleans())


@given(case=reordered())
@examples(300)
def test_the_status_does_not_depend_on_the_option_order(case):
    head, first, second, tcp = case
    transport = TCP if tcp else UDP
    a, b = join(head, first, tcp), join(head, second, tcp)
    assert python_status(a, transport, True) == python_status(b, transport, True), (a.hex(),
                                                                                      b.hex())


@needs_c
@given(case=reordered())
@examples(300)
def test_the_c_module_decodes_what_python_accepts_in_every_order(case):
    head, first, second, tcp = case
    for chunks in (first, second):
        agree(join(head, chunks, tcp), TCP if tcp else UDP, True)


@needs_lua
@given(case=reordered(), flips=st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(1, 255)),
                                        max_size=2))
@examples(150)
def test_the_dissector_reports_the_codec_status(case, flips, tmp_path_factory):
    """Each order, and each with a byte or two changed anywhere (the TCP Length kept right)."""
    head, first, second, tcp = case
    transport = TCP if tcp else UDP
    items = []
    for chunks in (first, second):
        buf = bytearray(join(head, chunks, tcp))
        items.append(bytes(buf))
        for at, mask in flips:
            buf[at % len(buf)] ^= mask
        if tcp:
            buf[4:8] = struct.pack("<I", len(buf))
        items.append(bytes(buf))
    got = dissector_statuses([(buf, tcp, True, None) for buf in items],
                             tmp_path_factory.mktemp("ws"))
    want = [python_status(buf, transport, True) for buf in items]
    assert got == want, [buf.hex() for buf in items]


# ---------------------------------------------------------------------------------------------
# What a KP receives: the header before everything


_PERSISTENT = [Tx.SELECT_PERSISTENT, Tx.ASK_PERSISTENT, Tx.INSERT_PERSISTENT]
_ANSWERS = [Tx.SELECT, Tx.ASK, Tx.INSERT_DATA, *_PERSISTENT]


@st.composite
def sib_datagrams(draw):
    # not 0xA1 over UDP: the dissector opens that as a sealed envelope (13), the layer a KP
    # peels before the codec sees the message
    version = draw(st.sampled_from([1, 1, 1, 0, 2, 0xE5]))
    type_byte = draw(st.one_of(st.sampled_from([0x00, 0x0F, 0x10, 0x4F, 0x80, 0x8F, 0x90, 0xC0,
                                                0xC6, 0xCF, 0x09, 0x89]),
                               st.integers(0, 255)))
    tcp = draw(st.booleans())
    rest = draw(st.binary(max_size=12))
    buf = bytes((version, type_byte)) + draw(st.binary(min_size=2, max_size=2)) + rest
    if tcp:  # whole frames: a stream reader waits for the bytes a Length announces
        buf = buf[:4] + struct.pack("<I", len(buf) + 4) + buf[4:]
    elif draw(st.booleans()):
        buf = buf[:draw(st.integers(0, len(buf)))]
    # an IND answers a persistent request (what the dissector matches it with)
    return buf, tcp, draw(st.sampled_from(_PERSISTENT if type_byte & 0x80 else _ANSWERS))


def firmware_status(buf: bytes, answers: Tx, tcp: bool) -> int | None:
    try:
        fw_codec.decode(buf, int(answers), tcp)
    except fw_codec.KspError as exc:
        return exc.status
    return None


@needs_lua
@given(cases=st.lists(sib_datagrams(), min_size=1, max_size=40))
@examples(60)
def test_every_reader_gives_a_kp_the_same_status(cases, tmp_path_factory):
    """Header size, Version, type byte (a RES-only status in an IND), in that order (3.2)."""
    got = dissector_statuses([(buf, tcp, False, answers) for buf, tcp, answers in cases],
                             tmp_path_factory.mktemp("ws"))
    for (buf, tcp, answers), dissected in zip(cases, got):
        transport = TCP if tcp else UDP
        want = python_status(buf, transport, False, answers)
        assert (firmware_status(buf, answers, tcp), dissected) == (want, want), buf.hex()
        if codec.speedups_enabled():
            agree(buf, transport, False, answers)


def test_the_header_is_checked_to_its_common_size_before_version():
    """`e5 c6 2197`: 4 bytes whose type byte would call for the 6-byte IND header."""
    buf = bytes.fromhex("e5c62197")
    assert python_status(buf, UDP, False, Tx.SELECT_PERSISTENT) == 0x01
    assert firmware_status(buf, Tx.SELECT_PERSISTENT, False) == 0x01
    short_ind = bytes.fromhex("01c62197")  # version 1: the type byte counts, 0x04
    assert python_status(short_ind, UDP, False, Tx.SELECT_PERSISTENT) == 0x04
    assert firmware_status(short_ind, Tx.SELECT_PERSISTENT, False) == 0x04
