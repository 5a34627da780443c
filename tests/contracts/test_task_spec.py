"""The task spec's two sides agree: what the platform writes (pydantic models of runtime.spec_model,
dumped as the local executor dumps them) is what the runtime reads (runtime.spec, the standard
library only), field by field, and what the models refuse the reader refuses too, naming the field."""

from __future__ import annotations

import json
import re
import typing
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from runtime import spec as reader
from runtime import spec_model as writer
from services.orchestrator.adapters.specs import build_spec
from services.orchestrator.core.frameworks import TaskKey
from tests.k8s.frameworks import framework

PAIRS = [
    (writer.TaskSpec, reader.TaskSpec),
    (writer.JobInfo, reader.JobInfo),
    (writer.Resources, reader.Resources),
    (writer.RoleInfo, reader.RoleInfo),
    (writer.TaskPlacement, reader.TaskPlacement),
    (writer.PluginSpec, reader.PluginSpec),
    (writer.StorageSpec, reader.StorageSpec),
    (writer.Directories, reader.Directories),
    (writer.RunAs, reader.RunAs),
    (writer.LogRotation, reader.LogRotation),
    (writer.Confine, reader.Confine),
    (writer.Container, reader.Container),
    (writer.Runc, reader.Runc),
    (writer.RuntimeExit, reader.RuntimeExit),
    (writer.RuntimeResult, reader.RuntimeResult),
]


def full_spec(tmp_path: Path) -> writer.TaskSpec:
    """Every field of the spec set, none left at its default."""
    return writer.TaskSpec(
        job=writer.JobInfo(
            user="alice", name="sweep", uid="j-9", attempt_id=2, task_attempt_id=1, virtual_cluster="vc1"
        ),
        role="worker",
        index=1,
        entrypoint="echo <% $secrets.token %>",
        gpu_indices=[3],
        gpu_milli=250,
        gpu_memory_mib=4096,
        mps_pipe_dir=tmp_path / "mps" / "pipe",
        roles=[
            writer.RoleInfo(
                name="ps",
                instances=1,
                resources=writer.Resources(cpu=0.5, memory_mb=16, gpu=0, shm_mb=64, ports={"http": 2}),
                min_failed_instances=2,
                min_succeeded_instances=1,
            ),
            writer.RoleInfo(
                name="worker", instances=2, resources=writer.Resources(cpu=2, memory_mb=1024, gpu=1)
            ),
        ],
        tasks=[
            writer.TaskPlacement(role="ps", index=0, host_ip="10.0.0.1", ports={"http": [4000, 4001]}),
            writer.TaskPlacement(role="worker", index=0, host_ip="10.0.0.2"),
            writer.TaskPlacement(role="worker", index=1, host_ip="10.0.0.3", ports={"ssh": [2222]}),
        ],
        plugins=[
            writer.PluginSpec(
                plugin="com.microsoft.pai.runtimeplugin.cmd",
                parameters={"callbacks": [{"event": "taskStarts", "commands": ["date"]}], "n": 1.5},
                failure_policy="ignore",
                taskroles=["worker"],
            ),
            writer.PluginSpec(plugin="ssh"),
        ],
        storages=[
            writer.StorageSpec(
                name="data",
                type="nfs",
                path="/srv/data",
                mount_path="/mnt/data",
                default=True,
                read_only=True,
            )
        ],
        secrets_file=tmp_path / "secrets.json",
        dirs=writer.Directories(
            work_dir=tmp_path / "work",
            log_dir=tmp_path / "logs",
            barrier_dir=tmp_path / "barrier",
            ssh_key_dir=tmp_path / "ssh",
            private_dir=tmp_path / "private",
        ),
        barrier_timeout_s=12.5,
        log_rotation=writer.LogRotation(max_bytes=4096, backup_count=1),
        result_tail_kib=4,
        default_fs_uri="hdfs://nn:9000",
        failure_rules_file=tmp_path / "rules.yaml",
        run_as=writer.RunAs(name="pai-task", uid=990, gid=990),
        confine=writer.Confine(
            cgroups=[Path("/sys/fs/cgroup/memory/pai-x/j-9.2.worker-1.1")], rlimits={"RLIMIT_DATA": 1 << 30}
        ),
        container=writer.Container(
            engine="/usr/bin/podman",
            run=["run", "--rm"],
            image="sha256:feed",
            env={"CONTAINERS_CONF": "/srv/pai/containers.conf"},
            digest="registry.example/app@sha256:beef",
            pull=True,
            auth_file=tmp_path / "private" / "auth.json",
            runc=writer.Runc(
                program="/usr/sbin/runc",
                root=tmp_path / "runc",
                config=tmp_path / "private" / "bundle.json",
                name="pai-j-9-2-worker-1-1",
            ),
        ),
        notice="the docker image was not used",
    )


