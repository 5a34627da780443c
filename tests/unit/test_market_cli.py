"""`pai market`'s own checks, before anything is sent: names, audiences and refused flag mixes."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from pai.cli.main import app
from pai.cli.market import rename_job, visibility

JOB = "protocolVersion: 2\nname: hello-world  \ntype: job\ntaskRoles:\n  main:\n    name: kept\n"


def test_renaming_a_job_changes_only_its_top_level_name() -> None:
    renamed = rename_job(JOB, "hello-world-x1")
    assert renamed.splitlines()[1] == "name: hello-world-x1"
    assert "    name: kept" in renamed
    assert renamed.replace("hello-world-x1", "hello-world  ") == JOB


def test_a_job_without_a_top_level_name_cannot_be_renamed() -> None:
    with pytest.raises(typer.Exit):
        rename_job("protocolVersion: 2\n  name: nested\n", "x")


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        ({"isPrivate": True, "isPublic": False, "groupList": []}, "private"),
        ({"isPrivate": False, "isPublic": True, "groupList": []}, "public"),
        ({"isPrivate": False, "isPublic": False, "groupList": ["vision", "nlp"]}, "group vision,nlp"),
    ],
    ids=["private", "public", "groups"],
)
def test_the_audience_reads_in_words(item: dict[str, object], expected: str) -> None:
    assert visibility(item) == expected


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["use", "x", "--wait"], "--wait follows a submitted job: add --submit."),
        (["list", "--type", "model"], "--type 'model' is not one of: template, data."),
        (["list", "--visibility", "world"], "--visibility 'world' is not one of: private, group, public."),
        (
            ["publish", "--type", "data", "--name", "d"],
            "a data item needs --data-type storage|url and --data-url.",
        ),
        (["publish"], "a template needs its job YAML: pai market publish FILE."),
    ],
    ids=[
        "wait-without-submit",
        "unknown-type",
        "unknown-visibility",
        "data-without-url",
        "template-without-file",
    ],
)
def test_refused_flag_mixes_say_what_to_do(args: list[str], message: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["market", *args], env={"PAI_CONFIG_DIR": str(tmp_path), "PAI_SERVER": "http://127.0.0.1:9"}
    )
    assert result.exit_code == 1
    assert message in result.output
    assert "Traceback" not in result.output


def test_only_one_audience_may_be_chosen(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(JOB)
    result = CliRunner().invoke(
        app, ["market", "publish", str(job), "--private", "--public"], env={"PAI_CONFIG_DIR": str(tmp_path)}
    )
    assert result.exit_code == 1
    assert "choose one of --private, --group and --public." in result.output
