"""Who a local task runs as and what it may reach, as the admin meets each setting: the users
PAI_TASK_USER names, the system user made for tasks, the data dir's modes, the engine line of
`pai up`. Root or not is the platform's euid, stated here rather than taken from the machine."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from services.orchestrator.adapters import engines, isolation
from services.orchestrator.adapters.isolation import (
    DEFAULT_UID_RANGE,
    DEFAULT_UID_REGISTRY,
    TaskUser,
    TaskUserError,
    TaskUsers,
    TenantUids,
    engine_line,
    prepare_task_dir,
    resolve_task_user,
    resolve_task_users,
    secure_data_dir,
    share_with_task,
    task_environment,
)

NOBODY = TaskUser("nobody", 65534, 65534)
ROOT = 0
NOT_ROOT = 1000


@pytest.fixture
def euid(monkeypatch: pytest.MonkeyPatch) -> object:
    def set_euid(value: int) -> None:
        monkeypatch.setattr(os, "geteuid", lambda: value)

    return set_euid


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# -- the environment ------------------------------------------------------------------------


def test_a_task_inherits_only_what_finds_programs_and_shows_text() -> None:
    host = {
        "PATH": "/opt/bin",
        "LANG": "C.UTF-8",
        "LANGUAGE": "en",
        "TZ": "UTC",
        "TERM": "xterm",
        "LD_LIBRARY_PATH": "/opt/lib",
        "TMPDIR": "/tmp/x",
        "LC_ALL": "C",
        "LC_TIME": "en_GB",
        "PAI_NATS_URL": "nats://u:p@x",
        "HOME": "/root",
        "AWS_SECRET_ACCESS_KEY": "k",
        "XLC_X": "no",
    }
    assert task_environment(host, PAI_JOB_NAME="j") == {
        "PATH": "/opt/bin",
        "LANG": "C.UTF-8",
        "LANGUAGE": "en",
        "TZ": "UTC",
        "TERM": "xterm",
        "LD_LIBRARY_PATH": "/opt/lib",
        "TMPDIR": "/tmp/x",
        "LC_ALL": "C",
        "LC_TIME": "en_GB",
        "PAI_JOB_NAME": "j",
    }


def test_a_task_without_a_host_path_gets_the_default_and_extras_win() -> None:
    assert task_environment({}) == {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
    assert task_environment({"PATH": "/a", "TZ": "UTC"}, PATH="/b") == {"PATH": "/b", "TZ": "UTC"}


# -- one task user --------------------------------------------------------------------------


@pytest.mark.parametrize("setting", ["none", " none ", "", "  "])
def test_none_or_nothing_runs_tasks_as_the_platform(setting: str, euid: object) -> None:
    euid(ROOT)  # type: ignore[operator]
    assert resolve_task_user(setting) is None


def test_auto_on_a_platform_that_is_not_root_runs_tasks_as_the_platform(euid: object) -> None:
    euid(NOT_ROOT)  # type: ignore[operator]
    assert resolve_task_user("auto") is None
    assert resolve_task_user(" auto ") is None


def test_auto_on_a_root_platform_takes_the_task_user_that_exists(
    euid: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    euid(ROOT)  # type: ignore[operator]
    task = TaskUser("pai-task", 990, 990)
    monkeypatch.setattr(isolation, "_lookup", {"pai-task": task, "nobody": NOBODY}.get)
    monkeypatch.setattr(isolation, "_create_system_user", lambda name: pytest.fail("made again"))
    assert resolve_task_user("auto") == task


def test_auto_on_a_root_platform_makes_the_task_user_when_missing(
    euid: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    euid(ROOT)  # type: ignore[operator]
    made = TaskUser("pai-task", 991, 991)
    asked: list[str] = []
    monkeypatch.setattr(isolation, "_lookup", {"nobody": NOBODY}.get)

    def create(name: str) -> TaskUser:
        asked.append(name)
        return made

    monkeypatch.setattr(isolation, "_create_system_user", create)
    assert resolve_task_user("auto") == made
    assert asked == ["pai-task"]


def test_auto_falls_back_to_nobody_when_the_task_user_cannot_be_made(
    euid: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    euid(ROOT)  # type: ignore[operator]
    monkeypatch.setattr(isolation, "_lookup", {"nobody": NOBODY}.get)
    monkeypatch.setattr(isolation, "_create_system_user", lambda name: None)
    assert resolve_task_user("auto") == NOBODY


def test_auto_with_no_user_at_all_names_both_and_the_fix(
    euid: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    euid(ROOT)  # type: ignore[operator]
    monkeypatch.setattr(isolation, "_lookup", lambda name: None)
    monkeypatch.setattr(isolation, "_create_system_user", lambda name: None)
    with pytest.raises(TaskUserError) as caught:
        resolve_task_user("auto")
    assert str(caught.value) == (
        "PAI_TASK_USER=auto: neither pai-task (useradd failed) nor nobody exists; "
        "create a user for tasks and name it in PAI_TASK_USER, or set PAI_TASK_USER=none"
    )


def test_a_named_user_that_does_not_exist_is_named_with_the_choices(euid: object) -> None:
    euid(ROOT)  # type: ignore[operator]
    with pytest.raises(TaskUserError) as caught:
        resolve_task_user(" no-such-user-here ")
    assert str(caught.value) == (
        "PAI_TASK_USER=no-such-user-here: no such user; create it, or use auto (a user of the platform's "
        "own when it runs as root) or none (tasks run as the platform's user)"
    )


def test_a_named_user_on_a_root_platform_runs_every_task(euid: object) -> None:
    euid(ROOT)  # type: ignore[operator]
    assert resolve_task_user("nobody") == NOBODY


def test_the_platforms_own_user_named_is_no_change_of_user(euid: object) -> None:
    euid(65534)  # type: ignore[operator]
    assert resolve_task_user("nobody") is None


def test_another_user_named_on_a_platform_that_is_not_root_is_refused(euid: object) -> None:
    euid(NOT_ROOT)  # type: ignore[operator]
    with pytest.raises(TaskUserError) as caught:
        resolve_task_user("nobody")
    assert str(caught.value) == (
        "PAI_TASK_USER=nobody: only a platform running as root can run tasks as another user; "
        "use auto or none"
    )


# -- the system user made for tasks -----------------------------------------------------------


def fake_useradd(tmp_path: Path, code: int) -> Path:
    program = tmp_path / "useradd"
    program.write_text(
        f'#!/bin/sh\nprintf "%s\\n" "$@" > {tmp_path}/args\necho "  no room left  " >&2\nexit {code}\n'
    )
    program.chmod(0o755)
    return program


def test_the_task_user_is_made_a_system_user_without_home_or_login(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    useradd = fake_useradd(tmp_path, 0)
    programs = {"useradd": str(useradd), "nologin": "/usr/sbin/nologin"}
    monkeypatch.setattr(shutil, "which", programs.get)
    with capture_logs() as logs:
        assert isolation._create_system_user("nobody") == NOBODY
    assert (tmp_path / "args").read_text().splitlines() == [
        "--system",
        "--user-group",
        "--no-create-home",
        "--home-dir",
        "/nonexistent",
        "--shell",
        "/usr/sbin/nologin",
        "--comment",
        "tasks of the AI platform",
        "nobody",
    ]
    assert logs == []


def test_without_nologin_the_task_users_shell_is_false(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shutil, "which", {"useradd": str(fake_useradd(tmp_path, 0))}.get)
    assert isolation._create_system_user("no-such-user-here") is None
    assert "/bin/false" in (tmp_path / "args").read_text().splitlines()


def test_a_useradd_that_fails_is_logged_with_its_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shutil, "which", {"useradd": str(fake_useradd(tmp_path, 9))}.get)
    with capture_logs() as logs:
        assert isolation._create_system_user("no-such-user-here") is None
    assert logs == [
        {
            "event": "cannot create the task user",
            "user": "no-such-user-here",
            "error": "no room left",
            "log_level": "warning",
        }
    ]


def test_without_useradd_no_user_is_made(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", {}.get)
    assert isolation._create_system_user("nobody") is None


# -- a policy for the platform ------------------------------------------------------------------


@pytest.mark.parametrize("setting", ["auto", " auto ", "tenant"])
def test_a_root_platform_gives_tenants_uids_from_the_range_and_registry_named(
    setting: str, tmp_path: Path, euid: object
) -> None:
    euid(ROOT)  # type: ignore[operator]
    users = resolve_task_users(
        setting, tmp_path, uid_range="1800700000-1800700009", registry=str(tmp_path / "r")
    )
    assert users.mode == "tenants"
    assert users.tenants is not None
    assert users.tenants.data_dir == tmp_path
    assert users.tenants.registry == tmp_path / "r"
    assert users.tenants.uid_range == (1800700000, 1800700009)
    assert users.describe() == "task users: a uid per platform user, from 1800700000-1800700009"
    first = users.for_user("alice")
    assert first == TaskUser("alice", 1800700000, 1800700000)
    assert users.for_user("alice") == first


def test_a_root_platform_without_settings_uses_the_default_range_and_registry(
    tmp_path: Path, euid: object
) -> None:
    euid(ROOT)  # type: ignore[operator]
    users = resolve_task_users("auto", tmp_path)
    assert users.tenants is not None
    assert users.tenants.registry == DEFAULT_UID_REGISTRY == Path("/var/lib/pai/uids")
    assert users.tenants.uid_range == DEFAULT_UID_RANGE == (1_800_000_000, 1_800_999_999)
    assert users.describe() == "task users: a uid per platform user, from 1800000000-1800999999"


def test_a_wrong_range_is_refused_on_a_root_platform(tmp_path: Path, euid: object) -> None:
    euid(ROOT)  # type: ignore[operator]
    with pytest.raises(TaskUserError) as caught:
        resolve_task_users("auto", tmp_path, uid_range="5-")
    assert str(caught.value) == "PAI_TASK_UIDS=5-: write the range as FIRST-LAST, e.g. 1800000000-1800999999"


def test_auto_on_a_platform_that_is_not_root_keeps_the_platforms_user(tmp_path: Path, euid: object) -> None:
    euid(NOT_ROOT)  # type: ignore[operator]
    users = resolve_task_users("auto", tmp_path)
    assert (users.mode, users.shared, users.tenants) == ("platform", None, None)
    assert users.for_user("alice") is None
    assert users.describe() == "task users: the platform's own (the platform is not root)"


def test_tenant_on_a_platform_that_is_not_root_is_refused_with_the_fix(tmp_path: Path, euid: object) -> None:
    euid(NOT_ROOT)  # type: ignore[operator]
    with pytest.raises(TaskUserError) as caught:
        resolve_task_users(" tenant ", tmp_path)
    assert str(caught.value) == (
        "PAI_TASK_USER=tenant: only a platform running as root can give tasks uids of "
        "their own; run pai up as root, or use auto"
    )


def test_none_keeps_the_platforms_user_and_says_it_was_chosen(tmp_path: Path, euid: object) -> None:
    euid(ROOT)  # type: ignore[operator]
    users = resolve_task_users("none", tmp_path)
    assert (users.mode, users.shared, users.tenants) == ("platform", None, None)
    assert users.describe() == "task users: the platform's own (PAI_TASK_USER=none)"


def test_a_named_user_runs_every_task_in_shared_trust(tmp_path: Path, euid: object) -> None:
    euid(ROOT)  # type: ignore[operator]
    users = resolve_task_users("nobody", tmp_path)
    assert (users.mode, users.shared, users.tenants) == ("shared", NOBODY, None)
    assert users.for_user("alice") == NOBODY
    assert users.describe() == "task users: every task as nobody (uid 65534; shared trust)"


def test_a_policy_made_by_hand_describes_itself() -> None:
    assert TaskUsers("platform", why="why").describe() == "task users: the platform's own (why)"


# -- the data dir ---------------------------------------------------------------------------

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="changing a directory's group needs root")


@pytest.fixture
def open_tmp() -> Iterator[Path]:
    """A folder under /tmp others may pass, as a real data dir's parents are (pytest's are 0700)."""
    with tempfile.TemporaryDirectory(prefix="pai-task-users-") as base:
        os.chmod(base, 0o755)
        yield Path(base)


def make_data_dir(tmp_path: Path) -> Path:
    data_dir = tmp_path / "data"
    (data_dir / "logs").mkdir(parents=True)
    (data_dir / "mps").mkdir()
    (data_dir / "mps").chmod(0o755)
    (data_dir / "rest-jwt.secret").write_text("s")
    (data_dir / "rest-jwt.secret").chmod(0o644)
    (data_dir / "link").symlink_to(tmp_path)
    return data_dir


def test_the_data_dir_is_the_platforms_only_when_tasks_run_as_the_platform(open_tmp: Path) -> None:
    data_dir = make_data_dir(open_tmp)
    secure_data_dir(data_dir, None)
    assert mode(data_dir) == 0o700
    assert mode(data_dir / "jobs") == 0o700
    assert mode(data_dir / "logs") == 0o700
    assert mode(data_dir / "rest-jwt.secret") == 0o600
    assert mode(data_dir / "mps") == 0o755, "the MPS pipes are kept as their maker set them"
    assert mode(open_tmp) == 0o755, "a symlink's target is not touched"


@needs_root
def test_the_data_dir_is_a_passage_for_the_task_users_group(open_tmp: Path) -> None:
    data_dir = make_data_dir(open_tmp)
    with capture_logs() as logs:
        secure_data_dir(data_dir, NOBODY)
    for passage in (data_dir, data_dir / "jobs"):
        assert mode(passage) == 0o710
        assert passage.stat().st_gid == NOBODY.gid
    assert mode(data_dir / "rest-jwt.secret") == 0o600
    assert [entry for entry in logs if entry["log_level"] == "warning"] == []


@needs_root
def test_with_a_uid_per_tenant_the_data_dir_is_a_passage_for_anyone(open_tmp: Path) -> None:
    data_dir = make_data_dir(open_tmp)
    with capture_logs() as logs:
        secure_data_dir(data_dir, None, tenants=True)
    for passage in (data_dir, data_dir / "jobs"):
        assert mode(passage) == 0o711
        assert passage.stat().st_gid == os.getegid()
    assert [entry for entry in logs if entry["log_level"] == "warning"] == []


@needs_root
def test_a_closed_folder_above_the_data_dir_is_named_with_the_fix(open_tmp: Path) -> None:
    closed = open_tmp / "closed"
    closed.mkdir(mode=0o700)
    data_dir = make_data_dir(closed)
    with capture_logs() as logs:
        secure_data_dir(data_dir, None, tenants=True)
        secure_data_dir(data_dir, NOBODY)
    fix = (
        f"chmod o+x {closed} (it stays unlistable), or put the data dir where other users may pass, "
        "e.g. pai up --data-dir /var/lib/pai"
    )
    assert [entry for entry in logs if entry["log_level"] == "warning"] == [
        {
            "event": "tasks cannot reach their working directories under the data dir; "
            "absolute paths there fail in tasks",
            "closed": str(closed),
            "fix": fix,
            "log_level": "warning",
        },
        {
            "event": "the task user cannot reach its working directories under the data dir; "
            "absolute paths there fail in tasks",
            "task_user": "nobody",
            "closed": str(closed),
            "fix": fix,
            "log_level": "warning",
        },
    ]


@needs_root
def test_a_folder_the_task_user_owns_or_shares_a_group_with_is_crossed_by_its_own_bits(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "f"
    folder.mkdir()
    os.chown(folder, NOBODY.uid, 0)
    folder.chmod(0o100)
    assert isolation._crossable(folder, NOBODY)
    folder.chmod(0o011)
    assert not isolation._crossable(folder, NOBODY)
    os.chown(folder, 0, NOBODY.gid)
    folder.chmod(0o010)
    assert isolation._crossable(folder, NOBODY)
    folder.chmod(0o101)
    assert not isolation._crossable(folder, NOBODY)
    os.chown(folder, 0, 0)
    folder.chmod(0o001)
    assert isolation._crossable(folder, NOBODY)
    folder.chmod(0o110)
    assert not isolation._crossable(folder, NOBODY)


@needs_root
def test_a_task_dir_has_passages_to_it_a_work_dir_of_its_user_and_logs_its_group_reads(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    (data_dir / "jobs").mkdir(parents=True)
    directory = data_dir / "jobs" / "job1" / "worker-0"
    prepare_task_dir(data_dir, directory, NOBODY)
    for passage in (data_dir / "jobs" / "job1", directory):
        assert (mode(passage), passage.stat().st_gid) == (0o710, NOBODY.gid)
    work, logs = directory / "work", directory / "logs"
    assert (mode(work), work.stat().st_uid, work.stat().st_gid) == (0o700, NOBODY.uid, NOBODY.gid)
    assert (mode(logs), logs.stat().st_uid, logs.stat().st_gid) == (0o750, 0, NOBODY.gid)
    spec = directory / "spec.json"
    spec.write_text("{}")
    share_with_task(spec, NOBODY)
    assert (mode(spec), spec.stat().st_gid) == (0o640, NOBODY.gid)


def test_a_task_dir_of_the_platforms_own_task_is_the_platforms_only(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    (data_dir / "jobs").mkdir(parents=True)
    directory = data_dir / "jobs" / "job1" / "worker-0"
    prepare_task_dir(data_dir, directory, None)
    prepare_task_dir(data_dir, directory, None)  # again, as after a restart
    for path in (data_dir / "jobs" / "job1", directory, directory / "work", directory / "logs"):
        assert mode(path) == 0o700
    spec = directory / "spec.json"
    spec.write_text("{}")
    spec.chmod(0o644)
    share_with_task(spec, None)
    assert mode(spec) == 0o600


# -- where tasks run ----------------------------------------------------------------------------


def test_the_engine_line_says_host_and_why(tmp_path: Path) -> None:
    assert engine_line(tmp_path, {"PAI_TASK_ENGINE": "host"}) == "tasks run on the host: PAI_TASK_ENGINE=host"


def test_the_engine_line_names_a_wrong_setting(tmp_path: Path) -> None:
    assert engine_line(tmp_path, {"PAI_TASK_ENGINE": "lxc"}) == (
        "task engine: PAI_TASK_ENGINE='lxc': must be auto, podman, docker or host"
    )
    assert engine_line(tmp_path, {"PAI_TASK_ENGINE": "host", "PAI_IMAGE_PULL": "sometimes"}) == (
        "task engine: PAI_IMAGE_PULL='sometimes': must be missing, never or always"
    )


def test_the_engine_line_names_the_engine_and_the_pull_policy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[tuple[str, Path, str]] = []

    def detect(setting: str, data_dir: Path, runner: str) -> engines.EngineChoice:
        asked.append((setting, data_dir, runner))
        podman = engines.Engine("podman", "/usr/bin/podman", "runc")
        if runner == "auto":
            podman = engines.Engine("podman", "/usr/bin/podman", "runc", runner="runc", runc="/usr/sbin/runc")
        return engines.EngineChoice(podman)

    monkeypatch.setattr(engines, "detect_engine", detect)
    assert engine_line(tmp_path, {}) == (
        "tasks run in their docker images: podman's images, run by runc itself; "
        "images pulled: missing (PAI_IMAGE_PULL)"
    )
    assert engine_line(
        tmp_path, {"PAI_TASK_ENGINE": "podman", "PAI_IMAGE_PULL": "never", "PAI_CONTAINER_RUNNER": "engine"}
    ) == ("tasks run in their docker images through podman (runc); images pulled: never (PAI_IMAGE_PULL)")
    assert asked == [("auto", tmp_path, "auto"), ("podman", tmp_path, "engine")]


def test_tenant_uids_made_by_hand_default_to_the_machines_registry(tmp_path: Path) -> None:
    uids = TenantUids(tmp_path)
    assert (uids.registry, uids.uid_range) == (DEFAULT_UID_REGISTRY, DEFAULT_UID_RANGE)


# -- the range of tenant uids and their claims ----------------------------------------------------


@pytest.mark.parametrize(
    ("text", "pair"),
    [
        ("1000-1000", (1000, 1000)),
        (" 1800000000 - 1800999999 ", (1_800_000_000, 1_800_999_999)),
        ("1000-4294967294", (1000, 4_294_967_294)),
    ],
)
def test_a_range_of_uids_is_read(text: str, pair: tuple[int, int]) -> None:
    assert isolation.parse_uid_range(text) == pair


@pytest.mark.parametrize("text", ["1800000000", "x-2000", "1000-y", "-1000-2000", "1000-2000-3000", ""])
def test_a_range_not_written_first_dash_last_names_the_form(text: str) -> None:
    with pytest.raises(TaskUserError) as caught:
        isolation.parse_uid_range(text)
    assert (
        str(caught.value)
        == f"PAI_TASK_UIDS={text}: write the range as FIRST-LAST, e.g. 1800000000-1800999999"
    )


@pytest.mark.parametrize("text", ["999-2000", "2001-2000", "1000-4294967295", "1000-99999999999"])
def test_a_range_out_of_bounds_names_the_bounds(text: str) -> None:
    with pytest.raises(TaskUserError) as caught:
        isolation.parse_uid_range(text)
    assert str(caught.value) == (
        f"PAI_TASK_UIDS={text}: a range of uids from 1000 up to 4294967294, the first not above the last"
    )


def tenant_uids(tmp_path: Path, size: int = 10) -> TenantUids:
    data_dir = tmp_path / "data"
    data_dir.mkdir(exist_ok=True)
    return TenantUids(data_dir, tmp_path / "registry", (1_800_800_000, 1_800_800_000 + size - 1))


def test_a_tenants_uid_is_logged_once_and_its_claim_is_the_platforms_only(tmp_path: Path) -> None:
    platform = tenant_uids(tmp_path)
    with capture_logs() as logs:
        alice = platform.user("alice")
        platform.user("alice")
    assert logs == [
        {"event": "a tenant has its task uid", "user": "alice", "uid": alice.uid, "log_level": "info"}
    ]
    claim = tmp_path / "registry" / str(alice.uid)
    assert mode(claim) == 0o600
    claim.unlink()
    tenant_uids(tmp_path).user("alice")
    assert mode(claim) == 0o600, "a claim made again is the platform's only too"


def test_a_used_up_range_names_the_range_the_registry_and_the_fix(tmp_path: Path) -> None:
    platform = tenant_uids(tmp_path, size=1)
    platform.user("alice")
    with pytest.raises(isolation.UidsExhaustedError) as caught:
        platform.user("bob")
    assert str(caught.value) == (
        f"every task uid of PAI_TASK_UIDS=1800800000-1800800000 is taken ({tmp_path / 'registry'} "
        "holds their claims); widen the range, or remove the claims of platforms that no longer exist"
    )


def test_a_uid_claimed_by_another_platform_names_the_claim_and_the_fix(tmp_path: Path) -> None:
    alice = tenant_uids(tmp_path).user("alice")
    claim = tmp_path / "registry" / str(alice.uid)
    claim.write_text('{"dataDir": "/elsewhere", "user": "eve"}')
    with pytest.raises(TaskUserError) as caught:
        tenant_uids(tmp_path).user("alice")
    assert str(caught.value) == (
        f"task uid {alice.uid} of user alice is claimed by another platform ({claim}: "
        '{"dataDir": "/elsewhere", "user": "eve"}); it will not be shared: remove that claim if its '
        "platform is gone"
    )


def test_a_root_platform_without_settings_says_it_gives_uids_from_the_default_range(
    tmp_path: Path, euid: object
) -> None:
    euid(ROOT)  # type: ignore[operator]
    line = isolation.containment_line(tmp_path, {})
    assert line.startswith("task users: a uid per platform user, from 1800000000-1800999999; task limits: ")


@needs_root
def test_passages_and_shared_files_stay_the_platforms_own(open_tmp: Path) -> None:
    data_dir = open_tmp / "not" / "yet" / "data"
    secure_data_dir(data_dir, NOBODY)
    assert (data_dir.stat().st_uid, (data_dir / "jobs").stat().st_uid) == (0, 0)
    secure_data_dir(data_dir, None, tenants=True)
    assert (data_dir.stat().st_uid, (data_dir / "jobs").stat().st_uid) == (0, 0)
    spec = data_dir / "spec.json"
    spec.write_text("{}")
    share_with_task(spec, NOBODY)
    assert spec.stat().st_uid == 0
