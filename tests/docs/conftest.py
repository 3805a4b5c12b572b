"""Fixtures of the documentation runners: a database of its own, a newcomer's shell on it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from ..support.newcomer import Newcomer, fetchval


@pytest.fixture
def database(database_url: str) -> Iterator[str]:
    """A database of its own: the README works in the default schema, aiopgq."""
    name = f"readme_{uuid.uuid4().hex[:12]}"
    fetchval(database_url, f'CREATE DATABASE "{name}"')
    yield urlunsplit(urlsplit(database_url)._replace(path=f"/{name}"))
    fetchval(database_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def newcomer(database: str, tmp_path: Path) -> Iterator[Newcomer]:
    person = Newcomer(tmp_path, database)
    yield person
    for _, proc, log in person.background:  # a failed test leaves them running
        proc.kill()
        proc.wait()
        log.close()
