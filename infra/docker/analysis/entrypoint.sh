#!/bin/sh
# analysis loader|submit|airflow|spark-submit|python [arguments of that program]
#   loader        python -m hadoop_loader --config $SAMSA_WAREHOUSE_CONFIG ...  (one load)
#   submit        the same load through spark-submit (python -m hadoop_loader.submit)
#   airflow       airflow ... (standalone, db migrate, scheduler, dag-processor, api-server, dags ...)
#   spark-submit  pyspark's spark-submit
#   python        the venv's python3
set -eu
what=${1:-}
[ $# -gt 0 ] && shift
# A uid with no name here (docker run --user "$(id -u)", to own files on a host
# directory): Spark's Hadoop login fails without a user name and Java's user.home
# is "?". nss_wrapper names it for this process tree; /etc/passwd stays read-only.
if ! id -un >/dev/null 2>&1; then
  [ "${HOME:-/}" != / ] || export HOME=/tmp
  NSS_WRAPPER_PASSWD=$(mktemp) NSS_WRAPPER_GROUP=$(mktemp)
  { cat /etc/passwd; echo "samsa-$(id -u):x:$(id -u):$(id -g):samsa:$HOME:/bin/sh"; } \
    > "$NSS_WRAPPER_PASSWD"
  { cat /etc/group; getent group "$(id -g)" >/dev/null || echo "samsa-$(id -g):x:$(id -g):"; } \
    > "$NSS_WRAPPER_GROUP"
  export LD_PRELOAD=libnss_wrapper.so NSS_WRAPPER_PASSWD NSS_WRAPPER_GROUP
fi
# SAMSA_DB_URL (postgresql+psycopg://HOST:PORT/DB?..., no user) and
# SAMSA_DB_CREDENTIALS_FILE (JSON username and password: the secret RDS keeps
# for the master user): Airflow's metadata database, its user and password put
# in at every start (a rotated password: restart the components)
if [ -n "${SAMSA_DB_CREDENTIALS_FILE:-}" ]; then
  AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=$(python3 -m infra.host_secrets database-url \
    --credentials "$SAMSA_DB_CREDENTIALS_FILE" --url "${SAMSA_DB_URL:?SAMSA_DB_URL is needed}")
  # Airflow 3's async engine too: psycopg 3 serves both (its own guess is asyncpg)
  AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC=$AIRFLOW__DATABASE__SQL_ALCHEMY_CONN
  export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC
fi
# the components reach the API server's execution API on the API server's port
: "${AIRFLOW__CORE__EXECUTION_API_SERVER_URL:=http://127.0.0.1:${AIRFLOW__API__PORT:-8080}/execution/}"
export AIRFLOW__CORE__EXECUTION_API_SERVER_URL
case "$what" in
  loader)       exec python3 -m hadoop_loader --config "$SAMSA_WAREHOUSE_CONFIG" "$@" ;;
  submit)       exec python3 -m hadoop_loader.submit --config "$SAMSA_WAREHOUSE_CONFIG" "$@" ;;
  airflow)      mkdir -p "$AIRFLOW_HOME"; exec airflow "$@" ;;
  spark-submit) exec spark-submit "$@" ;;
  python)       exec python3 "$@" ;;
  *) echo "usage: analysis loader|submit|airflow|spark-submit|python [arguments]" >&2; exit 2 ;;
esac
