#!/usr/bin/env bash
# The peer brokers of `make bench-peers` (bench/peers.py): RabbitMQ and
# ActiveMQ from Debian's packages. Installs them with apt when running as
# root, else says exactly what to install. Their services are not started by
# the install (a temporary policy-rc.d says no): the benchmark starts its own
# processes on free loopback ports and stops them.
set -euo pipefail

# file-to-check : Debian package
needed=(
  "/usr/lib/rabbitmq/bin/rabbitmq-server:rabbitmq-server"
  "/usr/share/activemq/bin/activemq.jar:activemq"
)
missing=()
for pair in "${needed[@]}"; do
  path=${pair%%:*}; pkg=${pair##*:}
  [ -e "$path" ] || missing+=("$pkg")
done
command -v java >/dev/null 2>&1 || missing+=("default-jre-headless")

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing system packages for bench-peers: ${missing[*]}"
  policy=/usr/sbin/policy-rc.d
  if [ ! -e "$policy" ]; then
    # keep the packages' init scripts from starting system-wide brokers
    printf '#!/bin/sh\nexit 101\n' > "$policy"
    chmod +x "$policy"
    trap 'rm -f "$policy"' EXIT
  fi
  # wait for another apt/dpkg (another setup running at the same time) rather than fail
  apt-get -o DPkg::Lock::Timeout=300 update -qq
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq "${missing[@]}"
else
  echo "make bench-peers needs these system packages: ${missing[*]}" >&2
  echo "install them with: sudo apt-get install ${missing[*]}" >&2
  exit 1
fi
