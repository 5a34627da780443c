"""`pai usage` against a running REST service whose history holds jobs of known size and length."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from services.rest.adapters.database import create_engine
from services.rest.handlers import apply_events
from tests.rest.serving import ServerThread
from tests.rest.test_cli import cli_env, logged_in, pai
from tests.rest.test_usage import history

__all__ = ["cli_env"]  # the fixture, used by name below


def table_cells(line: str) -> list[str]:
    """The cells of a table's row as rich draws it (nothing for a rule or another line)."""
    if line[:1] not in ("│", "┃"):
        return []
    return [cell.strip() for cell in line.strip("│┃").replace("┃", "│").split("│")]


async def _write_history(url: str) -> None:
    engine = create_engine(url)
    try:
        await apply_events(engine, history())
    finally:
        await engine.dispose()


@pytest.fixture
def with_history(server: ServerThread) -> None:
    server.run(_write_history(server.settings.resolved_database_url()))


def test_pai_usage_lists_gpu_hours_per_user_as_json_and_as_a_table(cli_env: Path, with_history: None) -> None:
    logged_in(cli_env)
    code, output = pai("usage", "--since", "1d", "--by", "user", "--json")
    assert code == 0, output
    report = json.loads(output)
    hours = {row["user"]: row["gpuHours"] for row in report["rows"]}
    # tests/rest/test_usage.py's history: alice 4 + 1 GPU-hours, carol 2 GPUs for 1 h (all of it
    # within the last day), dave's job is 8 days old; bob's half GPU still runs.
    assert hours["alice"] == pytest.approx(5.0)
    assert hours["carol"] == pytest.approx(2.0)
    assert "dave" not in hours
    assert hours["bob"] > 0.1

    code, output = pai("usage", "--since", "1d", "--by", "vc")
    assert code == 0, output
    lines = output.splitlines()
    assert lines[0].startswith("Usage from ")
    assert lines[0].endswith(", by vc")
    rows = {cells[0]: cells[1:] for cells in map(table_cells, lines) if cells}
    assert rows["VC"][:3] == ["GPU-HOURS", "CPU-HOURS", "JOBS RUN"]
    assert rows["team"] == ["1.00", "2.00", "1", "0", "1", "0", "10m"]
    assert rows["TOTAL"][0] == f"{float(rows['default'][0]) + 1:.2f}"


def test_pai_usage_names_a_bad_period_and_a_bad_grouping(cli_env: Path) -> None:
    logged_in(cli_env)
    code, output = pai("usage", "--since", "last week")
    assert code == 1
    assert "from must be an ISO-8601 time" in output
    assert "InvalidParametersError" in output
    code, output = pai("usage", "--by", "group")
    assert code == 2
    assert "expected user or vc" in output
