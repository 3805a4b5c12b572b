"""Checks of the worker's options: each names the option, the value and what is allowed."""

from __future__ import annotations

import importlib.util
from datetime import timedelta

from .._errors import ConfigurationError, shown


def seconds(
    value: float | timedelta | None, name: str, *, allow_none: bool = False
) -> float | None:
    """`value` in seconds (a number or a timedelta); None only where `allow_none`."""
    if value is None:
        if allow_none:
            return None
        raise ConfigurationError(f"{name} must be a number of seconds, not None")
    result = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if result < 0:
        raise ConfigurationError(f"{name} must be >= 0 seconds, got {result}")
    return result


def positive_int(value: int, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"{name} must be an int >= 1, got {shown(value)}")
    return value


def check_lease(visibility_timeout: float, heartbeat_interval: float) -> None:
    if visibility_timeout < 2 * heartbeat_interval:
        raise ConfigurationError(
            f"visibility_timeout ({visibility_timeout} s) must be at least twice "
            f"heartbeat_interval ({heartbeat_interval} s), or live jobs get rescued"
        )


def metrics_port(port: int | None) -> int | None:
    """A port to serve /metrics on (prometheus-client installed), or None."""
    if port is None:
        return None
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ConfigurationError(f"metrics_port must be a port number, got {shown(port)}")
    if importlib.util.find_spec("prometheus_client") is None:
        raise ConfigurationError(
            "metrics_port needs prometheus-client: pip install -e '.[metrics]' in the aiopgq clone"
        )
    return port


def retention_by_status(
    done: float | None, failed: float | None, cancelled: float | None
) -> dict[str, float]:
    """Seconds each finished status is kept, leaving out the statuses kept forever."""
    given = (("done", done), ("failed", failed), ("cancelled", cancelled))
    return {status: age for status, age in given if age is not None}
