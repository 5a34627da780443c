"""The REST API's job detail and a VC's quota, read and written through one model each."""

from __future__ import annotations

import subprocess
import sys

from libs.protocol.job_details import JobDetail
from libs.protocol.quotas import QuotaFields, VcAsk


def test_a_job_detail_gives_each_role_its_task_statuses_in_order() -> None:
    worker = [{"taskIndex": 0, "taskState": "RUNNING"}, {"taskIndex": 1, "taskState": "WAITING"}]
    shared = [{"node": "n1", "gpu": "0", "gpuMilli": 500, "tasks": []}]
    detail = {
        "name": "train",
        "taskRoles": {"worker": {"taskRoleStatus": {"name": "worker"}, "taskStatuses": worker}, "ps": {}},
        "sharedGpus": shared,
    }
    read = JobDetail.read(detail)
    assert read.roles == {"worker": worker, "ps": []}
    assert read.role_names == ["worker", "ps"]
    assert read.shared_gpus == shared


def test_a_detail_from_before_the_job_ran_has_no_roles() -> None:
    assert JobDetail.read({"name": "train"}) == JobDetail()
    assert JobDetail.read({"taskRoles": None, "sharedGpus": None}).role_names == []


def test_reading_a_job_detail_imports_no_pydantic() -> None:
    """`pai job status` and `pai job logs` import it; the CLI keeps its commands light."""
    code = "import sys, libs.protocol.job_details; print('pydantic' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_a_vc_ask_is_sent_with_the_apis_names_and_nothing_left_unsaid() -> None:
    assert VcAsk(cpu=4, memory_mb=0).body() == {"cpu": 4, "memoryMB": 0}
    assert VcAsk(gpus=2, model="V100").body() == {"gpus": 2, "model": "V100"}
    assert VcAsk().body() == {}


def test_a_quota_reads_the_json_names_and_keeps_them_on_the_way_out() -> None:
    quota = QuotaFields.model_validate({"cpu": 8.0, "memoryMB": 16384, "virtualCells": []})
    assert (quota.cpu, quota.memory_mb) == (8, 16384)
    assert quota.document() == {"cpu": 8, "memoryMB": 16384}
    assert QuotaFields.model_validate({"virtualCells": []}).model_fields_set == set()
