"""Reading the secrets bucket's raw values yields ciphertext; only the key opens them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from libs.backbone.sealing import KEY_FILE, PREFIX, SealError, SecretsCipher, cipher_for, key_from_file

SECRETS = {"registry_password": "hunter2-registry", "token": "tok-0123456789"}


def test_a_sealed_value_shows_none_of_the_secrets(tmp_path: Path) -> None:
    cipher = cipher_for(None, None, tmp_path)
    sealed = cipher.seal(SECRETS)
    assert sealed.startswith(PREFIX)
    for value in SECRETS.values():
        assert value.encode() not in sealed
    assert cipher.open(sealed) == SECRETS


def test_the_key_is_private_to_the_platform_and_kept(tmp_path: Path) -> None:
    first = key_from_file(tmp_path / KEY_FILE)
    assert (tmp_path / KEY_FILE).stat().st_mode & 0o777 == 0o600
    assert key_from_file(tmp_path / KEY_FILE) == first


def test_another_key_or_a_changed_value_is_refused(tmp_path: Path) -> None:
    sealed = cipher_for(None, None, tmp_path / "a").seal(SECRETS)
    with pytest.raises(SealError, match="another key"):
        cipher_for(None, None, tmp_path / "b").open(sealed)
    own = cipher_for(None, None, tmp_path / "a")
    with pytest.raises(SealError):
        own.open(sealed[:-4] + b"AAAA")


def test_secrets_stored_in_plain_by_an_older_version_are_still_read(tmp_path: Path) -> None:
    assert cipher_for(None, None, tmp_path).open(json.dumps(SECRETS).encode()) == SECRETS


def test_a_key_that_is_not_a_fernet_key_is_named() -> None:
    with pytest.raises(SealError, match="PAI_SECRETS_KEY"):
        SecretsCipher("not-a-key")
