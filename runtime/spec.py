"""The task spec, declared once: everything the orchestrator tells the runtime about one task of
one attempt, and the runtime's account of the task when it ends (runtime-result.json).

The orchestrator builds these records (services/orchestrator/adapters/specs.py), writes them as
JSON (``dump_spec``) to a file and starts ``python -m runtime --spec FILE``; the runtime reads the
file back (``load_spec``). It is the only input of the runtime besides the secrets file, so it
carries the whole attempt (every task's host and ports) to let each task compute the full PAI_*
environment without asking anyone. Secrets never appear here: only the path of the file that
holds them.

Each record's annotations are its fields' types, and ``field(...)`` their defaults and bounds;
one reader (``read``) checks a JSON value against them, each error naming the field. The
standard library only: every task pays for the runtime's start-up before its command runs, and
pydantic costs that start about 0.1 s, msgspec about 20 ms (it imports typing, inspect, decimal
and uuid); this module about 1.3 ms, reading a spec about 0.1 ms (bench/RESULTS.md).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

# Not `typing` (nor dataclasses, which imports inspect): each costs every task milliseconds. The
# annotations stay text (``from __future__ import annotations``) and ``read`` parses that text.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, ClassVar, Literal, Self, TypeVar, dataclass_transform

    R = TypeVar("R", bound="Record")
    Reader = Callable[[Any, str, bool], Any]
else:

    def dataclass_transform(**_: object) -> object:
        return lambda cls: cls


SPEC_VERSION: Literal[1] = 1
_MISSING: Any = object()


class SpecError(Exception):
    """The spec file is missing or invalid; the message names the field."""


class _Field:
    """What ``field`` declares of one field: its default and what its value must satisfy."""

    __slots__ = ("check", "default", "ge", "gt", "le", "min_length", "pattern", "says")

    def __init__(
        self,
        default: Any,
        ge: float | None,
        gt: float | None,
        le: float | None,
        min_length: int,
        pattern: str | None,
        says: str,
        check: Callable[[Any, str], Any] | None,
    ) -> None:
        self.default = default
        self.ge, self.gt, self.le = ge, gt, le
        self.min_length = min_length
        self.pattern = None if pattern is None else re.compile(pattern)
        self.says = says
        self.check = check

    def within(self) -> _Field:
        """The bounds of the numbers a list or object field holds: the field's own number bounds."""
        return _Field(_MISSING, self.ge, self.gt, self.le, 0, None, "", None)


def field(
    *,
    default: Any = _MISSING,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    min_length: int = 0,
    pattern: str | None = None,
    says: str = "",
    check: Callable[[Any, str], Any] | None = None,
) -> Any:
    """A field's default and bounds. ``ge``/``gt``/``le`` bound a number, or each number a list or
    object field holds; ``min_length`` the characters of a string or the items of a list;
    ``pattern`` a string, whose error says it must be ``says``; ``check(value, where)`` replaces
    the type's own check (it returns the value or raises SpecError)."""
    return _Field(default, ge, gt, le, min_length, pattern, says, check)


@dataclass_transform(frozen_default=True, kw_only_default=True, field_specifiers=(field,))
class Record:
    """A frozen record of keyword fields: a class's annotations are its fields, in order, and its
    class attributes (or ``field(default=...)``) their defaults (an empty list or dict default is
    a new one per record)."""

    _fields: ClassVar[tuple[str, ...]] = ()
    _declared: ClassVar[dict[str, _Field]] = {}
    _plan: ClassVar[tuple[tuple[str, Reader, bool], ...] | None] = None
    _aliases: ClassVar[dict[str, str]] = {}

    def __init_subclass__(cls) -> None:
        # The class's own annotations (inspect.get_annotations would import inspect).
        cls._fields = tuple(cls.__dict__.get("__annotations__", {}))  # noqa: RUF063
        cls._declared = {}
        cls._plan = None
        for name in cls._fields:
            declared = cls.__dict__.get(name, _MISSING)
            if not isinstance(declared, _Field):
                declared = _Field(declared, None, None, None, 0, None, "", None)
            cls._declared[name] = declared
            if declared.default is _MISSING:
                if name in cls.__dict__:
                    delattr(cls, name)
            else:
                setattr(cls, name, declared.default)

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
        """Every field, records within as dicts too."""
        return {name: _plain(getattr(self, name)) for name in self._fields}

    def _check(self, where: str) -> None:
        """What the fields must satisfy together, once each is read (SpecError if not)."""


