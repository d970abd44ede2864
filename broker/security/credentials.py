"""What a service (the mirror, the audit, the lag service, the loader)
authenticates with to the clusters it uses: its ``[credentials]`` settings.
Light to import (no client, no kazoo): the DAG files read the loader's
settings at parse time. docs/security.md."""
from __future__ import annotations

from dataclasses import dataclass

from broker.coordination.zk_tls import ZooKeeperTlsSettings
from broker.security.tls import TlsClientSettings, client_context_of


@dataclass(frozen=True)
class ServiceCredentials(ZooKeeperTlsSettings):
    """How a service (the mirror, the audit, the lag service) proves who it
    is to the clusters it uses: one user and one ZooKeeper identity in each
    (operators create the same user in every cluster the service reaches).
    A service's settings take them as a ``[credentials]`` table
    (``--set credentials.sasl_username=mirror``); docs/security.md."""
    sasl_username: str = ""
    """SCRAM-SHA-512 user for the brokers' listeners that ask for it."""
    sasl_password_file: str = ""
    """The file holding its password (first line)."""
    zookeeper_auth_file: str = ""
    """A ``user:password`` file: the service's ZooKeeper identity, that of
    its consumer groups (whose records only it may then change) and of what
    else it writes there (the mirror's marks of copied topics)."""
    tls: bool = False
    """Connect to the brokers' TLS listeners (found in ZooKeeper,
    /brokers/tls) rather than their plaintext ones."""
    tls_ca_file: str = ""
    """The authorities trusted for the brokers' certificates (empty: the system's)."""
    tls_cert_file: str = ""
    """The service's client certificate, for listeners that ask for one."""
    tls_key_file: str = ""
    tls_verify_hostname: bool = True

    def __post_init__(self) -> None:
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise ValueError("credentials: tls_cert_file and tls_key_file go together")
        self.zookeeper_tls_settings()          # validated

    def client_settings(self) -> dict:
        """The settings a ProducerConfig or ConsumerConfig takes."""
        return {"sasl_username": self.sasl_username,
                "sasl_password_file": self.sasl_password_file, "tls": self.tls,
                "tls_ca_file": self.tls_ca_file, "tls_cert_file": self.tls_cert_file,
                "tls_key_file": self.tls_key_file,
                "tls_verify_hostname": self.tls_verify_hostname}

    def tls_context(self):
        """The client context for a BrokerConnection or AdminClient (None: plaintext)."""
        return client_context_of(TlsClientSettings(
            self.tls, self.tls_ca_file, self.tls_cert_file, self.tls_key_file,
            self.tls_verify_hostname))

    def admin_options(self) -> dict:
        """Keyword arguments of an AdminClient or BrokerConnection: tls, sasl."""
        return {"tls": self.tls_context(), "sasl": self.login()}

    def group_settings(self) -> dict[str, str]:
        """The settings a GroupConsumerConfig takes."""
        return {**self.client_settings(), "zookeeper_auth_file": self.zookeeper_auth_file,
                **self.zookeeper_tls_fields()}

    def login(self):
        """The login for a BrokerConnection or AdminClient (a SaslLogin;
        None: none)."""
        from broker.client.authentication import SaslClientSettings, sasl_login_of
        return sasl_login_of(SaslClientSettings(self.sasl_username, self.sasl_password_file))