def read_back(model: writer.TaskSpec, tmp_path: Path) -> reader.TaskSpec:
    path = tmp_path / "spec.json"
    path.write_text(model.model_dump_json(indent=2), encoding="utf-8")  # as the local executor writes it
    return reader.load_spec(path)


@pytest.mark.parametrize(("model", "plain"), PAIRS, ids=lambda c: c.__name__)
def test_each_model_and_its_reader_class_have_the_same_fields_and_defaults(
    model: type[BaseModel], plain: type[Any]
) -> None:
    assert set(plain._fields) == set(model.model_fields)
    for name, info in model.model_fields.items():
        if info.is_required():
            assert not hasattr(plain, name), f"{name} is required by the model, has a default in the reader"
            continue
        ours = info.get_default(call_default_factory=True)
        ours = ours.model_dump() if isinstance(ours, BaseModel) else ours
        theirs = getattr(plain, name)
        assert (theirs.as_dict() if isinstance(theirs, reader.Record) else theirs) == ours, name


def test_a_spec_with_every_field_set_reads_back_as_written(tmp_path: Path) -> None:
    model = full_spec(tmp_path)
    read = read_back(model, tmp_path)
    assert read.as_dict() == model.model_dump()
    assert read.me == reader.TaskPlacement(role="worker", index=1, host_ip="10.0.0.3", ports={"ssh": [2222]})
    assert read.job.framework_name == model.job.framework_name


def test_the_orchestrators_own_spec_reads_back_as_written(tmp_path: Path) -> None:
    model = build_spec(tmp_path, framework(), TaskKey(0, "trainer", 1, 0), tmp_path / "task", True)
    read = read_back(model, tmp_path)
    assert read.as_dict() == model.model_dump()


def test_a_spec_with_only_the_required_fields_gets_the_same_defaults(tmp_path: Path) -> None:
    raw = {
        "job": {"user": "a", "name": "b", "uid": "c", "attempt_id": 0},
        "role": "main",
        "index": 0,
        "entrypoint": "true",
        "roles": [{"name": "main", "instances": 1, "resources": {"cpu": 1, "memory_mb": 16}}],
        "tasks": [{"role": "main", "index": 0, "host_ip": "127.0.0.1"}],
        "dirs": {"work_dir": "/w", "log_dir": "/l", "barrier_dir": "/b"},
    }
    assert reader.parse_spec(raw).as_dict() == writer.TaskSpec.model_validate(raw).model_dump()


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
# (field, wrong value, what the reader's message names): refused by the models and by the reader.
REFUSED = [
    ("job.user", "", "job.user"),
    ("job.attempt_id", -1, "job.attempt_id"),
    ("job.uid", _DELETE, "job.uid: field required"),
    ("job.extra", 1, "job.extra: extra field"),
    ("role", "nobody", "role: 'nobody'"),
    ("index", 5, "index: worker-5"),
    ("index", -1, "index"),
    ("entrypoint", 1, "entrypoint"),
    ("gpu_milli", 1000, "gpu_milli"),
    ("gpu_milli", 0, "gpu_milli"),
    ("gpu_memory_mib", 0, "gpu_memory_mib"),
    ("gpu_indices", "0", "gpu_indices"),
    ("roles", [], "roles"),
    ("roles.0.name", "bad-name", "roles.0.name"),
    ("roles.0.instances", 0, "roles.0.instances"),
    ("roles.0.resources.cpu", -1, "roles.0.resources.cpu"),
    ("roles.0.resources.ports", {"http": "x"}, "roles.0.resources.ports.http"),
    ("tasks.0.ports", {"http": ["x"]}, "tasks.0.ports.http.0"),
    ("tasks.0.host_ip", _DELETE, "tasks.0.host_ip"),
    ("tasks", [], "tasks"),
    ("plugins", [{"plugin": "cmd", "failure_policy": "sometimes"}], "plugins.0.failure_policy"),
    ("plugins", [{"plugin": "cmd", "taskroles": "worker"}], "plugins.0.taskroles"),
    ("plugins", [{"parameters": {}}], "plugins.0.plugin"),
    ("storages", [{"name": "d", "type": "nfs", "path": "/d"}], "storages.0.mount_path"),
    ("storages.0.default", "maybe", "storages.0.default"),
    ("dirs.log_dir", _DELETE, "dirs.log_dir"),
    ("dirs.log_dir", 3, "dirs.log_dir"),
    ("barrier_timeout_s", 0, "barrier_timeout_s"),
    ("barrier_timeout_s", "soon", "barrier_timeout_s"),
    ("log_rotation", {"max_bytes": 10}, "log_rotation.max_bytes"),
    ("log_rotation", None, "log_rotation"),
    ("result_tail_kib", -1, "result_tail_kib"),
    ("run_as", {"name": "root", "uid": 0, "gid": 0}, "run_as.uid"),
    ("container.image", "", "container.image"),
    ("container.runc.name", "", "container.runc.name"),
    ("container.runc.root", _DELETE, "container.runc.root: field required"),
    ("container.runc.config", 7, "container.runc.config"),
    ("container.runc.detach", True, "container.runc.detach: extra field"),
    ("spec_version", 2, "spec_version"),
    ("surprise", True, "surprise: extra field"),
]


