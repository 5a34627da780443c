"""`pai scheduler replay-cases` and `pai sim`: check and exercise the HiveD scheduler core offline.

Both run the pure core on files only, so an admin can try a cluster config or a trace on a
laptop before it reaches the real scheduler.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

scheduler_app = typer.Typer(no_args_is_help=True, help="Scheduler tools: replay HiveD behaviour cases.")


@scheduler_app.command("replay-cases")
def replay_cases(
    file: Path = typer.Argument(..., help="A cases file in the HiveD design-test layout."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object per step instead of text."),
) -> None:
    """Replay every step through the core; print how each compares and a closing tally."""
    from services.scheduler.sim.replay import CaseReplayer, format_line

    if not file.is_file():
        typer.echo(f"error: cases file {file} does not exist; pass the path of a cases YAML file", err=True)
        raise typer.Exit(2)
    try:
        outcomes = CaseReplayer(file).run()
    except (ValueError, OSError) as err:
        typer.echo(f"error: cannot replay {file}: {err}", err=True)
        raise typer.Exit(2) from err
    for o in outcomes:
        typer.echo(json.dumps(o.as_json()) if as_json else format_line(o))
    failed = sum(1 for o in outcomes if not o.passed)
    if not as_json:
        typer.echo(f"{len(outcomes) - failed} passed, {failed} failed")
    raise typer.Exit(1 if failed else 0)


def sim(
    cluster: Path = typer.Option(..., "--cluster", help="A HiveD config (YAML) or a node-list CSV."),
    trace: Path = typer.Option(
        ..., "--trace", help="A pod-list CSV (creation time, GPUs, CPU, memory, ...)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    rack_size: int = typer.Option(8, "--rack-size", help="Nodes per rack when deriving cells from a CSV."),
    vcs: int = typer.Option(1, "--vcs", help="Split a CSV cluster into this many equal VCs."),
    limit: int = typer.Option(0, "--limit", help="Replay only the first N pods (0: all)."),
    inflate: float = typer.Option(
        0.0,
        "--inflate",
        help="Run the FGD paper's experiment instead: tasks arrive until their GPU requests reach "
        "this multiple of the cluster's GPUs (1.3 = 130%), none departs; needs a node-list CSV.",
    ),
    policy: str = typer.Option(
        "",
        "--policy",
        help="Placement policy for --inflate: random, dotprod, gpuclustering, gpupacking, bestfit, fgd "
        "or fragpack (the platform's default).",
    ),
    seed: int = typer.Option(42, "--seed", help="Seed of the --inflate sampling, order and ties."),
) -> None:
    """Replay a trace in virtual time through the HiveD core and report queueing and allocation.

    With --inflate, run the FGD paper's workload-inflation experiment through the scheduler's
    GPU-sharing placement and report the GPU allocation ratio at each arrived percentage.
    """
    if inflate or policy:
        _sim_inflation(cluster, trace, inflate, policy, seed, as_json)
        return
    from services.scheduler.sim.simulator import SimError, load_cluster, load_trace, simulate

    try:
        config, vc_names = load_cluster(cluster, rack_size, vcs)
        pods, notes = load_trace(trace, vc_names, limit)
        report = simulate(config, pods, notes)
    except (SimError, OSError, ValueError) as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from err
    if as_json:
        typer.echo(json.dumps(report, indent=None, sort_keys=True))
        return
    for key, value in report.items():
        if key != "allocation_over_time":
            typer.echo(f"{key}: {value}")


def _sim_inflation(cluster: Path, trace: Path, inflate: float, policy: str, seed: int, as_json: bool) -> None:
    from services.scheduler.core.gpu_share import DEFAULT_POLICY, POLICIES, ShareConfigError
    from services.scheduler.sim.inflation import InflationError, simulate_inflation

    if not inflate:
        typer.echo(
            "error: --policy chooses the placement of the --inflate experiment; add --inflate 1.3", err=True
        )
        raise typer.Exit(2)
    if policy and policy not in POLICIES:
        typer.echo(f"error: --policy {policy!r} is unknown; choose one of {', '.join(POLICIES)}", err=True)
        raise typer.Exit(2)
    try:
        report = simulate_inflation(cluster, trace, inflate, policy or DEFAULT_POLICY, seed)
    except (InflationError, ShareConfigError, OSError) as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from err
    if as_json:
        typer.echo(json.dumps(report, sort_keys=True))
        return
    for key, value in report.items():
        if key != "allocation_ratio":
            typer.echo(f"{key}: {value}")


def register(app: typer.Typer) -> None:
    app.add_typer(scheduler_app, name="scheduler")
    app.command("sim")(sim)
