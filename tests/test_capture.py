"""Capture (transports/pcap.py, `ksp-sib --pcap`, `ksp capture`), reading captures
(`ksp decode --pcap`, tools/capture_read.py) and replay (`ksp replay`, the pytest plugin).

Real parts: captures are checked by Debian's tshark (its own checksum checks and TCP
reassembly), read back from files written by real tcpdump and tshark on the loopback interface
while a real `ksp-sib` serves real clients, and replayed against real SIBs.
"""
from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from ksp import UDP, Request, Tx, encode
from ksp.codec import TCP
from sib.testing import SibProcess, free_port
from tools import capture as capture_tool
from tools.capture_read import _Flow, _reassemble, annotate, messages
from transports import connect
from transports.pcap import Packet, PcapError, PcapWriter, read_packets

# slow: ksp-sib, tcpdump and tshark processes
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = ROOT / "tests" / "captures"
TSHARK = shutil.which("tshark")
TCPDUMP = shutil.which("tcpdump")
needs_tshark = pytest.mark.skipif(TSHARK is None, reason="tshark: scripts/test installs it")
EX = "http://example.org/cap#"
NO_SIB = ("--memory", "--coap-port", "-1")


def ksp(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tools.cli", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def tshark(*args: str) -> str:
    proc = subprocess.run([TSHARK, *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


async def traffic(ports: dict, big: bool = False) -> None:
    """A KP over UDP and one over TCP: inserts, a query, a subscription with an IND, its
    TERMINATE; with `big`, a TCP insert of ~200 KB (several TCP segments even on loopback)."""
    for scheme in ("udp", "tcp"):
        async with connect(f"{scheme}://127.0.0.1:{ports[scheme]}", kp_id=f"kp-{scheme}") as kp:
            text = f"SELECT ?o WHERE {{ <{EX}{scheme}> <{EX}p> ?o }}"
            async with kp.subscribe(text) as sub:
                await asyncio.wait_for(anext(sub), 30)
                await kp.update(f"INSERT DATA {{ <{EX}{scheme}> <{EX}p> 1 }}")
                await asyncio.wait_for(anext(sub), 30)
            await kp.query(f"SELECT ?s ?o WHERE {{ ?s <{EX}p> ?o }}")
            if big and scheme == "tcp":
                long = "x" * 200_000
                await kp.update(f'INSERT DATA {{ <{EX}big> <{EX}p> "{long}" }}')


# -- the writer ---------------------------------------------------------------------------------

@needs_tshark
def test_written_packets_pass_tsharks_checks_and_its_tcp_reassembly(tmp_path):
    out = tmp_path / "w.pcapng"
    msg = encode(Request(Tx.INSERT_DATA, 7, insert=()), TCP)
    with PcapWriter(out) as w:
        w.udp(("127.0.0.1", 40000), ("127.0.0.1", 7000), bytes.fromhex("01820100"))
        w.udp(("::1", 40001), ("::1", 7000), bytes.fromhex("01820200"))
        w.tcp_open(("10.1.2.3", 40002), ("10.1.2.4", 7001))
        w.tcp(("10.1.2.3", 40002), ("10.1.2.4", 7001), msg[:3])  # one message, two segments
        w.tcp(("10.1.2.3", 40002), ("10.1.2.4", 7001), msg[3:])
        w.tcp(("10.1.2.4", 7001), ("10.1.2.3", 40002), b"\x01\x00\x07\x00\x08\x00\x00\x00")
        w.tcp_close(("10.1.2.3", 40002), ("10.1.2.4", 7001))
    checks = ["-o", "ip.check_checksum:TRUE", "-o", "udp.check_checksum:TRUE",
              "-o", "tcp.check_checksum:TRUE"]
    rows = tshark("-r", str(out), *checks, "-T", "fields", "-E", "separator=|",
                  "-e", "ip.src", "-e", "ipv6.src", "-e", "udp.srcport", "-e", "tcp.srcport",
                  "-e", "ip.checksum.status", "-e", "udp.checksum.status",
                  "-e", "tcp.checksum.status").splitlines()
    assert len(rows) == 10
    fields = [r.split("|") for r in rows]
    assert fields[0][:3] == ["127.0.0.1", "", "40000"] and fields[1][1:3] == ["::1", "40001"]
    statuses = {v for f in fields for v in f[4:] if v}
    assert statuses == {"1"}, rows  # 1 = "Good" (0 bad, 2 unverified), every checksum
    follow = tshark("-r", str(out), "-q", "-z", "follow,tcp,raw,0")
    sent = "".join(line.strip() for line in follow.splitlines()
                   if line.strip() and all(c in "0123456789abcdef" for c in line.strip())
                   and not line.startswith("\t"))
    assert msg.hex() in sent  # the stream reassembled byte for byte


def test_rotation_keeps_the_newest_files(tmp_path):
    out = tmp_path / "ring.pcapng"
    with PcapWriter(out, max_bytes=4096, max_files=3) as w:
        for i in range(200):
            w.udp(("127.0.0.1", 5000), ("127.0.0.1", 7000), i.to_bytes(2, "big") * 50)
        files = list(w.files)
    assert len(files) == 3 and all(f.exists() for f in files)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f.name for f in files)
    assert all(f.stat().st_size < 4096 + 400 for f in files)
    last = [int.from_bytes(p.payload[:2], "big") for p in read_packets(files[-1])]
    assert last[-1] == 199
    with pytest.raises(ValueError):
        PcapWriter(tmp_path / "x.pcapng", max_bytes=100)


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=300))
def test_garbage_is_a_clear_error_not_a_crash(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("garbage") / "g.pcap"
    path.write_bytes(data)
    try:
        list(read_packets(path))
    except PcapError:
        pass


@settings(max_examples=100, deadline=None)
@given(st.lists(st.binary(min_size=0, max_size=40), min_size=1, max_size=8), st.data())
def test_tcp_reassembly_survives_any_segmentation_reordering_and_duplicates(bodies, data):
    frames = [b"\x01\x0b" + bytes([i, 0]) + (8 + len(b)).to_bytes(4, "little") + b
              for i, b in enumerate(bodies)]
    stream = b"".join(frames)
    cuts = sorted(set(data.draw(st.lists(st.integers(1, max(1, len(stream) - 1)), max_size=10))))
    pieces, start = [], 0
    for cut in cuts + [len(stream)]:
        if cut > start:
            pieces.append((start, stream[start:cut]))
            start = cut
    order = data.draw(st.permutations(pieces))
    order += data.draw(st.lists(st.sampled_from(pieces), max_size=3))  # retransmissions
    flow, got = _Flow(), []
    base = data.draw(st.integers(0, 0xFFFFFFFF))
    syn = Packet(0, "tcp", ("a", 1), ("b", 2), b"", base, 0x02)
    got += list(_reassemble(flow, syn))
    for offset, piece in order:
        seg = Packet(0, "tcp", ("a", 1), ("b", 2), piece, (base + 1 + offset) & 0xFFFFFFFF, 0x18)
        got += list(_reassemble(flow, seg))
    assert got == frames


# -- ksp-sib --pcap and ksp decode --pcap -------------------------------------------------------

def test_sib_capture_is_decoded_with_each_answer_read_by_its_request(tmp_path):
    out = tmp_path / "sib.pcapng"
    with SibProcess("--memory", "--udp-port", "0", "--tcp-port", "0", "--coap-port", "0",
                    "--pcap", str(out)) as sib:
        asyncio.run(traffic(sib.ports))

        async def over_coap():
            async with connect(f"coap://127.0.0.1:{sib.ports['coap']}") as kp:
                await kp.update(f"INSERT DATA {{ <{EX}coap> <{EX}p> 2 }}")
                await kp.query(f"SELECT ?o WHERE {{ <{EX}coap> <{EX}p> ?o }}")

        asyncio.run(over_coap())
        assert sib.stop() == 0
    items = annotate(messages(str(out), sib_ports=set(sib.ports.values())))
    coap = [(i.from_sib, type(i.message).__name__, i.answers) for i in items
            if i.transport == "coap"]
    assert coap == [(False, "Request", None), (True, "Response", Tx.INSERT_DATA),
                    (False, "Request", None), (True, "Response", Tx.SELECT)]
    kinds = [(i.transport, i.from_sib, type(i.message).__name__) for i in items]
    assert ("udp", False, "Request") in kinds and ("tcp", True, "Response") in kinds
    assert all(i.error is None for i in items), [i.error for i in items if i.error]
    answered = {(i.transport, i.answers.name) for i in items if i.from_sib and i.answers}
    assert {("udp", "SELECT_PERSISTENT"), ("udp", "TERMINATE"), ("udp", "SELECT"),
            ("tcp", "SELECT_PERSISTENT"), ("tcp", "TERMINATE")} <= answered
    inds = [i for i in items if i.from_sib and i.message.indication]
    assert inds and all(i.answers is Tx.SELECT_PERSISTENT for i in inds)

    shown = ksp("decode", "--pcap", str(out))
    assert shown.returncode == 0, shown.stderr
    assert "IND SELECT_PERSISTENT seq=1 OK" in shown.stdout
    assert "RES TERMINATE OK" in shown.stdout and "SelectResult(" in shown.stdout
    only = ksp("decode", "--pcap", str(out), "--brief", "--kp", "kp-tcp", "--type", "IND")
    lines = only.stdout.splitlines()
    assert lines[-1].startswith("1 of ") and "TCP" in lines[0] and "IND" in lines[0]
    assert ksp("decode", "--pcap", str(tmp_path / "missing.pcap")).returncode == 2


@pytest.mark.skipif(TCPDUMP is None or TSHARK is None or os.geteuid() != 0,
                    reason="tcpdump and tshark capturing on lo (root)")
@pytest.mark.parametrize("capturer", ["tcpdump-lo", "tcpdump-any", "tshark-lo"])
def test_captures_by_tcpdump_and_tshark_on_a_real_interface_are_read(tmp_path, capturer):
    """Ethernet (lo), Linux cooked v2 (any), pcap and pcapng; a 200 KB TCP message split into
    several segments; IPv4 and IPv6 (a SIB on ::1)."""
    out = tmp_path / ("c.pcapng" if capturer.startswith("tshark") else "c.pcap")
    udp6, tcp6 = free_port(), free_port("tcp")
    host = "::1"
    with SibProcess(*NO_SIB, "--host", host, "--udp-port", str(udp6), "--tcp-port",
                    str(tcp6)) as sib:
        filt = f"port {udp6} or port {tcp6}"
        if capturer.startswith("tcpdump"):
            iface = "lo" if capturer == "tcpdump-lo" else "any"
            cmd = [TCPDUMP, "-i", iface, "-U", "-s", "0", "-w", str(out), filt]
        else:
            cmd = [TSHARK, "-i", "lo", "-w", str(out), "-f", filt]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            _wait_file(out)
            time.sleep(1.0)

            async def go():
                for scheme, port in (("udp", udp6), ("tcp", tcp6)):
                    async with connect(f"{scheme}://[::1]:{port}", kp_id=f"v6-{scheme}") as kp:
                        await kp.update(f"INSERT DATA {{ <{EX}v6> <{EX}p> 1 }}")
                        if scheme == "tcp":
                            await kp.update(f'INSERT DATA {{ <{EX}big> <{EX}p> "{"y" * 200_000}" }}')
                        await kp.query(f"SELECT ?o WHERE {{ <{EX}v6> <{EX}p> ?o }}")

            asyncio.run(go())
            time.sleep(1.0)
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(30)
    packets = list(read_packets(out))
    assert any(len(p.payload) < 200_000 and p.proto == "tcp" and p.payload for p in packets)
    items = annotate(messages(str(out), sib_ports={udp6, tcp6}))
    reqs = [i for i in items if not i.from_sib and isinstance(i.message, Request)]
    assert {(i.transport, i.message.tx.name) for i in reqs} >= {
        ("udp", "INSERT_DATA"), ("udp", "SELECT"), ("tcp", "INSERT_DATA"), ("tcp", "SELECT")}
    big = [i for i in reqs if i.transport == "tcp" and len(i.data) > 200_000]
    assert len(big) == 1 and all(i.src[0] == "::1" for i in reqs)
    assert all(i.error is None for i in items)


def _wait_file(path: Path) -> None:
    end = time.monotonic() + 30
    while not (path.exists() and path.stat().st_size > 0) and time.monotonic() < end:
        time.sleep(0.1)


# -- ksp capture --------------------------------------------------------------------------------

def test_capture_proxy_records_both_transports(tmp_path):
    out = tmp_path / "proxy.pcapng"
    with SibProcess(*NO_SIB, "--udp-port", "0", "--tcp-port", "0") as sib:
        listen_udp = free_port()
        ready, loop_box = threading.Event(), {}

        def serve():
            async def main():
                stop = asyncio.Event()
                loop_box["stop"], loop_box["loop"] = stop, asyncio.get_running_loop()
                started = asyncio.Event()
                task = asyncio.ensure_future(capture_tool.run(
                    ("127.0.0.1", listen_udp), ("127.0.0.1", sib.ports["udp"]), str(out),
                    tcp=False, ready=started, stop=stop, report=lambda _: None))
                await started.wait()
                ready.set()
                loop_box["packets"] = await task
            asyncio.run(main())

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        assert ready.wait(30)
        asyncio.run(traffic({"udp": listen_udp, "tcp": sib.ports["tcp"]}))
        loop_box["loop"].call_soon_threadsafe(loop_box["stop"].set)
        thread.join(30)
    items = annotate(messages(str(out), sib_ports={listen_udp}))
    assert loop_box["packets"] == len(items) > 6
    assert all(i.transport == "udp" and listen_udp in (i.src[1], i.dst[1]) for i in items)
    assert any(i.from_sib and i.message.indication for i in items)


def test_capture_command_tcp_proxy(tmp_path):
    out = tmp_path / "tcp.pcapng"
    with SibProcess(*NO_SIB, "--udp-port", "0", "--tcp-port", "0") as sib:
        listen = free_port("tcp")
        proc = subprocess.Popen([sys.executable, "-m", "tools.cli", "capture", "--listen",
                                 f"127.0.0.1:{listen}", "--to", f"127.0.0.1:{sib.ports['tcp']}",
                                 "-w", str(out), "--tcp-only"], cwd=ROOT,
                                stdout=subprocess.PIPE, text=True)
        try:
            assert "capturing tcp" in proc.stdout.readline()
            asyncio.run(traffic({"udp": sib.ports["udp"], "tcp": listen}, big=True))
        finally:
            proc.send_signal(signal.SIGTERM)
            rest = proc.communicate(timeout=30)[0]
        assert proc.returncode == 0 and "stopped:" in rest
    items = annotate(messages(str(out), sib_ports={listen}))
    assert {i.transport for i in items} == {"tcp"}
    assert any(len(i.data) > 200_000 for i in items) and all(i.error is None for i in items)


def test_capture_checks_its_target_and_carries_only_what_it_takes(tmp_path):
    """A bad port is a usage error (no traceback at the first datagram); TCP is
    carried only where the target accepts it, and `--tcp-only` to a UDP port is refused."""
    out = ksp("capture", "--listen", "127.0.0.1:7100", "--to", "127.0.0.1:99999", "-w",
              str(tmp_path / "x.pcapng"))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.splitlines()[-1] == (
        "ksp capture: error: argument --to: port 99999: not a port number (1 to 65535)")
    with SibProcess(*NO_SIB, "--udp-port", "0", "--tcp-port", "0") as sib:
        udp = f"127.0.0.1:{sib.ports['udp']}"
        out = ksp("capture", "--listen", f"127.0.0.1:{free_port('tcp')}", "--to", udp, "-w",
                  str(tmp_path / "x.pcapng"), "--tcp-only")
        assert out.returncode == 1 and out.stderr.strip() == (
            f"ksp capture: --to {udp}: nothing accepts TCP connections there (a ksp-sib takes "
            "TCP on its --tcp-port, 7001 by default)")
        listen = free_port("tcp")
        proc = subprocess.Popen([sys.executable, "-m", "tools.cli", "capture", "--listen",
                                 f"127.0.0.1:{listen}", "--to", udp, "-w",
                                 str(tmp_path / "udp.pcapng")], cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert proc.stdout.readline().strip() == (
                f"capturing udp 127.0.0.1:{listen} -> {udp} into {tmp_path / 'udp.pcapng'} "
                f"(no TCP: nothing accepts TCP connections at {udp})")
            ask = ("query", "ASK { ?s ?p ?o }", "-o", "json", "-s")
            assert ksp(*ask, f"udp://127.0.0.1:{listen}").stdout == '{"boolean": false}\n'
            over_tcp = ksp(*ask, f"tcp://127.0.0.1:{listen}")
            assert over_tcp.returncode == 1 and "nothing listens there" in over_tcp.stderr
        finally:
            proc.send_signal(signal.SIGTERM)
            rest, err = proc.communicate(timeout=30)
        assert proc.returncode == 0 and "stopped: 2 packets" in rest and err == ""
    # a target where nothing listens: said once by the proxy, a timeout naming it for the KP
    gone = free_port()
    listen = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tools.cli", "capture", "--listen",
                             f"127.0.0.1:{listen}", "--to", f"127.0.0.1:{gone}", "--udp-only",
                             "-w", str(tmp_path / "gone.pcapng")], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().startswith("capturing udp")
        kp = ksp("query", "ASK { ?s ?p ?o }", "-s", f"udp://127.0.0.1:{listen}", "--timeout",
                 "2")
        assert kp.returncode == 1 and "a proxy does not forward it" in kp.stderr
    finally:
        proc.send_signal(signal.SIGTERM)
        rest, err = proc.communicate(timeout=30)
    assert f"127.0.0.1:{gone}: nothing listens there over UDP (the KPs will time out)" in rest
    assert "Traceback" not in err and "exception" not in err


# -- replay -------------------------------------------------------------------------------------

def test_replay_against_a_fresh_sib_matches_and_a_different_one_shows_a_diff(tmp_path):
    out = tmp_path / "rec.pcapng"
    with SibProcess(*NO_SIB, "--udp-port", "0", "--tcp-port", "0", "--pcap", str(out)) as sib:
        asyncio.run(traffic(sib.ports))
    with SibProcess(*NO_SIB, "--udp-port", "0", "--tcp-port", "-1") as fresh:
        same = ksp("replay", str(out), "--to", f"udp://127.0.0.1:{fresh.ports['udp']}")
    assert same.returncode == 0, same.stdout + same.stderr
    assert "every answer as recorded" in same.stdout
    with SibProcess(*NO_SIB, "--udp-port", "0", "--tcp-port", "-1") as other:
        async def seed():
            async with connect(f"udp://127.0.0.1:{other.ports['udp']}") as kp:
                await kp.update(f"INSERT DATA {{ <{EX}udp> <{EX}p> 99 }}")
        asyncio.run(seed())
        diff = ksp("replay", str(out), "--sib", f"udp://127.0.0.1:{other.ports['udp']}",
                   "--timeout", "3")  # --sib: the KP commands' name for --to
    assert diff.returncode == 1, diff.stdout + diff.stderr
    assert "extra ['(99)']" in diff.stdout and "SELECT_PERSISTENT" in diff.stdout


@pytest.mark.parametrize("name", ["greenhouse.pcapng", "script-udp.pcapng",
                                  "script-tcp.pcapng"])
def test_kept_captures_replay_as_recorded(ksp_replay, name):
    report = ksp_replay(CAPTURES / name)
    assert report.requests > 20


def replayed_by_pytest(directory: Path) -> subprocess.CompletedProcess:
    """pytest in another process, the plugin enabled as a user enables it, on `directory`."""
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                           "-p", "ksp_tools.pytest_ksp", "--ksp-replay", str(directory),
                           str(directory)],
                          cwd=directory.parent, capture_output=True, text=True, timeout=300)


