"""The layering of the code, held (DEVELOPERS.md, "Layers"): data flows one
way, and no module reaches into another's private names or its __main__.

Read from the source with ast, so it costs nothing to run and names the file
and line of every breach.
"""
from __future__ import annotations

import ast
import importlib.util
import pathlib
import sys
from dataclasses import dataclass

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("broker", "mirror", "audit", "hadoop_loader", "schemas", "dags", "infra", "bench")
PROJECT = PACKAGES


@dataclass(frozen=True)
class Import:
    module: str        # the importing module, dotted
    target: str        # what it imports, dotted (a module, or module.name)
    line: int
    path: str

    def where(self) -> str:
        return f"{self.path}:{self.line} imports {self.target}"


def module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_module(dotted: str) -> bool:
    base = ROOT.joinpath(*dotted.split("."))
    return (base.with_suffix(".py").exists() or (base / "__init__.py").exists()
            or any(base.parent.glob(base.name + ".*.so")) or base.with_suffix(".c").exists())


def source_files():
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" not in path.parts:
                yield path


def imports_of(path: pathlib.Path) -> tuple[list[Import], ast.Module]:
    tree = ast.parse(path.read_text(), str(path))
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    rel = str(path.relative_to(ROOT))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [Import(module, alias.name, node.lineno, rel) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            found += [Import(module, f"{source}.{alias.name}", node.lineno, rel)
                      for alias in node.names]
    return found, tree


@pytest.fixture(scope="module")
def every_import() -> list[Import]:
    found: list[Import] = []
    for path in source_files():
        found += imports_of(path)[0]
    return found


def project(target: str) -> bool:
    return target.split(".")[0] in PROJECT


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


#: (modules under, may not import anything under, why)
RULES = [
    ("broker.protocol", ("broker.server", "broker.client", "broker.storage",
                         "broker.coordination", "broker.service_kit", "broker.lag",
                         "broker.harness", "broker.tools", "mirror", "audit", "hadoop_loader",
                         "schemas", "infra", "dags", "bench"),
     "the codec is sans-IO and stands alone"),
    ("broker.storage", ("broker.server", "broker.client", "broker.coordination", "broker.lag",
                        "broker.harness", "broker.tools", "mirror", "audit", "hadoop_loader",
                        "schemas", "infra", "dags", "bench"),
     "storage knows the codec and nothing of who serves it"),
    ("broker.client", ("broker.server", "broker.storage", "broker.harness", "mirror", "audit",
                       "hadoop_loader", "infra", "bench"),
     "clients speak the protocol; they do not reach into the broker"),
    ("broker.service_kit", ("broker.server", "broker.storage", "broker.client",
                            "broker.coordination", "broker.protocol", "broker.lag",
                            "broker.harness", "broker.tools", "broker.config", "mirror",
                            "audit", "hadoop_loader", "schemas", "infra", "dags"),
     "the service kit serves every service and imports none of them"),
    ("mirror", ("broker.server", "broker.storage"), "the mirror uses the client"),
    ("audit", ("broker.server", "broker.storage"), "the audit uses the client"),
    ("hadoop_loader", ("broker.server", "broker.storage"), "the loader uses the client"),
    ("schemas", ("broker", "mirror", "audit", "hadoop_loader", "infra", "dags", "bench"),
     "schemas stands alone"),
    # ... but for its one service, which uses the service kit as every service does
    ("schemas.service", ("broker.server", "broker.storage", "broker.client",
                         "broker.coordination", "broker.protocol", "broker.lag",
                         "broker.harness", "broker.tools", "mirror", "audit", "hadoop_loader",
                         "infra", "dags", "bench"),
     "the registry's REST service uses the service kit and nothing else of the project"),
    ("dags", ("broker", "mirror", "schemas", "infra", "bench"),
     "DAGs wire the loader's and the audit's steps; they hold no logic"),
]


@pytest.mark.parametrize("layer, forbidden, why", RULES, ids=[r[0] for r in RULES])
def test_each_layer_imports_only_what_lies_below_it(every_import, layer, forbidden, why):
    breaches = [i.where() for i in every_import if within(i.module, layer)
                and any(within(i.target, f) for f in forbidden)
                and not (layer == "schemas" and within(i.module, "schemas.service")
                         and within(i.target, "broker.service_kit"))]
    assert not breaches, f"{layer}: {why}:\n" + "\n".join(breaches)


def test_no_module_imports_from_a_main(every_import):
    breaches = [i.where() for i in every_import if project(i.target)
                and "__main__" in i.target.split(".")
                and not i.module.endswith("__main__")]
    assert not breaches, "a __main__ is an entry point, not a library:\n" + "\n".join(breaches)


def private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_no_module_imports_another_modules_private_names(every_import):
    breaches = []
    for i in every_import:
        if not project(i.target):
            continue
        owner, _, name = i.target.rpartition(".")
        if not private(name):
            continue
        if is_module(i.target) and within(i.module, owner):
            continue        # a private module of its own package: a C accelerator
        breaches.append(i.where())
    assert not breaches, "private names are private:\n" + "\n".join(breaches)


def test_no_module_reads_a_private_attribute_of_a_module_it_imported():
    breaches = []
    for path in source_files():
        imports, tree = imports_of(path)
        bound = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if project(alias.name):
                        bound[alias.asname or alias.name.split(".")[0]] = alias.name
            elif isinstance(node, ast.ImportFrom) and not node.level:
                for alias in node.names:
                    target = f"{node.module}.{alias.name}"
                    if project(target) and is_module(target):
                        bound[alias.asname or alias.name] = target
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in bound and private(node.attr)):
                breaches.append(f"{path.relative_to(ROOT)}:{node.lineno} reads "
                                f"{bound[node.value.id]}.{node.attr}")
    assert not breaches, "private names are private:\n" + "\n".join(breaches)


