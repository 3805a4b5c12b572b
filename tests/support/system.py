"""The system programs some tests drive (chromium, pgbouncer): found, installed as root, or named.

A test declares what it needs with `@pytest.mark.needs("chromium")` (the `browser` and
`bouncer` fixtures add the marker themselves). After collection, tests/conftest.py looks
for the programs the selected tests need; when some are missing and the run is root on
Debian, it installs their Debian packages once (`apt-get update`, `apt-get install -y`),
saying so on the terminal. Otherwise those tests skip, naming the command that installs
them, and under CI=true they fail: CI must run every test.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

# Debian puts pgbouncer in /usr/sbin (not on an ordinary user's PATH) and the driver
# next to chromium.
_EXTRA_DIRS = ("/usr/sbin", "/sbin", "/usr/lib/chromium")
INSTALL_ENV = "AIOPGQ_TEST_INSTALL"  # "0": never run apt-get, even as root


@dataclass(frozen=True)
class Component:
    name: str
    programs: tuple[tuple[str, ...], ...]  # each one of these, by any of its names
    packages: tuple[str, ...]  # Debian's
    why: str

    @property
    def install_command(self) -> str:
        return f"apt-get install {' '.join(self.packages)}"


COMPONENTS = {
    c.name: c
    for c in (
        Component(
            "chromium",
            (("chromium", "chromium-browser"), ("chromedriver",)),
            ("chromium", "chromium-driver"),
            "the dashboard's tests drive a headless browser",
        ),
        Component(
            "pgbouncer",
            (("pgbouncer",),),
            ("pgbouncer",),
            "the scale-out tests put a pgbouncer in transaction mode before the server",
        ),
    )
}


def find(*names: str) -> str | None:
    """The first of `names` on PATH or in Debian's other program directories."""
    path = os.pathsep.join([os.environ.get("PATH", os.defpath), *_EXTRA_DIRS])
    for name in names:
        found = shutil.which(name, path=path)
        if found:
            return found
    return None


def missing(component: Component) -> bool:
    return any(find(*names) is None for names in component.programs)


def can_install() -> bool:
    """Root on a Debian-like system, and not told otherwise."""
    return (
        os.environ.get(INSTALL_ENV, "1") != "0"
        and os.geteuid() == 0
        and shutil.which("apt-get") is not None
    )


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def not_available(component: Component, detail: str = "") -> str:
    """What a test that needs `component` says when it cannot have it."""
    return (
        f"needs {component.name} ({component.why}): {component.install_command}, as root"
        f" (a test run as root installs it itself){'; ' + detail if detail else ''}"
    )


@contextlib.contextmanager
def _apt_lock() -> Iterator[None]:
    # Parallel test processes install one at a time; the later ones find it done.
    with open(Path(tempfile.gettempdir()) / "aiopgq-tests-apt.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def install(components: Iterable[Component], say: Callable[[str], object] = print) -> str:
    """Install the components' Debian packages; "" when done, else what went wrong."""
    wanted = [c for c in components if missing(c)]
    if not wanted:
        return ""
    with _apt_lock():
        wanted = [c for c in wanted if missing(c)]
        if not wanted:
            return ""
        packages = [p for c in wanted for p in c.packages]
        reasons = "; ".join(f"{c.name}: {c.why}" for c in wanted)
        say(f"aiopgq tests: installing {' '.join(packages)} with apt-get ({reasons})")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for command in (
            ["apt-get", "update", "-qq"],
            ["apt-get", "install", "-y", "-qq", *packages],
        ):
            done = subprocess.run(
                command, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True
            )
            if done.returncode != 0:
                tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
                return f"{' '.join(command)} exited {done.returncode}: {' / '.join(tail)}"
    still = [c.name for c in wanted if missing(c)]
    return f"still not found after apt-get install: {', '.join(still)}" if still else ""


def require(name: str) -> None:
    """Inside a test: skip (fail under CI) when the component is missing after set-up."""
    import pytest

    component = COMPONENTS[name]
    if missing(component):
        message = not_available(component)
        if in_ci():
            pytest.fail(f"CI=true: {message}", pytrace=False)
        pytest.skip(message)


def _main() -> None:
    # `python -m tests.support.system`: install everything the tests can need, as root.
    error = install(COMPONENTS.values())
    if error:
        sys.exit(error)


if __name__ == "__main__":
    _main()
