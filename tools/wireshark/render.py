"""Render what tshark shows of a capture, with the KSP dissector, as a PNG (docs/ screenshot):

    .venv/bin/python tools/wireshark/render.py tests/captures/greenhouse.pcapng \
        docs/wireshark-greenhouse.png --frame 16

The packet list (first `--rows` frames) and the detail pane of one frame (`-V`), as tshark
prints them, drawn in a monospace font with matplotlib (the `bench` extra).
"""
from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent


def tshark(*args: str) -> list[str]:
    out = subprocess.run(["tshark", "-X", f"lua_script:{HERE / 'ksp.lua'}", *args],
                         capture_output=True, text=True, check=True).stdout
    return [line.rstrip() for line in out.splitlines()]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("capture")
    p.add_argument("png")
    p.add_argument("--frame", type=int, default=16)
    p.add_argument("--rows", type=int, default=24)
    args = p.parse_args(argv)
    listing = tshark("-r", args.capture)[:args.rows]
    detail = tshark("-r", args.capture, "-V", "-Y", f"frame.number=={args.frame}")
    start = next(i for i, line in enumerate(detail) if line.startswith("Knowledge Sharing"))
    lines = ([f"$ tshark -X lua_script:tools/wireshark/ksp.lua -r {Path(args.capture).name}"]
             + listing + ["", f"$ ... -V -Y frame.number=={args.frame}"] + detail[start:])
    lines = [line[:150] for line in lines]

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    height = 0.16 * len(lines) + 0.4
    fig = plt.figure(figsize=(13, height), dpi=110)
    fig.patch.set_facecolor("#1e1e1e")
    fig.text(0.01, 1 - 0.2 / height, "\n".join(lines), family="monospace", fontsize=8.2,
             color="#e0e0e0", va="top", ha="left", linespacing=1.25)
    fig.savefig(args.png, facecolor=fig.get_facecolor())
    print(f"wrote {args.png} ({len(lines)} lines)")


if __name__ == "__main__":
    main()
