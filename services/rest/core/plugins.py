"""Runtime plugins a job may not ask for where its tasks run.

The ssh plugin (OpenPAI's ``ssh``: a key pair, an authorized key, a port named ssh) is only worth
its port where an ssh server listens on it. Tasks of the local executor have none: the runtime
writes the keys and the config, but no sshd is started (none is installed with the platform, and
one per task would be another root service per tenant). A job asking for it there is refused
when it is submitted, naming what does work on every engine: ``pai job exec``, a command or a
shell in the running task through the API, as its owner. On Kubernetes the plugin is left as it
is.
"""

from __future__ import annotations

from libs.protocol import JobConfig
from libs.protocol.errors import Problem

PLUGINS_PATH = "extras.com.microsoft.pai.runtimeplugin"
NO_SSH_SERVER = "local"
"""The executor (PAI_EXECUTOR) whose tasks have no ssh server."""


def unsupported_plugins(job: JobConfig, executor: str, user: str) -> list[Problem]:
    """A problem for each runtime plugin the executor's tasks cannot have, at its YAML path."""
    entries = (job.extras.runtime_plugins if job.extras is not None else None) or []
    if executor != NO_SSH_SERVER:
        return []
    return [
        Problem(
            path=f"{PLUGINS_PATH}[{at}]",
            message="the ssh plugin needs an ssh server in each task, and tasks on this platform have none",
            hint=f"remove the plugin; for a shell in a running task use `pai job exec {user}~{job.name} "
            "-it -- bash` (or any command after --)",
        )
        for at, entry in enumerate(entries)
        if entry.plugin == "ssh"
    ]
