"""A tenant gains nothing from its own binaries, sees no other tenant, and one job file behaves
the same on the host and in a container.

bob's job runs a setuid-root probe (tests/support/probes.py): on the host engine (the sandbox:
bubblewrap, then setpriv) and in his own image (Podman's, run by runc itself on the executor's
bundle, and through `podman run`). Either way it runs as bob's uid with no
capability, ``no_new_privs`` set, and the kernel refuses it a packet socket, the socket that
read the API's bearer tokens off loopback. On the host, bob's task scans every /proc/*/cmdline for
the secret in alice's running task's arguments and finds none. And a job that reads a storage
at its mount path sees the same path, the same PAI_* variables and a tenant's uid on both engines.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform as platform_module
import secrets
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from tests.e2e.platform import running_platform
from tests.security.test_tenants import detail, job, log_of, submit, user_client
from tests.support.images import ImageError, build_marker_image, remove_image
from tests.support.probes import ProbeError, build_probe, build_probe_image, probe_report
from tests.support.waiting import eventually

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(300),
    pytest.mark.skipif(os.geteuid() != 0, reason="tenants' uids and the sandbox need a root platform"),
]

ENGINE_ENV = {"PAI_TASK_ENGINE": "podman", "PAI_IMAGE_PULL": "never"}
NOTHING = "0000000000000000"


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A folder every tenant may pass through (the test's own tmp_path is root's alone)."""
    with tempfile.TemporaryDirectory(prefix="pai-sandbox-") as base:
        os.chmod(base, 0o755)
        yield Path(base)


def _needs_sandbox() -> None:
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed (make setup installs it where it runs as root)")


def _needs_podman() -> None:
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed (make setup installs it where it runs as root)")


def _tenant_uid(data_dir: Path, user: str) -> int:
    return int(json.loads((data_dir / "task-users.json").read_text())[user])


def _assert_gained_nothing(log: str, uid: int) -> None:
    report = probe_report(log)
    assert report.get("euid") == str(uid), log
    assert report.get("CapEff") == NOTHING, log
    assert report.get("CapPrm") == NOTHING, log
    assert report.get("CapBnd") == NOTHING, log
    assert report.get("NoNewPrivs") == "1", log
    assert report.get("packet", "").startswith("refused"), log


async def test_a_setuid_root_binary_gains_nothing_on_the_host_engine(open_dir: Path) -> None:
    _needs_sandbox()
    try:
        probe = build_probe(open_dir)
    except ProbeError as exc:
        pytest.skip(f"the probe cannot be built here: {exc}")
    data_dir = open_dir / "data"
    async with running_platform(data_dir, task_user="auto", env={"PAI_TASK_ENGINE": "host"}) as platform:  # noqa: SIM117 - the client needs the platform
        async with contextlib.aclosing(await user_client(platform, "bob")) as bob:
            await submit(bob, job("probe", [str(probe)]))
            done = await detail(bob, "bob", "probe")
            assert done["jobStatus"]["state"] == "SUCCEEDED", done
            _assert_gained_nothing(await log_of(bob, "bob", "probe"), _tenant_uid(data_dir, "bob"))


@pytest.fixture
def probe_image() -> Iterator[str]:
    _needs_podman()
    reference = f"localhost/pai-test-probe:{secrets.token_hex(6)}"
    try:
        build_probe_image(reference)
    except (ImageError, ProbeError) as exc:
        pytest.skip(f"no probe image can be made here: {exc}")
    try:
        yield reference
    finally:
        remove_image(reference)


@pytest.mark.parametrize("runner", ["bwrap", "runc", "engine"])
async def test_a_setuid_root_binary_in_the_tenants_image_gains_nothing_in_its_container(
    open_dir: Path, probe_image: str, runner: str
) -> None:
    data_dir = open_dir / "data"
    env = {**ENGINE_ENV, "PAI_CONTAINER_RUNNER": runner}
    async with running_platform(data_dir, task_user="auto", env=env) as platform:
        async with contextlib.aclosing(await user_client(platform, "bob")) as bob:
            await submit(bob, job("probe", ["/bin/probe"]).replace("python:3.11-slim", probe_image))
            done = await detail(bob, "bob", "probe")
            assert done["jobStatus"]["state"] == "SUCCEEDED", done
            log = await log_of(bob, "bob", "probe")
        _assert_gained_nothing(log, _tenant_uid(data_dir, "bob"))
        # The engine's default filter, carried over into the bundle where runc runs it.
        assert probe_report(log).get("Seccomp") == "2", log
        # With no new user namespace (Podman's profile allows one; the platform's does not).
        assert probe_report(log).get("user namespace") == "refused: Operation not permitted", log
        assert ("through podman and runc" in log) == (runner == "runc"), log
        assert ("through podman and bubblewrap" in log) == (runner == "bwrap"), log
        if platform_module.machine() == "x86_64":
            # The filter keeps the native ABI only (the platform's containers.conf names the engine's
            # profile narrowed, and runc's bundles narrow theirs): a 32-bit system call kills its thread.
            assert probe_report(log).get("i386 system call") == f"killed by signal {int(signal.SIGSYS)}", log


