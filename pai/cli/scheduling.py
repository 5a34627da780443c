"""`pai scheduler replay-cases` and `pai sim`: check and exercise the HiveD scheduler core offline.

Both run the pure core on files only, so an admin can try a cluster config or a trace on a
laptop before it reaches the real scheduler.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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
        ...,
        "--trace",
        help="A pod-list CSV (creation time, GPUs, CPU, memory, ...) or a job-list CSV "
        "(timestamp, duration, num_gpus; Philly's), gzipped or not.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    rack_size: int = typer.Option(8, "--rack-size", help="Nodes per rack when deriving cells from a CSV."),
    vcs: int = typer.Option(1, "--vcs", help="Split a CSV cluster into this many equal VCs."),
    limit: int = typer.Option(0, "--limit", help="Replay only the first N jobs to arrive (0: all)."),
    vc_column: str = typer.Option(
        "", "--vc-column", help="The trace column naming each job's VC; jobs keep it (else dealt in turn)."
    ),
    vc_quotas: Path | None = typer.Option(
        None,
        "--vc-quotas",
        help="A CSV with the header vc,gpus: each VC's guaranteed GPUs, made of whole nodes of a "
        "node-list cluster (needs --vc-column).",
    ),
    skip_unknown_vcs: bool = typer.Option(
        False, "--skip-unknown-vcs", help="Drop jobs of VCs the quota file does not list instead of failing."
    ),
    load: float = typer.Option(1.0, "--load", help="Arrival times are divided by this (2: twice the rate)."),
    private: bool = typer.Option(
        False, "--private", help="Run each VC alone on a cluster of its quota's nodes (needs --vc-quotas)."
    ),
    borrow: bool = typer.Option(
        False, "--borrow", help="With --policy quota: VCs may use idle GPUs beyond quota, preemptibly."
    ),
    inflate: float = typer.Option(
        0.0,
        "--inflate",
        help="Run the FGD paper's experiment instead: tasks arrive until their GPU requests reach "
        "this multiple of the cluster's GPUs (1.3 = 130%), none departs; needs a node-list CSV.",
    ),
    policy: str = typer.Option(
        "",
        "--policy",
        help="Replay: hived (the scheduler core, the default) or quota (the capacity-scheduler "
        "baseline: per-VC GPU quotas, no cells; needs --vc-quotas). With --inflate: random, dotprod, "
        "gpuclustering, gpupacking, bestfit, fgd or fragpack (the platform's default).",
    ),
    seed: int = typer.Option(42, "--seed", help="Seed of the --inflate sampling, order and ties."),
) -> None:
    """Replay a trace in virtual time through the HiveD core (or the quota baseline) and report
    queueing delay per VC and job size, allocation and fragmentation.

    With --inflate, run the FGD paper's workload-inflation experiment through the scheduler's
    GPU-sharing placement and report the GPU allocation ratio at each arrived percentage.
    """
    if inflate:
        _sim_inflation(cluster, trace, inflate, policy, seed, as_json)
        return
    from services.scheduler.sim.simulator import POLICIES, SimError

    policy = policy or "hived"
    if policy not in POLICIES:
        hint = " (placement policies of GPU sharing need --inflate)" if policy else ""
        typer.echo(
            f"error: --policy {policy!r} is unknown; choose one of {', '.join(POLICIES)}{hint}", err=True
        )
        raise typer.Exit(2)
    try:
        report = _replay(
            cluster,
            trace,
            rack_size,
            vcs,
            limit,
            vc_column,
            vc_quotas,
            skip_unknown_vcs,
            load,
            private,
            policy,
            borrow,
        )
    except (SimError, OSError, ValueError) as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from err
    if as_json:
        typer.echo(json.dumps(report, indent=None, sort_keys=True))
        return
    for key, value in report.items():
        if key != "allocation_over_time":
            typer.echo(f"{key}: {value}")


def _replay(
    cluster: Path,
    trace: Path,
    rack_size: int,
    vcs: int,
    limit: int,
    vc_column: str,
    vc_quotas: Path | None,
    skip_unknown_vcs: bool,
    load: float,
    private: bool,
    policy: str,
    borrow: bool,
) -> dict[str, Any]:
    from services.scheduler.sim.quotas import (
        demand_by_size,
        largest_jobs,
        private_cluster,
        read_quotas,
        shared_cluster,
        split_nodes,
    )
    from services.scheduler.sim.simulator import SimError, load_cluster, load_trace, simulate
    from services.scheduler.sim.traces import read_nodes

    if vc_quotas is None:
        if private or policy == "quota":
            raise SimError(f"{'--private' if private else '--policy quota'} needs --vc-quotas FILE (vc,gpus)")
        config, vc_names = load_cluster(cluster, rack_size, vcs)
        pods, notes = load_trace(trace, vc_names, limit, vc_column, load, skip_unknown_vcs)
        return simulate(config, pods, notes, policy, borrow)
    if cluster.suffix.lower() != ".csv":
        raise SimError(f"--vc-quotas makes the VCs of a node-list cluster; {cluster} is not a CSV node list")
    if not vc_column:
        raise SimError(
            "--vc-quotas gives GPUs to the trace's VCs; name the trace's VC column with --vc-column"
        )
    quotas = read_quotas(vc_quotas)
    nodes = read_nodes(cluster)
    pods, notes = load_trace(trace, list(quotas), limit, vc_column, load, skip_unknown_vcs)
    split = split_nodes(quotas, nodes, largest_jobs(pods), demand_by_size(pods))
    if not private:
        return simulate(shared_cluster(nodes, split), pods, notes, policy, borrow)
    return {
        vc: simulate(private_cluster(vc, members), [p for p in pods if p.vc == vc], notes, policy, borrow)
        for vc, members in split.items()
    }


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
