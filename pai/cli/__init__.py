"""The `pai` command line: one typer application (main.py) over the REST API and the platform."""
