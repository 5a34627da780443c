"""`pai vc`: see virtual clusters and change them at run time (admins).

`set-config` sends a HiveD config (whole, or its virtualClusters part, with optional
userLimits); the scheduler re-adds every running job into it first and refuses a change that
would kill a job or take its guarantee, naming the jobs. `--force` applies it anyway and lists
the jobs it harmed, so the admin can tell their users.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from libs.cli.jobs import ServerOption, _client, _friendly_errors
from libs.cli.output import console

vc_app = typer.Typer(no_args_is_help=True, help="Virtual clusters: status and run-time configuration.")


def _console() -> Console:
    return console()


def _gpus(resources: dict[str, Any]) -> int:
    return int(resources.get("GPUs", resources.get("gpu", 0)))


@vc_app.command("list")
def list_vcs(server: str | None = ServerOption) -> None:
    """Every VC with its guaranteed and used GPUs and its share of the cluster."""
    client, _ = _client(server)
    with _friendly_errors(), client:
        vcs = client.virtual_clusters()
    table = Table("VC", "CAPACITY %", "USED %", "GPUS GUARANTEED", "GPUS USED", "RUNNING", "WAITING")
    for name, vc in sorted(vcs.items()):
        table.add_row(
            name,
            f"{vc['capacity']:g}",
            f"{vc['usedCapacity']:g}",
            str(_gpus(vc["resourcesGuaranteed"])),
            str(_gpus(vc["resourcesUsed"])),
            str(vc.get("runningJobs", "")),
            str(vc.get("waitingJobs", "")),
        )
    _console().print(table)


@vc_app.command("show")
def show_vc(name: str = typer.Argument(..., help="the VC's name"), server: str | None = ServerOption) -> None:
    """One VC: resources, per-node and per-user use, user limits, jobs without guarantee."""
    client, _ = _client(server)
    with _friendly_errors(), client:
        vc = client.virtual_cluster(name)
    out = _console()
    used, guaranteed = vc["resourcesUsed"], vc["resourcesGuaranteed"]
    out.print(f"VC {name}: {vc['capacity']:g}% of the cluster, {vc['usedCapacity']:g}% in use", markup=False)
    for label, res in (("guaranteed", guaranteed), ("used", used)):
        out.print(f"  {label}: {_gpus(res)} GPUs, {res['cpu']} CPU, {res['memory']} MB memory", markup=False)
    limits = vc.get("userLimits") or {}
    if limits:
        out.print(f"  user limits: {limits}", markup=False)
    table = Table("NODE", "GPUS USED BY VC", "GPUS", "HEALTHY")
    for node in vc.get("nodes", []):
        table.add_row(
            node["name"], str(node["usedGpus"]), str(node["gpus"]), "yes" if node["healthy"] else "no"
        )
    out.print(table)
    for user, gpus in (vc.get("usedGpusByUser") or {}).items():
        out.print(f"  user {user}: {gpus} GPUs", markup=False)
    for job, why in (vc.get("jobsWithoutGuarantee") or {}).items():
        out.print(f"  job {job}: {why}", markup=False)


@vc_app.command("set-config")
def set_config(
    file: Path = typer.Argument(..., help="HiveD config YAML: whole, or virtualClusters and/or userLimits"),
    force: bool = typer.Option(False, "--force", help="apply even if running jobs lose their guarantee"),
    server: str | None = ServerOption,
) -> None:
    """Change VCs, cells or per-user limits now; refused if it would harm running jobs."""
    try:
        text = file.read_text()
    except OSError as err:
        typer.echo(f"error: cannot read {file}: {err.strerror}; pass the path of a YAML file", err=True)
        raise typer.Exit(2) from None
    client, _ = _client(server)
    with _friendly_errors(), client:
        answer = client.set_vc_config(text, force=force)
    out = _console()
    out.print(answer["message"], markup=False)
    out.print(f"virtual clusters: {', '.join(answer.get('virtualClusters', []))}", markup=False)
    for kind in ("killed", "downgraded"):
        for job, why in (answer.get(kind) or {}).items():
            out.print(f"  {kind}: {job}: {why}", markup=False)
