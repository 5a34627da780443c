"""`pai job validate` prints a verdict per file and exits 1 when any file is invalid."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from pai.cli.main import app
from tests.protocol.jobtexts import BASE_JOB, job, to_yaml


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_valid_files_print_ok_and_exit_zero(tmp_path: Path) -> None:
    good = write(tmp_path, "good.yaml", to_yaml(BASE_JOB))
    result = CliRunner().invoke(app, ["job", "validate", good])
    assert result.exit_code == 0
    assert result.stdout.strip() == f"{good}: OK"


def test_problems_are_printed_per_file_with_path_and_fix(tmp_path: Path) -> None:
    good = write(tmp_path, "good.yaml", to_yaml(BASE_JOB))
    bad = write(tmp_path, "bad.yaml", to_yaml(job(name="bad name!")))
    result = CliRunner().invoke(app, ["job", "validate", good, bad])
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert lines[0] == f"{good}: OK"
    assert lines[1] == f"{bad}: 1 problem"
    assert lines[2].startswith("  name: 'bad name!' is not a valid name")
    assert lines[3].startswith("      fix: ")


def test_json_prints_one_object_per_file_in_the_given_order(tmp_path: Path) -> None:
    good = write(tmp_path, "good.yaml", to_yaml(BASE_JOB))
    bad = write(tmp_path, "bad.yml", "name: [\n")
    missing = str(tmp_path / "missing.yaml")
    result = CliRunner().invoke(app, ["job", "validate", "--json", good, bad, missing])
    assert result.exit_code == 1
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["file"] for r in records] == [good, bad, missing]
    assert [r["valid"] for r in records] == [True, False, False]
    assert records[0]["problems"] == []
    for record in records[1:]:
        assert record["problems"]
        for problem in record["problems"]:
            assert set(problem) == {"path", "message", "hint"}
    assert "line" in records[1]["problems"][0]["message"]
    assert "cannot read" in records[2]["problems"][0]["message"]


def test_a_file_that_is_not_utf8_is_a_problem_of_that_file(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"name: caf\xe9\n")
    result = CliRunner().invoke(app, ["job", "validate", "--json", str(path)])
    assert result.exit_code == 1
    assert "UTF-8" in json.loads(result.stdout)["problems"][0]["message"]
