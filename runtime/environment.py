"""The PAI_* environment of a task, computed from its spec alone.

Distributed programs written for OpenPAI find their peers through these variables, so names and
formats follow OpenPAI's: the rest-server's framework env, FrameworkController's pod annotations
and the runtime's per-task env. Pure: no I/O, the same spec always gives the same mapping.

Job level
    PAI_JOB_NAME, PAI_FRAMEWORK_NAME   ``user~name``
    PAI_USER_NAME, PAI_USERNAME        the submitting user
    PAI_DEFAULT_FS_URI                 the cluster's default file system URI ("" when none)
    PAI_VIRTUAL_CLUSTER, PAI_JOB_VC_NAME   the job's virtual cluster
    PAI_JOB_UID, PAI_JOB_ATTEMPT_ID    this platform's job uid and attempt (additions)
    PAI_TASK_ROLE_COUNT, PAI_JOB_TASK_ROLE_COUNT, PAI_TASK_ROLES_NUM   number of task roles
    PAI_TASK_ROLE_LIST, PAI_JOB_TASK_ROLE_LIST   comma-separated role names, protocol order
    PAI_JOB_TASK_COUNT, PAI_TASKS_NUM  number of tasks of the job
    PAI_TASK_ROLE_INSTANCES            ``role:index`` of every task, comma-separated
Task role level, for every role R
    PAI_TASK_ROLE_TASK_COUNT_R         instances of R
    PAI_RESOURCE_R                     ``gpu,cpu,memoryMB,shmMB``
    PAI_MIN_FAILED_TASK_COUNT_R        completion.minFailedInstances (default 1)
    PAI_MIN_SUCCEEDED_TASK_COUNT_R     completion.minSucceededInstances (default: instances)
    PAI_TASK_ROLE_R_HOST_LIST          ``ip:httpPort`` of each task of R, comma-separated
Task level, for every task I of every role R and every port label L
    PAI_HOST_IP_R_I                    the task's host IP
    PAI_PORT_LIST_R_I_L                the ports reserved for L, comma-separated
    PAI_R_I_L_PORT                     the same (backward compatibility)
Current task
    PAI_CURRENT_TASK_ROLE_NAME, FC_TASKROLE_NAME          this task's role
    PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX, PAI_TASK_INDEX, FC_TASK_INDEX   this task's index
    FC_FRAMEWORK_NAME, FC_FRAMEWORK_ATTEMPT_ID, FC_TASK_ATTEMPT_ID   FrameworkController's names
    PAI_CURRENT_CONTAINER_IP, PAI_CONTAINER_HOST_IP       this task's host IP
    PAI_CURRENT_CONTAINER_PORT, PAI_CONTAINER_HOST_PORT   first ``http`` port (when reserved)
    PAI_CONTAINER_SSH_PORT             first ``ssh`` port (when reserved)
    PAI_CONTAINER_HOST_L_PORT_LIST     this task's ports for L, comma-separated
    PAI_CONTAINER_HOST_PORT_LIST       ``L:p1,p2;`` for every label, concatenated
    CUDA_VISIBLE_DEVICES               the GPUs assigned to the task ("" hides every GPU)
    NVIDIA_VISIBLE_DEVICES             the same, only when GPUs are assigned
A task sharing its GPU (extras.gpuShare) also gets
    PAI_GPU_SHARE_MILLI                its share in thousandths of the GPU (500: half)
    CUDA_MPS_ACTIVE_THREAD_PERCENTAGE  the share as a percentage of the GPU's SMs (NVIDIA MPS clients)
    CUDA_DEVICE_SM_LIMIT               the same percentage (HAMi-core's in-container limiter)
    XLA_PYTHON_CLIENT_MEM_FRACTION     the share as JAX's fraction of device memory to take
    TF_FORCE_GPU_ALLOW_GROWTH          true: TensorFlow takes memory as needed, not the whole GPU
and, when gpuMemoryMiB is set,
    PAI_GPU_MEMORY_MIB                 the device memory cap in MiB
    CUDA_MPS_PINNED_DEVICE_MEM_LIMIT   0=<MiB>M, the cap NVIDIA MPS enforces on its client
    CUDA_DEVICE_MEMORY_LIMIT           <MiB>m, the cap HAMi-core enforces
    XLA_PYTHON_CLIENT_MEM_FRACTION is then the cap's fraction of the device where known, else the share
and, where the node runs NVIDIA MPS (the spec's mps_pipe_dir),
    CUDA_MPS_PIPE_DIRECTORY            the MPS control daemon's pipe directory: the task is its client
"""

from __future__ import annotations

from runtime.spec import TaskSpec


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _ports(ports: list[int]) -> str:
    return ",".join(str(p) for p in ports)


