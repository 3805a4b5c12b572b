"""The user-facing retry policy of failed jobs: exponential backoff with a cap."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from ._errors import ConfigurationError


@dataclass(frozen=True)
class Retry:
    """Exponential backoff with a cap and jitter: `base * factor ** (attempt - 1)`.

    >>> @queue.task(retry=Retry(base=1.0, cap=60.0))
    ... async def flaky() -> None: ...

    Attributes:
        base: the delay after the first failed attempt, in seconds (default 10, >= 0).
        factor: what each further failed attempt multiplies the delay by (default 2, >= 1).
        cap: the longest delay, in seconds (default 3600, >= 0).
        jitter: a random spread of +/- this fraction of the delay (default 0.1, 0 to 1).

    Raises:
        ConfigurationError: a value is not finite or out of its range.
    """

    base: float = 10.0
    factor: float = 2.0
    cap: float = 3600.0
    jitter: float = 0.1  # +/- this fraction, so retries of a failed batch spread out

    def __post_init__(self) -> None:
        values = (self.base, self.factor, self.cap, self.jitter)
        if (
            not all(math.isfinite(v) for v in values)
            or self.base < 0
            or self.factor < 1
            or self.cap < 0
            or not 0 <= self.jitter <= 1
        ):
            raise ConfigurationError(
                f"invalid {self!r}: need finite base >= 0, factor >= 1, cap >= 0, 0 <= jitter <= 1"
            )

    def delay(self, attempt: int) -> float:
        """Seconds to wait before retrying after failed attempt number `attempt` (1-based).

        Args:
            attempt: the number of the attempt that failed, from 1.

        Returns:
            The delay in seconds: `base * factor ** (attempt - 1)`, at most `cap`, with jitter.
        """
        exponent = max(attempt - 1, 0)
        try:
            raw = min(self.cap, self.base * float(self.factor) ** min(exponent, 1100))
        except OverflowError:
            raw = self.cap
        return max(0.0, raw * (1 + random.uniform(-self.jitter, self.jitter)))
