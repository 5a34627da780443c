"""The task spec as the runtime reads it: the standard library only, so a task starts fast.

The orchestrator writes the spec with the pydantic models of ``runtime.spec_model`` (the
platform validates there) as JSON to a file, and starts ``python -m runtime --spec FILE``. Every
task pays for the runtime's start-up before its command runs, so the reader here uses ``json``
and frozen dataclasses with the same field names, defaults and bounds as the models: it accepts
what the models write and refuses what they refuse, each error naming the field
(tests/contracts/test_task_spec.py holds the two sides together).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

# Not `typing` (nor dataclasses, which imports inspect): each costs every task milliseconds.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Self, dataclass_transform
else:

    def dataclass_transform(**_: object) -> object:
        return lambda cls: cls


SPEC_VERSION = 1
_MISSING: Any = object()
_ROLE_NAME = re.compile(r"^[A-Za-z0-9_]+$")


class SpecError(Exception):
    """The spec file is missing or invalid; the message names the field."""


@dataclass_transform(frozen_default=True, kw_only_default=True)
class Record:
    """A frozen record of keyword fields: a class's annotations are its fields, in order, and its
    class attributes their defaults (an empty list or dict default is a new one per record)."""

    _fields: tuple[str, ...] = ()

    def __init_subclass__(cls) -> None:
        # The class's own annotations (inspect.get_annotations would import inspect).
        cls._fields = tuple(cls.__dict__.get("__annotations__", {}))  # noqa: RUF063

    def __init__(self, **values: Any) -> None:
        for name in self._fields:
            if name in values:
                value = values.pop(name)
            elif hasattr(type(self), name):
                value = getattr(type(self), name)
                if isinstance(value, list | dict):
                    value = type(value)(value)
            else:
                raise TypeError(f"{type(self).__name__}: {name} is required")
            object.__setattr__(self, name, value)
        if values:
            raise TypeError(f"{type(self).__name__}: no field {sorted(values)[0]}")

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen: {name} cannot be set")

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self._fields)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self._values() == other._values()

    def __hash__(self) -> int:
        return hash(tuple(repr(v) for v in self._values()))

    def __repr__(self) -> str:
        inside = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._fields)
        return f"{type(self).__name__}({inside})"

    def replace(self, **changes: Any) -> Self:
        """A copy with ``changes`` applied."""
        return type(self)(**{**{name: getattr(self, name) for name in self._fields}, **changes})

    def as_dict(self) -> dict[str, Any]:
        """Every field, records within as dicts too (as pydantic's ``model_dump`` gives them)."""
        return {name: _plain(getattr(self, name)) for name in self._fields}


def _plain(value: Any) -> Any:
    if isinstance(value, Record):
        return value.as_dict()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


class JobInfo(Record):
    """Who and what the task belongs to."""

    user: str
    name: str
    uid: str
    attempt_id: int
    task_attempt_id: int = 0
    virtual_cluster: str = "default"

    @property
    def framework_name(self) -> str:
        """OpenPAI names a job's framework ``user~name``; PAI_JOB_NAME carries that form."""
        return f"{self.user}~{self.name}"


class Resources(Record):
    cpu: float
    memory_mb: int
    gpu: int = 0
    shm_mb: int = 512
    ports: dict[str, int] = {}  # noqa: RUF012 - a new dict per record


class RoleInfo(Record):
    name: str
    instances: int
    resources: Resources
    min_failed_instances: int = 1
    min_succeeded_instances: int | None = None


class TaskPlacement(Record):
    role: str
    index: int
    host_ip: str
    ports: dict[str, list[int]] = {}  # noqa: RUF012 - a new dict per record


class PluginSpec(Record):
    plugin: str
    parameters: dict[str, Any] = {}  # noqa: RUF012 - a new dict per record
    failure_policy: str = "fail"
    taskroles: list[str] | None = None


class StorageSpec(Record):
    name: str
    type: str
    path: str
    mount_path: str
    default: bool = False
    read_only: bool = False


class Directories(Record):
    work_dir: Path
    log_dir: Path
    barrier_dir: Path
    ssh_key_dir: Path | None = None
    private_dir: Path | None = None


class Confine(Record):
    cgroups: list[Path] = []  # noqa: RUF012 - a new list per record
    rlimits: dict[str, int] = {}  # noqa: RUF012 - a new dict per record


class RunAs(Record):
    name: str
    uid: int
    gid: int
    groups: list[int] = []  # noqa: RUF012 - a new list per record


class Runc(Record):
    program: str
    root: Path
    config: Path
    name: str


class Container(Record):
    engine: str
    run: list[str]
    image: str
    env: dict[str, str] = {}  # noqa: RUF012 - a new dict per record
    digest: str | None = None
    pull: bool = False
    auth_file: Path | None = None
    runc: Runc | None = None


class Sandbox(Record):
    wrap: list[str]
    drop: list[str]


class LogRotation(Record):
    max_bytes: int = 16 * 1024 * 1024
    backup_count: int = 3


class RuntimeExit(Record):
    """Why the runtime itself ended the task, with one of its own exit codes."""

    code: int
    phrase: str
    reason: str


class RuntimeResult(Record):
    """runtime-result.json, as the runtime writes it (``runtime.spec_model.RuntimeResult`` reads
    it on the platform's side; tests/contracts keeps the two in agreement). Its keys are
    camelCase on disk (``to_json``)."""

    exit_code: int
    user_exit_code: int | None = None
    runtime_exit: RuntimeExit | None = None
    stopped_by: str | None = None
    plugins: list[dict[str, Any]] = []  # noqa: RUF012 - a new list per record
    user_log_tail: str = ""
    failure: dict[str, Any] | None = None
    image_digest: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The file's JSON object: each field under its camelCase name."""
        return {_camel(name): value for name, value in self.as_dict().items()}


def _camel(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(part.title() for part in rest)


class TaskSpec(Record):
    """The whole input of one runtime run (see ``runtime.spec_model.TaskSpec`` for each field)."""

    spec_version: int = SPEC_VERSION
    job: JobInfo
    role: str
    index: int
    entrypoint: str
    gpu_indices: list[int] = []  # noqa: RUF012 - a new list per record
    gpu_milli: int | None = None
    gpu_memory_mib: int | None = None
    mps_pipe_dir: Path | None = None
    roles: list[RoleInfo]
    tasks: list[TaskPlacement]
    plugins: list[PluginSpec] = []  # noqa: RUF012 - a new list per record
    storages: list[StorageSpec] = []  # noqa: RUF012 - a new list per record
    secrets_file: Path | None = None
    dirs: Directories
    barrier_timeout_s: float = 300.0
    gang: bool = True  # false: gang allocation off, no barrier (each task starts on its own)
    log_rotation: LogRotation = LogRotation()
    result_tail_kib: int = 16
    default_fs_uri: str = ""
    failure_rules_file: Path | None = None
    run_as: RunAs | None = None
    confine: Confine | None = None
    container: Container | None = None
    sandbox: Sandbox | None = None
    notice: str | None = None

    def role_info(self, name: str) -> RoleInfo:
        return next(r for r in self.roles if r.name == name)

    def placement(self, role: str, index: int) -> TaskPlacement:
        return next(t for t in self.tasks if t.role == role and t.index == index)

    @property
    def me(self) -> TaskPlacement:
        return self.placement(self.role, self.index)


# -- reading ---------------------------------------------------------------------------------


class _Fields:
    """Takes the fields of one JSON object in turn; what is left at the end is refused."""

    def __init__(self, data: Any, where: str, aliases: dict[str, str] | None = None) -> None:
        if not isinstance(data, dict):
            raise SpecError(f"{where or '(root)'}: must be an object")
        self.data = dict(data)
        self.where = where
        for alias, name in (aliases or {}).items():
            if alias in self.data and name not in self.data:
                self.data[name] = self.data.pop(alias)

    def _at(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def take(self, key: str, default: Any = _MISSING) -> tuple[Any, str]:
        if key in self.data:
            return self.data.pop(key), self._at(key)
        if default is _MISSING:
            raise SpecError(f"{self._at(key)}: field required")
        return default, ""

    def done(self) -> None:
        if self.data:
            raise SpecError(f"{self._at(sorted(self.data)[0])}: extra field not permitted")

    def text(self, key: str, default: Any = _MISSING, *, min_length: int = 0) -> Any:
        value, at = self.take(key, default)
        if not at:
            return value
        if not isinstance(value, str):
            raise SpecError(f"{at}: must be a string")
        if len(value) < min_length:
            raise SpecError(f"{at}: must have at least {min_length} character")
        return value

    def optional_text(self, key: str) -> str | None:
        value, at = self.take(key, None)
        return None if value is None else self._check_text(value, at)

    @staticmethod
    def _check_text(value: Any, at: str) -> str:
        if not isinstance(value, str):
            raise SpecError(f"{at}: must be a string")
        return value

    def integer(
        self, key: str, default: Any = _MISSING, *, ge: int | None = None, le: int | None = None
    ) -> Any:
        value, at = self.take(key, default)
        if not at or (value is None and default is None):
            return value
        return _integer(value, at, ge, le)

    def number(
        self, key: str, default: Any = _MISSING, *, ge: float | None = None, gt: float | None = None
    ) -> Any:
        value, at = self.take(key, default)
        if not at:
            return value
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise SpecError(f"{at}: must be a number")
        if ge is not None and value < ge:
            raise SpecError(f"{at}: must be greater than or equal to {ge}")
        if gt is not None and value <= gt:
            raise SpecError(f"{at}: must be greater than {gt}")
        return float(value)

    def flag(self, key: str, default: bool) -> bool:
        value, at = self.take(key, default)
        if at and not isinstance(value, bool):
            raise SpecError(f"{at}: must be true or false")
        return bool(value)

    def path(self, key: str, default: Any = _MISSING) -> Any:
        value, at = self.take(key, default)
        if not at or value is None:
            return value
        return Path(self._check_text(value, at))

    def items(self, key: str, default: Any = _MISSING, *, min_length: int = 0) -> list[tuple[Any, str]]:
        value, at = self.take(key, default)
        if not at:
            return [(v, "") for v in value]
        if not isinstance(value, list):
            raise SpecError(f"{at}: must be a list")
        if len(value) < min_length:
            raise SpecError(f"{at}: must have at least {min_length} item")
        return [(v, f"{at}.{i}") for i, v in enumerate(value)]

    def mapping(self, key: str) -> tuple[dict[str, Any], str]:
        value, at = self.take(key, {})
        if at and not isinstance(value, dict):
            raise SpecError(f"{at}: must be an object")
        return dict(value), at


def _integer(value: Any, at: str, ge: int | None = None, le: int | None = None) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(f"{at}: must be an integer")
    if ge is not None and value < ge:
        raise SpecError(f"{at}: must be greater than or equal to {ge}")
    if le is not None and value > le:
        raise SpecError(f"{at}: must be less than or equal to {le}")
    return value


def _job(data: Any, where: str) -> JobInfo:
    f = _Fields(data, where)
    job = JobInfo(
        user=f.text("user", min_length=1),
        name=f.text("name", min_length=1),
        uid=f.text("uid", min_length=1),
        attempt_id=f.integer("attempt_id", ge=0),
        task_attempt_id=f.integer("task_attempt_id", 0, ge=0),
        virtual_cluster=f.text("virtual_cluster", "default"),
    )
    f.done()
    return job


def _resources(data: Any, where: str) -> Resources:
    f = _Fields(data, where)
    ports, at = f.mapping("ports")
    resources = Resources(
        cpu=f.number("cpu", ge=0),
        memory_mb=f.integer("memory_mb", ge=0),
        gpu=f.integer("gpu", 0, ge=0),
        shm_mb=f.integer("shm_mb", 512, ge=0),
        ports={str(k): _integer(v, f"{at}.{k}") for k, v in ports.items()},
    )
    f.done()
    return resources


def _role(data: Any, where: str) -> RoleInfo:
    f = _Fields(data, where)
    name = f.text("name")
    if not _ROLE_NAME.match(name):
        raise SpecError(f"{where}.name: must be letters, digits and underscores")
    role = RoleInfo(
        name=name,
        instances=f.integer("instances", ge=1),
        resources=_resources(f.take("resources")[0], f"{where}.resources"),
        min_failed_instances=f.integer("min_failed_instances", 1),
        min_succeeded_instances=f.integer("min_succeeded_instances", None),
    )
    f.done()
    return role


def _placement(data: Any, where: str) -> TaskPlacement:
    f = _Fields(data, where)
    ports, at = f.mapping("ports")
    lists: dict[str, list[int]] = {}
    for label, values in ports.items():
        if not isinstance(values, list):
            raise SpecError(f"{at}.{label}: must be a list of ports")
        lists[str(label)] = [_integer(v, f"{at}.{label}.{i}") for i, v in enumerate(values)]
    task = TaskPlacement(
        role=f.text("role"), index=f.integer("index", ge=0), host_ip=f.text("host_ip"), ports=lists
    )
    f.done()
    return task


def _plugin(data: Any, where: str) -> PluginSpec:
    f = _Fields(data, where, {"failurePolicy": "failure_policy"})
    parameters, _ = f.mapping("parameters")
    policy = f.text("failure_policy", "fail")
    if policy not in ("ignore", "fail"):
        raise SpecError(f"{where}.failure_policy: must be 'ignore' or 'fail'")
    roles, at = f.take("taskroles", None)
    if roles is not None and (not isinstance(roles, list) or not all(isinstance(r, str) for r in roles)):
        raise SpecError(f"{at}: must be a list of task role names")
    plugin = PluginSpec(
        plugin=f.text("plugin"),
        parameters=parameters,
        failure_policy=policy,
        taskroles=None if roles is None else list(roles),
    )
    f.done()
    return plugin


def _storage(data: Any, where: str) -> StorageSpec:
    f = _Fields(data, where)
    storage = StorageSpec(
        name=f.text("name"),
        type=f.text("type"),
        path=f.text("path"),
        mount_path=f.text("mount_path"),
        default=f.flag("default", False),
        read_only=f.flag("read_only", False),
    )
    f.done()
    return storage


def _dirs(data: Any, where: str) -> Directories:
    f = _Fields(data, where)
    dirs = Directories(
        work_dir=f.path("work_dir"),
        log_dir=f.path("log_dir"),
        barrier_dir=f.path("barrier_dir"),
        ssh_key_dir=f.path("ssh_key_dir", None),
        private_dir=f.path("private_dir", None),
    )
    f.done()
    return dirs


def _confine(data: Any, where: str) -> Confine | None:
    if data is None:
        return None
    f = _Fields(data, where)
    cgroups = [Path(_Fields._check_text(v, at)) for v, at in f.items("cgroups", [])]
    raw, at = f.mapping("rlimits")
    rlimits = {str(name): _integer(value, f"{at}.{name}", ge=0) for name, value in raw.items()}
    f.done()
    return Confine(cgroups=cgroups, rlimits=rlimits)


def _container(data: Any, where: str) -> Container | None:
    if data is None:
        return None
    f = _Fields(data, where)
    run = [_Fields._check_text(v, at) for v, at in f.items("run")]
    raw, at = f.mapping("env")
    container = Container(
        engine=f.text("engine", min_length=1),
        run=run,
        image=f.text("image", min_length=1),
        env={str(k): _Fields._check_text(v, f"{at}.{k}") for k, v in raw.items()},
        digest=f.optional_text("digest"),
        pull=f.flag("pull", False),
        auth_file=f.path("auth_file", None),
        runc=_runc(f.take("runc", None)[0], f"{where}.runc"),
    )
    f.done()
    return container


def _runc(data: Any, where: str) -> Runc | None:
    if data is None:
        return None
    f = _Fields(data, where)
    runc = Runc(
        program=f.text("program", min_length=1),
        root=f.path("root"),
        config=f.path("config"),
        name=f.text("name", min_length=1),
    )
    f.done()
    return runc


def _sandbox(data: Any, where: str) -> Sandbox | None:
    if data is None:
        return None
    f = _Fields(data, where)
    wrap = [_Fields._check_text(v, at) for v, at in f.items("wrap")]
    drop = [_Fields._check_text(v, at) for v, at in f.items("drop")]
    if not wrap or not drop:
        raise SpecError(f"{where}: wrap and drop must each name a program")
    f.done()
    return Sandbox(wrap=wrap, drop=drop)


def _run_as(data: Any, where: str) -> RunAs | None:
    if data is None:
        return None
    f = _Fields(data, where)
    run_as = RunAs(
        name=f.text("name", min_length=1),
        uid=f.integer("uid", ge=1),
        gid=f.integer("gid", ge=0),
        groups=[_integer(v, at, 0, None) if at else v for v, at in f.items("groups", [])],
    )
    f.done()
    return run_as


def _rotation(data: Any, where: str) -> LogRotation:
    f = _Fields(data, where)
    rotation = LogRotation(
        max_bytes=f.integer("max_bytes", 16 * 1024 * 1024, ge=1024),
        backup_count=f.integer("backup_count", 3, ge=0),
    )
    f.done()
    return rotation


def parse_spec(data: Any) -> TaskSpec:
    """The task spec from its JSON value; SpecError names the first field that is wrong."""
    f = _Fields(data, "")
    version = f.integer("spec_version", SPEC_VERSION)
    if version != SPEC_VERSION:
        raise SpecError(f"spec_version: must be {SPEC_VERSION}")
    rotation, rotation_at = f.take("log_rotation", None)
    spec = TaskSpec(
        spec_version=version,
        job=_job(f.take("job")[0], "job"),
        role=f.text("role"),
        index=f.integer("index", ge=0),
        entrypoint=f.text("entrypoint"),
        gpu_indices=[_integer(v, at) for v, at in f.items("gpu_indices", [])],
        gpu_milli=f.integer("gpu_milli", None, ge=1, le=999),
        gpu_memory_mib=f.integer("gpu_memory_mib", None, ge=1),
        mps_pipe_dir=f.path("mps_pipe_dir", None),
        roles=[_role(v, at) for v, at in f.items("roles", min_length=1)],
        tasks=[_placement(v, at) for v, at in f.items("tasks", min_length=1)],
        plugins=[_plugin(v, at) for v, at in f.items("plugins", [])],
        storages=[_storage(v, at) for v, at in f.items("storages", [])],
        secrets_file=f.path("secrets_file", None),
        dirs=_dirs(f.take("dirs")[0], "dirs"),
        barrier_timeout_s=f.number("barrier_timeout_s", 300.0, gt=0),
        gang=f.flag("gang", True),
        log_rotation=LogRotation()
        if rotation is None and not rotation_at
        else _rotation(rotation, "log_rotation"),
        result_tail_kib=f.integer("result_tail_kib", 16, ge=0),
        default_fs_uri=f.text("default_fs_uri", ""),
        failure_rules_file=f.path("failure_rules_file", None),
        run_as=_run_as(f.take("run_as", None)[0], "run_as"),
        confine=_confine(f.take("confine", None)[0], "confine"),
        container=_container(f.take("container", None)[0], "container"),
        sandbox=_sandbox(f.take("sandbox", None)[0], "sandbox"),
        notice=f.optional_text("notice"),
    )
    f.done()
    _check_tasks_match_roles(spec)
    return spec


def _check_tasks_match_roles(spec: TaskSpec) -> None:
    by_name = {r.name: r for r in spec.roles}
    if len(by_name) != len(spec.roles):
        raise SpecError("roles: task role names must be unique")
    if spec.role not in by_name:
        raise SpecError(f"role: {spec.role!r} is not one of the roles {sorted(by_name)}")
    seen = {(t.role, t.index) for t in spec.tasks}
    expected = {(r.name, i) for r in spec.roles for i in range(r.instances)}
    if len(seen) != len(spec.tasks) or seen != expected:
        missing = sorted(expected - seen)
        extra = sorted(seen - expected)
        raise SpecError(
            f"tasks: must list each (role, index) of the roles exactly once; "
            f"missing {missing}, unexpected {extra}"
        )
    if (spec.role, spec.index) not in seen:
        raise SpecError(f"index: {spec.role}-{spec.index} is not a task of the attempt")


def load_spec(path: Path) -> TaskSpec:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"cannot read the task spec {path}: {exc.strerror}") from exc
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise SpecError(f"invalid task spec {path}: not JSON ({exc})") from exc
    try:
        return parse_spec(data)
    except SpecError as exc:
        raise SpecError(f"invalid task spec {path}: {exc}") from exc
