"""Reference data beside the repository (`../shared/anchors`): where it is, and what to do without it.

OpenPAI's schema, swagger, exit spec and reference jobs, and HiveD's test sequences, are read
from `shared/anchors` next to the repository's root, never copied into it. A fresh clone has no
such folder: the tests that read it skip, each with a reason naming the folder it looked for,
and collection never fails. CI has the folder and sets `PAI_REQUIRE_ANCHORS=1`, which turns a
missing folder into a failure instead, so there every one of these tests runs.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NoReturn

import pytest

# Where the reference data is: beside the checkout, unless PAI_ANCHORS names it (a copy of the
# tests elsewhere, such as a mutation run's snapshot, reads the same folder).
ANCHORS = Path(
    os.environ.get("PAI_ANCHORS") or Path(__file__).resolve().parents[2].parent / "shared" / "anchors"
)
REQUIRE_ENV = "PAI_REQUIRE_ANCHORS"


def anchor(*parts: str) -> Path:
    """A path inside `../shared/anchors` (it may not exist)."""
    return ANCHORS.joinpath(*parts)


def required() -> bool:
    return os.environ.get(REQUIRE_ENV, "").strip().lower() in ("1", "true", "yes")


def _reason(path: Path) -> str:
    relative = Path("..", "shared", "anchors", *path.relative_to(ANCHORS).parts)
    return (
        f"reference data {relative} is not beside this checkout (looked for {path}); "
        f"CI runs this test with it ({REQUIRE_ENV}=1)"
    )


def present(*parts: str) -> bool:
    """Whether the anchor exists; with PAI_REQUIRE_ANCHORS a missing one fails the test run."""
    path = anchor(*parts)
    if path.exists():
        return True
    if required():
        raise FileNotFoundError(f"{REQUIRE_ENV} is set but {_reason(path)}")
    return False


def needs(*parts: str) -> pytest.MarkDecorator:
    """A mark skipping a test when the anchor is missing (a failure instead under PAI_REQUIRE_ANCHORS)."""
    path = anchor(*parts)
    return pytest.mark.skipif(not present(*parts), reason=_reason(path))


def skip_without(*parts: str) -> Path:
    """The anchor's path; inside a test or fixture, skip the test when it is missing."""
    if not present(*parts):
        _skip(anchor(*parts))
    return anchor(*parts)


def skip_module_without(*parts: str) -> Path:
    """The anchor's path; at a module's top, skip the whole module when it is missing."""
    if not present(*parts):
        pytest.skip(_reason(anchor(*parts)), allow_module_level=True)
    return anchor(*parts)


def _skip(path: Path) -> NoReturn:
    pytest.skip(_reason(path))