def _plain(value: Any) -> Any:
    if isinstance(value, Record):
        return value.as_dict()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _task_roles(value: Any, at: str) -> list[str] | None:
    if value is not None and (not isinstance(value, list) or not all(isinstance(r, str) for r in value)):
        raise SpecError(f"{at}: must be a list of task role names")
    return None if value is None else list(value)


def _port_lists(value: Any, at: str) -> dict[str, list[int]]:
    if not isinstance(value, dict):
        raise SpecError(f"{at}: must be an object")
    lists: dict[str, list[int]] = {}
    for label, ports in value.items():
        if not isinstance(ports, list):
            raise SpecError(f"{at}.{label}: must be a list of ports")
        lists[str(label)] = [_integer(p, f"{at}.{label}.{i}") for i, p in enumerate(ports)]
    return lists


class JobInfo(Record):
    """Who and what the task belongs to."""

    user: str = field(min_length=1)
    name: str = field(min_length=1)  # the job name the user gave, without the user prefix
    uid: str = field(min_length=1)  # the platform's job uid
    attempt_id: int = field(ge=0)  # 0 for the first attempt, +1 per job retry
    task_attempt_id: int = field(default=0, ge=0)
    virtual_cluster: str = "default"

    @property
    def framework_name(self) -> str:
        """OpenPAI names a job's framework ``user~name``; PAI_JOB_NAME carries that form."""
        return f"{self.user}~{self.name}"


class Resources(Record):
    """Resources per instance of a task role, as in the protocol's resourcePerInstance."""

    cpu: float = field(ge=0)
    memory_mb: int = field(ge=0)
    gpu: int = field(default=0, ge=0)
    shm_mb: int = field(default=512, ge=0)
    ports: dict[str, int] = {}  # noqa: RUF012 - the port count requested per label; a new dict per record


class RoleInfo(Record):
    """One task role of the job: its size, resources and completion policy."""

    name: str = field(pattern=r"^[A-Za-z0-9_]+$", says="letters, digits and underscores")
    instances: int = field(ge=1)
    resources: Resources
    min_failed_instances: int = 1
    min_succeeded_instances: int | None = None  # None means every instance (OpenPAI's default)


class TaskPlacement(Record):
    """Where one task of the attempt runs and which ports were reserved for it, per label."""

    role: str
    index: int = field(ge=0)
    host_ip: str
    ports: dict[str, list[int]] = field(default={}, check=_port_lists)


class PluginSpec(Record):
    """One entry of extras."com.microsoft.pai.runtimeplugin" (or a translated cmd prerequisite)."""

    _aliases = {"failurePolicy": "failure_policy"}  # noqa: RUF012 - read-only

    plugin: str
    parameters: dict[str, Any] = {}  # noqa: RUF012 - a new dict per record
    failure_policy: Literal["ignore", "fail"] = "fail"
    taskroles: list[str] | None = field(default=None, check=_task_roles)  # None: every role


class StorageSpec(Record):
    """A storage the user may use; the runtime refuses any other."""

    name: str
    type: str  # local and nfs (already mounted on the node) are linked locally
    path: str  # where the storage's data is on the node
    mount_path: str  # where the task sees it, e.g. /mnt/data
    default: bool = False
    read_only: bool = False


class Directories(Record):
    work_dir: Path  # the task's working directory and the root of storage links
    log_dir: Path  # user.pai.* logs and runtime-result.json
    barrier_dir: Path  # shared by every task of the attempt
    ssh_key_dir: Path | None = None  # shared by every task of the job: holds the job ssh key pair
    # The runtime's own files (command scripts), out of the task's reach; None: private/ beside
    # log_dir, in the task's directory.
    private_dir: Path | None = None


