"""How the commands of infra/local's services end (``python -m
infra.local.daemon``, ``python -m infra.local.airflow_stack``): a failure
the module expects (its error type: a service that did not become ready, a
state file it cannot read) is one line on stderr and exit status 1;
anything else is a bug and keeps its traceback."""
from __future__ import annotations

import sys
from typing import Callable

EXIT_FAILED = 1


def exit_status(action: Callable[[], object], *expected: type[Exception]) -> int:
    """Run ``action``: 0 when it returns, EXIT_FAILED (the error said on
    stderr) when it raises one of ``expected``."""
    try:
        action()
    except expected as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    return 0
