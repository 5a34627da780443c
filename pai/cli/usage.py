"""`pai usage`: how many GPU-hours and CPU-hours each user or VC used, from the job history.

One call to `GET /api/v2/usage`: admins see every user; anyone else sees their own jobs. A
table by default (one row per user or VC, then the total), the report as the API gives it with
`--json`.
"""

from __future__ import annotations

import json
from typing import Any

import typer
from rich.table import Table

from pai.cli.common import ServerOption, _client, _friendly_errors
from pai.cli.output import console

STATES = ("SUCCEEDED", "FAILED", "STOPPED")
HEADINGS = {"user": ("USER", "user"), "vc": ("VC", "virtualCluster")}


def _hours(value: float) -> str:
    return f"{value:,.2f}"


def _wait(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def _cells(row: dict[str, Any]) -> list[str]:
    return [
        _hours(row["gpuHours"]),
        _hours(row["cpuHours"]),
        str(row["jobsRun"]),
        *(str(row["jobs"].get(state, 0)) for state in STATES),
        _wait(row["meanWaitSeconds"]),
    ]


def usage(
    since: str = typer.Option(
        "7d", "--since", help="from when: a time before now (7d, 24h, 30m) or an ISO-8601 time"
    ),
    until: str | None = typer.Option(
        None, "--until", help="until when, in the same forms [default: now]", show_default=False
    ),
    by: str = typer.Option("user", "--by", help="one row per user or per vc"),
    as_json: bool = typer.Option(False, "--json", help="print the report as JSON"),
    server: str | None = ServerOption,
) -> None:
    """GPU-hours, CPU-hours, jobs by final state and mean wait per user or VC (yours, unless admin)."""
    if by not in HEADINGS:
        raise typer.BadParameter(f"{by!r}: expected user or vc", param_hint="'--by'")
    client, _ = _client(server)
    with _friendly_errors(), client:
        report = client.usage(by, since, until)
    if as_json:
        typer.echo(json.dumps(report, indent=2))
        return
    heading, key = HEADINGS[by]
    out = console()
    out.print(f"Usage from {report['fromTime']} to {report['toTime']}, by {by}", markup=False)
    table = Table(heading, "GPU-HOURS", "CPU-HOURS", "JOBS RUN", *STATES, "MEAN WAIT")
    for column in table.columns[1:]:
        column.justify = "right"
    for row in report["rows"]:
        table.add_row(str(row[key]), *_cells(row))
    if report["rows"]:
        table.add_section()
        table.add_row("TOTAL", *_cells(report["total"]))
    out.print(table)
    if not report["rows"]:
        out.print("No job ran, started or ended in this period.", markup=False)
