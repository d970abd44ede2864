"""``python -m schemas``: register, list, show and check schemas.

    python -m schemas [--registry URL] register SUBJECT FILE.avsc|SHIPPED-NAME
    python -m schemas [--registry URL] check SUBJECT FILE.avsc|SHIPPED-NAME [--level L]
    python -m schemas [--registry URL] list [SUBJECT]
    python -m schemas [--registry URL] show SUBJECT [--version N|latest] | show --id ID
    python -m schemas [--registry URL] config SUBJECT [LEVEL]
    python -m schemas [--registry URL] bootstrap          # the shipped schemas, default topics
    python -m schemas [--registry URL] sync --to URL      # copy subjects to another registry
    python -m schemas shipped                              # the schemas that ship with Samsa
    python -m schemas [--registry URL] serve [--port 8081]  # Confluent's REST API over it

The registry is ``--registry``, else ``$SAMSA_SCHEMA_REGISTRY``, else
``zookeeper://127.0.0.1:2181`` (a local ZooKeeper's root):

    zookeeper://HOST:PORT[,HOST:PORT...][/CHROOT]   the cluster's ZooKeeper (the default kind)
    file:PATH (or a bare PATH)                       one JSON file, for local use
    http(s)://[USER@]HOST:PORT                       a registry served over Confluent's API

Credentials come from files named in the environment: a secured ZooKeeper
registry is written with the identity in ``$SAMSA_SCHEMA_REGISTRY_ZOOKEEPER_AUTH_FILE``
(user:password) and reached over TLS with ``$SAMSA_ZOOKEEPER_TLS_CA_FILE`` (and
``$SAMSA_ZOOKEEPER_TLS_CERT_FILE``, ``..._KEY_FILE``); a secured REST registry takes USER's password from
``$SAMSA_SCHEMA_REGISTRY_PASSWORD_FILE`` and its authority from
``$SAMSA_SCHEMA_REGISTRY_CA_FILE`` (docs/security.md).

Exit status: 0 done; 1 refused (an incompatible schema, or check found problems);
2 bad usage, a bad schema, an unknown subject, version or id; 3 the store is
unreachable or unreadable (or a registry file is not there for a command that
only reads); (serve) 4 its port is taken.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import tomllib
from importlib import metadata

from schemas import catalog, compatibility
from schemas.registry import (
    IncompatibleSchemaError,
    RegistryError,
    SchemaRegistry,
)
from schemas.stores import FileStore, StoreError

#: what each exit status means (the module's docstring says it too), in every --help
EXIT_STATUS = ("Exit status: 0 done; 1 refused (an incompatible schema, or check found "
               "problems); 2 bad usage, a bad schema, an unknown subject, version or id; 3 "
               "the store is unreachable or unreadable, or a registry file is not there for "
               "a command that only reads.")
DEFAULT_REGISTRY = "zookeeper://127.0.0.1:2181"
ENV = "SAMSA_SCHEMA_REGISTRY"


def samsa_version() -> str:
    """Samsa's version: the installed package's, else the checkout's
    pyproject.toml. schemas/ imports nothing of the project, so this is the
    one twin of broker/service_kit/version.py (tests/test_commands.py checks
    that they agree)."""
    try:
        return metadata.version("samsa")
    except metadata.PackageNotFoundError:
        pass
    try:
        with open(pathlib.Path(__file__).resolve().parents[1] / "pyproject.toml", "rb") as f:
            return str(tomllib.load(f)["project"]["version"])
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return "unknown"


def _schema_arg(text: str):
    """A file path, or the name of a shipped schema."""
    if os.path.exists(text) or text.endswith(".avsc") or os.sep in text:
        return catalog.load_file(text)
    return catalog.load(text)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m schemas", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"samsa {samsa_version()}",
                   help="print Samsa's version and exit")
    p.add_argument("--registry", default=None,
                   help=f"registry URL (default: ${ENV}, else {DEFAULT_REGISTRY})")
    p.add_argument("--timeout", type=float, default=10.0,
                   help="seconds to wait for ZooKeeper (default 10)")
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("register", help="register a schema under a subject")
    r.add_argument("subject")
    r.add_argument("schema", help="an .avsc file, or a shipped schema's name")

    c = sub.add_parser("check", help="would this schema be accepted? (nothing is written)")
    c.add_argument("subject")
    c.add_argument("schema", help="an .avsc file, or a shipped schema's name")
    c.add_argument("--level", choices=compatibility.LEVELS,
                   help="check against this level instead of the subject's")

    ls = sub.add_parser("list", help="subjects, or one subject's versions")
    ls.add_argument("subject", nargs="?")
    ls.add_argument("--json", action="store_true")

    s = sub.add_parser("show", help="a subject's version (default: latest), or a schema by "
                                    "id: the schema alone on stdout (its subject, version and "
                                    "id on stderr)")
    s.add_argument("subject", nargs="?")
    s.add_argument("--version", default="latest")
    s.add_argument("--id", type=int, dest="schema_id")

    cf = sub.add_parser("config", help="show or set a subject's compatibility level")
    cf.add_argument("subject")
    cf.add_argument("level", nargs="?", choices=compatibility.LEVELS)

    sub.add_parser("bootstrap", help="register the shipped schemas under their default "
                                     "topics: " + ", ".join(catalog.TOPIC_SCHEMAS))

    sy = sub.add_parser("sync", help="copy every subject, in version order, to another registry")
    sy.add_argument("--to", required=True, metavar="URL")

    sub.add_parser("shipped", help="list the schemas that ship with Samsa")

    # the one sub-command that is a service (schemas/service.py uses the service kit)
    from schemas.service import add_serve_parser
    add_serve_parser(sub)
    for command in sub.choices.values():
        if command.prog.split()[-1] != "serve":      # serve says its own exit statuses
            command.epilog = EXIT_STATUS
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "shipped":
        for name in catalog.names():
            topics = [t for t, n in catalog.TOPIC_SCHEMAS.items() if n == name]
            print(name + (f"   (topic {', '.join(topics)})" if topics else ""))
        return 0
    if args.command == "serve":
        from schemas.service import serve
        return serve(args, args.registry, ENV)
    url = args.registry or os.environ.get(ENV) or DEFAULT_REGISTRY
    try:
        registry = SchemaRegistry.open(url, args.timeout)
    except (StoreError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3 if isinstance(exc, StoreError) else 2
    try:
        if args.command == "check":
            _schema_arg(args.schema)        # a bad schema file is said first
        if _reads_only(args) and isinstance(registry.store, FileStore) \
                and not os.path.exists(registry.store.path):
            # a mistyped path would read as an empty registry
            raise StoreError(f"no registry file at {registry.store.path} (register a schema, "
                             f"or run bootstrap, to create one)")
        return _run(args, registry)
    except IncompatibleSchemaError as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return 1
    except RegistryError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except StoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    finally:
        registry.close()


def _reads_only(args) -> bool:
    """Does the command only read the registry (so that a missing file is a mistake)?"""
    return args.command in ("check", "list", "show", "sync") or \
        (args.command == "config" and not args.level)


def _run(args, registry: SchemaRegistry) -> int:
    if args.command == "register":
        done = registry.register(args.subject, _schema_arg(args.schema))
        print(f"{done.subject}: version {done.version}, id {done.id}")
        return 0
    if args.command == "check":
        level = args.level or registry.compatibility(args.subject)
        found = registry.check(args.subject, _schema_arg(args.schema), level)
        if found:
            print(f"incompatible ({level}):")
            for problem in found:
                print(f"  - {problem}")
            return 1
        print(f"compatible ({level})")
        return 0
    if args.command == "list":
        if args.subject:
            ids = registry.versions(args.subject)
            if not ids:
                raise RegistryError(f"no subject {args.subject!r}")
            rows = [{"version": n, "id": sid} for n, sid in enumerate(ids, start=1)]
            if args.json:
                print(json.dumps({"subject": args.subject,
                                  "compatibility": registry.compatibility(args.subject),
                                  "versions": rows}))
            else:
                print(f"{args.subject} ({registry.compatibility(args.subject)})")
                for row in rows:
                    print(f"  version {row['version']}: id {row['id']}")
            return 0
        subjects = registry.subjects()
        if args.json:
            print(json.dumps([{"subject": s, "versions": len(registry.versions(s)),
                               "compatibility": registry.compatibility(s)} for s in subjects]))
        else:
            for s in subjects:
                print(f"{s}\t{len(registry.versions(s))} version(s)\t{registry.compatibility(s)}")
        return 0
    if args.command == "show":
        if args.schema_id is not None:
            print(json.dumps(registry.by_id(args.schema_id), indent=2))
            return 0
        if not args.subject:
            raise RegistryError("show needs a SUBJECT or --id")
        found = registry.get(args.subject, args.version)
        # stdout is the schema alone (a valid .avsc); which one it is goes to stderr
        print(f"// {found.subject} version {found.version}, id {found.id}", file=sys.stderr)
        print(found.text())
        return 0
    if args.command == "config":
        if args.level:
            print(registry.set_compatibility(args.subject, args.level))
        else:
            print(registry.compatibility(args.subject))
        return 0
    if args.command == "bootstrap":
        for done in catalog.register_defaults(registry):
            print(f"{done.subject}: version {done.version}, id {done.id}")
        return 0
    if args.command == "sync":
        with SchemaRegistry.open(args.to, args.timeout) as other:
            done = registry.sync_to(other)
        for line in done:
            print(line)
        print(f"{len(done)} change(s)")
        return 0
    raise AssertionError(args.command)
