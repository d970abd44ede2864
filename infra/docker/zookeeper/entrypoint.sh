#!/bin/sh
# Write zoo.cfg from the environment, then run ZooKeeper in the foreground.
# ZOO_ADDRESS: the address its client port binds (empty: every address); the
# quorum ports bind the member's own address in ZOO_SERVERS.
set -eu
cfg=/conf/zoo.cfg
{
  echo "tickTime=2000"
  echo "initLimit=10"
  echo "syncLimit=5"
  echo "dataDir=/data"
  if [ -n "${ZOO_TLS_KEY_STORE}" ]; then
    # TLS alone on the client port (Netty's factory serves it): the key store
    # is the server's key and certificate in one PEM file, the trust store
    # the authorities of clients' certificates (PEM)
    echo "secureClientPort=${ZOO_PORT}"
    echo "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory"
    echo "ssl.keyStore.location=${ZOO_TLS_KEY_STORE}"
    echo "ssl.keyStore.type=PEM"
    echo "ssl.trustStore.location=${ZOO_TLS_TRUST_STORE}"
    echo "ssl.trustStore.type=PEM"
    echo "ssl.clientAuth=${ZOO_TLS_CLIENT_AUTH}"
    [ -z "${ZOO_ADDRESS}" ] || echo "secureClientPortAddress=${ZOO_ADDRESS}"
  else
    echo "clientPort=${ZOO_PORT}"
    [ -z "${ZOO_ADDRESS}" ] || echo "clientPortAddress=${ZOO_ADDRESS}"
  fi
  echo "admin.enableServer=false"
  echo "4lw.commands.whitelist=${ZOO_4LW_COMMANDS}"
  echo "autopurge.purgeInterval=${ZOO_AUTOPURGE_HOURS}"
  echo "autopurge.snapRetainCount=${ZOO_SNAP_RETAIN_COUNT}"
  if [ -n "${ZOO_SERVERS}" ]; then
    echo "${ZOO_SERVERS}" | tr ',' '\n' | sed 's/^\([0-9]*\)=/server.\1=/'
    if [ "${ZOO_TLS_QUORUM}" = "true" ]; then
      # TLS between the members too (quorum and election ports), with the
      # same key store; each member proves itself with its certificate and
      # checks the other's address (or the name it resolves back to) in it
      [ -n "${ZOO_TLS_KEY_STORE}" ] || { echo "ZOO_TLS_QUORUM=true needs ZOO_TLS_KEY_STORE" >&2; exit 2; }
      echo "sslQuorum=true"
      echo "ssl.quorum.keyStore.location=${ZOO_TLS_KEY_STORE}"
      echo "ssl.quorum.keyStore.type=PEM"
      echo "ssl.quorum.trustStore.location=${ZOO_TLS_TRUST_STORE}"
      echo "ssl.quorum.trustStore.type=PEM"
    fi
  fi
} > "$cfg"
[ -z "${ZOO_SERVERS}" ] || echo "${ZOO_MY_ID}" > /data/myid
main=org.apache.zookeeper.server.quorum.QuorumPeerMain
# zookeeper.jar's manifest names its dependencies; of SLF4J's backends only
# slf4j-simple (to stderr, so `docker logs`): with all of /usr/share/java on the
# classpath SLF4J found six, chose its no-op one, and ZooKeeper logged nothing;
# and netty-codec, which the TLS port's Netty factory needs and the manifest leaves out
exec java "-Xmx${ZOO_HEAP}" -Dorg.slf4j.simpleLogger.showDateTime=true \
  "-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd'T'HH:mm:ss.SSSZ" \
  -cp /usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar:/usr/share/java/netty-codec.jar \
  "$main" "$cfg"
