"""Schema names: the one identifier rule refuses anything but the whole name matching."""

from __future__ import annotations

import pytest

from aiopgq import ConfigurationError, Queue


@pytest.mark.parametrize("name", ["aiopgq\n", "aiopgq\n;drop", "\naiopgq", "a" * 64, "Aiopgq"])
def test_schema_names_with_a_newline_or_beyond_the_rule_are_refused(name: str) -> None:
    with pytest.raises(ConfigurationError, match="schema"):
        Queue("postgresql://localhost/db", schema=name)


def test_a_plain_schema_name_is_accepted() -> None:
    assert Queue("postgresql://localhost/db", schema="app_jobs").schema == "app_jobs"
