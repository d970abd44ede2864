"""The Makefile's first impression: plain ``make`` prints the help and does
nothing else, and the help names every target the Makefile declares."""
from __future__ import annotations

import pathlib
import re
import subprocess

ROOT = pathlib.Path(__file__).resolve().parent.parent
#: a rule line: ``name: prerequisites`` (not ``NAME := value``, not ``$(STAMP):``)
RULE = re.compile(r"^([a-z][a-z0-9-]*)\s*:(?!=)", re.MULTILINE)


def make(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "--no-print-directory", "-C", str(ROOT), *args],
                          capture_output=True, text=True, timeout=60, check=False)


def targets() -> set[str]:
    text = (ROOT / "Makefile").read_text().replace("\\\n", " ")    # continued lines joined
    phony = {name for line in re.findall(r"^\.PHONY:(.*)$", text, re.MULTILINE)
             for name in line.split()}
    return set(RULE.findall(text)) | phony


def test_the_rules_are_found():
    found = targets()
    assert {"help", "setup", "demo", "test", "clean", "lab-up", "tf-local-down"} <= found
    assert len(found) >= 30 and all(re.fullmatch(r"[a-z][a-z0-9-]*", t) for t in found), \
        sorted(found)


def test_plain_make_only_prints_the_help():
    planned = make("-n")                    # what plain make would run, run nothing
    assert planned.returncode == 0, planned.stderr
    commands = planned.stdout.strip().splitlines()
    assert commands and all(line.startswith("echo ") for line in commands), commands
    plain, helped = make(), make("help")
    assert plain.returncode == 0 and helped.returncode == 0, plain.stderr + helped.stderr
    assert plain.stdout == helped.stdout
    assert plain.stdout.startswith("make help")


def test_the_help_lists_every_target():
    shown = make("help").stdout
    missing = sorted(t for t in targets()
                     if not re.search(rf"(?<![\w-]){re.escape(t)}(?![\w-])", shown))
    assert not missing, f"make help does not list {missing}"
