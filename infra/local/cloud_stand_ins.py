"""Stand-ins for the cloud services an instance asks at boot, for the tests
of the boot scripts (tests/containers/test_boot_scripts.py) and of what the
hosts read (infra/host_secrets.py; tests/infra/test_host_secrets.py).

``SecretStoreStandIn``: AWS Secrets Manager's ``GetSecretValue`` as its
clients speak it (HTTP POST, JSON 1.1, the target in ``X-Amz-Target``, every
request signed with Signature Version 4)::

    store = SecretStoreStandIn(region="us-east-2")
    store.put("samsa-prod/ca", authority_json)
    store.grant("AKIDBROKER", "secret-key", ["samsa-prod/ca", ...])   # a role
    with store.serving() as endpoint:                                 # http://127.0.0.1:PORT
        ...   # AWS_ENDPOINT_URL_SECRETS_MANAGER=endpoint, the key in AWS_ACCESS_KEY_ID/...

It checks what Secrets Manager checks that matters here: the signature (with
the key's secret, the region and the service in its scope), that the key may
read the secret (else ``AccessDeniedException``, as IAM answers a role
without the grant), that the secret exists and has a value (else
``ResourceNotFoundException``, as for ``ca`` before the operator puts it).

``InstanceMetadataStandIn``: the instance metadata service as IMDSv2 answers
(a session token from ``PUT /latest/api/token``, required by every
``GET /latest/meta-data/<path>``; 401 without it, 404 for a path it does
not hold)::

    metadata = InstanceMetadataStandIn({"local-ipv4": "10.10.1.17",
                                        "placement/availability-zone": "us-east-1a"})
    with metadata.serving() as url:       # the boot script's metadata_url
        ...

Neither is a server of record: no versions, rotation, replicas or KMS, no
clock skew checked; no metadata but what it is given, and tokens that never
expire.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import hmac
import json
import re
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator

_AUTHORIZATION = re.compile(r"AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/"
                            r"aws4_request, ?SignedHeaders=([^,]+), ?Signature=([0-9a-f]{64})$")


class SecretStoreStandIn:
    """Secrets by name, keys allowed to read some of them, and an HTTP
    server answering ``GetSecretValue`` (see the module)."""

    def __init__(self, region: str = "us-east-2") -> None:
        self.region = region
        self._secrets: dict[str, str | None] = {}
        self._keys: dict[str, tuple[str, frozenset[str]]] = {}
        self._lock = threading.Lock()
        self.requests: list[tuple[str, str, str]] = []   # (key id, secret, answer)

    def put(self, name: str, value: str | None) -> None:
        """The secret ``name`` with ``value`` (None: made, never given a value)."""
        with self._lock:
            self._secrets[name] = value

    def grant(self, key_id: str, secret_key: str, names) -> None:
        """Access key ``key_id`` (signing with ``secret_key``) may read ``names``."""
        with self._lock:
            self._keys[key_id] = (secret_key, frozenset(names))

    def serving(self, host: str = "127.0.0.1"):
        """Serve on a free port of ``host`` while in the block: its URL."""
        return _serving(self._handler(), host, "secret-store")

    # ------------------------------------------------------------ answering

    def answer(self, method: str, path: str, headers: dict[str, str], body: bytes
               ) -> tuple[int, dict]:
        """(HTTP status, JSON answer) of one request."""
        target = headers.get("x-amz-target", "")
        if method != "POST" or target != "secretsmanager.GetSecretValue":
            return 400, _error("UnknownOperationException", f"not served here: {target}")
        match = _AUTHORIZATION.match(headers.get("authorization", ""))
        if not match:
            return 400, _error("IncompleteSignatureException", "no Signature Version 4")
        key_id, date, region, service, signed, signature = match.groups()
        with self._lock:
            known = self._keys.get(key_id)
        if known is None:
            return 400, _error("UnrecognizedClientException", "the security token is invalid")
        secret_key, readable = known
        if region != self.region or service != "secretsmanager":
            return 400, _error("InvalidSignatureException",
                               f"credential scoped to {region}/{service}, not "
                               f"{self.region}/secretsmanager")
        names = signed.split(";")
        missing = [h for h in names if h not in headers]
        if missing or "host" not in names or "x-amz-date" not in names:
            return 400, _error("InvalidSignatureException",
                               f"signed headers missing or not signed: {missing or signed}")
        if not headers["x-amz-date"].startswith(date):
            return 400, _error("InvalidSignatureException",
                               "x-amz-date is not the credential scope's date")
        path, _, query = path.partition("?")
        if query:
            return 400, _error("InvalidRequestException", "GetSecretValue takes no query")
        expected = sigv4_signature(secret_key, date, region, service, method, path,
                              {h: headers[h] for h in names}, body)
        if not hmac.compare_digest(expected, signature):
            return 400, _error("InvalidSignatureException", "the signature does not match")
        try:
            name = json.loads(body)["SecretId"]
        except (ValueError, KeyError, TypeError):
            return 400, _error("InvalidRequestException", "SecretId is required")
        with self._lock:
            exists, value = name in self._secrets, self._secrets.get(name)
        if name not in readable:
            answer = 400, _error("AccessDeniedException",
                                 f"{key_id} is not authorized to perform "
                                 f"secretsmanager:GetSecretValue on {name}")
        elif not exists:
            answer = 400, _error("ResourceNotFoundException",
                                 "Secrets Manager can't find the specified secret.")
        elif value is None:
            answer = 400, _error("ResourceNotFoundException",
                                 "Secrets Manager can't find the specified secret value "
                                 "for staging label: AWSCURRENT")
        else:
            answer = 200, {"ARN": f"arn:aws:secretsmanager:{self.region}:000000000000:"
                                  f"secret:{name}-AbCdEf", "Name": name, "SecretString": value,
                           "VersionId": str(uuid.uuid4()), "VersionStages": ["AWSCURRENT"],
                           "CreatedDate": dt.datetime.now(dt.timezone.utc).timestamp()}
        with self._lock:
            self.requests.append((key_id, name, answer[1].get("__type", "ok")))
        return answer

    def _handler(self):
        store = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:          # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                status, answer = store.answer(
                    "POST", self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/x-amz-json-1.1")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:
                pass

        return Handler


@contextlib.contextmanager
def _serving(handler, host: str, name: str) -> Iterator[str]:
    """``handler`` served on a free port of ``host`` by a thread, while in the
    block: its URL."""
    server = ThreadingHTTPServer((host, 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name=name, daemon=True)
    thread.start()
    try:
        yield f"http://{host}:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


class InstanceMetadataStandIn:
    """An instance's metadata (paths under /latest/meta-data/), answered as
    IMDSv2 answers (see the module)."""

    def __init__(self, values: dict[str, str]) -> None:
        self.values = dict(values)
        self._tokens: set[str] = set()
        self._lock = threading.Lock()
        self.asked: list[str] = []

    def serving(self, host: str = "127.0.0.1"):
        """Serve on a free port of ``host`` while in the block: its URL."""
        return _serving(self._handler(), host, "instance-metadata")

    def answer(self, method: str, path: str, headers: dict[str, str]) -> tuple[int, str]:
        """(HTTP status, text) of one request."""
        if method == "PUT" and path == "/latest/api/token":
            ttl = headers.get("x-aws-ec2-metadata-token-ttl-seconds", "")
            if not ttl.isdigit() or not 1 <= int(ttl) <= 21600:
                return 400, "X-aws-ec2-metadata-token-ttl-seconds: 1 to 21600 is required"
            token = uuid.uuid4().hex
            with self._lock:
                self._tokens.add(token)
            return 200, token
        if method != "GET" or not path.startswith("/latest/meta-data/"):
            return 404, "not found"
        with self._lock:
            known = headers.get("x-aws-ec2-metadata-token") in self._tokens
        if not known:
            return 401, "unauthorized: IMDSv2 asks for a session token"
        key = path.removeprefix("/latest/meta-data/")
        with self._lock:
            self.asked.append(key)
        if key not in self.values:
            return 404, "not found"
        return 200, self.values[key]

    def _handler(self):
        metadata = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                status, text = metadata.answer(
                    self.command, self.path, {k.lower(): v for k, v in self.headers.items()})
                data = text.encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_PUT = _answer          # noqa: N815 (http.server's names)

            def log_message(self, *args) -> None:
                pass

        return Handler


def _error(kind: str, message: str) -> dict:
    return {"__type": kind, "message": message}


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def sigv4_signature(secret_key: str, date: str, region: str, service: str, method: str,
               path: str, headers: dict[str, str], body: bytes) -> str:
    """Signature Version 4 of a request with no query string."""
    canonical_headers = "".join(f"{name}:{' '.join(value.split())}\n"
                                for name, value in sorted(headers.items()))
    canonical = "\n".join([method, path or "/", "", canonical_headers,
                           ";".join(sorted(headers)), hashlib.sha256(body).hexdigest()])
    scope = f"{date}/{region}/{service}/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", headers.get("x-amz-date", ""), scope,
                         hashlib.sha256(canonical.encode()).hexdigest()])
    key = _hmac(f"AWS4{secret_key}".encode(), date)
    for part in (region, service, "aws4_request"):
        key = _hmac(key, part)
    return hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
