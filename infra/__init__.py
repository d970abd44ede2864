"""Where Samsa runs: the multi-datacenter topology (topology.py) and the
programs that bring it up.

* ``infra.topology``: the model (ZooKeeper, the datacenter clusters behind
  their load balancers, the analysis cluster, the mirrors) and its TOML file;
  no processes, no sockets.
* ``infra.local``: the lab that runs a topology on one machine
  (``python -m infra.local up|status|down``), with HAProxy as the load balancer.

Nothing in broker/ or mirror/ imports this package.
"""
