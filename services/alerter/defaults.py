"""The built-in alerting configuration shipped with the platform (rules.yaml beside this file)."""

from __future__ import annotations

from importlib import resources

from services.alerter.core.config import AlertConfig, load_config


def default_text() -> str:
    return resources.files("services.alerter").joinpath("rules.yaml").read_text(encoding="utf-8")


def default_config() -> AlertConfig:
    return load_config(default_text())
