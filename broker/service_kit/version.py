"""Samsa's version, for ``--version`` of every command.

The installed distribution's (importlib.metadata) when Samsa is installed;
otherwise, run from a checkout that was never installed, the version
written in the checkout's pyproject.toml. Never raises: a version that
cannot be found is "unknown".
"""
from __future__ import annotations

import pathlib
import tomllib
from importlib import metadata

DISTRIBUTION = "samsa"
#: the checkout's pyproject.toml: this file is broker/service_kit/version.py
PYPROJECT = pathlib.Path(__file__).resolve().parents[2] / "pyproject.toml"


def package_version() -> str:
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        pass
    try:
        with open(PYPROJECT, "rb") as f:
            return str(tomllib.load(f)["project"]["version"])
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return "unknown"
