"""The one exception type for user mistakes.

Anything raised as `UserError` is the user's to fix (bad config, missing file, unknown pass):
the CLI prints its message and exits with code 2. Every other exception is an internal bug.
"""

from __future__ import annotations

import yaml


class UserError(Exception):
    """A mistake in the user's input; the message says where and how to fix it."""

    exit_code = 2


class BaselineUnavailable(Exception):
    """A baseline cannot run here (package missing, model unsupported); the run reports it and goes on."""


# What parsing YAML text raises on bad input: PyYAML's own errors, and the bare ValueError its int constructor
# raises on literals such as `0b_` or `0x_` (found by tests/test_fuzz.py)
YAML_ERRORS = (yaml.YAMLError, ValueError)
