#!/usr/bin/env bash
# Make sure the system tools Samsa needs are present: install them with apt
# when running as root, else say exactly what to install. Later parts of the
# project add to the list (Java, ZooKeeper, HAProxy).
set -euo pipefail

# command-to-check : Debian package
needed=(
  "gcc:gcc"
  "python3-config:python3-dev"
  "java:openjdk-17-jre-headless"
)
missing=()
for pair in "${needed[@]}"; do
  cmd=${pair%%:*}; pkg=${pair##*:}
  command -v "$cmd" >/dev/null 2>&1 || missing+=("$pkg")
done
[ -f /usr/include/zlib.h ] || missing+=("zlib1g-dev")
# ZooKeeper for coordination and its tests (broker/harness/zookeeper.py runs
# the jar with java directly; the jar comes with Debian's zookeeper package)
[ -f /usr/share/java/zookeeper.jar ] || missing+=("zookeeper")
# HAProxy: the per-datacenter load balancer of the multi-DC lab (infra/local)
command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || missing+=("haproxy")
# PostgreSQL: the audit service's production database (its tests start a real
# server as the postgres user, broker/harness/postgres.py)
compgen -G "/usr/lib/postgresql/*/bin/postgres" >/dev/null || missing+=("postgresql")
# Headless Chromium and its driver: the audit's HTML report is tested in a
# real browser (selenium drives Debian's chromium; nothing downloads a browser)
[ -x /usr/bin/chromium ] || missing+=("chromium")
[ -x /usr/bin/chromedriver ] || missing+=("chromium-driver")
# Prometheus and promtool: the lab's and the demo's monitoring (infra/local/prometheus.py);
# the tests check the alert rules with promtool and fire one in a real Prometheus.
# (Debian's package also installs a systemd unit on port 9090: nothing here uses it.)
[ -x /usr/bin/prometheus ] || missing+=("prometheus")
# iptables: the network lab's router cuts and drops packets with it (root;
# infra/local/network/runner.py names what else it needs)
command -v iptables-restore >/dev/null 2>&1 || [ -x /usr/sbin/iptables-restore ] || missing+=("iptables")
# Docker's registry (distribution): python -m infra.docker.push is tested
# pushing to a real registry (tests/containers/test_push.py); the package's
# own systemd service is not used
[ -x /usr/bin/docker-registry ] || missing+=("docker-registry")
# fincore: the drop-behind test asks the kernel which pages of a file are cached
command -v fincore >/dev/null 2>&1 || missing+=("util-linux-extra")
# Ceph's RADOS gateway on a one-node Ceph: a real S3 server for the loader's
# S3 output (infra/local/ceph_s3.py). Without recommends: ceph-mgr and its
# Python web stack are not needed (about 60 MB to download, not 150)
bare=()
for cmd in ceph-mon ceph-osd radosgw radosgw-admin; do
  command -v "$cmd" >/dev/null 2>&1 || { bare=(ceph-mon ceph-osd radosgw ceph-common); break; }
done

if [ ${#missing[@]} -eq 0 ] && [ ${#bare[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing system packages: ${missing[*]} ${bare[*]}"
  # wait for another apt/dpkg (another setup running at the same time) rather than fail
  apt-get -o DPkg::Lock::Timeout=300 update -qq
  if [ ${#missing[@]} -gt 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq \
      "${missing[@]}"
  fi
  if [ ${#bare[@]} -gt 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq \
      --no-install-recommends "${bare[@]}"
  fi
else
  echo "Samsa needs these system packages: ${missing[*]} ${bare[*]}" >&2
  echo "install them with: sudo apt-get install ${missing[*]}" \
       "${bare[*]:+&& sudo apt-get install --no-install-recommends ${bare[*]}}" >&2
  exit 1
fi
