"""Where the node runs NVIDIA MPS, a task holding a share of a GPU is its client; a whole-GPU task is not."""

from __future__ import annotations

from pathlib import Path

from libs.protocol.events import JobScheduled, TaskPlacement
from services.orchestrator.adapters.local import LocalExecutor
from services.orchestrator.core.deciders import decide
from services.orchestrator.core.effects import Context
from services.orchestrator.core.frameworks import TaskKey
from tests.orchestrator.jobs import job_config
from tests.orchestrator.sim import T0, submitted
from tests.orchestrator.test_local_executor import Exits, no_secrets

SHOW = (
    'echo "pipe=[$CUDA_MPS_PIPE_DIRECTORY] threads=[$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE]'
    ' memory=[$CUDA_MPS_PINNED_DEVICE_MEM_LIMIT] devices=[$CUDA_VISIBLE_DEVICES]"'
)


async def run_both(tmp_path: Path, pipe: Path | None) -> dict[str, str]:
    """A job of a shared task (half of GPU 0, 2 GiB) and a whole-GPU task (GPU 1): what each saw."""
    config = job_config({"shared": (1, SHOW), "whole": (1, SHOW)})
    placements = (
        TaskPlacement(
            role="shared",
            index=0,
            node="local",
            node_address="127.0.0.1",
            gpu_indices=(0,),
            gpu_milli=500,
            gpu_memory_mib=2048,
        ),
        TaskPlacement(role="whole", index=0, node="local", node_address="127.0.0.1", gpu_indices=(1,)),
    )
    framework = decide(None, submitted(config), Context(now=T0)).framework
    framework = decide(
        framework, JobScheduled(job_id="job1", attempt=0, placements=placements), Context(now=T0)
    ).framework
    assert framework is not None
    exits = Exits()
    executor = LocalExecutor(tmp_path / "data", exits, no_secrets, poll_seconds=0.05, mps_pipe_dir=pipe)
    try:  # both at once: the tasks of an attempt meet at its barrier first
        started = {
            role: await executor.start(framework, TaskKey(0, role, 0, 0)) for role in ("shared", "whole")
        }
        assert [(await exits.next()).exit_code for _ in started] == [0, 0]
    finally:
        await executor.close()
    return {
        role: (directory / "logs" / "user.pai.stdout").read_text().strip()
        for role, (_, directory) in started.items()
    }


async def test_a_shared_task_gets_the_mps_pipe_and_its_limits_and_a_whole_gpu_task_neither(
    tmp_path: Path,
) -> None:
    pipe = tmp_path / "data" / "mps" / "pipe"
    seen = await run_both(tmp_path, pipe)
    assert seen["shared"] == f"pipe=[{pipe}] threads=[50] memory=[0=2048M] devices=[0]"
    assert seen["whole"] == "pipe=[] threads=[] memory=[] devices=[1]"


async def test_without_mps_a_shared_task_is_told_its_limits_but_given_no_pipe(tmp_path: Path) -> None:
    seen = await run_both(tmp_path, None)
    assert seen["shared"] == "pipe=[] threads=[50] memory=[0=2048M] devices=[0]"
    assert seen["whole"] == "pipe=[] threads=[] memory=[] devices=[1]"


def test_the_mps_pipes_stay_reachable_when_the_data_dir_is_made_private(tmp_path: Path) -> None:
    data = tmp_path / "data"
    pipe = data / "mps" / "pipe"
    pipe.mkdir(parents=True)
    (data / "mps").chmod(0o711)
    pipe.chmod(0o755)
    (data / "logs").mkdir()
    (data / "logs").chmod(0o755)
    LocalExecutor(data, Exits(), no_secrets)
    assert oct((data / "logs").stat().st_mode & 0o777) == "0o700"  # the rest is the platform's
    assert oct((data / "mps").stat().st_mode & 0o777) == "0o711"
    assert oct(pipe.stat().st_mode & 0o777) == "0o755"
