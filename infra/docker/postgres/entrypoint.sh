#!/bin/sh
# First start: initdb into /data (UTF-8: with the minimal image's default SQL_ASCII,
# psycopg hands text back as bytes), create the user and database; then run postgres
# in the foreground, listening on 127.0.0.1 and PGPORT (host networking).
set -eu
bin=$(ls -d /usr/lib/postgresql/*/bin | tail -1)
if [ ! -s /data/PG_VERSION ]; then
  "$bin/initdb" -D /data -A trust -U postgres -E UTF8 --locale=C.UTF-8 >/dev/null
  "$bin/pg_ctl" -D /data -o "-c listen_addresses='' -c unix_socket_directories=/tmp -p ${PGPORT}" -w start >/dev/null
  psql -h /tmp -p "${PGPORT}" -U postgres -v ON_ERROR_STOP=1 -q <<SQL
CREATE ROLE "${POSTGRES_USER}" LOGIN $( [ -n "${POSTGRES_PASSWORD}" ] && echo "PASSWORD '${POSTGRES_PASSWORD}'" );
CREATE DATABASE "${POSTGRES_DB}" OWNER "${POSTGRES_USER}";
SQL
  "$bin/pg_ctl" -D /data -m fast -w stop >/dev/null
fi
exec "$bin/postgres" -D /data -c listen_addresses=127.0.0.1 -c port="${PGPORT}" -c jit=off \
  -c unix_socket_directories=/tmp