class Confine(Record):
    """The kernel limits the runtime puts itself (and so the task) under, first thing."""

    cgroups: list[Path] = []  # noqa: RUF012 - cgroup directories the runtime joins (cgroup.procs)
    # Resource limits set on the runtime, inherited by its commands.
    rlimits: dict[str, int] = field(default={}, ge=0)


class RunAs(Record):
    """The unprivileged user the task's commands run as (the runtime itself stays the platform's)."""

    name: str = field(min_length=1)
    uid: int = field(ge=1)  # never root
    gid: int = field(ge=0)
    # Supplementary groups: the gids of the team storages the task may mount.
    groups: list[int] = field(default=[], ge=0)


class Runc(Record):
    """The task's containers run by runc itself on a bundle the executor prepared (the image's
    files under an overlay of the task's own, the engine's configuration patched for the task;
    services/orchestrator/core/bundles.py), not through the engine's ``run``."""

    program: str = field(min_length=1)  # runc
    root: Path  # runc's state directory (--root), the platform's
    config: Path  # the task's OCI configuration; each script's adds its command
    name: str = field(min_length=1)  # each script's container is this name, a dash, its label


class Bind(Record):
    """A bind mount into a task's container: a host path at a path in the container."""

    source: str = field(min_length=1)
    target: str = field(min_length=1)
    read_only: bool = False


class ImageSandbox(Record):
    """The task's containers run by bubblewrap in a user namespace of the tenant's uid, on the
    bundle the executor prepared (services/orchestrator/core/image_sandboxes.py says the engine's
    configuration in bubblewrap's words), not through the engine's ``run`` nor runc."""

    argv: list[str]  # setpriv's arguments, then bubblewrap's up to each script's own mounts
    env: list[str]  # the container's environment (NAME=value); the task's variables are added
    entry: list[str] = []  # noqa: RUF012 - the image's entrypoint, before the loader
    rootfs: Path  # the task's root file system: its storages' mount points are made in it
    stage: str = field(min_length=1)  # where root mounts it, for bubblewrap to bind it as /
    binds: list[Bind] = []  # noqa: RUF012 - made by root on it first (the tenant may not reach them)
    seccomp: Path | None = None  # the engine's seccomp filter, compiled (BPF), loaded by bubblewrap
    # The same with the calls `pai job exec`'s nsenter needs, loaded before it (runtime/entering.py).
    entry_seccomp: Path | None = None

    def _check(self, where: str) -> None:
        if not self.argv:
            raise SpecError(f"{where}: argv must name a program")


class Container(Record):
    """The task's commands run in its docker image through a container engine (the runtime stays
    on the host); see services/orchestrator/core/containers.py."""

    engine: str = field(min_length=1)  # the engine's program (podman or docker)
    run: list[str]  # the engine's run arguments up to the environment and the image
    image: str = field(min_length=1)  # the image run: its id or repository@digest
    env: dict[str, str] = {}  # noqa: RUF012 - the engine's own environment (CONTAINERS_CONF)
    digest: str | None = None  # the image as repository@sha256:..., for the record
    # The runtime pulls the image first (it is not on the node); `image` is then the reference to
    # pull, run by the id the pull gives.
    pull: bool = False
    auth_file: Path | None = None  # registry credentials for the pull (root-only; removed after it)
    runc: Runc | None = None  # None: each script runs with the engine's run and `run`; else with runc
    sandbox: ImageSandbox | None = None  # else with bubblewrap (neither the engine nor runc)


class Sandbox(Record):
    """A host task's commands in a sandbox: bubblewrap's arguments up to the task's mounts, then
    setpriv's up to the command (services/orchestrator/core/sandboxes.py decides them)."""

    wrap: list[str]
    drop: list[str]

    def _check(self, where: str) -> None:
        if not self.wrap or not self.drop:
            raise SpecError(f"{where}: wrap and drop must each name a program")


