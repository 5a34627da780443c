"""The supervisor restarts the bus like any child and stops everything together."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from libs.backbone.connecting import connect
from libs.backbone.natsserver import EmbeddedNats
from libs.backbone.provisioning import StreamSpec, ensure_stream
from pai.embedded.supervising import Child, NatsChild, Supervisor
from tests.support.waiting import eventually, polled


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except OSError:
        return False


async def test_a_killed_bus_is_reaped_and_back_on_its_port_with_its_streams(tmp_path: Path) -> None:
    server = EmbeddedNats(tmp_path / "nats")
    nats_child = NatsChild(server)
    supervisor = Supervisor([nats_child])
    await supervisor.start()
    try:
        port = server.port
        bus = await connect(server.url, initial_timeout=5)
        await ensure_stream(bus.js, StreamSpec(name="KEEP", subjects=("keep.>",)))
        old_pid = nats_child.pid
        assert old_pid is not None

        os.kill(old_pid, signal.SIGKILL)
        new_pid = await eventually(polled(lambda: nats_child.pid), lambda pid: pid not in (None, old_pid))

        assert not _zombie(old_pid)
        assert server.port == port
        assert new_pid is not None
        assert nats_child.restarts == 1
        await eventually(polled(lambda: bus.is_connected), bool)
        info = await bus.js.stream_info("KEEP")
        assert info.config.subjects == ["keep.>"]
        await bus.close()
    finally:
        await supervisor.stop()
    assert not server.is_running


async def test_stop_terms_every_service_together_and_kills_one_that_ignores_it(tmp_path: Path) -> None:
    stubborn = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('up', flush=True); time.sleep(60)"
    )
    children = [
        Child(f"svc{i}", [sys.executable, "-c", stubborn], {}, tmp_path / f"svc{i}.log") for i in range(3)
    ]
    supervisor = Supervisor(children, grace=0.5)
    await supervisor.start()
    for child in children:
        log_path = child.log_path
        await eventually(polled(log_path.read_text), lambda text: "up" in text)
    pids = list(supervisor.pids().values())
    assert len(pids) == 3
    await supervisor.stop()
    # Together: the three share one grace period; each was killed after ignoring SIGTERM.
    assert all(c.process is not None and c.process.returncode == -signal.SIGKILL for c in children)
    assert supervisor.pids() == {}
