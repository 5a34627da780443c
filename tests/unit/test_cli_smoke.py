"""The command line starts and answers --help without a platform running."""

from typer.testing import CliRunner

from pai.cli.main import app


def test_pai_version_prints_the_installed_version() -> None:
    result = CliRunner().invoke(app, ["version"])
    assert result.exit_code == 0
    assert result.stdout.strip() == "0.1.0"
