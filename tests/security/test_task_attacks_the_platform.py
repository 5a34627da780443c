"""A job on a running platform (`pai up` as root) goes after the bus, the secrets and the data dir.

The task looks for the bus in its environment, connects to the bus's port without credentials
(and without the TLS handshake the bus wants first),
lists the data dir and reads the signing secret and the job's secrets file; every attempt fails.
The job's secrets sit sealed in KV. The task still runs, as the admin's task uid in a directory of its
own, survives an orchestrator restart, and its log is read through the API; the job detail and
the log's first line say that the docker image was not used, and as whom and where it ran.
"""

from __future__ import annotations

import os
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import nats.errors
import pytest
from nats.aio.client import Client as NATS

from libs.backbone.bustls import client_options
from libs.backbone.sealing import PREFIX
from tests.e2e.platform import job_yaml, running_platform
from tests.support.waiting import eventually, polled

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(240),
    pytest.mark.skipif(os.geteuid() != 0, reason="the drop to the task user needs a root platform"),
]


@pytest.fixture
def data_dir() -> Iterator[Path]:
    # Where the task user may walk to its own directory, as under /var/lib.
    with tempfile.TemporaryDirectory(prefix="pai-security-") as base:
        os.chmod(base, 0o755)
        yield Path(base) / "data"


def attack(data_dir: Path, nats_port: int) -> list[str]:
    bus = f"/dev/tcp/127.0.0.1/{nats_port}"
    return [
        'echo "uid=$(id -u) cwd=$(pwd)"',
        "env | grep -E '^PAI_(NATS|DATA_DIR|DATABASE|SECRETS)' && echo FOUND-PLATFORM-SETTING || true",
        # NATS' protocol by hand: a client with no credentials says CONNECT, then PING (the
        # bus wants a TLS handshake first, and hangs up).
        f"exec 3<>{bus} && printf 'CONNECT {{}}\\r\\nPING\\r\\n' >&3 && timeout 2 cat <&3 || true",
        f"ls {data_dir} && echo LISTED-DATA-DIR || true",
        f"cat {data_dir}/rest-jwt.secret && echo READ-JWT || true",
        f"cat {data_dir}/nats-credentials.json && echo READ-BUS-CREDENTIALS || true",
        f"cat {data_dir}/secrets.key && echo READ-SECRETS-KEY || true",
        "cat ../secrets.json && echo READ-SECRETS-FILE || true",
        "echo 'token rendered: <% $secrets.token %>' | sed 's/tok-[0-9]*/TOKEN/'",
        "sleep 2",
        "echo finished",
    ]


async def test_a_task_reaches_neither_the_bus_nor_the_data_dir(data_dir: Path) -> None:
    async with running_platform(data_dir, task_user="auto") as platform:
        nats_port = int(platform.info.nats_url.rsplit(":", 1)[1])
        yaml = job_yaml(
            "intruder",
            {"worker": {"commands": attack(data_dir, nats_port)}},
            secrets={"token": "tok-31337"},
        )
        job_id = await platform.submit(yaml)
        await platform.watcher.wait_for("task.started", job_id)

        # From outside the tasks too: a client without the platform's credentials is refused,
        # even one that trusts the bus's authority.
        stranger = NATS()
        with pytest.raises(nats.errors.Error, match=r"(?i)authorization"):
            await stranger.connect(
                platform.info.nats_url,
                allow_reconnect=False,
                connect_timeout=2,
                **client_options(platform.info.nats_ca),
            )
        await stranger.close()

        # The secrets are sealed in KV: the operator's own account sees ciphertext only.
        bucket = await platform.nc.jetstream().key_value("PAI_SECRETS")
        sealed = (await bucket.get(job_id)).value or b""
        assert sealed.startswith(PREFIX)
        assert b"tok-31337" not in sealed

        # The orchestrator dies while the task runs; the next one adopts the task.
        orchestrator = platform.child("orchestrator")
        old_pid = orchestrator.process.pid
        os.kill(old_pid, signal.SIGKILL)
        await eventually(
            polled(lambda: orchestrator.process.pid),
            lambda pid: pid != old_pid and orchestrator.restarts >= 1,
        )
        completed = await platform.completed(job_id)
        assert completed.state == "SUCCEEDED"
        assert len(platform.watcher.of("task.started", job_id)) == 1
        log = await platform.log("intruder", "worker", 0)
        detail = await platform.detail("intruder")
        # Every service did its work within its own permissions.
        service_logs = {path.name: path.read_text() for path in (data_dir / "logs").glob("*.log")}
    services = ("rest", "scheduler", "orchestrator", "monitor", "alerter")
    assert set(service_logs) >= {f"{service}.log" for service in services}
    for name, text in service_logs.items():
        assert "permissions violation" not in text.lower(), name

    # The job detail and the first line of the log say plainly what happened to the image.
    work = f"{data_dir}/jobs/{job_id}/attempt-0/worker-0/try-0/work"
    [task] = detail["taskRoles"]["worker"]["taskStatuses"]
    note = task["executorNote"]
    assert "python:3.11-slim was not used" in note
    assert "on the host, as uid 18" in note  # the admin's own task uid, of the reserved range
    assert "(the tasks of admin)" in note
    assert f"in directory {work}" in note
    assert log.splitlines()[0] == f"[pai] {note}"

    assert "uid=" in log, log
    assert "uid=0 " not in log
    assert f"cwd={work}" in log
    assert "FOUND-PLATFORM-SETTING" not in log
    assert "PONG" not in log  # the bus answered nothing to a plain CONNECT
    leaks = ("LISTED-DATA-DIR", "READ-JWT", "READ-BUS-CREDENTIALS", "READ-SECRETS-KEY", "READ-SECRETS-FILE")
    for leak in leaks:
        assert leak not in log
    assert "token rendered: TOKEN" in log  # its own secret it does get, rendered into its command
    assert "finished" in log
