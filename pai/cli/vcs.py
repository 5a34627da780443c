"""`pai vc`: see virtual clusters and change them at run time (admins).

`set NAME --gpus N` (or `--cells TYPE=N`, `--cpu N --memory MB`) creates or resizes one VC,
taking GPUs from the default VC, and `remove NAME` gives them back; `config` prints the HiveD
config in force as YAML, with its cell types, ready to edit and send back with `set-config`.
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
    notes: list[str] = next((list(vc["notes"]) for vc in vcs.values() if vc.get("notes")), [])
    for note in notes:
        _console().print(f"note: {note}", markup=False, soft_wrap=True)


def _gpus_option(value: str) -> tuple[int, str | None]:
    count, _, model = value.partition(":")
    if not count.strip().isdigit():
        raise typer.BadParameter(f"{value!r}: expected a count or COUNT:MODEL such as 2 or 8:V100")
    return int(count), model.strip() or None


def _cells_option(values: list[str]) -> dict[str, int]:
    cells: dict[str, int] = {}
    for value in values:
        for part in value.split(","):
            name, _, count = part.strip().partition("=")
            if not name or not count.strip().isdigit():
                raise typer.BadParameter(f"{part!r}: expected CELL-TYPE=N, such as V100-NODE8=1")
            cells[name] = cells.get(name, 0) + int(count)
    return cells


def _print_answer(answer: dict[str, Any]) -> None:
    out = _console()
    out.print(answer["message"], markup=False)
    for kind in ("killed", "downgraded"):
        for job, why in (answer.get(kind) or {}).items():
            out.print(f"  {kind}: {job}: {why}", markup=False)


@vc_app.command("set")
def set_vc(
    name: str = typer.Argument(..., help="the VC's name (a new one is created)"),
    gpus: str | None = typer.Option(
        None, "--gpus", help="GPUs it is guaranteed, N or N:MODEL; taken from the default VC"
    ),
    cells: list[str] = typer.Option(
        [], "--cells", help="its cells instead, CELL-TYPE=N (repeat, or comma-separated)"
    ),
    cpu: int | None = typer.Option(None, "--cpu", min=0, help="CPU quota for its tasks without GPUs"),
    memory: int | None = typer.Option(None, "--memory", min=0, help="memory quota in MB (with --cpu)"),
    force: bool = typer.Option(False, "--force", help="apply even if running jobs lose their guarantee"),
    server: str | None = ServerOption,
) -> None:
    """Create or resize a VC; refused, naming what is free, when it does not fit."""
    from libs.protocol.quotas import VcAsk  # pydantic: only this command pays for it

    count, model = _gpus_option(gpus) if gpus is not None else (None, None)
    asked = VcAsk(
        gpus=count,
        model=model or None,
        cells=_cells_option(cells) if cells else None,
        cpu=cpu,
        memory_mb=memory,
    ).body()
    if not asked:
        typer.echo("error: say what the VC gets: --gpus N, --cells TYPE=N, or --cpu N --memory MB", err=True)
        raise typer.Exit(2)
    client, _ = _client(server)
    with _friendly_errors(), client:
        answer = client.set_vc(name, asked, force=force)
    _print_answer(answer)


@vc_app.command("remove")
def remove_vc(
    name: str = typer.Argument(..., help="the VC's name"),
    force: bool = typer.Option(
        False, "--force", help="remove it even if its running jobs lose their guarantee"
    ),
    server: str | None = ServerOption,
) -> None:
    """Remove a VC; its GPUs go back to the default VC."""
    client, _ = _client(server)
    with _friendly_errors(), client:
        answer = client.remove_vc(name, force=force)
    _print_answer(answer)


@vc_app.command("config")
def show_config(server: str | None = ServerOption) -> None:
    """Print the HiveD config in force as YAML, with its cell types (edit it, then `set-config`)."""
    client, _ = _client(server)
    with _friendly_errors(), client:
        answer = client.vc_config()
    cells = "derived from the nodes" if answer.get("cells") == "nodes" else "given by the config"
    out = [f"# The scheduler config in force; its cells are {cells}."]
    out += [f"# note: {note}" for note in answer.get("notes") or []]
    typer.echo("\n".join(out))
    typer.echo(str(answer.get("yaml") or ""), nl=False)


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
