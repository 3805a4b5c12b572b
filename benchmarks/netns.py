"""Simulated hosts for the scaling benchmark: network namespaces joined by veth pairs.

Everything lives in namespaces this module creates and deletes: a "database" namespace
with a bridge (10.218.18.1/24) where the benchmark itself and its PostgreSQL run, and
one namespace per simulated host, each with a veth pair whose far end sits on that
bridge (10.218.18.10, .11, ...). No interface or address is added to the machine's own
namespace, and no traffic leaves the namespaces. Needs root (CAP_NET_ADMIN and
CAP_SYS_ADMIN for `ip netns`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

PREFIX = "aiopgq-s18"
SUBNET = "10.218.18"
DB_ADDRESS = f"{SUBNET}.1"


@dataclass(frozen=True)
class Hosts:
    db_namespace: str
    host_namespaces: tuple[str, ...]

    def address(self, host: int) -> str:
        return f"{SUBNET}.{10 + host}"


def why_not() -> str | None:
    """None if namespaces can be made here, else why not (for a clear skip message)."""
    if os.geteuid() != 0:
        return "creating network namespaces needs root"
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is missing"
    return None


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=10)


def _delete(namespace: str) -> None:
    subprocess.run(["ip", "netns", "del", namespace], capture_output=True, timeout=10)


@contextmanager
def simulated_hosts(count: int) -> Iterator[Hosts]:
    """Create the database namespace and `count` host namespaces; delete them after."""
    db = f"{PREFIX}-db"
    hosts = tuple(f"{PREFIX}-h{i}" for i in range(count))
    for namespace in (db, *hosts):  # leftovers of an interrupted run
        _delete(namespace)
    try:
        _ip("netns", "add", db)
        _ip("-n", db, "link", "set", "lo", "up")
        _ip("-n", db, "link", "add", "br0", "type", "bridge")
        _ip("-n", db, "addr", "add", f"{DB_ADDRESS}/24", "dev", "br0")
        _ip("-n", db, "link", "set", "br0", "up")
        for i, namespace in enumerate(hosts):
            _ip("netns", "add", namespace)
            _ip("-n", namespace, "link", "set", "lo", "up")
            # Both ends are made inside the namespaces: nothing touches the machine's own.
            _ip(
                "-n",
                db,
                "link",
                "add",
                f"h{i}",
                "type",
                "veth",
                "peer",
                "name",
                "eth0",
                "netns",
                namespace,
            )
            _ip("-n", db, "link", "set", f"h{i}", "master", "br0", "up")
            _ip("-n", namespace, "addr", "add", f"{SUBNET}.{10 + i}/24", "dev", "eth0")
            _ip("-n", namespace, "link", "set", "eth0", "up")
        yield Hosts(db, hosts)
    finally:
        for namespace in (*hosts, db):
            _delete(namespace)


def in_namespace(namespace: str, argv: list[str]) -> list[str]:
    """`argv` run inside `namespace`."""
    return ["ip", "netns", "exec", namespace, *argv]
