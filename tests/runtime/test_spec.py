"""The task spec, declared once in runtime/spec.py: what the orchestrator writes reads back as
written, a spec an earlier orchestrator wrote still reads, a field left out takes its default, and
a wrong field is refused with an error naming it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from runtime.spec import (
    Container,
    PluginSpec,
    Resources,
    RunAs,
    RuntimeExit,
    RuntimeResult,
    Sandbox,
    SpecError,
    TaskPlacement,
    dump_spec,
    load_spec,
    parse_result,
    parse_spec,
)
from tests.runtime.helpers import REPO_ROOT

# A spec with every field set, none at its default, as the orchestrator's pydantic models wrote it
# (model_dump_json(indent=2)) before the spec was declared once: tasks it started still read.
WRITTEN_BEFORE = Path(__file__).with_name("spec_v1_full.json")


def full() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(WRITTEN_BEFORE.read_text(encoding="utf-8"))
    return data


ADDED_SINCE = {"container": {"sandbox": None}}
"""Fields added since the spec below was written, with their defaults: written back with it."""


def test_a_spec_an_earlier_orchestrator_wrote_reads_and_writes_back_byte_for_byte() -> None:
    spec = load_spec(WRITTEN_BEFORE)
    assert spec.me == TaskPlacement(role="worker", index=1, host_ip="10.0.0.3", ports={"ssh": [2222]})
    assert spec.job.framework_name == "alice~sweep"
    assert spec.plugins[0].failure_policy == "ignore"
    assert spec.container is not None
    assert spec.container.runc is not None
    assert spec.container.runc.root == Path("/srv/pai/jobs/j-9/0/worker-1/runc")
    assert spec.roles[1].resources.cpu == 2.0
    written = full()
    for record, added in ADDED_SINCE.items():
        written[record].update(added)
    again = json.dumps(written, indent=2, ensure_ascii=False) + "\n"
    assert json.dumps(full(), indent=2, ensure_ascii=False) + "\n" == WRITTEN_BEFORE.read_text(
        encoding="utf-8"
    )
    assert dump_spec(spec, indent=2) + "\n" == again


def test_a_spec_with_only_the_required_fields_gets_every_default() -> None:
    raw = {
        "job": {"user": "a", "name": "b", "uid": "c", "attempt_id": 0},
        "role": "main",
        "index": 0,
        "entrypoint": "true",
        "roles": [{"name": "main", "instances": 1, "resources": {"cpu": 1, "memory_mb": 16}}],
        "tasks": [{"role": "main", "index": 0, "host_ip": "127.0.0.1"}],
        "dirs": {"work_dir": "/w", "log_dir": "/l", "barrier_dir": "/b"},
    }
    assert parse_spec(raw).as_dict() == {
        "spec_version": 1,
        "job": {
            "user": "a",
            "name": "b",
            "uid": "c",
            "attempt_id": 0,
            "task_attempt_id": 0,
            "virtual_cluster": "default",
        },
        "role": "main",
        "index": 0,
        "entrypoint": "true",
        "gpu_indices": [],
        "gpu_milli": None,
        "gpu_memory_mib": None,
        "mps_pipe_dir": None,
        "roles": [
            {
                "name": "main",
                "instances": 1,
                "resources": {"cpu": 1.0, "memory_mb": 16, "gpu": 0, "shm_mb": 512, "ports": {}},
                "min_failed_instances": 1,
                "min_succeeded_instances": None,
            }
        ],
        "tasks": [{"role": "main", "index": 0, "host_ip": "127.0.0.1", "ports": {}}],
        "plugins": [],
        "storages": [],
        "secrets_file": None,
        "dirs": {
            "work_dir": Path("/w"),
            "log_dir": Path("/l"),
            "barrier_dir": Path("/b"),
            "ssh_key_dir": None,
            "private_dir": None,
        },
        "barrier_timeout_s": 300.0,
        "gang": True,
        "log_rotation": {"max_bytes": 16 * 1024 * 1024, "backup_count": 3},
        "result_tail_kib": 16,
        "default_fs_uri": "",
        "failure_rules_file": None,
        "run_as": None,
        "confine": None,
        "container": None,
        "sandbox": None,
        "notice": None,
    }


def test_records_built_in_code_take_the_same_defaults() -> None:
    assert PluginSpec(plugin="ssh") == PluginSpec(
        plugin="ssh", parameters={}, failure_policy="fail", taskroles=None
    )
    assert RunAs(name="t", uid=1, gid=1).groups == []
    assert Resources(cpu=1, memory_mb=1).ports is not Resources(cpu=1, memory_mb=1).ports
    with pytest.raises(TypeError, match="Resources: memory_mb is required"):
        Resources(cpu=1)  # type: ignore[call-arg]


def test_the_plugins_camel_case_failure_policy_reads_too() -> None:
    raw = full()
    raw["plugins"] = [{"plugin": "cmd", "failurePolicy": "ignore"}]
    assert parse_spec(raw).plugins == [PluginSpec(plugin="cmd", failure_policy="ignore")]


def _set(data: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    node: Any = data
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if value is _DELETE:
        del node[last]
    elif isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value


class _Delete:
    """The field is removed rather than set (named in test ids, the same in every process)."""

    def __repr__(self) -> str:
        return "<deleted>"


_DELETE = _Delete()
# (field, wrong value, the error the runtime gives: it names the field).
REFUSED = [
    ("job.user", "", "job.user: must have at least 1 character"),
    ("job.attempt_id", -1, "job.attempt_id: must be greater than or equal to 0"),
    ("job.attempt_id", "1", "job.attempt_id: must be an integer"),
    ("job.attempt_id", True, "job.attempt_id: must be an integer"),
    ("job.uid", _DELETE, "job.uid: field required"),
    ("job.extra", 1, "job.extra: extra field not permitted"),
    ("job", [], "job: must be an object"),
    ("role", "nobody", "role: 'nobody' is not one of the roles ['ps', 'worker']"),
    ("index", 5, "index: worker-5 is not a task of the attempt"),
    ("index", -1, "index: must be greater than or equal to 0"),
    ("entrypoint", 1, "entrypoint: must be a string"),
    ("gpu_milli", 1000, "gpu_milli: must be less than or equal to 999"),
    ("gpu_milli", 0, "gpu_milli: must be greater than or equal to 1"),
    ("gpu_memory_mib", 0, "gpu_memory_mib: must be greater than or equal to 1"),
    ("gpu_indices", "0", "gpu_indices: must be a list"),
    ("gpu_indices", [0.5], "gpu_indices.0: must be an integer"),
    ("mps_pipe_dir", 1, "mps_pipe_dir: must be a string"),
    ("roles", [], "roles: must have at least 1 item"),
    ("roles.0.name", "bad-name", "roles.0.name: must be letters, digits and underscores"),
    ("roles.0.instances", 0, "roles.0.instances: must be greater than or equal to 1"),
    ("roles.0.resources.cpu", -1, "roles.0.resources.cpu: must be greater than or equal to 0"),
    ("roles.0.resources.cpu", "1", "roles.0.resources.cpu: must be a number"),
    ("roles.0.resources.memory_mb", "16", "roles.0.resources.memory_mb: must be an integer"),
    ("roles.0.resources.ports", {"http": "x"}, "roles.0.resources.ports.http: must be an integer"),
    ("roles.0.resources", _DELETE, "roles.0.resources: field required"),
    ("tasks.0.ports", {"http": "x"}, "tasks.0.ports.http: must be a list of ports"),
    ("tasks.0.ports", {"http": ["x"]}, "tasks.0.ports.http.0: must be an integer"),
    ("tasks.0.ports", [], "tasks.0.ports: must be an object"),
    ("tasks.0.host_ip", _DELETE, "tasks.0.host_ip: field required"),
    ("tasks", [], "tasks: must have at least 1 item"),
    ("tasks", "all", "tasks: must be a list"),
    (
        "plugins",
        [{"plugin": "cmd", "failure_policy": "sometimes"}],
        "plugins.0.failure_policy: must be 'ignore' or 'fail'",
    ),
    (
        "plugins",
        [{"plugin": "cmd", "taskroles": "worker"}],
        "plugins.0.taskroles: must be a list of task role names",
    ),
    (
        "plugins",
        [{"plugin": "cmd", "taskroles": [1]}],
        "plugins.0.taskroles: must be a list of task role names",
    ),
    ("plugins", [{"parameters": {}}], "plugins.0.plugin: field required"),
    ("plugins", [{"plugin": "cmd", "parameters": []}], "plugins.0.parameters: must be an object"),
    ("storages", [{"name": "d", "type": "nfs", "path": "/d"}], "storages.0.mount_path: field required"),
    ("storages.0.default", "maybe", "storages.0.default: must be true or false"),
    ("dirs.log_dir", _DELETE, "dirs.log_dir: field required"),
    ("dirs.log_dir", 3, "dirs.log_dir: must be a string"),
    ("barrier_timeout_s", 0, "barrier_timeout_s: must be greater than 0"),
    ("barrier_timeout_s", "soon", "barrier_timeout_s: must be a number"),
    ("gang", 1, "gang: must be true or false"),
    ("log_rotation", {"max_bytes": 10}, "log_rotation.max_bytes: must be greater than or equal to 1024"),
    ("log_rotation", None, "log_rotation: must be an object"),
    ("result_tail_kib", -1, "result_tail_kib: must be greater than or equal to 0"),
    ("run_as", {"name": "root", "uid": 0, "gid": 0}, "run_as.uid: must be greater than or equal to 1"),
    ("run_as.groups", [-1], "run_as.groups.0: must be greater than or equal to 0"),
    (
        "confine.rlimits",
        {"RLIMIT_DATA": -1},
        "confine.rlimits.RLIMIT_DATA: must be greater than or equal to 0",
    ),
    ("confine.cgroups", [1], "confine.cgroups.0: must be a string"),
    ("container.image", "", "container.image: must have at least 1 character"),
    ("container.env", {"A": 1}, "container.env.A: must be a string"),
    ("container.runc.name", "", "container.runc.name: must have at least 1 character"),
    ("container.runc.root", _DELETE, "container.runc.root: field required"),
    ("container.runc.config", 7, "container.runc.config: must be a string"),
    ("container.runc.detach", True, "container.runc.detach: extra field not permitted"),
    ("sandbox.wrap", [], "sandbox: wrap and drop must each name a program"),
    ("sandbox.drop", [3], "sandbox.drop.0: must be a string"),
    ("spec_version", 2, "spec_version: must be 1"),
    ("surprise", True, "surprise: extra field not permitted"),
]


@pytest.mark.parametrize(("where", "value", "error"), REFUSED, ids=[f"{w}={v!r}" for w, v, _ in REFUSED])
def test_a_wrong_field_is_refused_with_an_error_naming_it(where: str, value: Any, error: str) -> None:
    raw = full()
    _set(raw, where, value)
    with pytest.raises(SpecError, match=f"^{re.escape(error)}$"):
        parse_spec(raw)


def test_tasks_that_do_not_match_the_roles_are_refused() -> None:
    raw = full()
    raw["tasks"] = raw["tasks"][:2]
    with pytest.raises(SpecError, match=r"^tasks: .*missing \[\('worker', 1\)\], unexpected \[\]$"):
        parse_spec(raw)
    raw["roles"][1]["name"] = "ps"
    with pytest.raises(SpecError, match=r"^roles: task role names must be unique$"):
        parse_spec(raw)


def test_a_spec_that_is_not_an_object_or_not_json_names_its_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"^\(root\): must be an object$"):
        parse_spec([])
    path = tmp_path / "spec.json"
    path.write_text("{", encoding="utf-8")
    with pytest.raises(SpecError, match=f"^invalid task spec {re.escape(str(path))}: not JSON"):
        load_spec(path)
    path.write_text(json.dumps({**full(), "index": -1}), encoding="utf-8")
    with pytest.raises(SpecError, match=f"^invalid task spec {re.escape(str(path))}: index: must be"):
        load_spec(path)


def test_the_writer_refuses_tasks_that_do_not_match_the_roles_as_the_runtime_would() -> None:
    spec = parse_spec(full())
    with pytest.raises(SpecError, match=r"^tasks: must list each"):
        dump_spec(spec.replace(tasks=spec.tasks[:2]))


def test_records_are_frozen_and_compare_by_value() -> None:
    spec = parse_spec(full())
    with pytest.raises(AttributeError, match="frozen"):
        spec.role = "ps"  # type: ignore[misc]
    assert spec.replace(index=0).index == 0
    assert spec.index == 1
    assert spec.replace() == spec
    assert hash(spec.replace()) == hash(spec)
    assert spec != spec.replace(sandbox=Sandbox(wrap=["bwrap"], drop=["setpriv"]))


def test_the_runtime_reads_its_spec_without_importing_typing_or_any_validation_library() -> None:
    probe = (
        "import sys; from runtime.spec import load_spec; from pathlib import Path\n"
        f"load_spec(Path({str(WRITTEN_BEFORE)!r}))\n"
        "heavy = ('typing', 'dataclasses', 'inspect', 'pydantic', 'msgspec')\n"
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-S", "-c", probe],
        cwd=REPO_ROOT,
        env={"PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.strip() == "[]"


def test_the_runtimes_result_reads_back_on_the_platforms_side_as_written() -> None:
    """runtime-result.json the other way: the runtime's record, as its file holds it (camelCase
    keys), is what the platform reads; keys it does not know are ignored."""
    written = RuntimeResult(
        exit_code=245,
        user_exit_code=None,
        runtime_exit=RuntimeExit(code=245, phrase="RuntimeConfineFailed", reason="no cgroup"),
        stopped_by="SIGTERM",
        plugins=[{"plugin": "ssh", "status": "ok"}],
        user_log_tail="last line",
        failure={"code": 245, "type": "transient"},
        image_digest="registry.example/app@sha256:beef",
    )
    text = json.dumps(written.to_json())
    assert '"exitCode": 245' in text
    assert '"userLogTail": "last line"' in text
    assert parse_result(json.loads(text)) == written
    newer = {
        **written.to_json(),
        "someday": 1,
        "runtimeExit": {"code": 1, "phrase": "x", "reason": "y", "z": 0},
    }
    assert parse_result(newer).runtime_exit == RuntimeExit(code=1, phrase="x", reason="y")
    assert parse_result({"exit_code": 3}) == RuntimeResult(exit_code=3)
    with pytest.raises(SpecError, match=r"^exit_code: field required$"):
        parse_result({"userExitCode": 1})
    with pytest.raises(SpecError, match=r"^exit_code: must be an integer$"):
        parse_result({"exitCode": "1"})


def test_a_container_needs_its_engine_run_and_image() -> None:
    raw = full()
    del raw["container"]["run"]
    with pytest.raises(SpecError, match=r"^container\.run: field required$"):
        parse_spec(raw)
    assert Container(engine="podman", run=[], image="x").env == {}
