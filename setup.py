"""Builds the optional C accelerators: the message codec's and the audit's
counting kernel.

Everything else is in pyproject.toml. If the extension cannot be compiled
(no C compiler), Samsa installs anyway and uses the
pure-Python codec, only slower.
"""
from setuptools import Extension, setup

setup(ext_modules=[Extension("broker.protocol._speedups", ["broker/protocol/_speedups.c"],
                             extra_compile_args=["-O2", "-Wall", "-Wextra"],
                             optional=True),
                   Extension("audit._tally", ["audit/_tally.c"],
                             extra_compile_args=["-O2", "-Wall", "-Wextra"], optional=True)])