def build_environment(spec: TaskSpec) -> dict[str, str]:
    """Every PAI_* (and FC_*, CUDA) variable of the task described by ``spec``."""
    job = spec.job
    role_names = [r.name for r in spec.roles]
    total_tasks = sum(r.instances for r in spec.roles)
    env: dict[str, str] = {
        "PAI_JOB_NAME": job.framework_name,
        "PAI_FRAMEWORK_NAME": job.framework_name,
        "PAI_USER_NAME": job.user,
        "PAI_USERNAME": job.user,
        "PAI_DEFAULT_FS_URI": spec.default_fs_uri,
        "PAI_VIRTUAL_CLUSTER": job.virtual_cluster,
        "PAI_JOB_VC_NAME": job.virtual_cluster,
        "PAI_JOB_UID": job.uid,
        "PAI_JOB_ATTEMPT_ID": str(job.attempt_id),
        "PAI_TASK_ROLE_COUNT": str(len(role_names)),
        "PAI_JOB_TASK_ROLE_COUNT": str(len(role_names)),
        "PAI_TASK_ROLES_NUM": str(len(role_names)),
        "PAI_TASK_ROLE_LIST": ",".join(role_names),
        "PAI_JOB_TASK_ROLE_LIST": ",".join(role_names),
        "PAI_JOB_TASK_COUNT": str(total_tasks),
        "PAI_TASKS_NUM": str(total_tasks),
        "PAI_CURRENT_TASK_ROLE_NAME": spec.role,
        "PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX": str(spec.index),
        "PAI_TASK_INDEX": str(spec.index),
        "FC_FRAMEWORK_NAME": job.framework_name,
        "FC_TASKROLE_NAME": spec.role,
        "FC_TASK_INDEX": str(spec.index),
        "FC_FRAMEWORK_ATTEMPT_ID": str(job.attempt_id),
        "FC_TASK_ATTEMPT_ID": str(job.task_attempt_id),
    }

    instances: list[str] = []
    placed = {(task.role, task.index): task for task in spec.tasks}  # one look-up per peer, not a scan
    for role in spec.roles:
        res = role.resources
        name = role.name
        env[f"PAI_TASK_ROLE_TASK_COUNT_{name}"] = str(role.instances)
        env[f"PAI_RESOURCE_{name}"] = ",".join(
            [str(res.gpu), _number(res.cpu), str(res.memory_mb), str(res.shm_mb)]
        )
        env[f"PAI_MIN_FAILED_TASK_COUNT_{name}"] = str(role.min_failed_instances)
        succeeded = role.min_succeeded_instances
        env[f"PAI_MIN_SUCCEEDED_TASK_COUNT_{name}"] = str(role.instances if succeeded is None else succeeded)

        host_list: list[str] = []
        for index in range(role.instances):
            task = placed[(name, index)]
            instances.append(f"{name}:{index}")
            env[f"PAI_HOST_IP_{name}_{index}"] = task.host_ip
            for label, ports in task.ports.items():
                env[f"PAI_PORT_LIST_{name}_{index}_{label}"] = _ports(ports)
                env[f"PAI_{name}_{index}_{label}_PORT"] = _ports(ports)
            http = task.ports.get("http")
            host_list.append(f"{task.host_ip}:{http[0]}" if http else task.host_ip)
        env[f"PAI_TASK_ROLE_{name}_HOST_LIST"] = ",".join(host_list)
    env["PAI_TASK_ROLE_INSTANCES"] = ",".join(instances)

    me = spec.me
    env["PAI_CURRENT_CONTAINER_IP"] = me.host_ip
    env["PAI_CONTAINER_HOST_IP"] = me.host_ip
    if me.ports.get("http"):
        env["PAI_CURRENT_CONTAINER_PORT"] = str(me.ports["http"][0])
        env["PAI_CONTAINER_HOST_PORT"] = str(me.ports["http"][0])
    if me.ports.get("ssh"):
        env["PAI_CONTAINER_SSH_PORT"] = str(me.ports["ssh"][0])
    port_list = ""
    for label, ports in me.ports.items():
        env[f"PAI_CONTAINER_HOST_{label}_PORT_LIST"] = _ports(ports)
        port_list += f"{label}:{_ports(ports)};"
    env["PAI_CONTAINER_HOST_PORT_LIST"] = port_list

    gpus = ",".join(str(g) for g in spec.gpu_indices)
    env["CUDA_VISIBLE_DEVICES"] = gpus
    if gpus:
        env["NVIDIA_VISIBLE_DEVICES"] = gpus
    if gpus and spec.gpu_milli:
        env.update(gpu_share_environment(spec.gpu_milli, spec.gpu_memory_mib))
        if spec.mps_pipe_dir is not None:
            # A client of the node's MPS daemon: the limits above are then enforced, not advice.
            env["CUDA_MPS_PIPE_DIRECTORY"] = str(spec.mps_pipe_dir)
    return env


def gpu_share_environment(gpu_milli: int, gpu_memory_mib: int | None) -> dict[str, str]:
    """The variables that tell a task, its CUDA runtime and its framework how much of the GPU is its."""
    percent = str(max(1, round(gpu_milli / 10)))
    env = {
        "PAI_GPU_SHARE_MILLI": str(gpu_milli),
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": percent,
        "CUDA_DEVICE_SM_LIMIT": percent,
        "XLA_PYTHON_CLIENT_MEM_FRACTION": f"{gpu_milli / 1000:.3f}",
        "TF_FORCE_GPU_ALLOW_GROWTH": "true",
    }
    if gpu_memory_mib:
        # The task sees its one device as device 0 once CUDA_VISIBLE_DEVICES names it alone.
        env["PAI_GPU_MEMORY_MIB"] = str(gpu_memory_mib)
        env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = f"0={gpu_memory_mib}M"
        env["CUDA_DEVICE_MEMORY_LIMIT"] = f"{gpu_memory_mib}m"
    return env
