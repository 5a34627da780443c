"""Every marketplace starter runs to SUCCEEDED on the embedded platform, all at once on one."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.e2e.platform import running_platform
from tests.marketplace.starters import starters, with_parameters

pytestmark = pytest.mark.timeout(300)

# Long-running starters are made short the way a user would: through their parameters.
SHORTER = {
    "jupyter-notebook": {"serveSeconds": 2},
    "inference-server": {"serveSeconds": 1},
    "tensorboard-training": {"lingerSeconds": 0, "epochs": 5},
    "pytorch-ddp": {"steps": 10},
    "tensorflow-ps": {"steps": 10},
    "horovod-mpi": {"steps": 5},
    "hyperparameter-sweep": {"epochs": 3},
}
# A line each starter's log shows when it did its work, by (role, index).
SAYS = {
    "hello-world": ("main", 0, "Hello from admin~hello-world"),
    "pytorch-ddp": ("worker", 0, "rank 0 done"),
    "tensorflow-ps": ("ps", 0, "ps: served 2 workers"),
    "horovod-mpi": ("master", 0, "rank 0: w="),
    "jupyter-notebook": ("notebook", 0, "served for 2 seconds"),
    "tensorboard-training": ("train", 0, "trained: w="),
    "hyperparameter-sweep": ("report", 0, "best: learningRate="),
    "data-preparation": ("prepare", 1, "shard 1:"),
    "sklearn-cpu": ("train", 0, "mean accuracy"),
    "inference-server": ("server", 0, "smoke test: {'y': [5.0, 8.0]}"),
    "pipeline": ("evaluate", 0, "evaluated on 100 held-out samples"),
    "setup-teardown": ("main", 0, "the command succeeded, it wrote"),
}


async def test_every_starter_succeeds_on_the_embedded_platform(tmp_path: Path) -> None:
    every = starters()
    assert {s.slug for s in every} == set(SAYS), "each starter says what its log shows"
    async with running_platform(tmp_path / "data") as platform:
        jobs = {
            s.slug: await platform.submit(with_parameters(s.job_yaml, **SHORTER.get(s.slug, {})))
            for s in every
        }
        completed = await asyncio.gather(
            *(platform.completed(job_id, within=240) for job_id in jobs.values())
        )
        states = {slug: event.state for slug, event in zip(jobs, completed, strict=True)}
        logs = {slug: await platform.log(slug, *SAYS[slug][:2]) for slug in jobs}
        assert states == dict.fromkeys(jobs, "SUCCEEDED"), {
            slug: logs[slug][-2000:] for slug, state in states.items() if state != "SUCCEEDED"
        }
        missing = {slug: logs[slug][-2000:] for slug, (_, _, line) in SAYS.items() if line not in logs[slug]}
        assert not missing, missing
