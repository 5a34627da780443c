"""Pydantic models of the OpenPAI job protocol v2, with the defaults OpenPAI fills in.

Field names are Pythonic; aliases are OpenPAI's camelCase names, so
`model_dump(mode="json", by_alias=True, exclude_none=True)` gives back protocol YAML/JSON.
Types follow OpenPAI's JavaScript reading: a whole-valued number such as `4.0` is an integer,
`true` is never a number, text is never coerced. Where OpenPAI forbids unknown keys these models
do too; extras, deployments and plugin settings keep unknown keys for the plugins that read them.

Stricter than OpenPAI's server, on purpose, where its looseness only defers a failure to run
time: resource counts must be positive (gpu and port counts may be 0), retry counts and
completion thresholds must not be below 0 and -1, and the extras this platform acts on
(gangAllocation, hivedScheduler, storages, jobStatusChangeNotification, runtime plugins) are
typed, with hivedScheduler.taskRoles naming real task roles as OpenPAI checks when HiveD is on.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    PrivateAttr,
    ValidationError,
    model_validator,
)
from pydantic_core import PydanticCustomError

from libs.protocol.gpu_share import GpuShare, gpu_shares

NAME_PATTERN = r"^[a-zA-Z0-9_-]+$"
ROLE_PATTERN = r"^[a-zA-Z_][a-zA-Z0-9_]*$"
DEFAULT_PORTS = ("ssh", "http")
PRIORITIES = {"crit": 120, "prod": 100, "test": 10, "oppo": -1}


class Null:
    """Stands for an explicit YAML null where the protocol wants a value, so it fails typing."""


def _js_int(value: object) -> int:
    if isinstance(value, Null):
        raise PydanticCustomError("null_value", "must not be null")
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    raise PydanticCustomError("js_integer", "must be a whole number")


def _js_scalar(value: object) -> str | int | float:
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value
    raise PydanticCustomError("text_or_number", "must be text or a number")


JsInt = Annotated[int, PlainValidator(_js_int)]
TextOrNumber = Annotated[str | int | float, PlainValidator(_js_scalar)]
Text = Annotated[str, Field(strict=True)]
Flag = Annotated[bool, Field(strict=True)]
Name = Annotated[str, Field(strict=True, pattern=NAME_PATTERN, min_length=1, max_length=255)]
RoleName = Annotated[str, Field(strict=True, pattern=ROLE_PATTERN)]
ProtocolVersion = Literal[2, "2"]


class ProtocolModel(BaseModel):
    """Shared settings: camelCase aliases, unknown keys refused, explicit nulls refused."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    nullable: ClassVar[frozenset[str]] = frozenset()

    @model_validator(mode="before")
    @classmethod
    def _refuse_nulls(cls, data: Any) -> Any:
        # OpenPAI's schema rejects null for typed fields; a missing key and a null differ.
        # Unknown keys that a section keeps for plugins may hold null like any other value.
        if isinstance(data, dict) and None in data.values():
            typed = _typed_keys(cls)
            return {k: (Null() if v is None and k in typed else v) for k, v in data.items()}
        return data


_TYPED_KEYS: dict[type[ProtocolModel], frozenset[str]] = {}


def _typed_keys(model: type[ProtocolModel]) -> frozenset[str]:
    """The input keys of a model's declared fields that may not be null."""
    if model not in _TYPED_KEYS:
        keys = {key for name, info in model.model_fields.items() for key in (name, info.alias) if key}
        _TYPED_KEYS[model] = frozenset(keys - model.nullable)
    return _TYPED_KEYS[model]


