"""Job secrets sealed at rest: what KV ``PAI_SECRETS`` holds is ciphertext, never the values.

rest seals a job's secrets before it puts them in the bucket; the orchestrator opens them when
it writes a task's private secrets file. Both hold the key; no other service does. The cipher
is Fernet (AES-128-CBC with HMAC-SHA256, from the ``cryptography`` package), so a value
changed or cut in the bucket is refused rather than misread. A sealed value starts with
``fernet:``; a value without it is read as the plain JSON older versions wrote, so secrets
stored before the upgrade still reach their tasks (and are sealed when written again).

The key is a setting (``PAI_SECRETS_KEY``, on Kubernetes from the credentials Secret) or a file
(``PAI_SECRETS_KEY_FILE``; by default ``secrets.key`` in the data dir, created at first use,
0600), so the embedded platform needs no configuration.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from cryptography.fernet import Fernet, InvalidToken

PREFIX = b"fernet:"
KEY_FILE = "secrets.key"


class SealError(ValueError):
    """A sealed value cannot be opened (another key, or changed); the message says which."""


class SecretsCipher:
    """Seals and opens a job's secrets (a JSON mapping)."""

    def __init__(self, key: bytes | str) -> None:
        try:
            self._fernet = Fernet(key)
        except (ValueError, TypeError) as exc:
            raise SealError(
                "the job secrets key is not a Fernet key (32 url-safe base64-encoded bytes); "
                "fix PAI_SECRETS_KEY or the key file"
            ) from exc

    def seal(self, values: dict[str, Any]) -> bytes:
        return PREFIX + self._fernet.encrypt(json.dumps(values).encode())

    def open(self, stored: bytes) -> dict[str, Any]:
        """The mapping a stored value holds, sealed or (from older versions) plain JSON."""
        if stored.startswith(PREFIX):
            try:
                plain = self._fernet.decrypt(stored[len(PREFIX) :])
            except InvalidToken as exc:
                raise SealError("job secrets sealed with another key, or changed in the bucket") from exc
        else:
            plain = stored or b"{}"
        value = json.loads(plain)
        if not isinstance(value, dict):
            raise SealError("job secrets are not a mapping")
        return value


def key_from_file(path: Path) -> bytes:
    """The key in ``path``, or a new one written there (0600) when the file does not exist."""
    try:
        return path.read_bytes().strip()
    except FileNotFoundError:
        pass
    key = Fernet.generate_key()
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_bytes().strip()  # another process created it first
    with os.fdopen(fd, "wb") as f:
        f.write(key + b"\n")
    return key


def cipher_for(key: str | None, key_file: Path | None, data_dir: Path) -> SecretsCipher:
    """The cipher the settings name: the key itself, else its file (default: in the data dir)."""
    if key:
        return SecretsCipher(key)
    return SecretsCipher(key_from_file(key_file or data_dir / KEY_FILE))
