"""TLS to ZooKeeper's secure client port: the settings, as one object and as
the ``zookeeper_tls*`` fields a component's settings carry. Light to import
(no kazoo): client settings that the DAG files read at parse time hold them.
docs/security.md, "ZooKeeper"."""
from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class ZooKeeperTls:
    """TLS to ZooKeeper's secure client port (its ``secureClientPort``, served
    beside or instead of the plaintext one; docs/security.md, "ZooKeeper").
    The connect string then names the secure ports. The files are read at
    every connection, so renewed ones serve the next reconnection."""
    enabled: bool = False
    ca_file: str = ""
    """The authorities of ZooKeeper's certificate (empty: the system's)."""
    cert_file: str = ""
    """A client certificate, for a server whose ssl.clientAuth asks for one."""
    key_file: str = ""
    verify_hostname: bool = True
    """The server's address must be on its certificate."""

    def __post_init__(self) -> None:
        if bool(self.cert_file) != bool(self.key_file):
            raise ValueError("the ZooKeeper TLS certificate and key files go together")

    def kazoo_options(self) -> dict:
        """KazooClient's keyword arguments (none without TLS), for one client:
        its handler (zk_tls_handler.TlsHandler) makes its TLS connections
        from one context; ValueError for a file that cannot be read
        (checked here, where a client is made, not where settings are read:
        the DAG files read the loader's)."""
        if not self.enabled:
            return {}
        for path in (self.ca_file, self.cert_file, self.key_file):
            if path and not os.access(path, os.R_OK):
                raise ValueError(f"ZooKeeper TLS: cannot read {path}")
        from .zk_tls_handler import TlsHandler     # kazoo's: imported where a client is made
        return {"use_ssl": True, "ca": self.ca_file or None,
                "certfile": self.cert_file or None, "keyfile": self.key_file or None,
                "verify_certs": True, "check_hostname": self.verify_hostname,
                "handler": TlsHandler(self)}


@dataclass(frozen=True, kw_only=True)
class ZooKeeperTlsSettings:
    """The ``zookeeper_tls*`` settings of a client's or a service's settings
    (a base class: ``GroupConsumerConfig``, ``ServiceCredentials``)."""
    zookeeper_tls: bool = False
    """Connect to ZooKeeper over TLS (its secureClientPort, which the
    ZooKeeper connect string then names)."""
    zookeeper_tls_ca_file: str = ""
    """The authorities of ZooKeeper's certificate (empty: the system's)."""
    zookeeper_tls_cert_file: str = ""
    """A client certificate, for a ZooKeeper that asks for one."""
    zookeeper_tls_key_file: str = ""
    zookeeper_tls_verify_hostname: bool = True

    def zookeeper_tls_settings(self) -> ZooKeeperTls:
        """These settings as one; ValueError for files that will not do."""
        return ZooKeeperTls(self.zookeeper_tls, self.zookeeper_tls_ca_file,
                            self.zookeeper_tls_cert_file, self.zookeeper_tls_key_file,
                            self.zookeeper_tls_verify_hostname)

    def zookeeper_tls_fields(self) -> dict:
        """The fields, for another settings object that takes them."""
        return {"zookeeper_tls": self.zookeeper_tls,
                "zookeeper_tls_ca_file": self.zookeeper_tls_ca_file,
                "zookeeper_tls_cert_file": self.zookeeper_tls_cert_file,
                "zookeeper_tls_key_file": self.zookeeper_tls_key_file,
                "zookeeper_tls_verify_hostname": self.zookeeper_tls_verify_hostname}