class OpenModel(ProtocolModel):
    """A section whose unknown keys are kept: plugins read keys this platform does not know."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)


class DockerImageAuth(OpenModel):
    username: Text | None = None
    password: Text | None = None
    registryuri: Text | None = None


class _Prerequisite(ProtocolModel):
    protocol_version: ProtocolVersion | None = Field(None, alias="protocolVersion")
    name: Name
    version: TextOrNumber | None = None
    contributor: Text | None = None
    description: Text | None = None


class DockerImagePrerequisite(_Prerequisite):
    type: Literal["dockerimage"]
    uri: Text
    auth: DockerImageAuth | None = None


class ScriptOrOutputPrerequisite(_Prerequisite):
    model_config = ConfigDict(extra="allow", populate_by_name=True)
    type: Literal["script", "output"]
    uri: Text | None = None
    plugin: Text | None = None
    require: list[Text] | None = None


class DataPrerequisite(_Prerequisite):
    model_config = ConfigDict(extra="allow", populate_by_name=True)
    type: Literal["data"]
    uri: Annotated[list[Text], Field(min_length=1)] | None = None
    plugin: Text | None = None
    require: list[Text] | None = None


Prerequisite = Annotated[
    DockerImagePrerequisite | ScriptOrOutputPrerequisite | DataPrerequisite, Field(discriminator="type")
]


class Completion(ProtocolModel):
    """When a task role decides the job: null or 0 takes OpenPAI's default, -1 disables the rule."""

    nullable = frozenset({"minFailedInstances", "minSucceededInstances"})
    min_failed_instances: Annotated[JsInt, Field(ge=-1)] | None = Field(None, alias="minFailedInstances")
    min_succeeded_instances: Annotated[JsInt, Field(ge=-1)] | None = Field(
        None, alias="minSucceededInstances"
    )


class ExtraContainerOptions(ProtocolModel):
    shm_mb: Annotated[JsInt, Field(ge=1)] | None = Field(None, alias="shmMB")
    infiniband: Flag | None = None


class ResourcePerInstance(ProtocolModel):
    cpu: Annotated[JsInt, Field(ge=0)]  # 0: a task that reserves no CPU (a short CPU-light task)
    memory_mb: Annotated[JsInt, Field(ge=1)] = Field(alias="memoryMB")
    gpu: Annotated[JsInt, Field(ge=0)]
    ports: Annotated[dict[RoleName, Annotated[JsInt, Field(ge=0)]], Field(min_length=1)] | None = None


class TaskRole(ProtocolModel):
    protocol_version: ProtocolVersion | None = Field(None, alias="protocolVersion")
    instances: Annotated[JsInt, Field(ge=1)] = 1
    completion: Completion = Field(default_factory=Completion)
    task_retry_count: Annotated[JsInt, Field(ge=0)] = Field(0, alias="taskRetryCount")
    prerequisites: list[Text] | None = None
    docker_image: Text = Field(alias="dockerImage")
    data: Text | None = None
    output: Text | None = None
    script: Text | None = None
    extra_container_options: ExtraContainerOptions | None = Field(None, alias="extraContainerOptions")
    resource_per_instance: ResourcePerInstance = Field(alias="resourcePerInstance")
    commands: Annotated[list[Text], Field(min_length=1)]

    @model_validator(mode="after")
    def _fill_openpai_defaults(self) -> TaskRole:
        # As OpenPAI's launcher does: a missing, null or 0 threshold takes the default, and
        # every task gets one ssh and one http port unless the job asks otherwise.
        if not self.completion.min_failed_instances:
            self.completion.min_failed_instances = 1
        if not self.completion.min_succeeded_instances:
            self.completion.min_succeeded_instances = self.instances
        ports = dict(self.resource_per_instance.ports or {})
        for port in DEFAULT_PORTS:
            ports.setdefault(port, 1)
        self.resource_per_instance.ports = ports
        return self

    @property
    def shm_mb(self) -> int:
        """Size of /dev/shm in MB; OpenPAI gives 512 when the job does not say."""
        options = self.extra_container_options
        return options.shm_mb if options is not None and options.shm_mb else 512


class DeploymentTaskRole(ProtocolModel):
    pre_commands: Annotated[list[Text], Field(min_length=1)] | None = Field(None, alias="preCommands")
    post_commands: Annotated[list[Text], Field(min_length=1)] | None = Field(None, alias="postCommands")


