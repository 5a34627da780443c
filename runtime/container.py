"""The command of a task's container: its script read from stdin, a stop passed to all it started.

The runtime runs each of a task's command scripts (the user's command, a plugin's pre and post
commands) as ``<engine> run <arguments> <image> <this command>`` with the script on the
container's stdin (services/orchestrator/core/containers.py decides the arguments). The script,
secrets rendered in, is thus never an argument of any process, where another could read it.
Where the executor runs containers with runc itself (services/orchestrator/core/bundles.py), the
runtime writes each script's container's configuration from the task's and runs
``runc run --bundle``: the same command, the script on its stdin too.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not `typing`'s: importing it costs every task's start-up
if TYPE_CHECKING:
    from typing import Any

LOADER = (
    # Reads the script whole from stdin (the runtime's private file: never in an argument, where
    # every process could read it), closes stdin, and runs the script in the background so that
    # a stop signal can be passed to everything the script started (its process group).
    "IFS= read -r -d '' _pai_script; exec 0</dev/null; "
    "trap 'trap \"\" TERM INT; kill -TERM 0 2>/dev/null' TERM INT; "
    '( eval "unset -v _pai_script; $_pai_script" ) & _pai_pid=$!; '
    "wait $_pai_pid; _pai_code=$?; "
    'while kill -0 "$_pai_pid" 2>/dev/null; do wait "$_pai_pid"; _pai_code=$?; done; '
    'exit "$_pai_code"'
)
"""The container's command: bash when the image has it, else its /bin/sh."""


def shell_command(label: str) -> list[str]:
    """The command a container runs: the loader, under bash where the image has bash."""
    chooser = 'if command -v bash >/dev/null 2>&1; then exec bash -c "$1" "$0"; fi; eval "$1"'
    return ["/bin/sh", "-c", chooser, label, LOADER]


RUN_NAME_KEPT = 190
"""Of a task's container name in each of its scripts' (runc's ids and cgroups are file names)."""


def run_prefix(name: str) -> str:
    """What the name of every container of a task's scripts begins with (the runc runner)."""
    return f"{name[:RUN_NAME_KEPT]}-"


def run_name(name: str, label: str) -> str:
    """The container of one of a task's command scripts: a name of its own per script, so that
    each ends with its own container and all of a task's can be found by their prefix."""
    safe = "".join(c if c.isalnum() or c in "_.-" else "_" for c in label)[:60]
    return run_prefix(name) + safe


def script_config(
    base: dict[str, Any], name: str, label: str, env: dict[str, str], mounts: list[tuple[str, str, bool]]
) -> dict[str, Any]:
    """The OCI configuration of one script's container under runc: the task's (written by the
    executor, services/orchestrator/core/bundles.py) with the loader as its command, the task's
    variables by value, the storages' mounts and a cgroup named after the script's container."""
    process = base["process"]
    linux = base["linux"]
    kept = [entry for entry in process.get("env") or [] if entry.partition("=")[0] not in env]
    binds = [
        {
            "destination": target,
            "type": "bind",
            "source": source,
            "options": ["rbind", "rprivate", "ro" if read_only else "rw"],
        }
        for source, target, read_only in mounts
    ]
    parent = str(linux.get("cgroupsPath") or "").rpartition("/")[0]
    return {
        **base,
        "process": {
            **process,
            "args": [*process["args"], *shell_command(label)],
            "env": kept + [f"{key}={value}" for key, value in env.items()],
        },
        "mounts": [*base["mounts"], *binds],
        "linux": {**linux, "cgroupsPath": f"{parent}/{run_name(name, label)}"},
    }


def _repository(reference: str) -> str:
    """``registry/repo`` of an image reference, without its tag or digest."""
    name = reference.split("@", 1)[0]
    slash, colon = name.rfind("/"), name.rfind(":")
    return name[:colon] if colon > slash else name


def digest_of(digests: list[str], reference: str) -> str | None:
    """The digest of the repository ``reference`` names among an image's ``RepoDigests`` (an
    image tagged under several names has one per repository): the whole last path part must
    match, not a name ending alike; the first where none is that repository (an image named by
    its id). The orchestrator's look at an image reads it the same way."""
    repository = _repository(reference)
    for digest in digests:
        named = digest.split("@", 1)[0]
        if named == repository or named.endswith("/" + repository):
            return digest
    return digests[0] if digests else None
