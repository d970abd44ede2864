"""The loader's settings (TOML ``[loader]`` table, then options, then ``--set``)
and the warehouse DAGs' (``[warehouse]``); every setting and its default:
config/loader.toml. Light to import: the DAG files read it at parse time."""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from broker.security.credentials import ServiceCredentials


@dataclass(frozen=True)
class LoaderConfig:
    zookeeper: str
    """The analysis cluster's ZooKeeper connect string with its chroot."""
    output: str = "warehouse"
    """Where the Parquet goes: a local path or file:// URI (the embedded
    default), hdfs://namenode:port/path or s3a://bucket/path (outputfs.py)."""
    registry: str = ""
    """Schema registry URL (default: zookeeper://<zookeeper>)."""
    whitelist: str = ".*"
    blacklist: str = ""
    master: str = "local[*]"
    """Spark master: local[*] by default, any master by configuration."""
    max_unit_bytes: int = 64 << 20
    """A partition range longer than this is split at segment starts into several tasks."""
    fetch_bytes: int = 1 << 20
    on_retention_gap: str = "fail"
    """Committed offsets older than the brokers' retention: "fail", or "skip"
    to the earliest and report the bytes lost (the audit shows them as loss)."""
    audit: bool = True
    """After each publish, send the hadoop tier's monitoring events (counted
    from what was written) to the cluster's audit topic."""
    cluster_name: str = "analysis"
    """The cluster loaded, as the audit names it."""
    datacenter: str = ""
    """Where the loader runs (default: the cluster's name)."""
    audit_window_ms: int = 600_000
    staging_codec: str = "null"
    """The staged Avro container files' codec: "null" (the fastest: the files
    live for one run) or "deflate" (less disk, CPU to compress and inflate)."""
    one_file_per_hour: bool = False
    """False: no shuffle; a run writes at most ceil(staged Avro bytes of the
    topic / target_file_bytes) files per hour. True: exactly one file per
    topic and hour per run (Spark shuffles the rows by hour: slower)."""
    target_file_bytes: int = 128 << 20
    """Staged Avro per Spark write partition when one_file_per_hour is false."""
    progress_interval_s: float = 10.0
    """A progress line this often while the tasks pull (work units done, MB, MB/s)."""
    lock_timeout_s: float = 600.0
    """How long a load waits for another load of the same output to finish
    (one load at a time per output: ``_samsa/lock``) before it gives up."""
    staging_dir: str = ""
    """Where a run stages its files when the output is on S3: Spark's tasks
    write the Avro and the Parquet there, and the publish uploads them (so no
    Hadoop S3 connector is needed). It must be a local directory that the
    driver and every executor reach (one machine: Spark's local mode). Keep
    it on a disk that outlives the process, so that a publish that was
    killed can be finished. "" means ``<temp dir>/samsa-loader-staging``.
    A local or HDFS output stages under its own ``_samsa/staging/``."""
    keep_replaced_s: float = 3600.0
    """A reloaded hour's old files stay under ``_samsa/replaced/`` this long
    (for readers still reading them); a load after that deletes them."""
    app_name: str = "samsa-hadoop-loader"
    log_level: str = "INFO"
    log_format: str = "text"
    credentials: ServiceCredentials = field(default_factory=ServiceCredentials)
    """What the loader authenticates with to the analysis cluster's brokers
    ([loader.credentials] sasl_username, sasl_password_file, tls,
    tls_ca_file, tls_cert_file, tls_key_file, tls_verify_hostname): its
    planning, its Spark tasks' reads (the files must be readable where the
    executors run) and its audit counts; zookeeper_auth_file: its ZooKeeper
    identity (it only reads there). docs/security.md."""

    def __post_init__(self) -> None:
        if self.staging_codec not in ("null", "deflate"):
            raise ValueError("staging_codec is 'null' or 'deflate'")
        if self.on_retention_gap not in ("fail", "skip"):
            raise ValueError("on_retention_gap is 'fail' or 'skip'")
        if self.max_unit_bytes <= 0 or self.fetch_bytes <= 0 or self.target_file_bytes <= 0:
            raise ValueError("max_unit_bytes, fetch_bytes and target_file_bytes must be "
                             "positive")

    @property
    def output_dir(self) -> str:
        """The directory of a local output (for tools and tests)."""
        path = self.output[len("file://"):] if self.output.startswith("file://") else self.output
        if "://" in path:
            raise ValueError(f"output {self.output} is not a local path")
        return os.path.abspath(path)

    @property
    def effective_registry(self) -> str:
        return self.registry or f"zookeeper://{self.zookeeper}"


