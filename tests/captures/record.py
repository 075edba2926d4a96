"""Record the captures kept in this directory (run from the repository root):

    .venv/bin/python tests/captures/record.py

- `greenhouse.pcapng`: the Smart Greenhouse demo (tools/greenhouse.py: sensors, the
  Autocontrol rules, the actuator's subscription) against `ksp-sib --memory --pcap`.
- `script-udp.pcapng`, `script-tcp.pcapng`: the 22-transaction script of
  tests/test_sib_sockets.py (every transaction type, persistent ones ended by TERMINATE and
  RESET) over UDP and over TCP.

tests/test_capture.py replays them against a fresh SIB: a change in what the SIB answers shows
up there as a readable diff. Record them again only when that change is intended.
"""
from __future__ import annotations

import asyncio
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from sib.testing import SibProcess  # noqa: E402
from transports.tcp import open_tcp_link  # noqa: E402
from transports.udp import open_udp_link  # noqa: E402


async def run_script(transport: str, port: int) -> None:
    """The script of tests/test_sib_sockets.py, each request after the INDs of the one before
    have arrived (a pause: the SIB is idle), so that a replay sees the same order."""
    from test_sib_sockets import SCRIPT, send_script

    opener = open_udp_link if transport == "udp" else open_tcp_link
    link = await opener("127.0.0.1", port)
    try:
        await send_script(link, SCRIPT, between=lambda: asyncio.sleep(0.2))
    finally:
        await link.close()


def record(name: str, work) -> None:
    out = HERE / name
    with SibProcess("--memory", "--udp-port", "0", "--tcp-port", "0", "--coap-port", "-1",
                    "--pcap", str(out)) as sib:
        asyncio.run(work(sib.ports))
        assert sib.stop() == 0
    print(f"wrote {out} ({out.stat().st_size} bytes)")


def main() -> None:
    from tools.greenhouse import Greenhouse

    sys.path.insert(0, str(HERE.parent))
    record("greenhouse.pcapng", lambda ports: Greenhouse(f"udp://127.0.0.1:{ports['udp']}").run())
    record("script-udp.pcapng", lambda ports: run_script("udp", ports["udp"]))
    record("script-tcp.pcapng", lambda ports: run_script("tcp", ports["tcp"]))


if __name__ == "__main__":
    main()
