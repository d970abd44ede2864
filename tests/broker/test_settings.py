"""broker/service_kit/settings.py: typed settings from TOML and --set overrides."""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, field

import pytest

from broker.service_kit import settings
from broker.service_kit.settings import ConfigError


@dataclass(frozen=True)
class Endpoint:
    name: str
    port: int = 0


@dataclass(frozen=True)
class Inner:
    ratio: float = 0.5
    enabled: bool = True


@dataclass(frozen=True)
class Outer:
    title: str = "t"
    note: str | None = None
    tags: tuple[str, ...] = ()
    inner: Inner = field(default_factory=Inner)
    endpoints: tuple[Endpoint, ...] = ()
    primary: Endpoint | None = None

    def __post_init__(self) -> None:
        if len({e.name for e in self.endpoints}) != len(self.endpoints):
            raise ValueError("endpoint names must differ")


def test_nested_tables_arrays_and_round_trip():
    text = """
title = "x"
tags = ["a", "b"]
[inner]
ratio = 2
[primary]
name = "p"
[[endpoints]]
name = "e1"
port = 1
[[endpoints]]
name = "e2"
"""
    built = settings.build(Outer, tomllib.loads(text))
    assert built == Outer("x", None, ("a", "b"), Inner(2.0, True),
                          (Endpoint("e1", 1), Endpoint("e2", 0)), Endpoint("p"))
    assert settings.build(Outer, tomllib.loads(settings.to_toml(built))) == built


def test_overrides_are_typed(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text('title = "file"\n')
    built = settings.load(Outer, str(path), settings.parse_overrides(
        ["inner.enabled=false", "tags=a, b", "inner.ratio=0.25", "note="]))
    assert built.title == "file" and built.tags == ("a", "b")
    assert built.inner == Inner(0.25, False) and built.note == ""


@pytest.mark.parametrize("values, message", [
    ({"titel": "x"}, "unknown setting 'titel'"),
    ({"inner": {"ratio": "half"}}, "inner.ratio must be a number"),
    ({"inner": {"enabled": "maybe"}}, "inner.enabled must be true or false"),
    ({"inner": 3}, "inner must be a table"),
    ({"endpoints": [{"port": 1}]}, "missing setting.*endpoints\\[0\\].name"),
    ({"endpoints": [{"name": "a"}, {"name": "a"}]}, "endpoint names must differ"),
    ({"tags": {"a": 1}}, "tags must be a list"),
])
def test_bad_settings_say_what_is_wrong(values, message):
    with pytest.raises(ConfigError, match=message):
        settings.build(Outer, values)


def test_bad_override_syntax_and_files(tmp_path):
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        settings.parse_overrides(["novalue"])
    with pytest.raises(ConfigError, match="cannot read"):
        settings.load(Outer, str(tmp_path / "missing.toml"))
    bad = tmp_path / "bad.toml"
    bad.write_text("title = \n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        settings.load(Outer, str(bad))


def test_overrides_pick_a_table_of_an_array_by_name_or_index():
    values = {"endpoints": [{"name": "a", "port": 1}, {"name": "b", "port": 2}]}
    built = settings.build(Outer, settings.apply_overrides(
        values, {"endpoints.b.port": "20", "endpoints.0.port": "10"}))
    assert [(e.name, e.port) for e in built.endpoints] == [("a", 10), ("b", 20)]
    with pytest.raises(ConfigError, match=r"no table named 'c' in endpoints \(names: a, b"):
        settings.apply_overrides(values, {"endpoints.c.port": "3"})
    with pytest.raises(ConfigError, match="endpoints is an array of tables: name one of them"):
        settings.apply_overrides(values, {"endpoints.port": "3"})
