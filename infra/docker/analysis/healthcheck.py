#!/usr/bin/env python3
"""The analysis image's health check: Airflow's API server answers its
health endpoint on this host (host networking: every component's container
asks the API server). Over HTTPS when the API server serves it
(AIRFLOW__API__SSL_CERT), trusting the authority Airflow's own processes
trust (AIRFLOW__API__SSL_CA_FILE); the certificate names the instance's
address, not 127.0.0.1, so the name is not checked here, the chain is.
SAMSA_HEALTH_PORT and SAMSA_HEALTH_PATH ask another server (the scheduler's
own health server, plain HTTP). Exit 0: healthy."""
import os
import ssl
import sys
import urllib.request


def main() -> int:
    env = os.environ.get
    port = env("SAMSA_HEALTH_PORT") or env("AIRFLOW__API__PORT") or "8080"
    path = env("SAMSA_HEALTH_PATH", "api/v2/monitor/health")
    context = None
    scheme = "http"
    if env("AIRFLOW__API__SSL_CERT") and not env("SAMSA_HEALTH_PORT"):
        scheme = "https"
        context = ssl.create_default_context(cafile=env("AIRFLOW__API__SSL_CA_FILE") or None)
        context.check_hostname = False
    try:
        urllib.request.urlopen(f"{scheme}://127.0.0.1:{port}/{path}", timeout=2,
                               context=context).close()
    except OSError as exc:
        print(f"unhealthy: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