@pytest.mark.parametrize(("where", "value", "named"), REFUSED, ids=[f"{w}={v!r}" for w, v, _ in REFUSED])
def test_what_the_models_refuse_the_reader_refuses_naming_the_field(
    tmp_path: Path, where: str, value: Any, named: str
) -> None:
    raw = json.loads(full_spec(tmp_path).model_dump_json())
    _set(raw, where, value)
    with pytest.raises(ValidationError):
        writer.TaskSpec.model_validate(raw)
    with pytest.raises(reader.SpecError, match=re.escape(named)):
        reader.parse_spec(raw)


@pytest.mark.parametrize(("where", "value"), [("job.attempt_id", "1"), ("roles.0.resources.memory_mb", "16")])
def test_numbers_written_as_text_are_refused_by_the_reader(tmp_path: Path, where: str, value: Any) -> None:
    """The writer never writes them; the reader refuses them where the models' lax mode converts."""
    raw = json.loads(full_spec(tmp_path).model_dump_json())
    _set(raw, where, value)
    with pytest.raises(reader.SpecError, match=f"{re.escape(where)}: must be an integer"):
        reader.parse_spec(raw)


def test_tasks_that_do_not_match_the_roles_are_refused_by_both(tmp_path: Path) -> None:
    raw = json.loads(full_spec(tmp_path).model_dump_json())
    raw["tasks"] = raw["tasks"][:2]
    with pytest.raises(ValidationError, match="tasks"):
        writer.TaskSpec.model_validate(raw)
    with pytest.raises(reader.SpecError, match=r"tasks: .*missing \[\('worker', 1\)\]"):
        reader.parse_spec(raw)


def test_records_are_frozen_and_compare_by_value(tmp_path: Path) -> None:
    spec = read_back(full_spec(tmp_path), tmp_path)
    with pytest.raises(AttributeError, match="frozen"):
        spec.role = "ps"  # type: ignore[misc]
    assert spec.replace(index=0).index == 0
    assert spec.index == 1
    assert spec.replace() == spec
    assert reader.Resources(cpu=1, memory_mb=1).ports is not reader.Resources(cpu=1, memory_mb=1).ports


def test_the_reader_imports_nothing_but_the_standard_library() -> None:
    source = Path(reader.__file__).read_text(encoding="utf-8")
    imported = {
        line.split()[1].split(".")[0] for line in source.splitlines() if line.startswith(("import ", "from "))
    }
    assert imported <= {"__future__", "json", "re", "pathlib", "typing"}, imported
    assert typing.get_type_hints(reader.TaskSpec)  # its annotations resolve


def test_the_runtimes_result_reads_back_on_the_platforms_side_as_written() -> None:
    """runtime-result.json the other way: the runtime's record, as its file holds it, is the
    platform's model field for field (camelCase on disk)."""
    written = reader.RuntimeResult(
        exit_code=245,
        user_exit_code=None,
        runtime_exit=reader.RuntimeExit(code=245, phrase="RuntimeConfineFailed", reason="no cgroup"),
        stopped_by="SIGTERM",
        plugins=[{"plugin": "ssh", "status": "ok"}],
        user_log_tail="last line",
        failure={"code": 245, "type": "transient"},
    )
    text = json.dumps(written.to_json())
    assert '"exitCode": 245' in text
    assert '"userLogTail": "last line"' in text
    read = writer.RuntimeResult.model_validate_json(text)
    assert read.model_dump() == written.as_dict()
