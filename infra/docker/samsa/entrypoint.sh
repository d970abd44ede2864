#!/bin/sh
# samsa broker|mirror|audit|lag|tools [arguments of that program]
set -eu
what=${1:-}
[ $# -gt 0 ] && shift
case "$what" in
  broker) exec python3 -m broker "$@" ;;
  mirror) exec python3 -m mirror "$@" ;;
  audit)  exec python3 -m audit "$@" ;;
  lag)    exec python3 -m broker.lag "$@" ;;
  tools)  exec python3 -m broker.tools "$@" ;;
  *) echo "usage: samsa broker|mirror|audit|lag|tools [arguments]" >&2; exit 2 ;;
esac