class LogRotation(Record):
    max_bytes: int = field(default=16 * 1024 * 1024, ge=1024)
    backup_count: int = field(default=3, ge=0)


class RuntimeExit(Record):
    """Why the runtime itself ended the task, with one of its own exit codes."""

    code: int
    phrase: str
    reason: str


class RuntimeResult(Record):
    """runtime-result.json, the runtime's account of a finished task: what ended it (the user
    command's code or the runtime's own), who stopped it, the plugins' reports, the log's tail
    (secrets masked) and the failure rule the runtime matched. Its keys are camelCase on disk
    (``to_json``); the platform reads it tolerantly (``parse_result``)."""

    exit_code: int
    user_exit_code: int | None = None
    runtime_exit: RuntimeExit | None = None
    stopped_by: str | None = None
    plugins: list[dict[str, Any]] = []  # noqa: RUF012 - a new list per record
    user_log_tail: str = ""
    failure: dict[str, Any] | None = None
    image_digest: str | None = None  # the image the runtime pulled, repository@sha256:...

    def to_json(self) -> dict[str, Any]:
        """The file's JSON object: each field under its camelCase name."""
        return {_camel(name): value for name, value in self.as_dict().items()}


def _camel(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(part.title() for part in rest)


RuntimeResult._aliases = {_camel(name): name for name in RuntimeResult._fields}


class TaskSpec(Record):
    """The whole input of one runtime run."""

    spec_version: Literal[1] = SPEC_VERSION
    job: JobInfo
    role: str
    index: int = field(ge=0)
    entrypoint: str  # bash script, parameters rendered, secrets still as references
    gpu_indices: list[int] = []  # noqa: RUF012 - the GPUs assigned to this task
    gpu_milli: int | None = field(default=None, ge=1, le=999)  # thousandths of a shared task's GPU
    gpu_memory_mib: int | None = field(default=None, ge=1)  # device memory cap of a shared task
    # The pipe directory of the node's NVIDIA MPS control daemon, given to a shared task where
    # MPS enforces its share (CUDA_MPS_PIPE_DIRECTORY).
    mps_pipe_dir: Path | None = None
    roles: list[RoleInfo] = field(min_length=1)
    tasks: list[TaskPlacement] = field(min_length=1)  # every task of the attempt
    plugins: list[PluginSpec] = []  # noqa: RUF012 - a new list per record
    storages: list[StorageSpec] = []  # noqa: RUF012 - a new list per record
    secrets_file: Path | None = None
    dirs: Directories
    barrier_timeout_s: float = field(default=300.0, gt=0)
    # Wait at the barrier for every task of the attempt; false when the job turns gang allocation
    # off (extras.gangAllocation: false), whose tasks start on their own.
    gang: bool = True
    log_rotation: LogRotation = LogRotation()
    result_tail_kib: int = field(default=16, ge=0)
    default_fs_uri: str = ""
    # The operator's current failure rules; the packaged defaults when absent.
    failure_rules_file: Path | None = None
    run_as: RunAs | None = None  # the user commands run as; None: the runtime's own user
    confine: Confine | None = None  # None: no limits (none could be set)
    container: Container | None = None  # None: the commands run on the host; else in this container
    sandbox: Sandbox | None = None  # None: host commands run without a sandbox (or in a container)
    # What the executor did with the task's image and where the commands run; the first line of
    # the task's log.
    notice: str | None = None

    def _check(self, where: str) -> None:
        by_name = {r.name: r for r in self.roles}
        if len(by_name) != len(self.roles):
            raise SpecError("roles: task role names must be unique")
        if self.role not in by_name:
            raise SpecError(f"role: {self.role!r} is not one of the roles {sorted(by_name)}")
        seen = {(t.role, t.index) for t in self.tasks}
        expected = {(r.name, i) for r in self.roles for i in range(r.instances)}
        if len(seen) != len(self.tasks) or seen != expected:
            missing = sorted(expected - seen)
            extra = sorted(seen - expected)
            raise SpecError(
                f"tasks: must list each (role, index) of the roles exactly once; "
                f"missing {missing}, unexpected {extra}"
            )
        if (self.role, self.index) not in seen:
            raise SpecError(f"index: {self.role}-{self.index} is not a task of the attempt")

    def role_info(self, name: str) -> RoleInfo:
        return next(r for r in self.roles if r.name == name)

    def placement(self, role: str, index: int) -> TaskPlacement:
        return next(t for t in self.tasks if t.role == role and t.index == index)

    @property
    def me(self) -> TaskPlacement:
        return self.placement(self.role, self.index)


# -- reading ---------------------------------------------------------------------------------


def read(cls: type[R], data: Any, where: str = "", *, tolerant: bool = False) -> R:
    """The record ``cls`` from its JSON value, checked against its declaration; SpecError names
    the first field that is wrong (``where``: the value's place in the spec). ``tolerant``: keys
    the record does not declare are ignored rather than refused."""
    if not isinstance(data, dict):
        raise SpecError(f"{where or '(root)'}: must be an object")
    for alias, name in cls._aliases.items():
        if alias in data and name not in data:
            data = {(name if key == alias else key): value for key, value in data.items()}
    values: dict[str, Any] = {}
    for name, reader, required in cls._plan or _plan_of(cls):
        if name in data:
            values[name] = reader(data[name], f"{where}.{name}" if where else name, tolerant)
        elif required:
            raise SpecError(f"{where}.{name}: field required" if where else f"{name}: field required")
    if len(values) != len(data) and not tolerant:
        extra = sorted(key for key in data if key not in values)[0]
        raise SpecError(f"{f'{where}.{extra}' if where else extra}: extra field not permitted")
    record = cls(**values)
    record._check(where)
    return record


def _plan_of(cls: type[Record]) -> tuple[tuple[str, Reader, bool], ...]:
    """How to read each field of the record: its name, its reader, whether it is required; made
    from the annotations' text once per class."""
    annotations = cls.__dict__["__annotations__"]  # noqa: RUF063 - not inspect, as above
    cls._plan = tuple(
        (name, _reader(_kind(annotations[name]), declared), declared.default is _MISSING)
        for name, declared in cls._declared.items()
    )
    return cls._plan


_SCALARS = {"str": ("str",), "int": ("int",), "float": ("float",), "bool": ("bool",)}


def _kind(text: str) -> tuple[Any, ...]:
    """An annotation's text as a nested tuple: ``("list", item)``, ``("optional", kind)``..."""
    text = text.strip()
    alternatives = _split(text, "|")
    if len(alternatives) > 1:
        rest = [a for a in alternatives if a.strip() != "None"]
        if len(rest) != 1 or len(alternatives) != 2:
            raise TypeError(f"unsupported annotation {text!r}")
        return ("optional", _kind(rest[0]))
    if text.endswith("]"):
        head, inner = text[:-1].split("[", 1)
        args = _split(inner, ",")
        if head == "list":
            return ("list", _kind(args[0]))
        if head == "dict":
            return ("dict", _kind(args[1]))
        if head == "Literal":
            return ("choice", tuple(json.loads(a.strip().replace("'", '"')) for a in args))
        raise TypeError(f"unsupported annotation {text!r}")
    if text in _SCALARS:
        return _SCALARS[text]
    if text == "Path":
        return ("path",)
    if text == "Any":
        return ("any",)
    record = globals().get(text)
    if isinstance(record, type) and issubclass(record, Record):
        return ("record", record)
    raise TypeError(f"unsupported annotation {text!r}")


def _split(text: str, separator: str) -> list[str]:
    """``text`` split at ``separator`` outside brackets."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        elif char == separator and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def _reader(kind: tuple[Any, ...], declared: _Field) -> Reader:
    """The function that checks one value of a field of this type and these bounds, returning
    it as the record holds it (a path as a Path); SpecError names ``at``, the value's place."""
    check = declared.check
    if check is not None:
        return lambda value, at, tolerant: check(value, at)
    tag = kind[0]
    if tag == "optional":
        inner = _reader(kind[1], declared)
        return lambda value, at, tolerant: None if value is None else inner(value, at, tolerant)
    if tag in ("str", "path"):
        least, pattern, says, as_path = declared.min_length, declared.pattern, declared.says, tag == "path"

        def text(value: Any, at: str, tolerant: bool) -> Any:
            if not isinstance(value, str):
                raise SpecError(f"{at}: must be a string")
            if len(value) < least:
                raise SpecError(f"{at}: must have at least {least} character")
            if pattern is not None and not pattern.match(value):
                raise SpecError(f"{at}: must be {says}")
            return Path(value) if as_path else value

        return text
    if tag == "int":
        ge, le = declared.ge, declared.le
        return lambda value, at, tolerant: _integer(value, at, ge, le)
    if tag == "float":
        ge, gt = declared.ge, declared.gt
        return lambda value, at, tolerant: _number(value, at, ge, gt)
    if tag == "bool":

        def flag(value: Any, at: str, tolerant: bool) -> bool:
            if not isinstance(value, bool):
                raise SpecError(f"{at}: must be true or false")
            return value

        return flag
    if tag == "choice":
        choices = kind[1]
        said = " or ".join(repr(c) for c in choices)

        def choice(value: Any, at: str, tolerant: bool) -> Any:
            if not any(type(value) is type(c) and value == c for c in choices):
                raise SpecError(f"{at}: must be {said}")
            return value

        return choice
    if tag == "record":
        record = kind[1]
        return lambda value, at, tolerant: read(record, value, at, tolerant=tolerant)
    if tag == "list":
        least, item = declared.min_length, _reader(kind[1], declared.within())

        def items(value: Any, at: str, tolerant: bool) -> list[Any]:
            if not isinstance(value, list):
                raise SpecError(f"{at}: must be a list")
            if len(value) < least:
                raise SpecError(f"{at}: must have at least {least} item")
            return [item(v, f"{at}.{i}", tolerant) for i, v in enumerate(value)]

        return items
    if tag == "dict":
        entry = _reader(kind[1], declared.within())

        def mapping(value: Any, at: str, tolerant: bool) -> dict[str, Any]:
            if not isinstance(value, dict):
                raise SpecError(f"{at}: must be an object")
            return {str(k): entry(v, f"{at}.{k}", tolerant) for k, v in value.items()}

        return mapping
    return lambda value, at, tolerant: value  # Any


def _integer(value: Any, at: str, ge: float | None = None, le: float | None = None) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(f"{at}: must be an integer")
    _bounded(value, at, ge, None, le)
    return value


def _number(value: Any, at: str, ge: float | None, gt: float | None) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SpecError(f"{at}: must be a number")
    _bounded(value, at, ge, gt, None)
    return float(value)


def _bounded(value: float, at: str, ge: float | None, gt: float | None, le: float | None) -> None:
    if ge is not None and value < ge:
        raise SpecError(f"{at}: must be greater than or equal to {ge}")
    if gt is not None and value <= gt:
        raise SpecError(f"{at}: must be greater than {gt}")
    if le is not None and value > le:
        raise SpecError(f"{at}: must be less than or equal to {le}")


def parse_spec(data: Any) -> TaskSpec:
    """The task spec from its JSON value; SpecError names the first field that is wrong."""
    return read(TaskSpec, data)


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


def dump_spec(spec: TaskSpec, indent: int | None = None) -> str:
    """The spec's JSON, as the runtime reads it: every field, paths as text. Its tasks are checked
    against its roles first (SpecError), as the runtime will; each field's type is the type
    checker's to hold (reading every placement back would cost a large job's every task)."""
    spec._check("")
    compact = (",", ":") if indent is None else None
    return json.dumps(spec.as_dict(), indent=indent, separators=compact, ensure_ascii=False, default=str)


def parse_result(data: Any) -> RuntimeResult:
    """runtime-result.json as the platform reads it: its camelCase keys (or the fields' own names),
    keys an older or newer runtime wrote that this one does not know ignored."""
    return read(RuntimeResult, data, tolerant=True)
