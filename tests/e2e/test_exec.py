"""`pai job exec` on the default platform (tasks as the platform's user): a command in a running
task prints what the task itself sees, another user is refused, and a shell with a terminal
knows the job's PAI_* variables.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pty
import re
import select
import subprocess
import time
from pathlib import Path

import aiohttp
import httpx
import pytest

from tests.e2e.platform import ADMIN_PASSWORD, PAI, REPO, Cli, Platform, job_yaml, running_platform
from tests.support.waiting import eventually, polled

pytestmark = pytest.mark.timeout(240)

# The task writes what it sees of itself, then waits for the test's word to end.
HOLDER = ["id -u > seen-uid; pwd > seen-dir; touch ready", "while [ ! -f done ]; do sleep 0.1; done"]


def work_dir(platform: Platform, job_id: str) -> Path:
    return platform.info.data_dir / "jobs" / job_id / "attempt-0" / "worker-0" / "try-0" / "work"


async def running_holder(platform: Platform, name: str) -> tuple[str, Path]:
    job_id = await platform.submit(job_yaml(name, {"worker": {"commands": HOLDER}}))
    work = work_dir(platform, job_id)
    await eventually(polled((work / "ready").exists), bool, within=60)
    return job_id, work


async def through_the_portal_signed_in(platform: Platform, *, csrf: bool) -> int:
    """The status of an exec's upgrade made with the portal's session cookie, as a page would."""
    site = platform.info.portal_url.rstrip("/")
    async with httpx.AsyncClient(base_url=site, timeout=30) as browser:
        form = await browser.get("/index.html")
        nonce = re.search(r'name="csrf" value="([0-9a-f]+)"', form.text)
        assert nonce, form.text
        fields = {"username": "admin", "password": ADMIN_PASSWORD, "csrf": nonce.group(1), "next": ""}
        assert (await browser.post("/portal/login", data=fields)).status_code == 302
        token = (await browser.get("/portal/session")).json()["csrf"]
        cookies = "; ".join(f"{name}={value}" for name, value in browser.cookies.items())
    params = [("command", "true")] + ([("csrf", token)] if csrf else [])
    async with aiohttp.ClientSession() as http:
        try:
            ws = await http.ws_connect(
                f"{site}/api/v2/jobs/admin~holder/tasks/worker/0/exec",
                params=params,
                headers={"Cookie": cookies, "Origin": site},
            )
        except aiohttp.WSServerHandshakeError as exc:
            return exc.status
        async with ws:
            async for _ in ws:
                pass
        return 101


async def token_of(platform: Platform, user: str) -> dict[str, str]:
    login = await platform.api.post(
        "/api/v2/authn/basic/login", json={"username": user, "password": f"{user}-password-1"}
    )
    assert login.status_code == 200, login.text
    return {"Authorization": f"Bearer {login.json()['token']}"}


async def logged_in(platform: Platform, config: Path, user: str, password: str) -> Cli:
    cli = Cli(platform.info.api_url, config)
    code, _, err = await cli.run("login", "--user", user, env={"PAI_PASSWORD": password})
    assert code == 0, err
    return cli


def in_a_terminal(cli: Cli, args: list[str], steps: list[tuple[bytes, bytes]], within: float = 30) -> bytes:
    """`pai ARGS` on a pseudo-terminal of its own, typing each step's text once the terminal has
    shown something and its awaited text; everything the terminal showed until pai exits."""
    master, child = pty.openpty()
    process = subprocess.Popen(
        [*PAI, *args], cwd=REPO, env=cli.env, stdin=child, stdout=child, stderr=child, start_new_session=True
    )
    os.close(child)
    shown = b""
    deadline = time.monotonic() + within
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if not ready:
                continue
            try:
                data = os.read(master, 4096)
            except OSError:  # EIO: pai has exited, and the terminal is nobody's
                break
            shown += data
            if steps and steps[0][0] in shown:
                os.write(master, steps.pop(0)[1])
        with contextlib.suppress(subprocess.TimeoutExpired):  # said below, with what it showed
            process.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(master)
    assert process.returncode == 0, shown.decode(errors="replace")
    assert not steps, f"never shown: {steps[0][0]!r}; shown: {shown.decode(errors='replace')}"
    return shown


async def test_exec_runs_in_the_running_task_for_its_owner_only(tmp_path: Path) -> None:
    async with running_platform(tmp_path / "data") as platform:
        job_id, work = await running_holder(platform, "holder")
        admin = await logged_in(platform, tmp_path / "admin", "admin", ADMIN_PASSWORD)

        code, out, err = await admin.run("job", "exec", "holder", "--", "id", "-u")
        assert code == 0, err
        assert out.strip() == (work / "seen-uid").read_text().strip()
        code, out, err = await admin.run("job", "exec", "holder", "--role", "worker", "--", "pwd")
        assert (code, out.strip()) == (0, (work / "seen-dir").read_text().strip()), err
        # The command's own exit code is pai's, its errors are pai's errors.
        code, out, err = await admin.run("job", "exec", "holder", "--", "sh", "-c", "echo oops >&2; exit 3")
        assert (code, out, err) == (3, "", "oops\n")

        created = await platform.api.post(
            "/api/v2/users",
            json={"username": "bob", "password": "bob-password-1", "virtualCluster": ["default"]},
        )
        assert created.status_code in (200, 201), created.text
        bob = await logged_in(platform, tmp_path / "bob", "bob", "bob-password-1")
        code, out, err = await bob.run("job", "exec", "admin~holder", "--role", "worker", "--", "id", "-u")
        assert code == 1, (out, err)
        assert "User bob is not allowed to run commands in job admin~holder. [ForbiddenUserError]" in err
        assert out == ""
        bobs = httpx.AsyncClient(base_url=platform.info.api_url, headers=await token_of(platform, "bob"))
        async with bobs:
            refused = await bobs.get(
                "/api/v2/jobs/admin~holder/tasks/worker/0/exec",
                params={"command": "id"},
                headers={
                    "Connection": "Upgrade",
                    "Upgrade": "websocket",
                    "Sec-WebSocket-Version": "13",
                    "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
                },
            )
        assert refused.status_code == 403, refused.text

        shown = await asyncio.to_thread(
            in_a_terminal,
            admin,
            ["job", "exec", "holder", "-it", "--", "sh"],
            [(b"", b"echo name=$PAI_JOB_NAME.\r"), (b"name=admin~holder.", b"exit\r")],
        )
        assert b"name=admin~holder." in shown

        # Through the portal's address: with a token as the CLI sends it ...
        portal = Cli(platform.info.portal_url.rstrip("/"), tmp_path / "portal")
        code, _, err = await portal.run("login", "--user", "admin", env={"PAI_PASSWORD": ADMIN_PASSWORD})
        assert code == 0, err
        code, out, err = await portal.run("job", "exec", "holder", "--", "id", "-u")
        assert (code, out.strip()) == (0, (work / "seen-uid").read_text().strip()), err
        # ... and with a browser's session, from the portal's own page with its CSRF token only.
        assert await through_the_portal_signed_in(platform, csrf=False) == 403
        assert await through_the_portal_signed_in(platform, csrf=True) == 101

        (work / "done").touch()
        await platform.completed(job_id)
        code, out, err = await admin.run("job", "exec", "holder", "--role", "worker", "--", "true")
        assert code == 1, (out, err)
        assert "Task worker[0] of job admin~holder is not running. [TaskNotRunningError]" in err
