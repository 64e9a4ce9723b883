"""The exception types the CLI answers with one message instead of a traceback.

Anything raised as `UserError` is the user's to fix (bad config, missing file, unknown pass):
the CLI prints its message and exits with code 2. `BaselineUnavailable` and `ReferenceFailed` are
what a run found (a baseline or the accuracy reference could not run). Every other exception is an
internal bug.
"""

from __future__ import annotations

from contextvars import ContextVar
from pathlib import Path

import yaml

# The folder of the work in flight (a run's, a sweep's): where the CLI writes an internal error's traceback.
ERROR_LOG_FOLDER: ContextVar[Path | None] = ContextVar("error_log_folder", default=None)


class UserError(Exception):
    """A mistake in the user's input; the message says where and how to fix it."""

    exit_code = 2


class BaselineUnavailable(Exception):
    """A baseline cannot run here (package missing, model unsupported); the run reports it and goes on."""


class ReferenceFailed(Exception):
    """The accuracy reference could not run, so no output was checked: the run is recorded as failed (result.json,
    report, store row, with every label that was measured) and then this is raised, carrying that result. The CLI
    prints its one-line message and exits 1; a sweep records the variant as failed."""

    exit_code = 1

    def __init__(self, result):  # a record.result.RunResult (this bottom room names no higher one)
        super().__init__(result.error)
        self.result = result


REASON_CHARS = 200  # an error as one line (`one_line`), at most


def one_line(exc: BaseException) -> str:
    """An exception as one short line: its first non-empty message line, with its type unless it is ours.

    TVM's errors put a C++ stack trace before what failed: their message is the last line that says `Check
    failed` or `Error`, where there is one."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    said = [line for line in lines if "Check failed" in line or "Error:" in line]
    text = said[-1] if said and len(lines) > 1 else lines[0] if lines else ""
    ours = isinstance(exc, (UserError, BaselineUnavailable))
    reason = text if ours and text else f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return reason if len(reason) <= REASON_CHARS else reason[:REASON_CHARS - 3] + "..."


# What parsing YAML text raises on bad input: PyYAML's own errors, and the bare ValueError its int constructor
# raises on literals such as `0b_` or `0x_` (found by tests/test_fuzz.py)
YAML_ERRORS = (yaml.YAMLError, ValueError)