def test_plugin_replays_a_directory_and_fails_with_the_diff(tmp_path):
    (tmp_path / "good").mkdir()
    shutil.copy(CAPTURES / "script-udp.pcapng", tmp_path / "good")
    run = replayed_by_pytest(tmp_path / "good")
    assert run.returncode == 0 and "1 passed" in run.stdout, run.stdout + run.stderr
    # A capture recorded against a SIB that already held data (seeded before the capture
    # began): a fresh SIB answers without it.
    (tmp_path / "bad").mkdir()
    bad = tmp_path / "bad" / "seeded.pcapng"
    data = ("--data-dir", str(tmp_path / "data"), "--coap-port", "-1", "--tcp-port", "-1")
    with SibProcess(*data, "--udp-port", "0") as sib:
        asyncio.run(_udp_only(sib.ports["udp"]))
    with SibProcess(*data, "--udp-port", "0", "--pcap", str(bad)) as sib:
        asyncio.run(_udp_only(sib.ports["udp"]))
    run = replayed_by_pytest(tmp_path / "bad")
    assert run.returncode == 1 and "1 failed" in run.stdout, run.stdout
    assert "ksp-replay[seeded.pcapng]" in run.stdout and "missing [" in run.stdout


async def _udp_only(port: int) -> None:
    async with connect(f"udp://127.0.0.1:{port}") as kp:
        await kp.update(f"INSERT DATA {{ <{EX}n> <{EX}p> {time.monotonic_ns()} }}")
        await kp.query(f"SELECT ?o WHERE {{ <{EX}n> <{EX}p> ?o }}")


