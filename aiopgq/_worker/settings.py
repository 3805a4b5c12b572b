"""Settings: a worker option given in seconds (a number or a timedelta), checked."""

from __future__ import annotations

from datetime import timedelta

from .._errors import ConfigurationError


def seconds_of(
    value: float | timedelta | None, name: str, *, allow_none: bool = False
) -> float | None:
    if value is None:
        if allow_none:
            return None
        raise ConfigurationError(f"{name} must be a number of seconds, not None")
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if seconds < 0:
        raise ConfigurationError(f"{name} must be >= 0 seconds, got {seconds}")
    return seconds
