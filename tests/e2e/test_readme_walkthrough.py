"""README.md's "Your first job", run as written: each command of its block, in order, on a platform
as `make up` starts it (OpenPAI's rate limits included), with what each step must print."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tests.e2e.platform import ADMIN_PASSWORD, REPO, Cli, running_platform

pytestmark = pytest.mark.timeout(240)

# What each step of the walkthrough prints (stdout), by the command's words before its arguments.
EXPECTED = {
    ("login",): "logged in to",
    ("job", "submit"): "submitted admin~server-workers (id ",
    ("job", "list"): "admin~server-workers",
    ("job", "status"): "job        admin~server-workers",
    ("job", "logs"): "server heard from ['worker-0', 'worker-1']",
    ("job", "stop"): "admin~server-workers has already finished (SUCCEEDED); there is nothing to stop.",
    ("vc", "show"): "VC default:",
}


def walkthrough() -> list[list[str]]:
    """The `pai` commands of the README's first code block under "Your first job", comments cut."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Your first job", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"\n\n((?:    .*\n)+)", section)
    assert block, "the section has an indented code block"
    commands = []
    for line in block.group(1).splitlines():
        words = shlex.split(line.strip(), comments=True)
        if not words or words[0] == "export":  # the PATH set-up: the test runs this checkout's pai
            continue
        assert words[0] == "pai", f"the walkthrough runs `pai` only; teach this test {line.strip()!r}"
        commands.append(words[1:])
    return commands


def expected(words: list[str]) -> str:
    for prefix, text in EXPECTED.items():
        if tuple(words[: len(prefix)]) == prefix:
            return text
    raise AssertionError(f"no expected output for README step `pai {' '.join(words)}`; add it to EXPECTED")


async def test_the_readme_first_job_walkthrough_runs_as_written(tmp_path: Path) -> None:
    steps = walkthrough()
    assert [s[:2] for s in steps][:2] == [["login", "--user"], ["job", "submit"]]
    assert ["job", "logs", "server-workers", "--role", "server", "-f"] in steps
    async with running_platform(tmp_path / "data", api_per_min=None) as platform:
        cli = Cli(platform.info.api_url, tmp_path / "config")
        job_id = ""
        for words in steps:
            if words[:2] == ["job", "stop"] and job_id:
                # The README stops a job that has finished: the step after following its log.
                # `pai job stop` asks the API, whose read model follows the bus's completion.
                await platform.completed(job_id)
                await platform.detail("server-workers", final=True)
            code, out, err = await cli.run(*words, env={"PAI_PASSWORD": ADMIN_PASSWORD})
            step = f"pai {' '.join(words)}"
            assert code == 0, f"{step}: exit {code}\n{out}\n{err}"
            assert "Too many requests" not in out + err, step
            assert "slow down" not in err, step
            assert expected(words) in out, f"{step} printed:\n{out}\n{err}"
            if words[:2] == ["job", "submit"]:
                job_id = out.split("(id ")[1].split(")")[0]
            if words[:2] == ["job", "logs"]:
                assert out.count("server heard from") == 1, "the log is printed once"
            if words[:2] == ["vc", "show"]:
                assert re.search(r"│ \S+ +│ \d+/\d+ ", out), f"a node row with CPU in use of offered:\n{out}"
        completed = await platform.completed(job_id)
        assert completed.state == "SUCCEEDED", "the stop step changed nothing"
