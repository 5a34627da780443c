"""A retried gang job's second attempt meets at a barrier of its own: the specs the executor
builds for each attempt, run by the real runtime.

The first attempt's tasks both pass their barrier and fail; the job is retried. Of the second
attempt, one task starts and waits; its peer starts only once the first is waiting (a peer that
is slow to start: an image pull, a busy node). The waiting task must not pass before that peer
of its own attempt announces itself: the first attempt's barrier, where every peer is ready, is
not its barrier.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from runtime.spec import dump_spec
from services.orchestrator.adapters.specs import build_spec, task_dir
from services.orchestrator.core.frameworks import TaskKey
from tests.orchestrator.jobs import job_config
from tests.orchestrator.sim import JOB, World, scheduled, submitted
from tests.runtime.helpers import start_runtime

TASK = """\
date +%s.%N > "{marks}/$PAI_JOB_ATTEMPT_ID-$PAI_TASK_INDEX.started"
[ "$PAI_JOB_ATTEMPT_ID" != 0 ]
"""


def launched(world: World, data_dir: Path, key: TaskKey) -> tuple[subprocess.Popen[str], Path]:
    """The task's runtime started on the spec the executor writes for it; and its barrier dir."""
    assert world.framework is not None
    directory = task_dir(data_dir, JOB, key)
    directory.mkdir(parents=True)
    spec = build_spec(data_dir, world.framework, key, directory, False)
    spec_file = directory / "spec.json"
    spec_file.write_text(dump_spec(spec))
    return start_runtime(spec_file), spec.dirs.barrier_dir


def ended(world: World, key: TaskKey, runtime: subprocess.Popen[str]) -> int:
    """The runtime's exit, reported to the orchestrator's core as the executor reports it (unless
    the core stopped the task already: a gang's first failure ends its peers)."""
    _, err = runtime.communicate(timeout=60)
    if key in world.running:
        world.exit(key, runtime.returncode)
        world.drain()
    assert runtime.returncode in (0, 1), err
    return runtime.returncode


def waiting_at_barrier(runtime: subprocess.Popen[str]) -> None:
    """Returns once the runtime says it announced itself and waits for its peers."""
    assert runtime.stderr is not None
    for line in runtime.stderr:
        if "waiting up to" in line:
            return
    raise AssertionError(f"the task ended without reaching its barrier: {runtime.communicate()}")


def test_a_retried_gang_jobs_second_attempt_waits_at_its_own_barrier(tmp_path: Path) -> None:
    data_dir, marks = tmp_path / "data", tmp_path / "marks"
    marks.mkdir()
    script = tmp_path / "task.sh"
    script.write_text(TASK.format(marks=marks))
    config = job_config({"worker": (2, f"sh {script}")}, extra="jobRetryCount: 1")
    world = World()
    world.feed(submitted(config))

    world.feed(scheduled(config, attempt=0))
    first = {index: launched(world, data_dir, TaskKey(0, "worker", index, 0)) for index in range(2)}
    codes = [ended(world, TaskKey(0, "worker", index, 0), first[index][0]) for index in range(2)]
    assert codes == [1, 1]
    assert sorted(p.name for p in marks.iterdir()) == ["0-0.started", "0-1.started"], "both passed"
    assert "job.retrying" in world.types()

    world.feed(scheduled(config, attempt=1))
    waiting, barrier = launched(world, data_dir, TaskKey(1, "worker", 0, 0))
    waiting_at_barrier(waiting)
    late, late_barrier = launched(world, data_dir, TaskKey(1, "worker", 1, 0))
    assert [ended(world, TaskKey(1, "worker", i, 0), run) for i, run in enumerate((waiting, late))] == [0, 0]

    peer_ready = (late_barrier / "worker-1.ready").stat().st_mtime
    passed = float((marks / "1-0.started").read_text())
    assert passed >= peer_ready, "the task passed its barrier before its peer of the same attempt arrived"
    assert barrier == late_barrier
    assert barrier not in (first[0][1], first[1][1]), "the second attempt met at the first one's barrier"