class Deployment(OpenModel):
    protocol_version: ProtocolVersion | None = Field(None, alias="protocolVersion")
    name: Name
    task_roles: Annotated[dict[RoleName, DeploymentTaskRole], Field(min_length=1)] = Field(alias="taskRoles")


class Defaults(ProtocolModel):
    virtual_cluster: Text = Field("default", alias="virtualCluster")
    deployment: Text | None = None


class RuntimePlugin(OpenModel):
    nullable = frozenset({"taskroles", "parameters"})
    plugin: Text
    taskroles: list[Text] | None = None
    parameters: dict[str, Any] | None = None


class HivedTaskRole(OpenModel):
    nullable = frozenset({"skuType", "skuNum", "skuNumber", "pinnedCellId", "affinityGroupName"})
    sku_type: Text | None = Field(None, alias="skuType")
    sku_num: Annotated[JsInt, Field(ge=1)] | None = Field(
        None, validation_alias=AliasChoices("skuNum", "skuNumber"), serialization_alias="skuNum"
    )
    pinned_cell_id: Text | None = Field(None, alias="pinnedCellId")
    affinity_group_name: Text | None = Field(None, alias="affinityGroupName")


class HivedScheduler(OpenModel):
    nullable = frozenset({"jobPriorityClass", "taskRoles"})
    job_priority_class: Literal["crit", "prod", "test", "oppo"] | None = Field(None, alias="jobPriorityClass")
    task_roles: dict[str, HivedTaskRole] | None = Field(None, alias="taskRoles")


class Storage(OpenModel):
    nullable = frozenset({"mountPath", "share", "readOnly"})
    name: Text
    mount_path: Text | None = Field(None, alias="mountPath")
    share: Flag | None = None
    read_only: Flag | None = Field(None, alias="readOnly")


class JobStatusChangeNotification(OpenModel):
    nullable = frozenset({"running", "succeeded", "failed", "stopped", "retried"})
    running: Flag | None = None
    succeeded: Flag | None = None
    failed: Flag | None = None
    stopped: Flag | None = None
    retried: Flag | None = None


class Extras(OpenModel):
    # OpenPAI only asks extras to be a mapping, so a null setting here means "not set".
    nullable = frozenset(
        {
            "com.microsoft.pai.runtimeplugin",
            "hivedScheduler",
            "gangAllocation",
            "storages",
            "jobStatusChangeNotification",
            "submitFrom",
        }
    )
    runtime_plugins: list[RuntimePlugin] | None = Field(None, alias="com.microsoft.pai.runtimeplugin")
    hived_scheduler: HivedScheduler | None = Field(None, alias="hivedScheduler")
    gang_allocation: Flag | None = Field(None, alias="gangAllocation")
    storages: list[Storage] | None = None
    job_status_change_notification: JobStatusChangeNotification | None = Field(
        None, alias="jobStatusChangeNotification"
    )
    submit_from: Text | None = Field(None, alias="submitFrom")


