# The boot scripts' common steps (included in each module's user_data by
# templatefile; docs: infra/terraform/README.md, "Boot"). Every service runs
# the project's container image, the one `make test` runs, with host
# networking, under systemd (restarted on failure).

# install_engine: Debian's docker.io (once), and Amazon's ECR credential
# helper, through which the engine pulls with the instance's role.
install_engine() {
  if ! command -v docker >/dev/null; then
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      docker.io amazon-ecr-credential-helper
  fi
  mkdir -p /root/.docker
  [ -e /root/.docker/config.json ] || echo '{"credsStore": "ecr-login"}' > /root/.docker/config.json
  systemctl enable --now docker
}

# fetch_image IMAGE: pull IMAGE unless the engine has it (an instance
# rebooted, or a test's engine that has it built).
fetch_image() {
  docker image inspect "$1" >/dev/null 2>&1 || docker pull -q "$1"
}

# metadata PATH: the instance's metadata at PATH (IMDSv2: a session token
# first) from $METADATA_URL, the instance metadata service unless the
# script set it; fails when it has none.
metadata() {
  local url=${METADATA_URL:-http://169.254.169.254} token value
  token=$(curl -sf -X PUT "$url/latest/api/token" -H "X-aws-ec2-metadata-token-ttl-seconds: 60")
  value=$(curl -sf -H "X-aws-ec2-metadata-token: $token" "$url/latest/meta-data/$1") \
    || { echo "no instance metadata $1 at $url" >&2; return 1; }
  echo "$value"
}

# own_dir IMAGE USER DIR: DIR made and owned by USER as IMAGE knows it (a
# service that does not run as root writes there).
own_dir() {
  mkdir -p "$3"
  docker run --rm --user root --network none -v "$3:/owned" --entrypoint chown "$1" "$2" /owned
}

# state_dir DEVICE DIR: DIR on the data volume DEVICE (made a file system,
# labelled samsa-data, the first time only; mounted at every boot through
# fstab), or a plain directory when DEVICE is "" (no data volume).
state_dir() {
  local device=$1 dir=$2
  mkdir -p "$dir"
  if [ -n "$device" ]; then
    for _ in $(seq 120); do [ -e "$device" ] && break; sleep 1; done
    [ -e "$device" ] || { echo "no data volume at $device" >&2; return 1; }
    blkid "$device" >/dev/null || mkfs.ext4 -q -L samsa-data "$device"
    grep -q "LABEL=samsa-data" /etc/fstab \
      || echo "LABEL=samsa-data $dir ext4 defaults,nofail 0 2" >> /etc/fstab
    mountpoint -q "$dir" || mount "$dir"
  fi
}

# service_unit NAME DESCRIPTION DOCKER_RUN_ARGS...: the unit samsa-NAME that
# runs the container NAME (docker run --rm --network host ARGS), removes a
# leftover one first, stops it with docker stop, and restarts on failure.
service_unit() {
  local name=$1 description=$2
  shift 2
  cat > "/etc/systemd/system/samsa-$name.service" <<UNIT
[Unit]
Description=$description
Requires=docker.service
After=docker.service network-online.target
[Service]
ExecStartPre=-/usr/bin/docker rm -f $name
ExecStart=/usr/bin/docker run --rm --name $name --network host $*
ExecStop=/usr/bin/docker stop $name
Restart=always
RestartSec=3
[Install]
WantedBy=multi-user.target
UNIT
  systemctl daemon-reload
  systemctl enable --now "samsa-$name"
}
