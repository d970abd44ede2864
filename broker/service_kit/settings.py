"""Settings files: frozen dataclasses loaded from TOML with command-line
overrides, validated together when built. Shared by every Samsa program
(broker, mirror, the multi-DC topology); it imports nothing of them.

A settings class is a frozen dataclass whose fields are str, int, float,
bool, ``str | None``, ``tuple[str, ...]``, another settings class (a TOML
table) or ``tuple[<settings class>, ...]`` (an array of tables). Checks that
span fields go in ``__post_init__`` and raise ValueError; ``build`` turns
that into ConfigError naming the file's table.

Overrides are ``dotted.key=value`` strings as typed on a command line
(``--set log.flush_ms=10``): values are converted to the field's type. In an
array of tables a part of the key picks one table, by its ``name`` or its
index: ``--set datacenters.dc-a.brokers=3``, ``--set sources.0.zookeeper=...``.
"""
from __future__ import annotations

import dataclasses
import tomllib
import types
import typing
from typing import Any


class ConfigError(ValueError):
    """A setting is unknown, missing, or has a value it cannot take."""


def read_toml(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None


def parse_overrides(items: list[str] | None) -> dict[str, str]:
    """``["a.b=1", "c=x"]`` -> ``{"a.b": "1", "c": "x"}``."""
    out: dict[str, str] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set wants KEY=VALUE, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def apply_overrides(values: dict[str, Any], overrides: dict[str, Any] | None) -> dict[str, Any]:
    """Put dotted ``overrides`` into the nested ``values`` (in place)."""
    for key, value in (overrides or {}).items():
        target = values
        parts = key.split(".")
        for i, part in enumerate(parts[:-1]):
            if isinstance(target, list):
                target = _array_element(target, part, key, ".".join(parts[:i]))
            else:
                target = target.setdefault(part, {})
            if not isinstance(target, (dict, list)):
                raise ConfigError(f"{key}: {part} is not a table")
        if not isinstance(target, dict):
            raise ConfigError(f"{key}: {'.'.join(parts[:-1])} is an array of tables: "
                              f"name one of them ({'.'.join(parts[:-1])}.<name or index>.KEY)")
        target[parts[-1]] = value
    return values


def _array_element(items: list, part: str, key: str, where: str) -> dict:
    """The table of the array ``items`` named (its ``name`` key) or indexed by ``part``."""
    for item in items:
        if isinstance(item, dict) and item.get("name") == part:
            return item
    if part.isdigit() and int(part) < len(items):
        return items[int(part)]
    names = [str(item.get("name")) for item in items if isinstance(item, dict)]
    raise ConfigError(f"{key}: no table named {part!r} in {where} "
                      f"(names: {', '.join(names) or 'none'}; or an index 0..{len(items) - 1})")


def read_table(path: str | None, table: str | None = None) -> dict[str, Any]:
    """The values of one table of the TOML file ``path`` (None: the whole
    file; no path: nothing, the defaults apply)."""
    if not path:
        return {}
    values = read_toml(path)
    if table is None:
        return values
    found = values.get(table, {})
    if not isinstance(found, dict):
        raise ConfigError(f"config file {path}: {table} must be a table ([{table}])")
    return found


def load(cls, path: str | None = None, overrides: dict[str, Any] | None = None,
         table: str | None = None):
    """An instance of ``cls`` from ``path`` (TOML; None: defaults only), its
    ``[table]`` when one is named (its errors then name ``table.KEY``), with
    ``overrides`` on top."""
    return build(cls, apply_overrides(read_table(path, table), overrides),
                 f"{table}." if table else "")


def sketch(cls, values: dict[str, Any]):
    """``cls`` from ``values`` as far as they go, for showing, not for use:
    fields absent and without a default are None, and no check spanning
    fields runs (unknown settings and values of the wrong type are
    ConfigError all the same). ``--print-config`` shows this when the settings are not yet
    complete (no cluster named), so that a file can be started from it."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ConfigError(f"unknown setting(s) {', '.join(unknown)}; known: "
                          f"{', '.join(sorted(fields))}")
    sketched = object.__new__(cls)
    for name, f in fields.items():
        if name in values:
            value = values[name]
            if dataclasses.is_dataclass(hints[name]) and isinstance(value, dict):
                value = sketch(hints[name], value)
            else:
                value = _convert(name, hints[name], value)
        elif f.default is not dataclasses.MISSING:
            value = f.default
        elif f.default_factory is not dataclasses.MISSING:
            value = f.default_factory()
        else:
            value = None
        object.__setattr__(sketched, name, value)
    return sketched


def missing(cls, values: dict[str, Any]) -> list[str]:
    """The settings of ``cls`` that have no default and no value in ``values``."""
    return [f.name for f in dataclasses.fields(cls) if f.name not in values
            and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]


def build(cls, values: dict[str, Any], prefix: str = ""):
    """An instance of the settings class ``cls`` from a (TOML) dict."""
    if not isinstance(values, dict):
        raise ConfigError(f"{prefix.rstrip('.') or 'settings'} must be a table")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for key, value in values.items():
        if key not in fields:
            raise ConfigError(f"unknown setting '{prefix}{key}'; known: "
                              f"{', '.join(prefix + k for k in sorted(fields))}")
        kwargs[key] = _convert(prefix + key, hints[key], value)
    absent = missing(cls, kwargs)
    if absent:
        raise ConfigError(f"missing setting(s): {', '.join(prefix + m for m in absent)}")
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except (ValueError, TypeError) as exc:
        where = f"[{prefix.rstrip('.')}] " if prefix else ""
        raise ConfigError(f"{where}{exc}") from None


def _convert(name: str, hint: Any, value: Any) -> Any:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        if value is None or (isinstance(value, str) and value == "" and str in options):
            return None if value is None else value
        return _convert(name, options[0], value)
    if origin is tuple:
        (item,) = [a for a in typing.get_args(hint) if a is not Ellipsis]
        if isinstance(value, str):      # a command-line override: comma-separated
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{name} must be a list")
        return tuple(_convert(f"{name}[{i}]", item, v) for i, v in enumerate(value))
    if dataclasses.is_dataclass(hint):
        if isinstance(value, hint):
            return value
        return build(hint, value, name + ".")
    if hint is bool:
        if isinstance(value, str):
            if value.lower() in ("1", "true", "yes", "on"):
                return True
            if value.lower() in ("0", "false", "no", "off"):
                return False
            raise ConfigError(f"{name} must be true or false, got {value!r}")
        if not isinstance(value, bool):
            raise ConfigError(f"{name} must be true or false, got {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool):
            raise ConfigError(f"{name} must be an integer, got {value!r}")
        try:
            return int(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{name} must be an integer, got {value!r}") from None
    if hint is float:
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{name} must be a number, got {value!r}") from None
    if hint is str:
        if isinstance(value, (dict, list)):
            raise ConfigError(f"{name} must be a string")
        return str(value)
    return value


def to_toml(config, table: str | None = None) -> str:
    """The settings as TOML that ``load`` (with the same ``table``) reads
    back to an equal object."""
    lines: list[str] = [f"[{table}]"] if table else []
    _write_table(config, f"{table}." if table else "", lines)
    return "\n".join(lines).lstrip("\n") + "\n"


def _write_table(config, path: str, lines: list[str]) -> None:
    tables, arrays = [], []
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if dataclasses.is_dataclass(value):
            tables.append((f.name, value))
        elif isinstance(value, tuple) and value and dataclasses.is_dataclass(value[0]):
            arrays.append((f.name, value))
        elif value is not None:
            lines.append(f"{f.name} = {_toml_value(value)}")
    for name, table in tables:
        lines.append(f"\n[{path}{name}]")
        _write_table(table, f"{path}{name}.", lines)
    for name, items in arrays:
        for item in items:
            lines.append(f"\n[[{path}{name}]]")
            _write_table(item, f"{path}{name}.", lines)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'
