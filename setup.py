"""The C part of the package, and the package layout pyproject.toml cannot say.

`tools/` is installed as `ksp_tools` (a top-level `tools` would clash with other
distributions), with the board firmware (`device_firmware/`) and the Wireshark dissector copied
in as its package data, so `ksp flash` and `ksp simulate-board` work from a wheel. In a checkout
`tools` stays importable as it is (`python -m tools.make_vectors`), found by the same lookup
(`tools/resources.py`).

`ksp._speedups` is optional: without a C compiler the install still succeeds and ksp.codec
decodes in pure Python (tests/test_speedups.py fails then, so CI notices). Its enums come from
`ksp/_layout.h`, which this file writes from the layout table (`ksp/layout.py`) and the model
(`ksp/model.py`) before the build, so the C module never declares the layout itself.

What a build makes on its way (objects, the wheel's tree, a wheel's egg-info) goes to a
temporary folder removed when this file's process ends: `pip wheel .` leaves no `build/` or
egg-info in the source tree, only its products, and `python setup.py build_ext --inplace` still
leaves `ksp/_speedups*.so` in place.
"""
import atexit
import functools
import importlib
import pathlib
import shutil
import sys
import tempfile
import types

from setuptools import Extension, find_packages, setup
from setuptools.command.build import build
from setuptools.command.build_py import build_py
from setuptools.command.egg_info import egg_info

HERE = pathlib.Path(__file__).resolve().parent


def write_layout_header() -> None:
    """Import ksp.layout and ksp.model without running ksp/__init__ (which would load the codec
    and the C module being built), and write the header when its text changed."""
    saved = {name: sys.modules.pop(name) for name in list(sys.modules)
             if name == "ksp" or name.startswith("ksp.")}
    package = types.ModuleType("ksp")
    package.__path__ = [str(HERE / "ksp")]
    sys.modules["ksp"] = package
    try:
        layout = importlib.import_module("ksp.layout")
        model = importlib.import_module("ksp.model")
        text = layout.c_header(model.Request._fields, model.Response._fields, model.Ack._fields)
    finally:
        for name in [n for n in sys.modules if n == "ksp" or n.startswith("ksp.")]:
            del sys.modules[name]
        sys.modules.update(saved)
    header = HERE / "ksp" / "_layout.h"
    if not header.exists() or header.read_text() != text:
        header.write_text(text)


TOOLS = "ksp_tools"


def packages() -> list[str]:
    """The project's packages, `tools` and its subpackages under their installed name."""
    own = find_packages(include=["ksp", "ksp.*", "transports", "transports.*", "sib", "sib.*",
                                 "bridge", "bridge.*", "spark_ingest", "spark_ingest.*"])
    return own + [TOOLS + name[len("tools"):] for name in find_packages(include=["tools", "tools.*"])]


class BuildWithFirmware(build_py):
    """Copies the firmware and the dissector into ksp_tools in the build; an editable install
    reads them where they are in the checkout instead."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        target = pathlib.Path(self.build_lib) / TOOLS
        shutil.copytree(HERE / "device_firmware", target / "firmware", dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "pyrightconfig.*"))
        (target / "wireshark").mkdir(exist_ok=True)
        shutil.copy2(HERE / "tools" / "wireshark" / "ksp.lua", target / "wireshark" / "ksp.lua")


@functools.cache
def scratch() -> str:
    """The temporary build folder, made on first use."""
    path = tempfile.mkdtemp(prefix="ksp-gateway-build-")
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


class BuildInScratch(build):
    """Out of the tree: every command's intermediate output (build_py, build_ext, bdist_wheel)
    goes under `build_base`. `--build-base` still chooses another."""

    def initialize_options(self) -> None:
        super().initialize_options()
        self.build_base = scratch()


class EggInfoInScratch(egg_info):
    """The egg-info a wheel build writes, out of the tree too. An sdist carries its egg-info, so
    `sdist` writes it in the tree as usual; dist_info and editable installs choose their own."""

    def initialize_options(self) -> None:
        super().initialize_options()
        if "sdist" not in self.distribution.commands:
            self.egg_base = scratch()


write_layout_header()
setup(packages=packages(), package_dir={TOOLS: "tools"},
      cmdclass={"build": BuildInScratch, "egg_info": EggInfoInScratch,
                "build_py": BuildWithFirmware},
      ext_modules=[Extension("ksp._speedups", ["ksp/_speedups.c"], depends=["ksp/_layout.h"],
                             optional=True,
                             extra_compile_args=["-O2", "-Wall", "-Wno-unused-function"])])
