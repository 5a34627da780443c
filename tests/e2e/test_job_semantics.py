"""What OpenPAI users rely on, shown on the whole platform: failures explained and retried as
they should be, completion policies, and the PAI_* environment of every task."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.platform import job_yaml, running_platform

pytestmark = pytest.mark.timeout(240)


async def test_failures_are_explained_and_only_the_transient_one_is_retried(tmp_path: Path) -> None:
    async with running_platform(tmp_path / "data") as platform:
        syntax = await platform.submit(
            job_yaml("syntax", {"main": {"commands": ["python3 -c 'def broken(:'"]}}, jobRetryCount=3)
        )
        # Killed by SIGKILL on its first attempt only: the retry succeeds.
        killed = await platform.submit(
            job_yaml(
                "killed",
                {
                    "main": {
                        "commands": [
                            'if [ "$PAI_JOB_ATTEMPT_ID" = 0 ]; then kill -9 $$; fi',
                            "echo second try",
                        ]
                    }
                },
                jobRetryCount=1,
            )
        )
        oom = await platform.submit(
            job_yaml(
                "oom",
                {
                    "main": {
                        "commands": [
                            "echo 'RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB' >&2",
                            "exit 1",
                        ]
                    }
                },
            )
        )

        syntax_done = await platform.completed(syntax)
        assert syntax_done.state == "FAILED"
        assert syntax_done.attempt == 0, "a permanent failure is never retried, whatever jobRetryCount says"
        assert syntax_done.failure is not None
        assert syntax_done.failure.phrase == "PythonSyntaxError"
        assert "SyntaxError" in (syntax_done.failure.matched_line or "")

        killed_done = await platform.completed(killed)
        assert killed_done.state == "SUCCEEDED"
        [retry] = platform.watcher.of("job.retrying", killed)
        assert (retry.kind, retry.counted) == ("platform", False), "SIGKILL is transient: retried for free"
        [first_exit] = [e for e in platform.watcher.of("task.completed", killed) if e.attempt == 0]
        assert first_exit.exit_code == 137

        oom_done = await platform.completed(oom)
        assert oom_done.state == "FAILED"
        assert oom_done.failure is not None
        assert oom_done.failure.phrase == "GpuOutOfMemory"
        assert "CUDA out of memory" in (oom_done.failure.matched_line or "")

        detail = await platform.detail("syntax")
        status = detail["jobStatus"]
        assert status["retries"] == 0
        assert status["appExitSpec"]["phrase"] == "PythonSyntaxError"
        killed_detail = await platform.detail("killed")
        assert killed_detail["jobStatus"]["retryDetails"]["platform"] == 1


async def test_a_master_dominated_job_ends_when_the_master_succeeds_and_its_workers_are_stopped(
    tmp_path: Path,
) -> None:
    job = job_yaml(
        "master",
        {
            "master": {"commands": ["echo master done"], "completion": {"minSucceededInstances": 1}},
            "worker": {"instances": 2, "commands": ["sleep 600"], "completion": {"minFailedInstances": -1}},
        },
    )
    async with running_platform(tmp_path / "data") as platform:
        job_id = await platform.submit(job)
        completed = await platform.completed(job_id)
        assert completed.state == "SUCCEEDED"
        assert completed.trigger_role == "master"
        detail = await platform.detail("master")
        workers = [t["taskState"] for t in detail["taskRoles"]["worker"]["taskStatuses"]]
        assert workers == ["STOPPED", "STOPPED"]


async def test_every_task_of_a_three_role_job_sees_the_documented_environment(tmp_path: Path) -> None:
    dump = "env | grep -E '^(PAI_|FC_)' | sort"
    # With OpenPAI's default completion, the first role whose instances all succeed ends the job
    # and its other tasks are stopped; -1 waits for every task, so every task prints its env.
    every_task = {"minSucceededInstances": -1}
    roles = {
        "ps": {"instances": 1, "commands": [dump], "ports": {"grpc": 2}, "completion": every_task},
        "worker": {"instances": 2, "commands": [dump], "completion": every_task},
        "evaluator": {"instances": 1, "commands": [dump], "completion": every_task},
    }
    async with running_platform(tmp_path / "data") as platform:
        job_id = await platform.submit(job_yaml("envs", roles))
        assert (await platform.completed(job_id)).state == "SUCCEEDED"
        envs = {
            (role, index): _parse(await platform.log("envs", role, index, file="stdout"))
            for role, spec in roles.items()
            for index in range(int(str(spec["instances"])))
        }
    host_ips = {f"PAI_HOST_IP_{role}_{index}": "127.0.0.1" for role, index in envs}
    ports: dict[str, str] = {}
    for env in envs.values():
        ports.update({k: v for k, v in env.items() if k.startswith("PAI_PORT_LIST_")})
    for (role, index), env in envs.items():
        assert env["PAI_JOB_NAME"] == "admin~envs"
        assert env["PAI_USER_NAME"] == "admin"
        assert env["PAI_TASK_ROLE_COUNT"] == "3"
        assert env["PAI_TASK_ROLE_LIST"] == "ps,worker,evaluator"
        assert (env["PAI_TASK_ROLE_TASK_COUNT_ps"], env["PAI_TASK_ROLE_TASK_COUNT_worker"]) == ("1", "2")
        assert env["PAI_TASK_ROLE_TASK_COUNT_evaluator"] == "1"
        assert env["PAI_CURRENT_TASK_ROLE_NAME"] == role
        assert env["PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX"] == env["PAI_TASK_INDEX"] == str(index)
        assert env["PAI_RESOURCE_worker"].split(",")[:3] == ["0", "1", "128"]
        assert env["PAI_MIN_FAILED_TASK_COUNT_worker"] == "1"
        assert env["PAI_MIN_SUCCEEDED_TASK_COUNT_worker"] == "-1"
        assert env["PAI_JOB_VC_NAME"] == "default"
        assert {k: env[k] for k in host_ips} == host_ips, "every task knows every peer's address"
        assert {k: env[k] for k in ports} == ports, "and every peer's ports, the same for all"
        assert env["PAI_CURRENT_CONTAINER_IP"] == "127.0.0.1"
        assert env["PAI_CONTAINER_SSH_PORT"] == env[f"PAI_PORT_LIST_{role}_{index}_ssh"]
        assert env["PAI_CURRENT_CONTAINER_PORT"] == env[f"PAI_PORT_LIST_{role}_{index}_http"]
        assert len(env["PAI_TASK_ROLE_worker_HOST_LIST"].split(",")) == 2
    assert len(envs[("ps", 0)]["PAI_PORT_LIST_ps_0_grpc"].split(",")) == 2
    every_port = [p for v in ports.values() for p in v.split(",")]
    assert len(every_port) == len(set(every_port)), "no two tasks on the node share a port"


def _parse(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
