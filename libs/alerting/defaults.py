"""The built-in alerting configuration shipped with the platform (rules.yaml beside this file)."""

from __future__ import annotations

from importlib import resources

from libs.alerting.config import AlertConfig, load_config


def default_text() -> str:
    return resources.files("libs.alerting").joinpath("rules.yaml").read_text(encoding="utf-8")


def default_config() -> AlertConfig:
    return load_config(default_text())
