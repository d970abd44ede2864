#!/bin/sh
# First start: initdb into /data (UTF-8: with the minimal image's default SQL_ASCII,
# psycopg hands text back as bytes), create the user and database; then run postgres
# in the foreground, listening on PG_LISTEN (127.0.0.1: host networking; "*" on a bridge
# network) and PGPORT.
set -eu
bin=$(ls -d /usr/lib/postgresql/*/bin | tail -1)
if [ ! -s /data/PG_VERSION ]; then
  # with a password, connections over TCP must give it; the local socket
  # (this script, pg_isready in the container) stays trusted
  auth="-A trust"
  [ -z "${POSTGRES_PASSWORD}" ] || auth="--auth-local=trust --auth-host=scram-sha-256"
  # shellcheck disable=SC2086
  "$bin/initdb" -D /data $auth -U postgres -E UTF8 --locale=C.UTF-8 >/dev/null
  "$bin/pg_ctl" -D /data -o "-c listen_addresses='' -c unix_socket_directories=/tmp -p ${PGPORT}" -w start >/dev/null
  psql -h /tmp -p "${PGPORT}" -U postgres -v ON_ERROR_STOP=1 -q <<SQL
CREATE ROLE "${POSTGRES_USER}" LOGIN $( [ -n "${POSTGRES_PASSWORD}" ] && echo "PASSWORD '${POSTGRES_PASSWORD}'" );
CREATE DATABASE "${POSTGRES_DB}" OWNER "${POSTGRES_USER}";
SQL
  "$bin/pg_ctl" -D /data -m fast -w stop >/dev/null
fi
tls=""
if [ -n "${PG_TLS_CERT_FILE}" ]; then
  # TLS alone over TCP (as RDS with rds.force_ssl): the certificate and key
  # copied where PostgreSQL accepts a key (its own, 0600), every TCP line of
  # pg_hba.conf hostssl
  install -m 0600 "${PG_TLS_CERT_FILE}" /data/server.crt
  install -m 0600 "${PG_TLS_KEY_FILE}" /data/server.key
  sed -i 's/^host /hostssl /' /data/pg_hba.conf
  tls="-c ssl=on -c ssl_cert_file=/data/server.crt -c ssl_key_file=/data/server.key"
fi
# shellcheck disable=SC2086
exec "$bin/postgres" -D /data -c listen_addresses="${PG_LISTEN}" -c port="${PGPORT}" -c jit=off \
  -c unix_socket_directories=/tmp $tls
