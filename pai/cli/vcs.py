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

from libs.protocol.wording import counted
from pai.cli.common import ServerOption, _client, _friendly_errors
from pai.cli.output import console

vc_app = typer.Typer(no_args_is_help=True, help="Virtual clusters: status and run-time configuration.")


def _console() -> Console:
    return console()


def _gpus(resources: dict[str, Any]) -> int:
    return int(resources.get("GPUs", resources.get("gpu", 0)))


def _number(value: Any) -> str:
    number = float(value or 0)
    return str(int(number)) if number.is_integer() else f"{number:.2f}".rstrip("0")


def _used_of(used: Any, offered: Any) -> str:
    return f"{_number(used)}/{_number(offered)}"


@vc_app.command("list")
def list_vcs(server: str | None = ServerOption) -> None:
    """Every VC with its guaranteed and used GPUs, its share of the cluster, and the nodes' CPU and memory."""
    client, _ = _client(server)
    with _friendly_errors(), client:
        vcs = client.virtual_clusters()
    table = Table(
        "VC",
        "CAPACITY %",
        "USED %",
        "GPUS GUARANTEED",
        "GPUS USED",
        "RUNNING",
        "WAITING",
        "NODES",
        "CPU USED/OFFERED",
        "MEMORY MB USED/OFFERED",
    )
    for name, vc in sorted(vcs.items()):
        cluster = vc.get("cluster") or {}
        used = vc["resourcesUsed"]
        table.add_row(
            name,
            f"{vc['capacity']:g}",
            f"{vc['usedCapacity']:g}",
            str(_gpus(vc["resourcesGuaranteed"])),
            str(_gpus(used)),
            str(vc.get("runningJobs", "")),
            str(vc.get("waitingJobs", "")),
            str(cluster.get("nodes", len(vc.get("nodeList", [])))),
            _used_of(used.get("cpu"), cluster.get("cpu")),
            _used_of(used.get("memory"), cluster.get("memoryMb")),
        )
    _console().print(table)


@vc_app.command("show")
def show_vc(name: str = typer.Argument(..., help="the VC's name"), server: str | None = ServerOption) -> None:
    """One VC: resources, every node with what it offers and what is in use, users, limits."""
    client, _ = _client(server)
    with _friendly_errors(), client:
        vc = client.virtual_cluster(name)
    out = _console()
    used, guaranteed = vc["resourcesUsed"], vc["resourcesGuaranteed"]
    cluster = vc.get("cluster") or {}
    nodes = vc.get("nodes", [])
    if cluster.get("gpus", 1):
        out.print(
            f"VC {name}: {vc['capacity']:g}% of the cluster's GPUs, {vc['usedCapacity']:g}% in use",
            markup=False,
        )
        out.print(
            f"  guaranteed: {_gpus(guaranteed)} GPUs, {guaranteed['cpu']} CPU, "
            f"{guaranteed['memory']} MB memory",
            markup=False,
        )
    else:
        out.print(
            f"VC {name}: the cluster has no GPUs; jobs run on any of its {counted(len(nodes), 'node')} "
            "by CPU and memory",
            markup=False,
        )
    out.print(f"  used: {_gpus(used)} GPUs, {used['cpu']} CPU, {used['memory']} MB memory", markup=False)
    if cluster:
        out.print(
            f"  the cluster offers: {counted(int(cluster.get('gpus', 0)), 'GPU')}, "
            f"{_number(cluster.get('cpu'))} CPU, {_number(cluster.get('memoryMb'))} MB memory "
            f"on {counted(int(cluster.get('nodes', 0)), 'node')}",
            markup=False,
        )
    limits = vc.get("userLimits") or {}
    if limits:
        out.print(f"  user limits: {limits}", markup=False)
    table = Table(
        "NODE",
        "CPU USED/OFFERED",
        "MEMORY MB USED/OFFERED",
        "GPUS USED/OFFERED",
        "USED BY THIS VC",
        "HEALTHY",
    )
    for node in nodes:
        in_use = node.get("used") or {}
        table.add_row(
            node["name"],
            _used_of(in_use.get("cpu"), node.get("cpu")),
            _used_of(in_use.get("memoryMb"), node.get("memoryMb")),
            _used_of(in_use.get("gpus", node["usedGpus"]), node["gpus"]),
            f"{_number(node.get('usedCpu'))} CPU, {_number(node.get('usedMemoryMb'))} MB, "
            f"{counted(int(node['usedGpus']), 'GPU')}",
            "yes" if node["healthy"] else "no",
        )
    out.print(table)
    for user, gpus in (vc.get("usedGpusByUser") or {}).items():
        out.print(f"  user {user}: {gpus} GPUs", markup=False)
    for job, why in (vc.get("jobsWithoutGuarantee") or {}).items():
        out.print(f"  job {job}: {why}", markup=False)
    shared = vc.get("sharedGpus") or []
    if shared:
        out.print(
            f"  shared GPUs: {len(shared)} (thousandths of each device in use, and by whom)", markup=False
        )
        rows = Table("NODE", "GPU", "USED/1000", "TASKS")
        for gpu in shared:
            holders = ", ".join(
                f"{t['jobId']} {t['taskRole']}-{t['taskIndex']} ({t.get('user') or '?'}): {t['gpuMilli']}"
                for t in gpu.get("tasks", [])
            )
            rows.add_row(str(gpu["node"]), str(gpu["gpu"]), str(gpu["usedMilli"]), holders)
        out.print(rows)


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
