"""Secrets: read from their file, rendered into commands at the last moment, masked everywhere else.

The protocol lets commands say ``<% $secrets.NAME %>``. Everything upstream keeps the reference;
only the runtime, right before it runs a command, replaces it with the value. Every byte the
runtime writes to a log goes through a Masker so a value the user command prints is hidden too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

TYPE_CHECKING = False  # not `typing`'s: importing it costs every task's start-up
if TYPE_CHECKING:
    from typing import Any

MASK = "******"
_REFERENCE = re.compile(r"<%\s*\$secrets\.([A-Za-z0-9_.-]+?)\s*%>")


class SecretsError(Exception):
    """The secrets file is unreadable or malformed, or a referenced secret does not exist."""


def load_secrets(path: Path | None) -> dict[str, str]:
    """The secrets mapping from a JSON or YAML file; no file means no secrets."""
    if path is None:
        return {}
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SecretsError(f"cannot read the secrets file {path}: {exc.strerror}") from exc
    try:
        data: Any = json.loads(text)
    except json.JSONDecodeError:
        import yaml  # only for a YAML file: every task pays for what start-up imports

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            # The parser's message may quote the file, and the file is secret.
            raise SecretsError(f"the secrets file {path} is neither JSON nor YAML") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SecretsError(f"the secrets file {path} must hold a mapping of names to values")
    return {str(k): _as_text(v) for k, v in data.items()}


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value) if isinstance(value, dict | list) else str(value)


def referenced_secrets(text: str) -> set[str]:
    return set(_REFERENCE.findall(text))


def render_secrets(text: str, secrets: Mapping[str, str]) -> str:
    """Replace every ``<% $secrets.NAME %>`` with its value; an unknown NAME is an error."""
    missing = sorted(referenced_secrets(text) - secrets.keys())
    if missing:
        raise SecretsError(
            f"the command references secrets {missing} that the job does not define; "
            "add them to the job's secrets section or remove the references"
        )
    return _REFERENCE.sub(lambda m: secrets[m.group(1)], text)


def render_in(value: Any, secrets: Mapping[str, str]) -> Any:
    """render_secrets applied to every string inside nested plugin parameters."""
    if isinstance(value, str):
        return render_secrets(value, secrets)
    if isinstance(value, list):
        return [render_in(v, secrets) for v in value]
    if isinstance(value, dict):
        return {k: render_in(v, secrets) for k, v in value.items()}
    return value


class Masker:
    """Hides secret values in text written to logs.

    Every non-empty value is masked, however short: a garbled log line is better than a leaked
    secret. Multi-line values are also masked line by line, because logs are processed per line.
    """

    def __init__(self, values: Iterable[str]) -> None:
        needles: set[str] = set()
        for value in values:
            if value:
                needles.add(value)
                needles.update(line for line in value.splitlines() if line.strip())
        # Longest first, so a secret that contains another is masked whole.
        ordered = sorted(needles, key=len, reverse=True)
        self._text = re.compile("|".join(re.escape(n) for n in ordered)) if ordered else None
        self._bytes = re.compile(b"|".join(re.escape(n.encode()) for n in ordered)) if ordered else None

    def text(self, text: str) -> str:
        return self._text.sub(MASK, text) if self._text else text

    def data(self, data: bytes) -> bytes:
        return self._bytes.sub(MASK.encode(), data) if self._bytes else data
