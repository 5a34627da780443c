"""`pai user`, `pai group` and `pai token` against a real server."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import jwt
import pytest
from typer.testing import CliRunner

from pai.cli.main import app
from tests.rest.conftest import ADMIN_PASSWORD
from tests.rest.serving import ServerThread

runner = CliRunner()


@pytest.fixture
def cli_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server: ServerThread) -> Path:
    monkeypatch.setenv("PAI_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("PAI_SERVER", server.url)
    monkeypatch.setenv("COLUMNS", "200")
    for name in ("PAI_PASSWORD", "PAI_NEW_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "config"


def pai(*args: str, **env: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args), env=env)
    return result.exit_code, result.output


def test_an_admin_manages_users_groups_and_tokens_from_the_command_line(cli_env: Path) -> None:
    assert pai("login", "--user", "admin", PAI_PASSWORD=ADMIN_PASSWORD)[0] == 0
    code, out = pai(
        "user", "create", "bob", "--vc", "vc2", "--email", "bob@example.com", PAI_NEW_PASSWORD="bob-pw-1"
    )
    assert (code, out.strip()) == (0, "User is created successfully")
    code, out = pai("user", "list")
    assert code == 0
    bob = next(line for line in out.splitlines() if "bob" in line)
    assert "default,vc2" in bob
    assert "bob@example.com" in bob

    assert pai("group", "create", "ops", "--admin", "--description", "operators")[0] == 0
    assert pai("group", "add-user", "ops", "bob")[0] == 0
    assert pai("group", "members", "ops")[1].strip() == "bob (admin)"
    assert "(admin)" in pai("user", "show", "bob")[1]
    assert pai("group", "remove-user", "ops", "bob")[0] == 0
    assert pai("user", "set", "bob", "--no-admin", "--vc", "vc3")[0] == 0
    shown = pai("user", "show", "bob")[1]
    assert "virtual clusters: vc3" in shown
    assert "(admin)" not in shown

    code, token = pai("token", "create")
    token = token.strip()
    assert code == 0
    assert token.count(".") == 2
    assert token in pai("token", "list")[1]
    assert pai("token", "revoke", token)[1].strip() == "revoke successfully"
    assert token not in pai("token", "list")[1]
    # Named, and expiring after the days asked (30 unless told; 0: never).
    code, named = pai("token", "create", "--name", "nightly-ci", "--expires-in", "7")
    assert code == 0
    claims = jwt.decode(named.strip(), options={"verify_signature": False})
    assert claims["exp"] - claims["iat"] == 7 * 86_400
    [line] = [x for x in pai("token", "list")[1].splitlines() if x.startswith(named.strip())]
    expires = datetime.fromtimestamp(claims["exp"], UTC).strftime("%Y-%m-%d %H:%M UTC")
    assert line.split("  ")[1:] == ["nightly-ci", "application", f"expires {expires}"]
    code, forever = pai("token", "create", "--expires-in", "0")
    assert "exp" not in jwt.decode(forever.strip(), options={"verify_signature": False})
    assert f"{forever.strip()}  -  application  never expires" in pai("token", "list")[1]

    code, out = pai("user", "delete", "admin")
    assert code == 1
    assert "RemoveAdminError" in out
    assert pai("user", "delete", "bob")[0] == 0
    code, out = pai("user", "show", "bob")
    assert code == 1
    assert "NoUserError" in out
