"""Security of the pipeline (issue 30, docs/security.md), pure parts first:
no sockets and no ZooKeeper here, so the server, the clients and the tools
share one meaning of each control.

* acl.py: access control entries (principal, operation, resource pattern,
  allow or deny) and the Authorizer's decision, deny winning.

(SCRAM-SHA-512's exchange is a part of the wire protocol: broker/protocol/scram.py.)
"""
