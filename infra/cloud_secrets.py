"""The certificate authority of a cloud environment, kept in its secret store
(docs/security.md, "In the cloud"; module ``secrets`` of infra/terraform).

Terraform makes the environment's secrets and writes every password itself
(generated, write-only: never in its state), but not the authority: the
operator makes it once, here, and puts it in the two secrets the module made
for it; the hosts that serve TLS read it at boot and issue their own
certificate with it.

    python -m infra.cloud_secrets authority --environment samsa-prod \
            --region us-east-2 --out DIR
        a new authority in DIR (made 0700, or an existing one only its owner
        may use): ca.json (the certificate and key, 0600: what secret
        <environment>/ca holds) and ca.crt (what <environment>/ca-certificate
        holds); prints the two ``aws secretsmanager put-secret-value``
        commands that put them in the secrets' primary region. It refuses a
        DIR that holds one already; it does not look in the secret store
        (putting replaces what is there)

    python -m infra.cloud_secrets issue --authority ca.json --name broker-0 \\
            --host 10.10.1.17 [--host broker-0.internal ...] --out /etc/samsa/tls
        a certificate for a host, signed by the authority in ``ca.json`` (as
        the secret holds it), valid for each --host (addresses and names):
        DIR/<name>.crt, DIR/<name>.key (0600), DIR/ca.crt

Errors (an unreadable or malformed authority, a directory that already holds
one or that others may read, a bad name or host, a file that cannot be
written) exit 2 with one line saying what is wrong.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import sys
import tempfile

from broker.security.ca import CertificateAuthority
from broker.service_kit import cli

#: a DNS name or an address (IPv4 or IPv6) a certificate may be valid for
HOST = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                  r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*|[0-9A-Fa-f:.]+)$")
#: a certificate's name (its files' too): no path in it
NAME = re.compile(r"^(?!\.)[A-Za-z0-9._-]{1,64}$")
#: what the authority's secret holds: one JSON object of these PEM texts
AUTHORITY_FIELDS = ("certificate", "key")


class AuthorityError(ValueError):
    """An authority that cannot be made or read."""


def _write(path: str, text: str, private: bool) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600 if private else 0o644)
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(text)


def _private_directory(directory: str) -> None:
    """``directory`` made the owner's alone (0700), or refused if it exists
    and others may read it (the authority's key goes in it)."""
    try:
        os.makedirs(directory, mode=0o700)
    except FileExistsError:
        if not os.path.isdir(directory):
            raise AuthorityError(f"{directory} is not a directory") from None
        if os.stat(directory).st_mode & 0o077:
            raise AuthorityError(f"{directory} may be read by others: give a new directory, "
                                 f"or one only its owner may use (chmod 700)") from None


def make_authority(environment: str, directory: str) -> tuple[str, str]:
    """A new authority named after ``environment`` in ``directory`` (made,
    0700; refused if it holds one already): (ca.json, ca.crt)."""
    json_path, cert_path = (os.path.join(directory, "ca.json"),
                            os.path.join(directory, "ca.crt"))
    if any(os.path.exists(p) for p in (json_path, cert_path)):
        raise AuthorityError(f"{directory} already holds an authority: not made again "
                             f"(a new one is a new trust for every client)")
    _private_directory(directory)
    with tempfile.TemporaryDirectory(dir=directory) as scratch:
        ca = CertificateAuthority.create(scratch, name=f"{environment} CA")
        with open(ca.cert_path) as c, open(ca.key_path) as k:
            certificate, key = c.read(), k.read()
    _write(json_path, json.dumps({"certificate": certificate, "key": key}) + "\n", True)
    _write(cert_path, certificate, False)
    return json_path, cert_path


def read_authority(path: str) -> dict[str, str]:
    """The authority's JSON as the secret holds it; AuthorityError saying
    what is wrong with it."""
    try:
        with open(path, encoding="ascii") as f:
            held = json.load(f)
    except OSError as exc:
        raise AuthorityError(f"cannot read the authority {path}: {exc.strerror}") from None
    except (ValueError, UnicodeDecodeError):
        raise AuthorityError(f"{path} is not the authority's JSON "
                             f"({{\"certificate\": PEM, \"key\": PEM}})") from None
    if not isinstance(held, dict) or any(
            not isinstance(held.get(field), str) or "-----BEGIN" not in held[field]
            for field in AUTHORITY_FIELDS):
        raise AuthorityError(f"{path} is not the authority's JSON: it needs "
                             f"{' and '.join(AUTHORITY_FIELDS)}, each a PEM text")
    return held


def issue(authority_json: str, name: str, hosts: list[str], directory: str,
          days: int = 365) -> tuple[str, str, str]:
    """A certificate for ``name`` valid for ``hosts``, signed by the
    authority in ``authority_json``, written in ``directory`` (made, 0700)
    with the authority's certificate: (certificate, key, ca.crt)."""
    if not NAME.match(name):
        raise AuthorityError(f"bad name {name!r}: letters, digits, '.', '_' and '-' "
                             f"(it names the files)")
    if not hosts:
        raise AuthorityError("a certificate needs at least one --host")
    for host in hosts:
        if not HOST.match(host):
            raise AuthorityError(f"bad host {host!r}: an IP address or a DNS name "
                                 f"(no wildcard)")
    if days < 1:
        raise AuthorityError(f"--days is 1 or more, not {days}")
    held = read_authority(authority_json)
    _private_directory(directory)
    # the authority's key, for the moment of signing, in the private directory
    # (not the machine's shared temporary one)
    with tempfile.TemporaryDirectory(dir=directory) as scratch:
        ca = CertificateAuthority(os.path.join(scratch, "ca.crt"),
                                  os.path.join(scratch, "ca.key"))
        _write(ca.cert_path, held["certificate"], False)
        _write(ca.key_path, held["key"], True)
        try:
            cert, key = ca.issue(name, hosts, directory, days=days)
        except (ValueError, TypeError) as exc:   # a key or certificate that will not load
            raise AuthorityError(f"cannot issue with {authority_json}: {exc}") from None
        ca_copy = os.path.join(directory, "ca.crt")
        shutil.copyfile(ca.cert_path, ca_copy + ".partial")
        os.replace(ca_copy + ".partial", ca_copy)
    return cert, key, ca_copy


def put_commands(environment: str, region: str, json_path: str, cert_path: str) -> list[str]:
    """The commands that put a made authority in the environment's secrets,
    in their primary region (a replica cannot be written)."""
    return [f"aws secretsmanager put-secret-value --region {shlex.quote(region)} "
            f"--secret-id {shlex.quote(f'{environment}/{secret}')} "
            f"--secret-string {shlex.quote('file://' + os.path.abspath(path))}"
            for secret, path in (("ca", json_path), ("ca-certificate", cert_path))]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m infra.cloud_secrets",
                                description="The certificate authority of a cloud environment "
                                            "(docs/security.md, \"In the cloud\").")
    sub = p.add_subparsers(dest="command", required=True)
    a = sub.add_parser("authority", help="make the environment's authority, once")
    a.add_argument("--environment", required=True, metavar="NAME",
                   help="the secrets' prefix, module secrets' name (e.g. samsa-prod)")
    a.add_argument("--region", required=True,
                   help="the secrets' primary region (the analysis region; replicas "
                        "cannot be written)")
    a.add_argument("--out", required=True, metavar="DIR",
                   help="where to write ca.json and ca.crt (made, 0700; or an empty "
                        "directory only its owner may use)")
    i = sub.add_parser("issue", help="a host's certificate, signed by the authority")
    i.add_argument("--authority", required=True, metavar="FILE",
                   help="the authority's JSON, as secret <environment>/ca holds it")
    i.add_argument("--name", required=True, help="the certificate's common name (its files' "
                                                 "name)")
    i.add_argument("--host", action="append", default=[], metavar="ADDRESS",
                   help="an address or DNS name the certificate is valid for (repeat)")
    i.add_argument("--out", required=True, metavar="DIR", help="where to write the files")
    i.add_argument("--days", type=int, default=365, help="validity (default 365)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.command == "authority":
            json_path, cert_path = make_authority(args.environment, args.out)
            print(f"the authority of {args.environment}: {json_path} (certificate and key: "
                  f"keep it nowhere else once put) and {cert_path}")
            print("put them in the environment's secrets (module secrets made them):")
            for command in put_commands(args.environment, args.region, json_path, cert_path):
                print(f"  {command}")
        else:
            cert, key, ca = issue(args.authority, args.name, args.host, args.out, args.days)
            print(f"{cert} and {key}, valid for {', '.join(args.host)}; the authority: {ca}")
    except AuthorityError as exc:
        return cli.fail(str(exc))
    except OSError as exc:
        return cli.fail(f"{exc.filename or 'a file'}: {exc.strerror}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