class JobConfig(ProtocolModel):
    """A whole job, validated, with OpenPAI's defaults filled in."""

    _json: dict[str, Any] | None = PrivateAttr(None)
    """Its protocol JSON once `kept_json` made it (a stored framework is written per decision)."""

    def __eq__(self, other: object) -> bool:
        # The kept JSON is a cache: a job equals another with the same fields, dumped or not.
        if not isinstance(other, JobConfig):
            return NotImplemented
        return self.__dict__ == other.__dict__ and self.__pydantic_extra__ == other.__pydantic_extra__

    protocol_version: ProtocolVersion = Field(alias="protocolVersion")
    name: Name
    type: Literal["job"]
    version: TextOrNumber | None = None
    contributor: Text | None = None
    description: Text | None = None
    prerequisites: Annotated[list[Prerequisite], Field(min_length=1)] | None = None
    parameters: dict[str, Any] | None = None
    secrets: dict[str, Any] | None = None
    job_retry_count: Annotated[JsInt, Field(ge=0)] = Field(0, alias="jobRetryCount")
    task_roles: Annotated[dict[RoleName, TaskRole], Field(min_length=1)] = Field(alias="taskRoles")
    deployments: Annotated[list[Deployment], Field(min_length=1)] | None = None
    defaults: Defaults = Field(default_factory=Defaults)
    extras: Extras | None = None

    @property
    def total_tasks(self) -> int:
        return sum(role.instances for role in self.task_roles.values())

    @property
    def total_task_roles(self) -> int:
        return len(self.task_roles)

    @property
    def total_gpus(self) -> int:
        return sum(role.instances * role.resource_per_instance.gpu for role in self.task_roles.values())

    @property
    def virtual_cluster(self) -> str:
        return self.defaults.virtual_cluster or "default"

    @property
    def priority_class(self) -> str | None:
        hived = self.extras.hived_scheduler if self.extras is not None else None
        return hived.job_priority_class if hived is not None else None

    @property
    def priority(self) -> int | None:
        """HiveD's numeric priority for the job's priority class (crit 120 ... oppo -1), if set."""
        return PRIORITIES.get(self.priority_class) if self.priority_class is not None else None

    @property
    def gpu_shares(self) -> dict[str, GpuShare]:
        """Each task role's share of one GPU from extras.gpuShare; roles using whole GPUs are absent."""
        extra = self.extras.model_extra if self.extras is not None else None
        return gpu_shares(extra)

    @property
    def gang_allocation(self) -> bool:
        """All tasks start together unless extras.gangAllocation is false."""
        return self.extras is None or self.extras.gang_allocation is not False

    def prerequisite(
        self, kind: str, name: str | None
    ) -> DockerImagePrerequisite | ScriptOrOutputPrerequisite | DataPrerequisite | None:
        """The prerequisite of that type ('dockerimage', 'script', 'output', 'data') and name."""
        for item in self.prerequisites or []:
            if item.type == kind and item.name == name:
                return item
        return None

    def deployment(self) -> Deployment | None:
        """The deployment named in defaults.deployment, whose commands wrap every task role's."""
        for item in self.deployments or []:
            if item.name == self.defaults.deployment:
                return item
        return None


def stored_job(config: Mapping[str, Any] | JobConfig) -> JobConfig:
    """A job config kept as JSON (a read-model row, a stored framework) as the model it was dumped
    from: the one way a service turns a stored config back into fields, defaults included."""
    return config if isinstance(config, JobConfig) else JobConfig.model_validate(config)


_last_read: list[tuple[object, JobConfig | None]] = []


def stored_job_or_none(config: object) -> JobConfig | None:
    """stored_job for a value read back from storage, or None where it holds no job (a row
    written before jobs were checked, or by hand): readers then show what they can without it.

    The last value read is remembered by identity, so the thousands of task statuses of one job
    detail, each reading the same row's config, decode it once. Treat the model as read-only."""
    if isinstance(config, JobConfig):
        return config
    if _last_read and _last_read[0][0] is config:
        return _last_read[0][1]
    job: JobConfig | None = None
    if isinstance(config, Mapping):
        try:
            job = JobConfig.model_validate(config)
        except ValidationError:
            job = None
    _last_read[:] = [(config, job)]
    return job


def job_json(job: JobConfig) -> dict[str, Any]:
    """The job as protocol JSON (camelCase, nulls left out): what events carry and rows store."""
    return job.model_dump(mode="json", by_alias=True, exclude_none=True)


def kept_json(job: JobConfig) -> dict[str, Any]:
    """`job_json(job)`, made once and kept with the model, for serializers that only read it (an
    event's config, a stored framework's, written again at every decision about the job). Never
    change what it returns, nor the model after its first call: use job_json for a copy to edit."""
    if job._json is None:
        job._json = job_json(job)
    return job._json
