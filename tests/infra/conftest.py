"""Fixtures of the lab tests (tests/infra), on top of tests/conftest.py.

* ``make_lab(topology)``: a ``Lab`` of this test, moved to a base port where
  every port of its topology is free now, with its state in tmp_path; taken
  down at teardown (and the tails of its logs printed when the test failed).

The topologies themselves come from lab_helpers.small_topology().
"""
from __future__ import annotations

import os

import pytest

from infra.local.lab import Lab, LabError, free_topology
from infra.topology import Topology


def _test_failed(node) -> bool:
    # tests/conftest.py keeps each phase's report on the item
    return any(getattr(getattr(node, f"rep_{when}", None), "failed", False)
               for when in ("setup", "call"))


@pytest.fixture
def make_lab(tmp_path, request):
    labs: list[Lab] = []

    def make(topology: Topology, name: str = "lab") -> Lab:
        lab = Lab(free_topology(topology), str(tmp_path / name))
        labs.append(lab)
        return lab

    yield make
    for lab in labs:
        if _test_failed(request.node):
            print_lab_logs(lab)
        try:
            lab.down(timeout=10)
        except LabError as exc:
            print(f"teardown: {exc}")


def print_lab_logs(lab: Lab, lines: int = 60) -> None:
    logs = lab.path("logs")
    if not os.path.isdir(logs):
        return
    for name in sorted(os.listdir(logs)):
        path = os.path.join(logs, name)
        try:
            with open(path, "rb") as f:
                text = f.read().decode(errors="replace").splitlines()
        except OSError as exc:
            text = [f"(unreadable: {exc})"]
        print(f"\n----- {path} -----")
        print("\n".join(text[-lines:]))
