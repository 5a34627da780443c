"""Attack surface on the user's side: job files the CLI cannot send as they are.

`pai job submit` of a Latin-1 file printed a full traceback, and `pai job validate` said OK to a
5 MB file the server then refused. Both commands now read files the same way: text that is not
UTF-8 is a clear problem naming the byte, a file over the server's default body limit a warning.
"""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from libs.protocol.limits import DEFAULT_BODY_BYTES
from pai.cli.main import app
from tests.security.rest_app import one_role_job


def test_submitting_a_latin1_file_says_so_without_a_traceback(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    text = one_role_job("cafe").replace("echo hello", "echo café")
    path.write_bytes(text.encode("latin-1"))
    result = CliRunner().invoke(app, ["job", "submit", str(path), "--server", "http://127.0.0.1:9"])
    assert result.exit_code == 1
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    offset = text.encode("latin-1").index(b"\xe9")
    assert f"is not UTF-8 text (invalid continuation byte at byte {offset}, 0xe9)" in result.output
    assert "save the job as UTF-8" in result.output


def test_validate_warns_about_a_file_over_the_servers_body_limit(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text(one_role_job("big") + "description: " + "x" * DEFAULT_BODY_BYTES + "\n", encoding="utf-8")
    result = CliRunner().invoke(app, ["job", "validate", str(path)])
    assert "warning: the file is" in result.output
    assert f"more than the {DEFAULT_BODY_BYTES:,} bytes a server accepts by default" in result.output
    as_json = CliRunner().invoke(app, ["job", "validate", "--json", str(path)])
    [warning] = json.loads(as_json.stdout)["warnings"]
    assert "PAI_LIMIT_BODY_BYTES" in warning


def test_a_small_valid_file_has_no_warning(tmp_path: Path) -> None:
    path = tmp_path / "small.yaml"
    path.write_text(one_role_job("small"), encoding="utf-8")
    result = CliRunner().invoke(app, ["job", "validate", "--json", str(path)])
    assert result.exit_code == 0
    assert json.loads(result.stdout)["warnings"] == []
