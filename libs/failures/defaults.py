"""The rule set the platform ships, read once from the `rules.yaml` packaged beside this module.

The runtime and the orchestrator start from these rules; operators may pass their own file
instead (`load_rules`), checked with `pai failure-rules check FILE` before it is deployed.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files

from libs.failures.models import RuleSet, load_rules


def default_rules_text() -> str:
    """The packaged rule file as text, for tools that show or copy it."""
    return files("libs.failures").joinpath("rules.yaml").read_text(encoding="utf-8")


@cache
def default_rules() -> RuleSet:
    """The packaged rules, loaded and compiled once per process."""
    return load_rules(default_rules_text())
