"""The steps the warehouse DAGs run (dags/warehouse_load.py and
dags/audit_report.py hold only their wiring): ask the audit whether an hour
is complete, run the load with spark-submit, check the rows written against
what the producers delivered, mark the hour's partitions done, keep the
day's audit report.

Every step that is about an hour (ask_audit, audit_gate, validate,
mark_success, audit_report) takes the data interval Airflow gives the run,
never the clock: re-running an interval does the same thing (idempotent),
and catchup and backfill run old hours as they would have run then. ``load``
loads everything new since the offsets kept with the output (so a run for
any hour loads what has arrived); on any try but its first (a retry, a
cleared run) it then rebuilds the run's hour from the offsets recorded
for it, so a re-run leaves the hour with the same rows. Settings come from one
file (``[loader]`` and ``[warehouse]`` tables, config/loader.toml), named
by the environment variable SAMSA_WAREHOUSE_CONFIG.

Light to import (the DAG files import it while Airflow parses them): the
heavy modules (the client, Spark, pyarrow) are imported inside the steps.
"""
from __future__ import annotations

import datetime as dt
import logging
import sys

from hadoop_loader.config import LoaderConfig, WarehouseConfig, config_path, read_settings
from hadoop_loader.outputfs import OutputFS
from hadoop_loader.state import hour_partition

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
SUCCESS_MARKER = "_SUCCESS"

log = logging.getLogger("samsa.warehouse")


class StepFailed(RuntimeError):
    """A step found something wrong that a retry will not change (a
    shortfall, a loss): the DAG run fails at once, with the numbers."""


# ------------------------------------------------------------------ settings

def dag_settings() -> WarehouseConfig:
    """The ``[warehouse]`` settings, at DAG parse time (the schedule, the
    sensor's timing, retries)."""
    return read_settings()[1]


def start_date(warehouse: WarehouseConfig) -> dt.datetime:
    value = dt.datetime.fromisoformat(warehouse.start_date)
    return value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)


def default_args(warehouse: WarehouseConfig) -> dict:
    """Every task's retries (the delay doubles each time, up to the cap) and
    bounded run time (``step_timeout_s``; the load sets its own)."""
    return {"retries": warehouse.retries,
            "execution_timeout": dt.timedelta(seconds=warehouse.step_timeout_s),
            "retry_delay": dt.timedelta(seconds=warehouse.retry_delay_s),
            "retry_exponential_backoff": True,
            "max_retry_delay": dt.timedelta(seconds=warehouse.max_retry_delay_s)}


def _fail(message: str) -> Exception:
    """An exception that fails the task without retries: Airflow's, when
    the step runs inside Airflow (which has imported it; importing Airflow
    anywhere else would initialise it there), else StepFailed."""
    if "airflow.sdk" in sys.modules:
        from airflow.sdk.exceptions import AirflowFailException
        return AirflowFailException(message)
    return StepFailed(message)


def _ms(moment) -> int:
    return int(round(moment.timestamp() * 1000))


def interval_hour(interval_start, interval_end) -> int:
    """The hour (start, ms) of a one-hour data interval."""
    begin, end = _ms(interval_start), _ms(interval_end)
    if end - begin != HOUR_MS or begin % HOUR_MS:
        raise _fail(f"the data interval {interval_start} to {interval_end} is not one whole "
                    f"hour: warehouse_load's timetable must be hourly")
    return begin


# ------------------------------------------------------------------ warehouse_load

def _hour_check(loader: LoaderConfig, warehouse: WarehouseConfig, hour_ms: int):
    from audit.gate import check_hour
    from audit.remote import fetch_verdicts
    from hadoop_loader.plan import topic_filter
    answer = fetch_verdicts(warehouse.audit_url, hour_ms, hour_ms + HOUR_MS,
                            credentials=warehouse.audit_credentials)
    return check_hour(answer["verdicts"], hour_ms, answer["now_ms"], answer["grace_ms"],
                      tier=warehouse.audit_tier,
                      cluster=warehouse.audit_cluster or loader.cluster_name,
                      topics=topic_filter(loader.whitelist, loader.blacklist))


def ask_audit(interval_start, interval_end, path: str | None = None,
              say=None) -> tuple[str | None, int, list[str]]:
    """Ask the audit once about the run's hour: (the gate's state, or None
    when the audit service could not be asked; when the audit's grace ends
    for every window of the hour, epoch ms, 0 when it could not be asked: its
    end + the grace, later where producers reported late; the answer's
    lines). Each line goes to ``say(level, text)`` (default: this
    module's log; the sensor's trigger passes its own, whose lines are the
    task's log), a loss as an error."""
    from audit.gate import LOST
    from audit.remote import AuditUnavailable
    say = say or (lambda level, text: getattr(log, level)("%s", text))
    loader, warehouse = read_settings(path)
    hour = interval_hour(interval_start, interval_end)
    try:
        check = _hour_check(loader, warehouse, hour)
    except AuditUnavailable as exc:
        say("warning", f"{exc}; asking again at the next poke")
        return None, 0, []
    lines = check.lines()
    for line in lines:
        say("error" if check.state == LOST else "info", line)
    if check.state == LOST:
        say("error", f"the audit shows messages LOST before the {warehouse.audit_tier} tier in "
                     f"this hour: it is not loaded unless they arrive before the sensor times "
                     f"out")
    return check.state, check.grace_ends_ms, lines


