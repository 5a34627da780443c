"""Two tenants on one root platform: bob's task goes after alice's, and gets nothing.

alice's job keeps a secret in its environment, its memory and a file of its work dir, and waits.
bob's job scans /proc as an attacker would: every other process's environ, heap (/proc/PID/mem),
working directory and the secret.txt in it, ptrace, and kill -9. Each attempt fails; alice's job
ends SUCCEEDED, untouched. A third job tries to make the runtime (root) write through symlinks it
put in its own work dir, into a folder only root may enter: the folder stays empty. A fourth
holds 1 GB with memoryMB 128: the job FAILS with OpenPAI's -1200.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.platform import Platform, running_platform
from tests.support.waiting import eventually, polled

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(300),
    pytest.mark.skipif(os.geteuid() != 0, reason="tenants' uids need a root platform"),
]

SECRET = "alice-s3cr3t-7f1d"


@pytest.fixture
def data_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="pai-tenants-") as base:
        os.chmod(base, 0o755)
        yield Path(base) / "data"


def job(name: str, commands: list[str], *, memory_mb: int = 128, **top: Any) -> str:
    doc = {
        "protocolVersion": 2,
        "name": name,
        "type": "job",
        "prerequisites": [{"name": "image", "type": "dockerimage", "uri": "python:3.11-slim"}],
        "taskRoles": {
            "worker": {
                "instances": 1,
                "dockerImage": "image",
                "resourcePerInstance": {"cpu": 1, "memoryMB": memory_mb, "gpu": 0},
                "commands": commands,
            }
        },
        **top,
    }
    return json.dumps(doc)


ALICE = [
    "export TOKEN='<% $secrets.token %>'",
    'echo "$TOKEN" > secret.txt && chmod 644 secret.txt',
    # The secret in the heap of a long-lived process, as a training job holds its keys.
    "python3 -c 'import os, sys, time\n"
    'held = ("heap:" + os.environ["TOKEN"]).encode() * 1000\n'
    'open("ready", "w").close()\n'
    'while not os.path.exists("done"): time.sleep(0.1)\n'
    'print("alice finished", len(held))\'',
]

SCAN = """
import ctypes, os, re, signal
print("bob is uid", os.getuid())
libc = ctypes.CDLL(None, use_errno=True)
found = lambda data: b"s3cr3t" in data or b"secret.txt" in data


def heap(pid):
    data = b""
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb") as mem:
        for line in maps:
            if "[heap]" in line or line.split()[1].startswith("rw") and len(line.split()) < 6:
                start, end = (int(x, 16) for x in line.split()[0].split("-"))
                try:
                    mem.seek(start)
                    data += mem.read(min(end - start, 64 << 20))
                except (OSError, ValueError, OverflowError):
                    pass
    return data


for pid in [int(p) for p in os.listdir("/proc") if p.isdigit()]:
    try:
        if os.getsid(pid) == os.getsid(0):
            continue  # bob's own task
    except OSError:
        continue
    for what, read in (
        ("environ", lambda: open(f"/proc/{pid}/environ", "rb").read()),
        ("heap", lambda: heap(pid)),
        ("cwd", lambda: "\\n".join(os.listdir(f"/proc/{pid}/cwd")).encode()),
        ("secret", lambda: open(f"/proc/{pid}/cwd/secret.txt", "rb").read()),
    ):
        try:
            if found(read()):
                print("LEAK", what, pid)
        except OSError:
            pass
    if libc.ptrace(16, pid, 0, 0) == 0:
        print("LEAK ptrace", pid)
    try:
        os.kill(pid, signal.SIGKILL)
        print("LEAK killed", pid)
    except OSError:
        pass