def _cmdlines_holding(secret: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if secret.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


async def test_a_host_task_finds_no_other_tenants_arguments_in_proc(open_dir: Path) -> None:
    _needs_sandbox()
    secret = f"ALICE-{secrets.token_hex(8)}"
    release = open_dir / "release"
    release.mkdir(mode=0o755)
    data_dir = open_dir / "data"
    async with running_platform(data_dir, task_user="auto", env={"PAI_TASK_ENGINE": "host"}) as platform:
        alice = await user_client(platform, "alice")
        bob = await user_client(platform, "bob")
        try:
            await _scan(alice, bob, secret, release)
        finally:
            await alice.aclose()
            await bob.aclose()


async def _scan(alice: httpx.AsyncClient, bob: httpx.AsyncClient, secret: str, release: Path) -> None:
    waiting = f"sh -c 'while [ ! -e {release}/done ]; do sleep 0.1; done' --api-key {secret}"
    await submit(alice, job("holds", [waiting]))

    # The secret is there to be found: the machine's own /proc shows it in alice's task.
    async def holders() -> list[int]:
        return _cmdlines_holding(secret)

    await eventually(holders, bool, within=60)

    # bob looks for it by a pattern his own arguments do not hold.
    half = len(secret) // 2
    scan = (
        "import os\n"
        f"wanted = {secret[:half]!r} + {secret[half:]!r}\n"
        "pids = [p for p in os.listdir('/proc') if p.isdigit()]\n"
        "hits = []\n"
        "for pid in pids:\n"
        "    try:\n"
        "        if wanted.encode() in open(f'/proc/{pid}/cmdline', 'rb').read(): hits.append(pid)\n"
        "    except OSError:\n"
        "        pass\n"
        "print('bob saw', len(pids), 'processes; holding the secret:', hits or 'none')\n"
    )
    await submit(bob, job("scan", [f"python3 - <<'SCAN'\n{scan}SCAN"]))
    scanned = await detail(bob, "bob", "scan")
    assert scanned["jobStatus"]["state"] == "SUCCEEDED", scanned
    bob_log = await log_of(bob, "bob", "scan")
    assert "holding the secret: none" in bob_log, bob_log
    assert "bob saw" in bob_log

    (release / "done").touch()
    finished = await detail(alice, "alice", "holds")
    assert finished["jobStatus"]["state"] == "SUCCEEDED", finished


SEEN = (
    "echo storage: $(cat /mnt/team/sets/hello.txt); "
    'echo work-is-home: $([ "$(pwd)" = "$HOME" ] && echo yes || echo no); '
    "echo uid: $(id -u); "
    "echo gid: $(id -g) $(id -G); "
    "echo vars: $(env | cut -d= -f1 | grep ^PAI_ | sort | tr '\\n' ' ')"
)


def _storages(open_dir: Path) -> Path:
    shared = open_dir / "shared"
    (shared / "sets").mkdir(parents=True)
    (shared / "sets" / "hello.txt").write_text("from the storage\n")
    shared.chmod(0o755)
    (shared / "sets").chmod(0o755)
    (shared / "sets" / "hello.txt").chmod(0o644)
    path = open_dir / "storages.yaml"
    storages = [{"name": "team", "type": "local", "default": True, "data": {"path": str(shared)}}]
    path.write_text(yaml.safe_dump(storages))
    return path


def _seen(log: str) -> dict[str, str]:
    return {
        line.split(":", 1)[0]: line.split(":", 1)[1].strip()
        for line in log.splitlines()
        if line.split(":", 1)[0] in ("storage", "work-is-home", "uid", "gid", "vars")
    }


async def test_one_job_file_sees_the_same_storage_path_and_environment_on_both_engines(
    open_dir: Path,
) -> None:
    _needs_sandbox()
    _needs_podman()
    marker = f"marker-{secrets.token_hex(6)}"
    image = f"localhost/pai-test-marker:{marker}"
    try:
        build_marker_image(image, marker)
    except ImageError as exc:
        pytest.skip(f"no test image can be made here: {exc}")
    plugin = {
        "plugin": "teamwise_storage",
        "parameters": {"storages": [{"name": "team", "mountPath": "/mnt/team"}]},
    }
    text = job("same", [SEEN], extras={"com.microsoft.pai.runtimeplugin": [plugin]}).replace(
        "python:3.11-slim", image
    )
    storages = str(_storages(open_dir))
    seen: dict[str, dict[str, str]] = {}
    try:
        for engine in ("host", "podman"):
            data_dir = open_dir / f"data-{engine}"
            env = {"PAI_TASK_ENGINE": engine, "PAI_IMAGE_PULL": "never", "PAI_STORAGES_FILE": storages}
            async with running_platform(data_dir, task_user="auto", env=env) as platform:
                # The admin, whose groups the storage is granted to.
                await submit(platform.api, text)
                done = await detail(platform.api, "admin", "same")
                assert done["jobStatus"]["state"] == "SUCCEEDED", (engine, done)
                seen[engine] = _seen(await log_of(platform.api, "admin", "same"))
                tenant = _tenant_uid(data_dir, "admin")
                assert seen[engine]["uid"] == str(tenant), (engine, seen)
                # The tenant's group (gid and uid are one number) and the storage's it mounts
                # (docs/security.md, "Team storages"), never root's group 0.
                team = json.loads((data_dir / "storage-gids.json").read_text())["team"]
                assert seen[engine]["gid"] == f"{tenant} {tenant} {team}", (engine, seen)
    finally:
        remove_image(image)
    host, container = seen["host"], seen["podman"]
    assert host["storage"] == container["storage"] == "from the storage", seen
    assert host["work-is-home"] == container["work-is-home"] == "yes", seen
    assert host["vars"] == container["vars"], seen
    assert "PAI_JOB_NAME" in host["vars"].split(), seen