def sensor_deadline_ms(first_ask_ms: int, timeout_s: float, grace_ends_ms: int,
                       poke_s: float) -> int:
    """When warehouse_load's wait for the audit gives up: ``timeout_s`` after
    its first ask, but never before the audit can have called every window
    of the hour lost (``grace_ends_ms``, from ask_audit: the hour's end + the
    audit's grace, later where producers reported late; + two asks): failing
    earlier would refuse an hour whose data may still be on its way."""
    return max(first_ask_ms + int(timeout_s * 1000), grace_ends_ms + int(2 * poke_s * 1000))


def run_outside_its_hour(logical_date, interval_start, interval_end) -> str | None:
    """Why a run must not load (its logical date lies outside the hour it
    would load: ``airflow dags trigger --logical-date`` infers the hour from
    the time of the call), or None."""
    if logical_date is None or interval_start <= logical_date < interval_end:
        return None
    return (f"this run's logical date {logical_date.isoformat()} is outside the hour it would "
            f"load ({interval_start.isoformat()} to {interval_end.isoformat()}): `airflow dags "
            f"trigger` infers the hour from the time of the call, not from --logical-date. "
            f"Load an hour by hand through the REST API or the UI (logical date: the start of "
            f"the hour), or with `airflow backfill create --from-date H --to-date H`; then "
            f"delete this run: it holds that logical date (docs/loader.md)")


def audit_gate(interval_start, interval_end, path: str | None = None) -> bool:
    """One ask (``ask_audit``, into the log): True once the audit says the
    hour is complete at the configured tier."""
    from audit.gate import READY
    return ask_audit(interval_start, interval_end, path)[0] == READY


RELOAD_REFUSED = 3          # the job's exit status when an hour cannot be reloaded


def load(path: str | None = None, interval_start=None, interval_end=None,
         try_number: int = 1) -> int:
    """Run the loader with spark-submit, its output in the task's log. The
    first try loads everything new (offsets kept with the output). Any
    later try (a retry, a cleared run; not ``airflow dags test``, which
    makes a new run) then also rebuilds the run's hour of every topic from
    the offsets recorded for it and swaps it in (hadoop_loader/job.py): a
    re-run gives the hour the same rows, whatever happened to its files. A failed or
    killed job commits nothing: the retry loads the same ranges (and
    finishes an interrupted publish first), so each message lands once. An
    hour that cannot be rebuilt (part of it has left the brokers'
    retention) fails the task without retries, its partitions untouched."""
    from hadoop_loader import submit
    loader, warehouse = read_settings(path)
    job_args = []
    if try_number > 1 and interval_start is not None:
        hour = dt.datetime.fromtimestamp(interval_hour(interval_start, interval_end) / 1000,
                                         dt.timezone.utc).strftime("%Y-%m-%dT%H")
        job_args = ["--reload-hour", hour]
        log.info("try %d of this run's load: hour %s is rebuilt after the load", try_number,
                 hour)
    argv = submit.command(path or config_path(), spark_submit=warehouse.spark_submit,
                          master=loader.master, py_files=warehouse.py_files,
                          spark_args=warehouse.spark_args, app_name=loader.app_name,
                          job_args=job_args)
    log.info("running %s", " ".join(argv))
    errors: list[str] = []

    def line(text: str) -> None:
        log.info("%s", text)
        if text.startswith("error: "):
            errors.append(text[len("error: "):])
    rc = submit.run(argv, line=line)
    if rc == RELOAD_REFUSED:
        raise _fail("; ".join(errors) or "the hour cannot be reloaded (exit status 3)")
    if rc != 0:
        raise RuntimeError(f"the load failed (spark-submit exit status {rc}); nothing of it "
                           f"was committed, the retry loads the same ranges")
    return rc


def rows_in_hour(out, topic: str, hour_ms: int) -> int:
    """Rows of a topic's hour partition, from the Parquet files' footers."""
    return sum(out.parquet_rows(path) for path, _size in out.files(hour_partition(topic, hour_ms))
               if path.endswith(".parquet"))


