"""The audit database's credentials file: a JSON object with "username" and
"password", as RDS keeps a database's master-user secret. It is written on
the host (``python -m infra.host_secrets database``) and rewritten when RDS
rotates the password. The audit reads it for each new connection; the
analysis image reads it at each start. Standard library only: the host tools
read it without the database's driver."""
from __future__ import annotations

import json


class CredentialsError(ValueError):
    """A database credentials file that cannot be read or is not one."""


def read_credentials(path: str) -> tuple[str, str]:
    """(username, password) of the credentials file ``path``: a JSON object
    with both, as RDS keeps a database's master user secret."""
    try:
        with open(path) as f:
            held = json.load(f)
    except OSError as exc:
        raise CredentialsError(f"cannot read the database credentials {path}: "
                               f"{exc.strerror}") from None
    except ValueError:
        raise CredentialsError(f"the database credentials {path} are not JSON") from None
    if not (isinstance(held, dict) and isinstance(held.get("username"), str)
            and isinstance(held.get("password"), str) and held["username"]):
        raise CredentialsError(f"the database credentials {path}: a JSON object with "
                               f"\"username\" and \"password\" is expected")
    return held["username"], held["password"]
