"""Every package's __init__ docstring is a map of what the package holds
today: each module and subpackage is named in it, and nothing it names is gone."""
from __future__ import annotations

import ast
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = sorted(p.parent for top in ("broker", "mirror", "audit", "hadoop_loader", "schemas",
                                       "infra")
                  for p in (ROOT / top).rglob("__init__.py")
                  if "migrations" not in p.parts)


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_package_map_names_what_the_package_holds(package):
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
    held = {p.name for p in package.glob("*.py") if p.name != "__init__.py"}
    held |= {f"{p.parent.name}/" for p in package.glob("*/__init__.py")}
    missing = sorted(name for name in held if name not in doc)
    assert not missing, f"{package.relative_to(ROOT)}/__init__.py does not name {missing}"
    named = set(re.findall(r"(?<![/\w.])([a-z_][a-z0-9_]*\.py)\b", doc))   # not a/b.py
    gone = sorted(name for name in named if not (package / name).exists()
                  and not list(package.glob(f"*/{name}")))
    assert not gone, f"{package.relative_to(ROOT)}/__init__.py names what is gone: {gone}"
