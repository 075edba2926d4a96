"""The C part of the package (everything else is in pyproject.toml).

`ksp._speedups` is optional: without a C compiler the install still succeeds and ksp.codec
decodes in pure Python (tests/test_speedups.py fails then, so CI notices).
"""
from setuptools import Extension, setup

setup(ext_modules=[Extension("ksp._speedups", ["ksp/_speedups.c"], optional=True,
                             extra_compile_args=["-O2", "-Wall", "-Wno-unused-function"])])
