"""Where the files beside the code are: the board firmware and the Wireshark dissector.

A checkout has them at the top (`device_firmware/`, `tools/wireshark/ksp.lua`); an installed
wheel carries them inside this package (setup.py copies them in), so one lookup serves both.
"""
from __future__ import annotations

import os
from pathlib import Path

HERE = Path(__file__).resolve().parent
CHECKOUT = HERE.parent


def installed() -> bool:
    """Whether this is the wheel's copy (the firmware inside the package), not a checkout."""
    return (HERE / "firmware" / "main.py").is_file()


def firmware_dir() -> Path:
    """The device firmware: main.py, kspfw/, lib/, simulate.py and the example configurations."""
    return HERE / "firmware" if installed() else CHECKOUT / "device_firmware"


def dissector() -> Path:
    """The Wireshark dissector (`tshark -X lua_script:PATH`)."""
    return HERE / "wireshark" / "ksp.lua"


def build_dir() -> Path:
    """Where `ksp flash` puts the compiled firmware by default: build/firmware in a checkout,
    the user's cache directory for an install (never inside site-packages)."""
    if not installed():
        return CHECKOUT / "build" / "firmware"
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "ksp-gateway" / "firmware"
