"""Push the images the cloud runs to a registry (``make push-images``).

    python -m infra.docker.push --registry 123456789012.dkr.ecr.us-east-2.amazonaws.com
    python -m infra.docker.push --registry R --tag 0.1.0-rc1 --only samsa
    python -m infra.docker.push --registry R --dry-run       # what would be pushed

The images are the ones ``make images`` built (``samsa/<name>:latest``, the
ones ``make test`` runs): CLOUD_IMAGES, the images the Terraform modules'
instances run. Each is tagged ``REGISTRY/samsa/<name>:TAG`` and pushed with
the project's engine; TAG is by default the project's version and the
image's own revision label (``0.1.0-3f2a9c1d0e4b``): every build of a commit
gets its own tag, so an instance that has pulled one tag never runs another
build under it (the environments' ``image_version`` is this TAG). A build of
a working tree with changes not committed carries the commit's revision too:
commit first.

The engine must be logged in to the registry: for ECR, ``aws ecr
get-login-password --region REGION | docker login --username AWS
--password-stdin REGISTRY`` (with the project's DOCKER_HOST), or Amazon's
credential helper. Each pushed image's digest is printed; exit 2 when an
image is not built or a push fails (the registry's own words).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys

from infra.docker import engine
from infra.docker.images import latest

#: the images the cloud instances run (infra/terraform/modules/*)
CLOUD_IMAGES = ("zookeeper", "samsa", "analysis")
REVISION_LABEL = "org.opencontainers.image.revision"
VERSION_LABEL = "org.opencontainers.image.version"
#: a registry host[:port][/path], as docker takes it (no scheme)
REGISTRY = re.compile(r"^[a-z0-9.-]+(:[0-9]+)?(/[a-z0-9._-]+)*$")
TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


class PushError(RuntimeError):
    """An image that could not be pushed: which and why, in one line."""


def default_tag(labels: dict[str, str]) -> str:
    """The tag of a built image: its version and the first 12 characters of
    its revision label."""
    version, revision = labels.get(VERSION_LABEL, ""), labels.get(REVISION_LABEL, "")
    if not version or not revision:
        raise PushError("the image has no version or revision label: build it with make images")
    return f"{version}-{revision[:12]}"


def labels_of(image: str, env: dict) -> dict[str, str]:
    done = subprocess.run(["docker", "image", "inspect", "--format",
                           "{{json .Config.Labels}}", image], env=env, capture_output=True,
                          text=True)
    if done.returncode != 0:
        raise PushError(f"{image} is not built here (make images)")
    return json.loads(done.stdout or "{}") or {}


def push(name: str, registry: str, tag: str | None, env: dict, dry_run: bool = False) -> str:
    """Tag ``samsa/<name>:latest`` as ``registry/samsa/<name>:tag`` and push
    it: the pushed reference and its digest (``REF@sha256:...``)."""
    source = latest(name)
    tag = tag or default_tag(labels_of(source, env))
    target = f"{registry}/samsa/{name}:{tag}"
    if dry_run:
        labels_of(source, env)              # said now if it is not built
        return target
    subprocess.run(["docker", "tag", source, target], env=env, check=True)
    done = subprocess.run(["docker", "push", "--quiet", target], env=env, capture_output=True,
                          text=True)
    if done.returncode != 0:
        words = (done.stderr or done.stdout).strip().splitlines()
        raise PushError(f"{target}: {words[-1] if words else 'docker push failed'}")
    digests = subprocess.run(["docker", "image", "inspect", "--format",
                              "{{range .RepoDigests}}{{println .}}{{end}}", target], env=env,
                             capture_output=True, text=True).stdout.split()
    pushed = [d for d in digests if d.startswith(f"{registry}/samsa/{name}@")]
    return f"{target} {pushed[0].split('@', 1)[1]}" if pushed else target


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m infra.docker.push", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--registry", required=True,
                   help="host[:port][/path] (an ECR registry: ACCOUNT.dkr.ecr.REGION.amazonaws.com)")
    p.add_argument("--tag", help="the tag (default: VERSION-REVISION of each image's labels)")
    p.add_argument("--only", help="comma-separated, of: " + ", ".join(CLOUD_IMAGES))
    p.add_argument("--dry-run", action="store_true", help="print what would be pushed")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    names = [n.strip() for n in args.only.split(",")] if args.only else list(CLOUD_IMAGES)
    problems = []
    if set(names) - set(CLOUD_IMAGES):
        problems.append(f"unknown images: {', '.join(sorted(set(names) - set(CLOUD_IMAGES)))}")
    if not REGISTRY.match(args.registry):
        problems.append(f"not a registry (host[:port][/path], no scheme): {args.registry!r}")
    if args.tag is not None and not TAG.match(args.tag):
        problems.append(f"not a tag: {args.tag!r}")
    if problems:
        print(f"python -m infra.docker.push: {'; '.join(problems)}", file=sys.stderr)
        return 2
    env = {**os.environ, "DOCKER_HOST": engine.up()}
    try:
        for name in names:
            print(push(name, args.registry, args.tag, env, args.dry_run), flush=True)
    except PushError as exc:
        print(f"python -m infra.docker.push: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
