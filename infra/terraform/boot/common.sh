# The boot scripts' common steps (included in each module's user_data by
# templatefile; docs: infra/terraform/README.md, "Boot"). Every service runs
# the project's container image, the one `make test` runs, with host
# networking, under systemd (restarted on failure). A script may run again
# (by hand, after a change): each step does what is missing and the unit is
# restarted with what it now says.

# apt_get ARGS...: apt-get, without questions, waiting up to 10 minutes for
# the package database when another apt or dpkg holds it (a fresh instance's
# unattended-upgrades may be installing at first boot: plain dpkg would fail
# at once).
apt_get() {
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 -q "$@"
}

# install_engine: Debian's docker.io and Amazon's ECR credential helper,
# through which the engine pulls with the instance's role, and
# amazon-ec2-utils, whose udev rules name an EBS volume on an NVMe instance
# (every Nitro type) by its attachment, /dev/xvdb, as the modules attach it
# (each installed unless there).
install_engine() {
  local missing=()
  command -v docker >/dev/null || missing+=(docker.io)
  command -v docker-credential-ecr-login >/dev/null || missing+=(amazon-ecr-credential-helper)
  [ -e /lib/udev/rules.d/70-ec2-nvme-devices.rules ] || missing+=(amazon-ec2-utils)
  if [ ${#missing[@]} -gt 0 ]; then
    apt_get update
    apt_get install -y --no-install-recommends "${missing[@]}"
  fi
  mkdir -p /root/.docker
  [ -e /root/.docker/config.json ] || echo '{"credsStore": "ecr-login"}' > /root/.docker/config.json
  systemctl enable --now docker
}

# install_ssm_agent BASE: Amazon's SSM agent (Session Manager: a shell on
# the instance through its role, with no SSH), which Debian does not
# package: BASE/debian_<arch>/amazon-ssm-agent.deb (the modules pass the
# region's bucket of Amazon, reached through the S3 gateway endpoint), unless
# it is installed already (by apt_get: it waits for the package database);
# then enabled and started. A failed install does
# not stop the boot, because the service matters more than this way in: the
# script says so and the next boot tries again. BASE empty: nothing is
# installed, and the script says that too.
install_ssm_agent() {
  if [ -z "$1" ]; then
    echo "SSM agent: none asked (no package location given)"
    return 0
  fi
  if ! dpkg-query -W -f '${Status}' amazon-ssm-agent 2>/dev/null | grep -q "ok installed"; then
    local deb url
    url="$1/debian_$(dpkg --print-architecture)/amazon-ssm-agent.deb"
    deb=$(mktemp --suffix=.deb)
    if ! curl -sf --connect-timeout 5 --max-time 300 --retry 3 -o "$deb" "$url" \
        || ! apt_get install -y --no-install-recommends "$deb" >/dev/null; then
      rm -f "$deb"
      echo "warning: the SSM agent was not installed from $url; no Session Manager on" \
           "this instance until a boot installs it" >&2
      return 0
    fi
    rm -f "$deb"
  fi
  systemctl enable --now amazon-ssm-agent \
    || echo "warning: the SSM agent did not start (systemctl status amazon-ssm-agent)" >&2
}

# wan_buffers: across the WAN, TCP may grow a connection's buffers to the
# bandwidth-delay product (docs/mirror.md, "Across a WAN"); 64 MiB covers
# ~150 MB/s at 400 ms. Kept in /etc/sysctl.d for every boot, applied now and
# read back: a kernel that refused (sysctl may still exit 0) is warned of,
# and the boot goes on.
wan_buffers() {
  local conf=/etc/sysctl.d/60-samsa-wan.conf key want have
  cat > "$conf" <<'SYSCTL'
net.ipv4.tcp_rmem = 4096 131072 67108864
net.ipv4.tcp_wmem = 4096 16384 67108864
SYSCTL
  sysctl -q -p "$conf" >/dev/null 2>&1 || true
  for key in net.ipv4.tcp_rmem net.ipv4.tcp_wmem; do
    want=$(sed -n "s/^$key = //p" "$conf")
    have=$(sysctl -n "$key" 2>/dev/null | tr -s '\t ' ' ')
    if [ "$have" != "$want" ]; then
      echo "warning: the WAN buffer sizes are not in effect ($key is '$have', not '$want')" >&2
      return 0
    fi
  done
}

# fetch_image IMAGE: pull IMAGE unless the engine has it (an instance
# rebooted, or a test's engine that has it built). A tag is pulled once: give
# every build a tag of its own (image_version).
fetch_image() {
  docker image inspect "$1" >/dev/null 2>&1 || docker pull -q "$1"
}

# metadata PATH: the instance's metadata at PATH (IMDSv2: a session token
# first) from $METADATA_URL, the instance metadata service unless the
# script set it; fails, saying so, when it has none or an empty one.
metadata() {
  local url=${METADATA_URL:-http://169.254.169.254} token value
  local curl=(curl -sf --connect-timeout 2 --retry 5 --retry-connrefused)
  token=$("${curl[@]}" -X PUT "$url/latest/api/token" \
    -H "X-aws-ec2-metadata-token-ttl-seconds: 60") \
    || { echo "no instance metadata service at $url" >&2; return 1; }
  value=$("${curl[@]}" -H "X-aws-ec2-metadata-token: $token" "$url/latest/meta-data/$1") \
    && [ -n "$value" ] || { echo "no instance metadata $1 at $url" >&2; return 1; }
  echo "$value"
}

# own_dir IMAGE USER DIR: DIR made and owned by USER as IMAGE knows it (a
# service that does not run as root writes there).
own_dir() {
  mkdir -p "$3"
  docker run --rm --user root --network none -v "$3:/owned" --entrypoint chown "$1" "$2" /owned
}

# image_user IMAGE USER: USER's uid:gid as IMAGE knows it (fails when IMAGE
# has no such user).
image_user() {
  docker run --rm --network none --entrypoint sh "$1" \
    -ec 'u=$(id -u "$1"); g=$(id -g "$1"); echo "$u:$g"' image_user "$2"
}

# fetch_secrets IMAGE USER SERVICE NAME DIR OUTPUTS...: the host's secrets,
# read from the environment's secret store (the secrets named
# $SAMSA_SECRETS/..., module secrets' name; in the instance's region) by
# python -m infra.host_secrets fetch in IMAGE (samsa/samsa), run as USER
# (uid:gid, the service's) into DIR (made USER's alone, mounted at the same
# path); the host's certificate NAME for its private address and the private
# DNS name that address resolves back to; OUTPUTS the fetch's --*-out
# options (files in DIR). The AWS endpoints are the instance's (its role's
# credentials from the metadata service), or $SECRETS_ENDPOINT when set. A
# fetch that fails (the authority not put yet: an environment's first apply)
# is tried again every 20 s, $FETCH_ATTEMPTS times (90: 30 minutes).
fetch_secrets() {
  local image=$1 user=$2 service=$3 name=$4 dir=$5 region address hostname attempt
  shift 5
  region=$(metadata placement/region)
  address=$(metadata local-ipv4)
  hostname=$(metadata local-hostname)
  secrets_dir "$user" "$dir"
  for attempt in $(seq "${FETCH_ATTEMPTS:-90}"); do
    if host_secrets "$image" "$user" "$dir" fetch --service "$service" \
        --environment "$SAMSA_SECRETS" --region "$region" --name "$name" \
        --host "$address" --host "$hostname" --out "$dir" "$@"; then
      return 0
    fi
    echo "fetch_secrets: attempt $attempt failed (above); again in 20 s" >&2
    [ "$attempt" = "${FETCH_ATTEMPTS:-90}" ] || sleep 20
  done
  echo "fetch_secrets: $service's secrets not had after ${FETCH_ATTEMPTS:-90} attempts" >&2
  return 1
}

# secrets_dir USER DIR: DIR made, USER's (uid:gid) alone.
secrets_dir() {
  mkdir -p "$2"
  chown "$1" "$2"
  chmod 700 "$2"
}

# aws_endpoints: the docker run options that give a container the AWS
# endpoints of the instance: its metadata service (its role's credentials),
# and $SECRETS_ENDPOINT for Secrets Manager when set.
aws_endpoints() {
  echo "-e AWS_EC2_METADATA_SERVICE_ENDPOINT=${METADATA_URL:-http://169.254.169.254}"
  [ -z "${SECRETS_ENDPOINT:-}" ] || echo "-e AWS_ENDPOINT_URL_SECRETS_MANAGER=$SECRETS_ENDPOINT"
}

# host_secrets IMAGE USER DIR ARGS...: python -m infra.host_secrets ARGS, run
# once in IMAGE as USER with DIR mounted at the same path and the instance's
# AWS endpoints.
host_secrets() {
  local image=$1 user=$2 dir=$3
  shift 3
  # shellcheck disable=SC2046
  docker run --rm --network host --user "$user" -v "$dir:$dir" $(aws_endpoints) \
    --entrypoint python3 "$image" -m infra.host_secrets "$@"
}

# every_boot: this script run again at every boot of the instance, from
# cloud-init's per-boot scripts (it runs user data once per instance): the
# secrets read anew (a rotated password taken, the host's certificate issued
# anew), the units restarted with what they now say. Nothing when the script
# is not a file cloud-init ran (run by hand from stdin, or a test).
every_boot() {
  local dir=/var/lib/cloud/scripts/per-boot self
  self=$(readlink -f "$0" 2>/dev/null) || return 0
  if [ -d /var/lib/cloud ] && [ -f "$self" ] && [ "$(dirname "$self")" != "$dir" ]; then
    mkdir -p "$dir"
    install -m 0700 "$self" "$dir/samsa-boot.sh"
  fi
}

# state_dir DEVICE DIR: DIR on the data volume DEVICE (made a file system
# the first time only; mounted at every boot through fstab, by its UUID), or a
# plain directory when DEVICE is "" (no data volume). The units started after
# it need DIR mounted (RequiresMountsFor).
state_dir() {
  local device=$1 dir=$2 uuid
  mkdir -p "$dir"
  SAMSA_STATE_DIR=$dir
  if [ -n "$device" ]; then
    # an NVMe volume attached before amazon-ec2-utils was installed: its
    # rules applied now (they make /dev/xvdb a link to /dev/nvmeXn1)
    [ -e "$device" ] || { udevadm trigger --subsystem-match=block --action=add && udevadm settle; } || true
    for _ in $(seq 600); do [ -e "$device" ] && break; sleep 1; done
    [ -e "$device" ] || { echo "no data volume at $device after 600 s" >&2; return 1; }
    blkid "$device" >/dev/null || mkfs.ext4 -q -L samsa-data "$device"
    uuid=$(blkid -s UUID -o value "$device")
    grep -q "^UUID=$uuid " /etc/fstab || echo "UUID=$uuid $dir ext4 defaults,nofail 0 2" >> /etc/fstab
    mountpoint -q "$dir" || mount "$dir"
  fi
}

# service_unit NAME DESCRIPTION [--options FILE] DOCKER_RUN_ARGS...: the unit
# samsa-NAME that runs the container NAME (docker run --rm --network host
# ARGS; its log rotated), removes a leftover one first, gives it 60 s to
# stop, restarts on failure, and needs the state directory mounted;
# (re)started with what it says now. With --options, the words of
# SAMSA_SECURED_OPTIONS in FILE (host_secrets fetch --options-out) follow the
# arguments. No argument may hold a space, '%' or '$' (systemd's own syntax).
service_unit() {
  local name=$1 description=$2 arg options_file="" options=""
  shift 2
  if [ "${1:-}" = "--options" ]; then
    options_file=$2
    options=' $SAMSA_SECURED_OPTIONS'
    shift 2
  fi
  for arg in "$@"; do
    case "$arg" in *[[:space:]%\$]*) echo "service_unit $name: argument '$arg' holds a space, % or \$" >&2; return 1 ;; esac
  done
  cat > "/etc/systemd/system/samsa-$name.service" <<UNIT
[Unit]
Description=$description
Requires=docker.service
Wants=network-online.target
After=docker.service network-online.target
${SAMSA_STATE_DIR:+RequiresMountsFor=$SAMSA_STATE_DIR}
[Service]
${options_file:+EnvironmentFile=$options_file}
ExecStartPre=-/usr/bin/docker rm -f $name
ExecStart=/usr/bin/docker run --rm --name $name --network host --log-opt max-size=100m --log-opt max-file=5 $*$options
ExecStop=/usr/bin/docker stop -t 60 $name
TimeoutStopSec=90
Restart=always
RestartSec=3
[Install]
WantedBy=multi-user.target
UNIT
  systemctl daemon-reload
  systemctl enable "samsa-$name"
  systemctl restart "samsa-$name"
}
