"""Task uids per tenant: one each, kept for good, never the same for two platform users, on one
platform or two sharing a machine; a range used up or a claim of another says so and why."""

from __future__ import annotations

import json
import os
import pwd
from pathlib import Path

import pytest

from services.orchestrator.adapters.isolation import (
    TaskUserError,
    TenantUids,
    UidsExhaustedError,
    parse_uid_range,
    resolve_task_users,
)

LOW = 1_800_500_000


def uids(tmp_path: Path, name: str, size: int = 10) -> TenantUids:
    data_dir = tmp_path / name
    data_dir.mkdir(exist_ok=True)
    return TenantUids(data_dir, tmp_path / "registry", (LOW, LOW + size - 1))


def test_each_tenant_has_a_uid_of_its_own_and_keeps_it(tmp_path: Path) -> None:
    platform = uids(tmp_path, "one")
    alice, bob = platform.user("alice"), platform.user("bob")
    assert alice.uid != bob.uid
    assert alice.gid == alice.uid
    assert platform.user("alice") == alice
    # A restarted platform reads who has which from its data dir.
    assert uids(tmp_path, "one").user("bob") == bob
    assert json.loads((tmp_path / "one" / "task-users.json").read_text()) == {
        "alice": alice.uid,
        "bob": bob.uid,
    }
    assert (tmp_path / "one" / "task-users.json").stat().st_mode & 0o077 == 0


def test_two_platforms_on_one_machine_never_hand_out_the_same_uid(tmp_path: Path) -> None:
    first, second = uids(tmp_path, "first"), uids(tmp_path, "second")
    given = [first.user("alice").uid, second.user("alice").uid, first.user("bob").uid, second.user("bob").uid]
    assert len(set(given)) == 4
    claim = json.loads((tmp_path / "registry" / str(given[1])).read_text())
    assert claim == {"dataDir": str((tmp_path / "second").resolve()), "user": "alice"}


def test_a_uid_the_machine_has_a_user_for_is_never_given(tmp_path: Path) -> None:
    nobody = pwd.getpwnam("nobody").pw_uid
    assert not any(entry.pw_uid == nobody + 1 for entry in pwd.getpwall())
    platform = TenantUids(tmp_path, tmp_path / "registry", (nobody, nobody + 1))
    assert platform.user("alice").uid == nobody + 1


def test_a_used_up_range_names_the_setting_and_the_fix(tmp_path: Path) -> None:
    platform = uids(tmp_path, "small", size=2)
    platform.user("alice")
    platform.user("bob")
    with pytest.raises(
        UidsExhaustedError, match=r"every task uid of PAI_TASK_UIDS=1800500000-1800500001 is taken"
    ):
        platform.user("carol")


def test_a_uid_claimed_by_another_platform_is_not_shared(tmp_path: Path) -> None:
    platform = uids(tmp_path, "mine")
    alice = platform.user("alice")
    (tmp_path / "registry" / str(alice.uid)).write_text(json.dumps({"dataDir": "/elsewhere", "user": "eve"}))
    with pytest.raises(
        TaskUserError, match=f"task uid {alice.uid} of user alice is claimed by another platform"
    ):
        uids(tmp_path, "mine").user("alice")


def test_a_wiped_registry_is_claimed_again(tmp_path: Path) -> None:
    platform = uids(tmp_path, "mine")
    alice = platform.user("alice")
    (tmp_path / "registry" / str(alice.uid)).unlink()
    assert uids(tmp_path, "mine").user("alice") == alice
    assert (tmp_path / "registry" / str(alice.uid)).exists()


@pytest.mark.parametrize(
    "text",
    ["1800000000", "a-b", "10-20", "20000-10000", "1-99999999999"],
    ids=["no dash", "not numbers", "below login users", "first above last", "past the largest uid"],
)
def test_a_wrong_uid_range_is_refused_naming_the_setting(text: str) -> None:
    with pytest.raises(TaskUserError, match=f"PAI_TASK_UIDS={text}"):
        parse_uid_range(text)


@pytest.mark.skipif(os.geteuid() != 0, reason="tenants' uids need root")
def test_auto_gives_tenants_uids_on_a_root_platform_and_names_the_range(tmp_path: Path) -> None:
    users = resolve_task_users(
        "auto", tmp_path, uid_range="1800500000-1800500099", registry=str(tmp_path / "r")
    )
    assert users.mode == "tenants"
    assert users.describe() == "task users: a uid per platform user, from 1800500000-1800500099"
    assert (
        resolve_task_users("none", tmp_path).describe()
        == "task users: the platform's own (PAI_TASK_USER=none)"
    )
