"""The operator's failure rules as the orchestrator sees them: watched in KV, kept on disk for tasks.

Operators change rules at run time (`pai failure-rules set`, `PUT /api/v2/failure-rules`); the
text lands in KV bucket PAI_FAILURE_RULES under key `current`. This module keeps two copies of
the newest good version:

- in memory, the parsed RuleSet the orchestrator uses for platform-level analysis (a task that
  could not start, a process that died without a result);
- on disk, `<data dir>/failure-rules/rules-<revision>.yaml`, written atomically, with the file
  `current` naming it. `build_spec` puts that path in every task spec, so the runtime of the
  next task explains its exit with the new rules. Older files stay (a few) because specs of
  tasks still running name them.

A watch applies changes as they come; `refresh()` before a task starts reads the key once more,
so a change the API has confirmed is in force for every task started after it, even if the
watch has not delivered it yet. A stored value that does not load never replaces the last good
rules: it is logged with every problem and skipped. Deleting the key means the packaged defaults.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import structlog
from nats.js import JetStreamContext
from nats.js.errors import KeyDeletedError, KeyNotFoundError
from nats.js.kv import KeyValue

from libs.backbone.kv import KeyWatch
from libs.backbone.topology import FAILURE_RULES
from libs.failures import RuleError, RuleSet, default_rules, load_rules

log = structlog.get_logger(__name__)

RULES_KEY = "current"
RULES_DIR = "failure-rules"
POINTER_FILE = "current"
KEEP_FILES = 20
"""Rule files kept on disk; a task whose file was pruned falls back to the packaged defaults."""


def rules_dir(data_dir: Path) -> Path:
    return data_dir / RULES_DIR


def current_rules_file(data_dir: Path) -> Path | None:
    """The newest good rule file for task specs; None while the packaged defaults apply."""
    directory = rules_dir(data_dir)
    try:
        name = (directory / POINTER_FILE).read_text(encoding="utf-8").strip()
    except OSError:
        return None
    path = directory / name
    return path if name and path.is_file() else None


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _revision_of(path: Path) -> int:
    digits = path.stem.removeprefix("rules-")
    return int(digits) if digits.isdigit() else -1


class RulesKeeper:
    """The current failure rules: `rules` in memory, `current_rules_file(data_dir)` on disk."""

    def __init__(self, data_dir: Path, kv: KeyValue | None = None) -> None:
        self.data_dir = data_dir
        self._kv = kv
        self._rules = default_rules()
        self._revision = 0
        self._watch = KeyWatch(
            self._bucket,
            RULES_KEY,
            lambda _key, revision, value: self._apply_stored(revision, value),
            what="failure rules",
        )

    @classmethod
    async def open(cls, js: JetStreamContext, data_dir: Path) -> RulesKeeper:
        """Bind to the bucket (provisioned by ensure_topology) and load what is stored now."""
        keeper = cls(data_dir, await js.key_value(FAILURE_RULES.bucket))
        await keeper.refresh()
        if keeper.revision == 0:
            keeper.apply(0, None)  # nothing stored: a pointer left from earlier must not apply
        return keeper

    @property
    def rules(self) -> RuleSet:
        return self._rules

    @property
    def revision(self) -> int:
        """The KV revision last applied (or refused); 0 before any."""
        return self._revision

    async def _bucket(self) -> KeyValue:
        assert self._kv is not None, "watch() returns at once without a bucket"
        return self._kv

    def _apply_stored(self, revision: int, value: bytes | None) -> None:
        self.apply(revision, None if value is None else value.decode("utf-8", "replace"))

    def apply(self, revision: int, text: str | None) -> bool:
        """Adopt the value stored at `revision` (None: deleted); False if older or refused."""
        if revision < self._revision or (revision == self._revision and revision != 0):
            return False
        directory = rules_dir(self.data_dir)
        if text is None:
            self._rules, self._revision = default_rules(), revision
            (directory / POINTER_FILE).unlink(missing_ok=True)
            log.info("failure rules reset to the packaged defaults", revision=revision)
            return True
        try:
            rules = load_rules(text)
        except RuleError as exc:
            # Remember the revision so it is not parsed again, but keep the last good rules.
            self._revision = revision
            log.error(
                "stored failure rules refused; the last good rules stay in force",
                revision=revision,
                problems=[str(problem) for problem in exc.problems],
            )
            return False
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"rules-{revision}.yaml"
        _write_atomically(path, text)
        _write_atomically(directory / POINTER_FILE, path.name)
        self._rules, self._revision = rules, revision
        self._prune(directory)
        log.info("failure rules updated", revision=revision, rules=len(rules.rules), file=str(path))
        return True

    def _prune(self, directory: Path) -> None:
        files = sorted(directory.glob("rules-*.yaml"), key=_revision_of)
        for old in files[:-KEEP_FILES]:
            with contextlib.suppress(OSError):
                old.unlink()

    async def refresh(self) -> None:
        """Read the stored value now and apply it if it is newer than what is in force."""
        if self._kv is None:
            return
        try:
            entry = await self._kv.get(RULES_KEY)
        except KeyDeletedError as exc:
            revision = getattr(exc.entry, "revision", None)
            if revision:
                self.apply(int(revision), None)
            return
        except KeyNotFoundError:
            return
        if entry.revision:
            self._apply_stored(entry.revision, entry.value)

    async def watch(self) -> None:
        """Apply every change of the key until `close`; a broken watch is opened again."""
        if self._kv is not None:
            await self._watch.run()

    @property
    def closed(self) -> bool:
        return self._watch.closed

    async def close(self) -> None:
        """End `watch` (stopping its watcher; a cancel alone may be swallowed by the client)."""
        await self._watch.close()