print("bob finished")
"""

BOB = [f"python3 - <<'SCAN'{SCAN}SCAN"]


def symlink_attack(target: Path) -> list[str]:
    # Everything the runtime could write in the work dir leads to the root-only folder.
    return [
        f"for name in .runtime .ssh mnt data; do rm -rf $name; ln -s {target} $name; done",
        "ls -la",
        "echo attacked",
    ]


async def user_client(platform: Platform, name: str) -> httpx.AsyncClient:
    created = await platform.api.post(
        "/api/v2/users",
        json={"username": name, "password": f"{name}-password-1", "virtualCluster": ["default"]},
    )
    assert created.status_code in (200, 201), created.text
    client = httpx.AsyncClient(base_url=platform.info.api_url, timeout=30)
    login = await client.post(
        "/api/v2/authn/basic/login", json={"username": name, "password": f"{name}-password-1"}
    )
    assert login.status_code == 200, login.text
    client.headers["Authorization"] = f"Bearer {login.json()['token']}"
    return client


async def submit(client: httpx.AsyncClient, yaml_text: str) -> str:
    response = await client.post("/api/v2/jobs", content=yaml_text, headers={"Content-Type": "text/yaml"})
    assert response.status_code == 202, response.text
    return str(response.json()["jobId"])


async def detail(client: httpx.AsyncClient, user: str, name: str) -> dict[str, Any]:
    async def probe() -> dict[str, Any]:
        response = await client.get(f"/api/v2/jobs/{user}~{name}")
        return dict(response.json()) if response.status_code == 200 else {}

    def over(found: dict[str, Any]) -> bool:
        return found.get("jobStatus", {}).get("state") in ("SUCCEEDED", "FAILED", "STOPPED")

    return await eventually(probe, over, within=120)


async def log_of(client: httpx.AsyncClient, user: str, name: str) -> str:
    path = f"/api/v2/jobs/{user}~{name}/attempts/0/taskRoles/worker/taskIndex/0/attempts/0/logs/all"
    response = await client.get(path)
    assert response.status_code == 200, response.text
    body = response.json()
    return str(body["content"] if isinstance(body, dict) else body)


async def test_tenants_cannot_reach_each_others_tasks(data_dir: Path) -> None:
    root_only = Path(tempfile.mkdtemp(prefix="pai-root-only-"))
    os.chmod(root_only, 0o700)
    async with running_platform(data_dir, task_user="auto") as platform:
        alice = await user_client(platform, "alice")
        bob = await user_client(platform, "bob")
        try:
            alice_job = await submit(alice, job("holder", ALICE, secrets={"token": SECRET}))
            await platform.watcher.wait_for("task.started", alice_job)
            work = data_dir / "jobs" / alice_job / "attempt-0" / "worker-0" / "try-0" / "work"
            await eventually(polled((work / "ready").exists), bool, within=60)

            # bob's scan runs while he has no other task: his own he may signal, alice's never.
            bob_job = await submit(bob, job("scanner", BOB))
            bob_detail = await detail(bob, "bob", "scanner")
            await submit(
                bob,
                job(
                    "symlinks",
                    symlink_attack(root_only),
                    extras={
                        "com.microsoft.pai.runtimeplugin": [
                            {"plugin": "cmd", "parameters": {"postCommands": ["echo post ran"]}},
                        ]
                    },
                ),
            )
            await submit(
                alice,
                job(
                    "greedy",
                    ["python3 -c 'b = bytearray(1024 * 1024 * 1024); b[::4096] = b\"x\" * len(b[::4096])'"],
                ),
            )
            symlinks_detail = await detail(bob, "bob", "symlinks")
            greedy_detail = await detail(alice, "alice", "greedy")
            bob_log = await log_of(bob, "bob", "scanner")
            symlinks_log = await log_of(bob, "bob", "symlinks")

            await asyncio.to_thread((work / "done").touch)
            alice_detail = await detail(alice, "alice", "holder")
            alice_log = await log_of(alice, "alice", "holder")
            alice_uid = (await asyncio.to_thread(work.stat)).st_uid
        finally:
            await alice.aclose()
            await bob.aclose()
        assert bob_job
        left_in_root_only = await asyncio.to_thread(lambda: list(root_only.iterdir()))

    # bob ran as a uid of his own, neither root nor alice's, and found nothing of hers.
    assert bob_detail["jobStatus"]["state"] == "SUCCEEDED", bob_log
    assert "bob finished" in bob_log
    assert "LEAK" not in bob_log, bob_log
    assert SECRET not in bob_log
    bob_uid = int(bob_log.split("bob is uid")[1].split()[0])
    assert bob_uid not in (0, alice_uid)
    assert alice_uid != 0

    # alice's job ran to its end, untouched.
    assert alice_detail["jobStatus"]["state"] == "SUCCEEDED", alice_log
    assert "alice finished" in alice_log

    # The runtime wrote nothing through the symlinks; the job itself went on as any other.
    assert left_in_root_only == []
    assert symlinks_detail["jobStatus"]["state"] in ("SUCCEEDED", "FAILED"), symlinks_log
    assert "attacked" in symlinks_log or "ssh" in symlinks_log

    # Past its memory: FAILED, with OpenPAI's code for it.
    assert greedy_detail["jobStatus"]["state"] == "FAILED"
    assert greedy_detail["jobStatus"]["appExitCode"] == -1200, greedy_detail["jobStatus"]
    os.rmdir(root_only)
