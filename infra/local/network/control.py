"""Talking to a running network lab's keeper (keeper.py): its control
socket and its hosts file, both under ``<state dir>/network/``."""
from __future__ import annotations

import json
import os
import socket


class NetworkLabError(RuntimeError):
    pass


def network_dir(state_dir: str) -> str:
    return os.path.join(os.path.abspath(state_dir), "network")


def hosts(state_dir: str) -> dict:
    """The keeper's hosts document (keeper.hosts_document); NetworkLabError
    when no network lab is built there."""
    path = os.path.join(network_dir(state_dir), "hosts.json")
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        raise NetworkLabError(f"no network lab runs in {os.path.abspath(state_dir)} "
                              f"(no {path})") from None


def request(state_dir: str, op: str, timeout: float = 10.0, **fields) -> dict:
    """Send one control request; its answer. NetworkLabError when the keeper
    cannot be reached or refuses the request (its reason)."""
    path = os.path.join(network_dir(state_dir), "control.sock")
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(path)
            sock.sendall(json.dumps({"op": op, **fields}).encode() + b"\n")
            data = b""
            while not data.endswith(b"\n"):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
    except OSError as exc:
        raise NetworkLabError(f"the network lab's keeper does not answer at {path}: "
                              f"{exc}") from None
    try:
        answer = json.loads(data)
    except ValueError:
        raise NetworkLabError(f"the keeper answered {data[:200]!r}") from None
    if not answer.get("ok"):
        raise NetworkLabError(answer.get("error", "refused"))
    return answer


def host_pid(state_dir: str, host: str) -> int:
    """The pid whose network namespace is ``host``'s (for nsenter)."""
    document = hosts(state_dir)
    try:
        return document["hosts"][host]["pid"]
    except KeyError:
        raise NetworkLabError(f"no host {host!r} in the network lab (hosts: "
                              f"{', '.join(document['hosts'])})") from None


def enter_command(state_dir: str, host: str, command: list[str]) -> list[str]:
    """``command`` run in ``host``'s network namespace."""
    return ["nsenter", "--target", str(host_pid(state_dir, host)), "--net", "--", *command]
