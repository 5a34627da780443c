"""`pai failure-rules`: check, try out, read and change the platform's failure rules.

Operators change failure rules by editing YAML; `check` shows every mistake (and suspicious but
legal constructs) before the file reaches the runtime or the orchestrator, and `explain` answers
"what would the platform say about exit code N with this log" without running a job.
`get`, `set FILE` and `reset` read and change the rules of a running platform through its REST
API (changing them needs an admin login): the next failure uses the new rules, no restart.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer

from libs.failures import (
    DEFAULT_TAIL_KIB,
    PodStatus,
    RuleError,
    RuleProblem,
    RuleSet,
    analyze,
    check_rules,
    default_rules,
    load_rules,
    retry_decision,
    retry_kind,
)
from pai.cli.client import ApiError, ClientError, PaiClient
from pai.cli.common import ServerOption, api_error_lines
from pai.cli.common import _client as logged_in_client

failure_rules_app = typer.Typer(no_args_is_help=True, help="Check and try out failure-analysis rules.")


def _read(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        typer.echo(f"error: cannot read the {what} {str(path)!r}: {exc.strerror or exc}", err=True)
        raise typer.Exit(2) from None


def _read_tail(path: Path, what: str) -> str:
    """The end of a log file: analysis reads only its last KiBs, so a huge log is not loaded."""
    keep = 4 * DEFAULT_TAIL_KIB * 1024  # room for multi-byte characters
    try:
        with path.open("rb") as handle:
            size = handle.seek(0, 2)
            handle.seek(max(0, size - keep))
            return handle.read().decode("utf-8", errors="replace")
    except OSError as exc:
        typer.echo(f"error: cannot read the {what} {str(path)!r}: {exc.strerror or exc}", err=True)
        raise typer.Exit(2) from None


def _load(path: Path) -> RuleSet:
    try:
        return load_rules(_read(path, "rule file"))
    except RuleError as exc:
        for problem in exc.problems:
            typer.echo(f"error: {problem}", err=True)
        raise typer.Exit(1) from None


@failure_rules_app.command()
def check(file: Annotated[Path, typer.Argument(help="A rule file in the exit-spec format.")]) -> None:
    """Load a rule file and print its problems, or OK."""
    rules = _load(file)
    warnings = check_rules(rules)
    for warning in warnings:
        typer.echo(f"warning: {warning}")
    suffix = f", {len(warnings)} warning(s)" if warnings else ""
    typer.echo(f"OK: {len(rules.rules)} rules, version {rules.version}{suffix}")


@failure_rules_app.command()
def explain(
    exit_code: Annotated[int | None, typer.Option("--exit-code", help="The exit code to classify.")] = None,
    log: Annotated[Path | None, typer.Option("--log", help="The user's log (its end is read).")] = None,
    platform_log: Annotated[Path | None, typer.Option("--platform-log", help="The runtime's log.")] = None,
    stage: Annotated[str, typer.Option("--stage", help="container (runtime) or platform (orchestrator).")] = (
        "container"
    ),
    pod_reason: Annotated[str, typer.Option("--pod-reason", help="Platform stage: status reason.")] = "",
    rules_file: Annotated[
        Path | None, typer.Option("--rules", help="A rule file; default: built-in.")
    ] = None,
) -> None:
    """Print which rule an exit code (and log) matches, and what a retry policy does with it."""
    if stage not in ("container", "platform"):
        typer.echo(f"error: --stage must be 'container' or 'platform', not {stage!r}", err=True)
        raise typer.Exit(2)
    rules = default_rules() if rules_file is None else _load(rules_file)
    verdict = analyze(
        rules,
        exit_code=exit_code,
        user_log="" if log is None else _read_tail(log, "log"),
        platform_log="" if platform_log is None else _read_tail(platform_log, "platform log"),
        stage="container" if stage == "container" else "platform",
        pod=PodStatus(reason=pod_reason) if pod_reason else None,
    )
    rule = "none (built-in answer)" if verdict.rule_code is None else str(verdict.rule_code)
    typer.echo(f"code:         {verdict.code} {verdict.phrase}")
    typer.echo(f"rule:         {rule}")
    typer.echo(f"type:         {verdict.type} ({verdict.category})")
    typer.echo(f"retry:        {retry_decision(verdict)}, counted as {retry_kind(verdict)}")
    typer.echo(f"matched line: {verdict.matched_line if verdict.matched_line is not None else '-'}")
    typer.echo(f"reason:       {verdict.reason}")
    for step in verdict.solution:
        typer.echo(f"solution:     {step}")


@contextmanager
def _remote_errors() -> Iterator[None]:
    """One readable line per problem on stderr, never a stack trace (exit 2 for refused rules)."""
    try:
        yield
    except ApiError as exc:
        problems = []
        for raw in exc.problems:
            try:
                problems.append(str(RuleProblem.model_validate(raw)))
            except ValueError:
                problems.append(str(raw))
        for line in api_error_lines(exc, problems):
            typer.echo(line, err=True)
        raise typer.Exit(2 if exc.problems and exc.status != 401 else 1) from None
    except ClientError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None


def _client(server: str | None) -> PaiClient:
    client, _ = logged_in_client(server)
    return client


@failure_rules_app.command("get")
def get_rules(
    server: str | None = ServerOption,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write the rules to this file instead.")
    ] = None,
) -> None:
    """Print the failure rules the platform uses now (the packaged defaults when none were set)."""
    with _remote_errors(), _client(server) as client:
        text, version = client.failure_rules()
    if output is None:
        typer.echo(text, nl=not text.endswith("\n"))
        return
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as exc:
        typer.echo(f"error: cannot write {str(output)!r}: {exc.strerror or exc}", err=True)
        raise typer.Exit(2) from None
    where = f"version {version}" if version else "the packaged defaults"
    typer.echo(f"wrote the failure rules ({where}) to {output}")


@failure_rules_app.command("set")
def set_rules(
    file: Annotated[Path, typer.Argument(help="A rule file in the exit-spec format.")],
    server: str | None = ServerOption,
) -> None:
    """Replace the platform's failure rules (admin); the next failure uses them, no restart."""
    text = _read(file, "rule file")
    with _remote_errors(), _client(server) as client:
        answer = client.set_failure_rules(text)
    for warning in answer.get("warnings") or []:
        typer.echo(f"warning: {warning}")
    typer.echo(f"OK: {answer.get('rules')} rules in force, version {answer.get('version')}")


@failure_rules_app.command("reset")
def reset_rules(server: str | None = ServerOption) -> None:
    """Go back to the packaged failure rules (admin)."""
    with _remote_errors(), _client(server) as client:
        answer = client.reset_failure_rules()
    typer.echo(f"OK: the packaged defaults are in force ({answer.get('rules')} rules)")
