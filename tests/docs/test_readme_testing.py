"""The README's example project for aiopgq.testing passes as written, in a pytest of its own."""

from __future__ import annotations

from pathlib import Path

from ..support.markdown import section_files
from ..support.project import run_pytest, write_project


def test_the_readme_example_passes_on_the_given_database(dsn: str, tmp_path: Path) -> None:
    files = section_files("Testing your own code")
    assert sorted(files) == ["conftest.py", "jobs.py", "pyproject.toml", "test_jobs.py"]
    write_project(tmp_path, files)
    result = run_pytest(tmp_path, dsn)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout


def test_the_readme_example_passes_on_the_plugins_own_embedded_server(tmp_path: Path) -> None:
    write_project(tmp_path, section_files("Testing your own code"))
    (tmp_path / "test_where.py").write_text(
        "import os\nfrom urllib.parse import urlsplit\n\n\n"
        "def test_the_plugin_started_a_server_and_said_where(aiopgq_dsn):\n"
        "    assert os.environ['AIOPGQ_DSN'] == aiopgq_dsn\n"
        "    assert urlsplit(aiopgq_dsn).path == '/aiopgq_test'\n"
    )
    result = run_pytest(tmp_path, None)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout
