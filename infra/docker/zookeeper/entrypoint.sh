#!/bin/sh
# Write zoo.cfg from the environment, then run ZooKeeper in the foreground.
set -eu
cfg=/conf/zoo.cfg
{
  echo "tickTime=2000"
  echo "initLimit=10"
  echo "syncLimit=5"
  echo "dataDir=/data"
  echo "clientPort=${ZOO_PORT}"
  echo "admin.enableServer=false"
  echo "4lw.commands.whitelist=${ZOO_4LW_COMMANDS}"
  echo "autopurge.purgeInterval=${ZOO_AUTOPURGE_HOURS}"
  echo "autopurge.snapRetainCount=${ZOO_SNAP_RETAIN_COUNT}"
  if [ -n "${ZOO_SERVERS}" ]; then
    echo "${ZOO_SERVERS}" | tr ',' '\n' | sed 's/^\([0-9]*\)=/server.\1=/'
  fi
} > "$cfg"
[ -z "${ZOO_SERVERS}" ] || echo "${ZOO_MY_ID}" > /data/myid
main=org.apache.zookeeper.server.quorum.QuorumPeerMain
exec java "-Xmx${ZOO_HEAP}" -cp "/usr/share/java/zookeeper.jar:/usr/share/java/*" "$main" "$cfg"
