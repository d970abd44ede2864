"""broker/service_kit/ports.py: the one port allocator of the harnesses, the
lab and the Terraform tests. Every port it hands out is distinct, outside the
kernel's ephemeral range (where outgoing connections take their source
ports) and bindable."""
from __future__ import annotations

import socket

from broker.service_kit import ports


def outside_ephemeral(port: int) -> bool:
    low, high = ports.ephemeral_port_range()
    return not low <= port <= high


def bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def test_free_ports_are_distinct_outside_the_ephemeral_range_and_bindable():
    found = ports.free_ports(40)
    assert len(set(found)) == 40
    assert all(outside_ephemeral(p) and p >= ports.FIRST_PORT for p in found), found
    assert all(bindable(p) for p in found)


def test_base_ports_keep_the_whole_span_outside_the_ephemeral_range():
    for span in (1, 100, 700):
        bases = ports.base_ports(span)
        assert len(bases) >= 1
        for base in (bases[0], bases[-1]):
            assert outside_ephemeral(base) and outside_ephemeral(base + span - 1), (span, base)
            assert base + span - 1 <= 65_535


def test_a_free_base_port_frees_every_port_of_the_layout():
    def layout(base: int) -> list[tuple[int, str]]:
        return [(base, "first"), (base + 7, "eighth"), (base + 350, "last")]

    for _ in range(10):
        base = ports.free_base_port(layout)
        assert all(outside_ephemeral(p) and bindable(p) for p, _ in layout(base))


def test_a_listening_port_is_busy_and_a_free_one_is_not():
    free, other = ports.free_ports(2)
    with socket.socket() as held:
        held.bind(("127.0.0.1", free))
        held.listen()
        assert ports.busy_among([(free, "held"), (other, "free")]) == [(free, "held")]


def test_a_host_whose_ephemeral_range_leaves_no_room_still_gets_ports(monkeypatch):
    """ip_local_port_range = 1024 65535 (containers, tuned hosts): neither side
    has room, so the ports come from the whole range rather than from nothing."""
    monkeypatch.setattr(ports, "ephemeral_port_range", lambda: (1024, 65_535))
    assert ports.base_ports(700)[0] == ports.FIRST_PORT
    found = ports.free_ports(5)
    assert len(set(found)) == 5 and all(bindable(p) for p in found)
    assert ports.free_base_port(lambda base: [(base, "first"), (base + 300, "last")]) >= \
        ports.FIRST_PORT
