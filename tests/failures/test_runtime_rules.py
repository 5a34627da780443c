"""Failure rules changed at run time: the orchestrator's keeper of the rules in KV and on disk.

The keeper runs against a real nats-server: what an operator stores under PAI_FAILURE_RULES
becomes the in-memory rules and the file every later task spec names, and the runtime's
analysis with that file gives the new rule's verdict. A stored value that does not load never
replaces the last good rules; deleting the key brings back the packaged defaults.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from nats.js.kv import KeyValue

from libs.backbone.connecting import Bus
from libs.backbone.topology import FAILURE_RULES, ensure_topology
from libs.failures import default_rules, default_rules_text
from runtime.analysis import analyze_exit
from services.orchestrator.adapters.rules import (
    POINTER_FILE,
    RULES_KEY,
    RulesKeeper,
    current_rules_file,
    rules_dir,
)
from tests.support.waiting import eventually

DATASET_RULE = """\
- code: 3
  phrase: DatasetGone
  issuer: USER_CONTAINER
  causer: USER_CONTAINER
  type: USER_FAILURE
  stage: RUNNING
  behavior: PERMANENT
  reaction: NEVER_RETRY
  reason: "The training data set was removed."
  solution: ["Restore the data set, then submit the job again."]
  pattern:
    runtimeContainerPatterns:
    - userLogRegex: 'DATASET GONE'
"""


def rules_with(extra: str) -> str:
    """The packaged rules with one more rule first (first match wins)."""
    head, _, tail = default_rules_text().partition("spec:\n")
    return f"{head}spec:\n{extra}\n{tail}"


@pytest.fixture
async def kv(bus: Bus) -> KeyValue:
    await ensure_topology(bus.js)
    return await bus.js.key_value(FAILURE_RULES.bucket)


@pytest.fixture
async def keeper(bus: Bus, kv: KeyValue, tmp_path: Path) -> AsyncIterator[RulesKeeper]:
    keeper = await RulesKeeper.open(bus.js, tmp_path)
    watching = asyncio.create_task(keeper.watch())
    try:
        yield keeper
    finally:
        await keeper.close()
        await asyncio.wait_for(watching, 10)  # close alone must end the watch


def verdict_phrase(data_dir: Path, exit_code: int, log: str) -> str:
    """What the runtime of a task started now would say about this exit."""
    result = analyze_exit(exit_code, log, current_rules_file(data_dir))
    assert result is not None
    return str(result["phrase"])


async def test_nothing_stored_means_the_packaged_defaults(keeper: RulesKeeper, tmp_path: Path) -> None:
    assert keeper.revision == 0
    assert keeper.rules == default_rules()
    assert current_rules_file(tmp_path) is None
    assert verdict_phrase(tmp_path, 3, "DATASET GONE") == "UnrecognisedFailure"


async def test_a_stored_rule_reaches_memory_and_the_file_the_next_task_spec_names(
    keeper: RulesKeeper, kv: KeyValue, tmp_path: Path
) -> None:
    revision = await kv.put(RULES_KEY, rules_with(DATASET_RULE).encode())
    await eventually(lambda: _revision(keeper), lambda seen: seen == revision)
    path = current_rules_file(tmp_path)
    assert path == rules_dir(tmp_path) / f"rules-{revision}.yaml"
    assert keeper.rules.rules[0].phrase == "DatasetGone"
    assert verdict_phrase(tmp_path, 3, "loading\nDATASET GONE\n") == "DatasetGone"
    # Unrelated exits keep their packaged meaning.
    assert verdict_phrase(tmp_path, 3, "something else") == "UnrecognisedFailure"


async def test_refresh_applies_a_change_before_the_watch_delivers_it(
    bus: Bus, kv: KeyValue, tmp_path: Path
) -> None:
    keeper = await RulesKeeper.open(bus.js, tmp_path)  # no watch running at all
    revision = await kv.put(RULES_KEY, rules_with(DATASET_RULE).encode())
    await keeper.refresh()
    assert keeper.revision == revision
    assert verdict_phrase(tmp_path, 3, "DATASET GONE") == "DatasetGone"


async def test_a_bad_stored_value_never_replaces_the_last_good_rules(
    keeper: RulesKeeper, kv: KeyValue, tmp_path: Path
) -> None:
    good = await kv.put(RULES_KEY, rules_with(DATASET_RULE).encode())
    await eventually(lambda: _revision(keeper), lambda seen: seen == good)
    bad = await kv.put(RULES_KEY, b"spec:\n- code: not-a-number\n  phrase: Broken\n")
    await eventually(lambda: _revision(keeper), lambda seen: seen == bad)
    assert keeper.rules.rules[0].phrase == "DatasetGone"
    assert current_rules_file(tmp_path) == rules_dir(tmp_path) / f"rules-{good}.yaml"
    assert not (rules_dir(tmp_path) / f"rules-{bad}.yaml").exists()


async def test_deleting_the_key_brings_back_the_packaged_defaults(
    keeper: RulesKeeper, kv: KeyValue, tmp_path: Path
) -> None:
    good = await kv.put(RULES_KEY, rules_with(DATASET_RULE).encode())
    await eventually(lambda: _revision(keeper), lambda seen: seen == good)
    await kv.delete(RULES_KEY)
    await eventually(lambda: _revision(keeper), lambda seen: seen > good)
    assert keeper.rules == default_rules()
    assert current_rules_file(tmp_path) is None
    assert verdict_phrase(tmp_path, 3, "DATASET GONE") == "UnrecognisedFailure"


async def test_a_restarted_keeper_forgets_a_file_left_from_rules_deleted_meanwhile(
    bus: Bus, kv: KeyValue, tmp_path: Path
) -> None:
    first = await RulesKeeper.open(bus.js, tmp_path)
    await kv.put(RULES_KEY, rules_with(DATASET_RULE).encode())
    await first.refresh()
    assert current_rules_file(tmp_path) is not None
    await kv.purge(RULES_KEY)  # a purge leaves no value behind, as if nothing was ever stored
    second = await RulesKeeper.open(bus.js, tmp_path)
    assert second.rules == default_rules()
    assert current_rules_file(tmp_path) is None


def test_an_older_revision_never_replaces_a_newer_one(tmp_path: Path) -> None:
    keeper = RulesKeeper(tmp_path)
    assert keeper.apply(5, rules_with(DATASET_RULE))
    assert not keeper.apply(4, default_rules_text())
    assert not keeper.apply(5, default_rules_text())
    assert keeper.rules.rules[0].phrase == "DatasetGone"
    assert (rules_dir(tmp_path) / POINTER_FILE).read_text() == "rules-5.yaml"


async def _revision(keeper: RulesKeeper) -> int:
    return keeper.revision
