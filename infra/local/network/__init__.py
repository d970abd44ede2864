"""The network lab (issue 29): the lab's hosts in network namespaces of
their own, datacenters joined by a router whose WAN links have latency,
jitter, loss and bandwidth, and the faults of a real network (a link cut,
a datacenter isolated, a host cut off from its ZooKeeper).

    plan.py      who is where: hosts, addresses, links (from the topology)
    shaping.py   what a link does to a packet (sans-IO)
    delayer.py   the router's TUN loop that applies it
    fabric.py    namespaces, cables, bridges, routes, host filters (ip, iptables)
    keeper.py    the process that builds and keeps it all; its control socket
    control.py   talking to a running keeper
    runner.py    up and down of the keeper from the lab's state directory
    __main__.py  python -m infra.local.network

docs/network-lab.md explains it.
"""