def ids_in_hour(out, topic: str, hour_ms: int,
                window_ms: int) -> dict[int, tuple[int, int, int]]:
    """The rows of a topic's hour partition per audit window (by their event
    time): ``{window: (rows, distinct event ids, checksum of the distinct
    ids)}``, the checksum as the audit makes it (audit/tally.py's id_hash)."""
    from audit.counting import id_hash
    seen: dict[int, set[bytes]] = {}
    rows: dict[int, int] = {}
    for path, _size in out.files(hour_partition(topic, hour_ms)):
        if not path.endswith(".parquet"):
            continue
        header = out.parquet_column(["header.time_ms", "header.event_id"], path).column(
            "header").combine_chunks()
        times = header.field("time_ms").to_pylist()
        for t, event_id in zip(times, header.field("event_id").to_pylist()):
            begin = t - t % window_ms
            rows[begin] = rows.get(begin, 0) + 1
            seen.setdefault(begin, set()).add(event_id)
    return {begin: (rows[begin], len(ids), sum(map(id_hash, ids)) % (1 << 64))
            for begin, ids in seen.items()}


def validate(interval_start, interval_end, path: str | None = None) -> dict[str, dict]:
    """The hour's rows against what the producers delivered, window by
    window and id by id (the audit's counts and id checksums): ``{topic:
    {"produced": n, "loaded": m, "duplicated": d}}``. Fails (no retry) when
    a message the producers delivered is not among the rows, also when
    copies make up the numbers (a loss hidden under duplicates); copies
    alone are at-least-once delivery: logged."""
    from audit.gate import producer_references, shortfalls
    from audit.remote import fetch_verdicts
    from hadoop_loader.plan import topic_filter
    loader, warehouse = read_settings(path)
    hour = interval_hour(interval_start, interval_end)
    answer = fetch_verdicts(warehouse.audit_url, hour, hour + HOUR_MS,
                            credentials=warehouse.audit_credentials)
    reference = producer_references(answer["verdicts"], hour,
                                    topic_filter(loader.whitelist, loader.blacklist))
    out = OutputFS(loader.output)
    loaded = {topic: ids_in_hour(out, topic, hour, loader.audit_window_ms)
              for topic in reference}
    result = {}
    for topic, windows in sorted(reference.items()):
        rows = sum(n for n, _, _ in loaded[topic].values())
        copies = sum(n - distinct for n, distinct, _ in loaded[topic].values())
        produced = sum(n for n, _ in windows.values())
        result[topic] = {"produced": produced, "loaded": rows, "duplicated": copies}
        log.info("%s: %d rows loaded, %d produced%s", topic, rows, produced,
                 f" ({copies} copies: at-least-once delivery)" if copies else "")
    short = shortfalls(reference, loaded)
    if short:
        raise _fail("messages missing in the warehouse for this hour: "
                    + "; ".join(s.line() for s in short))
    return result


def mark_success(interval_start, interval_end, validated: dict[str, dict],
                 path: str | None = None) -> list[str]:
    """A ``_SUCCESS`` marker in each validated topic's hour partition (with
    the counts, as JSON), written last: readers wait for it."""
    loader, _ = read_settings(path)
    hour = interval_hour(interval_start, interval_end)
    out = OutputFS(loader.output)
    written = []
    for topic, counts in sorted(validated.items()):
        marker = (hour_partition(topic, hour), SUCCESS_MARKER)
        out.write_json(marker, {"topic": topic, "hour_ms": hour, **counts})
        written.append(out.path(*marker))
        log.info("marked %s", out.path(*marker))
    return written


# ------------------------------------------------------------------ audit_report

def report_location(loader: LoaderConfig, warehouse: WarehouseConfig, day_ms: int):
    """(file system, the day's directory in it) of the audit report."""
    t = dt.datetime.fromtimestamp(day_ms / 1000, dt.timezone.utc)
    if warehouse.report_dir:
        return OutputFS(warehouse.report_dir), f"date={t:%Y-%m-%d}"
    return OutputFS(loader.output), f"_audit/date={t:%Y-%m-%d}"


def audit_report(interval_start, interval_end, path: str | None = None) -> dict:
    """The day's audit report (``report.html`` and ``report.json``) kept
    beside the data; fails (no retry) when it shows a loss, with the lost
    windows in the log."""
    from audit.remote import fetch_report
    loader, warehouse = read_settings(path)
    begin, end = _ms(interval_start), _ms(interval_end)
    if end - begin != DAY_MS or begin % DAY_MS:
        raise _fail(f"the data interval {interval_start} to {interval_end} is not one whole "
                    f"day (UTC): audit_report's timetable must be daily")
    report = fetch_report(warehouse.audit_url, begin, end,
                          credentials=warehouse.audit_credentials)
    out, directory = report_location(loader, warehouse, begin)
    for name, data in (("report.html", report.html), ("report.json", report.json_bytes())):
        out.write_bytes((directory, name), data)
    html, json_path = out.path(directory, "report.html"), out.path(directory, "report.json")
    log.info("report: %s and %s", html, json_path)
    for line in report.lines():
        (log.error if line.lstrip().startswith("LOSS") else log.info)("%s", line)
    if report.losses:
        raise _fail(f"the audit shows {len(report.losses)} windows with lost messages on "
                    f"this day (report: {html})")
    return {"html": html, "json": json_path, "summary": report.summary}
