"""warehouse_load's wait for the audit: a sensor that asks once, then
defers to a trigger that keeps asking in Airflow's triggerer.

Why not a sensor in reschedule mode: Airflow 3 fails such a sensor when
the executor's "finished" for one poke reaches the scheduler after the
next poke was queued (same try number, so the scheduler takes the late
event for a task killed from outside: "finished with state success, but
the task instance's state attribute is queued ... Marking task as
FAILED"; apache/airflow#71172). With the LocalExecutor and a poke every
few seconds on a busy machine it happened within the first three pokes.
A deferred task has no executor event between two asks, holds no worker
slot, and survives a restart of the scheduler (the trigger is in the
database; the triggerer runs it again).

The wait ends:

* ``ready``: the audit calls the hour complete (audit/gate.py): the
  sensor succeeds and the load runs;
* ``timed_out``: the deadline passed first. The deadline is the first ask
  plus ``sensor_timeout_s``, and never before the audit's grace for the
  hour has run out (plus two pokes; the grace of a window runs from its end
  or from the producers' last report of it, whichever is later): before that a window cannot be
  called lost, so failing earlier would refuse an hour that may still
  arrive. The task fails with "Sensor has timed out" and the audit's last
  numbers, without retries.

Every ask logs the audit's numbers per topic in the task's log (a loss as
an error): the trigger's lines are the task's log lines in Airflow 3.
The steps themselves are hadoop_loader/dag_steps.py; this module is the
Airflow glue for them (the DAG file and the triggerer import it).
"""
from __future__ import annotations

import asyncio
import datetime as dt
import time
from typing import Any, AsyncIterator

from airflow.sdk import BaseSensorOperator
from airflow.sdk.exceptions import AirflowFailException, AirflowSensorTimeout
from airflow.triggers.base import BaseTrigger, TriggerEvent

from hadoop_loader import dag_steps

READY, TIMED_OUT = "ready", "timed_out"
#: how long past the deadline Airflow itself fails a deferral whose
#: trigger never answered (a triggerer that is down)
DEFERRAL_MARGIN_S = 300.0


def _moment(value) -> dt.datetime:
    return value if isinstance(value, dt.datetime) else dt.datetime.fromisoformat(value)


class AuditHourTrigger(BaseTrigger):
    """Asks the audit about one hour every ``poke_s`` until it is ready or
    ``deadline_ms`` (epoch ms) has passed; fires once, with the state."""

    def __init__(self, interval_start: str, interval_end: str, deadline_ms: int,
                 poke_s: float, config_path: str | None = None) -> None:
        """``deadline_ms`` is moved later when an ask shows that the audit's
        grace for the hour ends after it (the first ask could not tell: the
        audit service was not answering)."""
        super().__init__()
        self.interval_start, self.interval_end = interval_start, interval_end
        self.deadline_ms, self.poke_s, self.config_path = deadline_ms, poke_s, config_path

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{__name__}.{type(self).__name__}",
                {"interval_start": self.interval_start, "interval_end": self.interval_end,
                 "deadline_ms": self.deadline_ms, "poke_s": self.poke_s,
                 "config_path": self.config_path})

    def _say(self, level: str, text: str) -> None:
        getattr(self.log, level)("%s", text)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        lines: list[str] = []
        while True:
            state, grace_ends_ms, asked = await asyncio.to_thread(
                dag_steps.ask_audit, _moment(self.interval_start), _moment(self.interval_end),
                self.config_path, self._say)
            lines = asked or lines
            if state is not None:
                self.deadline_ms = max(self.deadline_ms, dag_steps.sensor_deadline_ms(
                    0, 0, grace_ends_ms, self.poke_s))
            if state == "ready":
                yield TriggerEvent({"state": READY, "lines": lines})
                return
            left_s = self.deadline_ms / 1000 - time.time()
            if left_s <= 0:
                yield TriggerEvent({"state": TIMED_OUT, "lines": lines})
                return
            self.log.info("not complete yet: asking again in %.0f s (gives up in %.0f s)",
                          min(self.poke_s, left_s), left_s)
            await asyncio.sleep(min(self.poke_s, left_s))


class AuditCompleteSensor(BaseSensorOperator):
    """Waits until the audit calls the run's hour complete (see the module's
    docstring): one ask in the worker, then a deferral to AuditHourTrigger.
    ``poke_interval`` and ``timeout`` are the ``[warehouse]`` settings
    ``sensor_poke_s`` and ``sensor_timeout_s``."""

    def __init__(self, *, config_path: str | None = None, **kwargs) -> None:
        kwargs.setdefault("retries", 0)
        super().__init__(**kwargs)
        self.config_path = config_path

    def _say(self, level: str, text: str) -> None:
        getattr(self.log, level)("%s", text)

    def execute(self, context) -> None:
        start, end = context["data_interval_start"], context["data_interval_end"]
        if start is None or end is None:
            raise AirflowFailException("this run has no data interval: trigger warehouse_load "
                                       "with a logical date (the start of the hour to load)")
        refused = dag_steps.run_outside_its_hour(context.get("logical_date"), start, end)
        if refused:
            raise AirflowFailException(refused)
        state, grace_ends_ms, _ = dag_steps.ask_audit(start, end, self.config_path, self._say)
        if state == READY:
            self.log.info("the audit calls the hour complete: loading it")
            return
        if not grace_ends_ms:     # the audit could not be asked: at least the hour's grace
            grace_ends_ms = int(end.timestamp() * 1000)
        give_up = dag_steps.sensor_deadline_ms(int(time.time() * 1000), self.timeout,
                                               grace_ends_ms, self.poke_interval)
        wait_s = give_up / 1000 - time.time()
        self.log.info("the hour is not complete yet: waiting for the audit (deferred to the "
                      "triggerer: no worker slot is held), asking every %g s for up to %.0f s",
                      self.poke_interval, wait_s)
        self.defer(trigger=AuditHourTrigger(start.isoformat(), end.isoformat(), give_up,
                                            self.poke_interval, self.config_path),
                   method_name="execute_complete",
                   timeout=dt.timedelta(seconds=wait_s + DEFERRAL_MARGIN_S))

    def execute_complete(self, context, event: dict | None = None) -> None:
        if event and event.get("state") == READY:
            self.log.info("the audit calls the hour complete: loading it")
            return
        last = "; ".join((event or {}).get("lines") or ["the audit could not be asked"])
        raise AirflowSensorTimeout(f"Sensor has timed out: the audit did not call the hour "
                                   f"complete before the deadline (last answer: {last})")
