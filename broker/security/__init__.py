"""Security of the pipeline (issue 30, docs/security.md), pure parts first:
no sockets and no ZooKeeper in them, so the server, the clients and the
tools share one meaning of each control; store.py alone talks to ZooKeeper.

* acl.py: access control entries (principal, operation, resource pattern,
  allow or deny) and the Authorizer's decision, deny winning;
* tls.py: TLS settings, the server's and client's contexts (strict
  defaults), reloaded when their files change, and the principal a client
  certificate names;
* ca.py: a certificate authority of one's own (the lab, the demo, tests):
  a CA and certificates it issues per host;
* password_file.py: a password read from a file named in the settings;
* credentials.py: what a service authenticates with (its [credentials]):
  a SCRAM user, TLS to the brokers, its ZooKeeper identity and TLS;
* store.py: the users' SCRAM credentials and the ACLs in ZooKeeper
  (/security/...): reading and writing them (the ``users`` and ``acls``
  tools), and SecurityCache, a broker's copy of them kept current by
  ZooKeeper's watches.

(SCRAM-SHA-512's exchange is a part of the wire protocol: broker/protocol/scram.py.)
"""