def test_dags_are_wiring_only():
    """A DAG file's tasks each return one call of a step; no other function,
    no class, no loop or branch at its top level."""
    for path in sorted((ROOT / "dags").glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            assert not isinstance(node, (ast.ClassDef, ast.For, ast.While, ast.If)), \
                f"{path.name}:{node.lineno}: logic belongs in hadoop_loader/ or audit/"
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                body = [s for s in node.body if not (isinstance(s, ast.Expr)
                                                     and isinstance(s.value, ast.Constant))]
                assert len(body) == 1 and isinstance(body[0], ast.Return) \
                    and isinstance(body[0].value, ast.Call), \
                    f"{path.name}:{node.lineno}: a task returns one step's call"


def test_the_rules_see_the_code():
    """The checks above read real imports: a guard against a walk that finds nothing."""
    found = []
    for path in source_files():
        found += imports_of(path)[0]
    assert len(found) > 1000
    assert any(i.module == "mirror.pipe" and within(i.target, "broker.client") for i in found)
    assert spec_of("broker.protocol.api")


def spec_of(name: str):
    sys.path.insert(0, str(ROOT))
    try:
        return importlib.util.find_spec(name)
    finally:
        sys.path.pop(0)


#: private attributes of other libraries' objects that we read on purpose,
#: each with its reason in the code: kazoo's client (its request queue for
#: multiRead, its session timeout and state), Enum and NamedTuple internals
THIRD_PARTY_PRIVATE = {"client._call", "client._session_timeout", "client._state",
                       "ErrorCode._value2member_map_", "ZnodeStat._make"}


def test_no_object_of_ours_is_reached_into_from_outside():
    """``obj._name`` only on self or cls: a module asks another module's
    objects through their public names (``conn.take_correlation_ids()``,
    not ``conn._next_correlation_id``)."""
    breaches = []
    for path in source_files():
        if path.relative_to(ROOT).parts[0] == "bench":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id not in ("self", "cls") and private(node.attr)
                    and f"{node.value.id}.{node.attr}" not in THIRD_PARTY_PRIVATE):
                breaches.append(f"{path.relative_to(ROOT)}:{node.lineno} "
                                f"{node.value.id}.{node.attr}")
    assert not breaches, "private names are private:\n" + "\n".join(breaches)