@dataclass(frozen=True)
class WarehouseConfig:
    """The warehouse_load and audit_report DAGs' settings (``[warehouse]``)."""
    audit_url: str = "http://127.0.0.1:8090"
    """The audit service (python -m audit serve) the DAGs ask."""
    audit_ca_file: str = ""
    """An https audit_url: the authority its certificate is checked against
    (default: the system's)."""
    audit_username: str = ""
    """A secured audit service: the user the DAGs ask as (its role read)..."""
    audit_password_file: str = ""
    """...and the file whose first line is its password (docs/security.md)."""
    audit_tier: str = "cluster"
    """The tier an hour must be complete at before it is loaded: the analysis
    cluster's own count (tier "cluster", cluster named by audit_cluster)."""
    audit_cluster: str = ""
    """Default: the loader's cluster_name."""
    start_date: str = "2026-11-01T00:00:00+00:00"
    catchup: bool = False
    """Run every hour since start_date (or use airflow backfill create)."""
    sensor_poke_s: float = 300.0
    """How often the sensor asks the audit (deferred to the triggerer: no
    worker slot is held between asks)."""
    sensor_timeout_s: float = 6 * 3600.0
    """The hour's DAG run fails when the audit has not said complete this
    long after the first ask; never before the audit's grace for the hour
    has passed (hadoop_loader/audit_wait.py)."""
    retries: int = 3
    retry_delay_s: float = 300.0
    """First retry delay of a failed task (every task of both DAGs but the
    sensor, which never retries); doubles each retry, up to max_retry_delay_s."""
    max_retry_delay_s: float = 3600.0
    load_timeout_s: float = 3 * 3600.0
    """The load task's execution_timeout: a hung spark-submit is killed and
    the task fails (then retries)."""
    step_timeout_s: float = 3600.0
    """Every other task's execution_timeout (validate, mark_success, the
    day's report; the sensor's asks in the worker; its wait in the
    triggerer is bounded by sensor_timeout_s): a hung step fails instead of
    holding its hour."""
    spark_submit: str = ""
    """The spark-submit to run; default: the one of the installed pyspark."""
    spark_args: str = ""
    """More spark-submit arguments (shell syntax), e.g. "--conf spark.executor.memory=4g"."""
    py_files: str = ""
    """A zip or wheel of the project for executors on other machines
    (--py-files); empty on one machine, where the installed package serves."""
    report_dir: str = ""
    """Where audit_report keeps the daily reports; default <output>/_audit/."""

    def __post_init__(self) -> None:
        if self.sensor_poke_s <= 0 or self.sensor_timeout_s <= 0:
            raise ValueError("sensor_poke_s and sensor_timeout_s must be positive")
        if self.retries < 0:
            raise ValueError("retries must be >= 0")
        if self.load_timeout_s <= 0 or self.step_timeout_s <= 0:
            raise ValueError("load_timeout_s and step_timeout_s must be positive")
        if bool(self.audit_username) != bool(self.audit_password_file):
            raise ValueError("audit_username and audit_password_file go together")

    @property
    def audit_credentials(self):
        """How the DAGs reach the audit service (audit.remote.HttpCredentials)."""
        from audit.remote import HttpCredentials
        return HttpCredentials(self.audit_ca_file, self.audit_username,
                               self.audit_password_file)


#: names the settings file of the DAGs and of spark-submit's job
CONFIG_ENV = "SAMSA_WAREHOUSE_CONFIG"


def config_path() -> str:
    """The settings file: $SAMSA_WAREHOUSE_CONFIG, else config/loader.toml."""
    path = os.environ.get(CONFIG_ENV)
    if path:
        return path
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return os.path.join(root, "config", "loader.toml")


def read_settings(path: str | None = None, overrides=()) -> tuple[LoaderConfig, WarehouseConfig]:
    """The ``[loader]`` and ``[warehouse]`` settings of the file (with
    ``--set``-style loader overrides)."""
    from broker.service_kit import settings
    path = path or config_path()
    loader = settings.load(LoaderConfig, path, settings.parse_overrides(list(overrides)),
                           table="loader")
    return loader, settings.load(WarehouseConfig, path, table="warehouse")
