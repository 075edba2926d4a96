"""The C part of the package (everything else is in pyproject.toml).

`ksp._speedups` is optional: without a C compiler the install still succeeds and ksp.codec
decodes in pure Python (tests/test_speedups.py fails then, so CI notices). Its enums come from
`ksp/_layout.h`, which this file writes from the layout table (`ksp/layout.py`) and the model
(`ksp/model.py`) before the build, so the C module never declares the layout itself.
"""
import importlib
import pathlib
import sys
import types

from setuptools import Extension, setup

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


write_layout_header()
setup(ext_modules=[Extension("ksp._speedups", ["ksp/_speedups.c"], depends=["ksp/_layout.h"],
                             optional=True,
                             extra_compile_args=["-O2", "-Wall", "-Wno-unused-function"])])