@pytest.mark.parametrize("form", ["pcapng", "pcap"])
def test_a_capture_cut_short_shows_what_came_before_and_says_where(tmp_path, form):
    """`ksp decode --pcap` of a capture cut short prints the messages before the cut, then one
    line naming the file and the byte (exit 1); `ksp replay` refuses it so (exit 2), rather
    than reporting what was cut off as differences."""
    whole = tmp_path / f"gh.{form}"
    if form == "pcap":
        if shutil.which("editcap") is None:
            pytest.skip("editcap (Debian's wireshark-common, with tshark) is not installed")
        subprocess.run(["editcap", "-F", "pcap", str(CAPTURES / "greenhouse.pcapng"),
                        str(whole)], check=True, capture_output=True)
    else:
        shutil.copy(CAPTURES / "greenhouse.pcapng", whole)
    total = int(re.search(r"(\d+) of \1 KSP messages", ksp("decode", "--pcap", str(whole)
                                                          ).stdout)[1])
    cut = tmp_path / f"cut.{form}"
    cut.write_bytes(whole.read_bytes()[:whole.stat().st_size * 2 // 3])
    out = ksp("decode", "--pcap", str(cut), "--brief")
    shown = int(re.search(r"(\d+) of \1 KSP messages", out.stdout)[1])
    assert out.returncode == 1 and 0 < shown < total, (out.stdout[-300:], out.stderr)
    assert re.fullmatch(rf"error: {re.escape(str(cut))}: the capture is cut short at byte "
                        r"\d+; the messages before it are shown\n", out.stderr), out.stderr
    out = ksp("replay", str(cut), "--to", "udp://127.0.0.1:9", "--wait", "1")
    assert out.returncode == 2 and out.stdout == "", out.stdout
    assert out.stderr.startswith(f"ksp replay: {cut}: the capture is cut short at byte ")


def test_a_pcapng_block_whose_length_fields_differ_is_damage_said_where(tmp_path):
    """A pcapng block carries its length at both ends: one whose two differ (a damaged length
    field) stops the reading there with the file and the byte, where the rest was read as
    garbage without a word (and a replay reported its lost packets as differences)."""
    data = bytearray((CAPTURES / "greenhouse.pcapng").read_bytes())
    at, blocks = 0, []
    while at < len(data):
        blocks.append(at)
        at += struct.unpack("<I", data[at + 4:at + 8])[0]
    damaged_at = blocks[len(blocks) // 2]
    length = struct.unpack("<I", data[damaged_at + 4:damaged_at + 8])[0]
    data[damaged_at + 4:damaged_at + 8] = struct.pack("<I", length + 4)
    path = tmp_path / "damaged.pcapng"
    path.write_bytes(bytes(data))
    out = ksp("decode", "--pcap", str(path), "--brief")
    assert out.returncode == 1 and int(re.search(r"(\d+) of \1 KSP messages", out.stdout)[1])
    assert re.fullmatch(rf"error: {re.escape(str(path))}: a damaged pcapng block at byte "
                        rf"{damaged_at}: its length fields say {length + 4} and \d+; the "
                        r"messages before it are shown\n", out.stderr), out.stderr
    out = ksp("replay", str(path), "--to", "udp://127.0.0.1:9", "--wait", "1")
    assert out.returncode == 2 and f"a damaged pcapng block at byte {damaged_at}" in out.stderr
