"""Exit codes the runtime itself uses when it, not the user command, ends a task.

Where OpenPAI's job exit spec has a code for the same cause, the same number is used so the
platform's failure analysis classifies it the OpenPAI way (transient, conflict, permanent). The
codes 245-248 are additions of this platform; OpenPAI's spec leaves them unassigned.

Otherwise the runtime's exit code is the user command's: its own exit status, or 128 + the signal
number when a signal ended it (143 after SIGTERM), as a shell reports it.
"""

from __future__ import annotations

import signal

SUCCEEDED = 0

# This platform's codes.
CONFINE_FAILED = 245
"""The task's limits (cgroups, rlimits) could not be put in place, so it did not run (transient)."""
SPEC_INVALID = 246
"""The task spec or the secrets file could not be read or is malformed (a platform bug)."""
PLUGIN_FAILED = 247
"""A runtime plugin with failurePolicy fail failed (its commands, keys or storage links)."""
SECRET_MISSING = 248
"""The command references <% $secrets.NAME %> but the job has no such secret (user error)."""

# OpenPAI's codes (k8s-job-exit-spec).
START_PERMISSION_DENIED = -1202
"""ContainerDockerStartCmdPermissionDenied: the container's shell may not be executed."""
START_NOT_FOUND = -1203
"""ContainerDockerStartCmdNotFound: the image has no /bin/sh for the task's commands."""
BARRIER_TIMEOUT = 251
"""JobGangAllocationTimeout: not every task of the attempt became ready in time (transient conflict)."""
PORT_CONFLICT = 253
"""ContainerPortConflict: a port reserved for this task is taken on the node (transient)."""
IMAGE_NOT_EXISTS = 254
"""ContainerImageNotExists: the task's docker image is not on the node and cannot be pulled."""
INTERNAL_ERROR = 255
"""PAIRuntimeUnknownFailed: the runtime itself failed unexpectedly."""

PHRASES: dict[int, str] = {
    CONFINE_FAILED: "RuntimeConfineFailed",
    SPEC_INVALID: "RuntimeSpecInvalid",
    PLUGIN_FAILED: "RuntimePluginFailed",
    SECRET_MISSING: "RuntimeSecretMissing",
    BARRIER_TIMEOUT: "JobGangAllocationTimeout",
    PORT_CONFLICT: "ContainerPortConflict",
    IMAGE_NOT_EXISTS: "ContainerImageNotExists",
    START_PERMISSION_DENIED: "ContainerDockerStartCmdPermissionDenied",
    START_NOT_FOUND: "ContainerDockerStartCmdNotFound",
    INTERNAL_ERROR: "PAIRuntimeUnknownFailed",
}


def from_returncode(returncode: int) -> int:
    """A Popen return code as a shell exit status: -N (killed by signal N) becomes 128 + N."""
    if returncode < 0:
        return 128 + (-returncode)
    return returncode


TERMINATED = 128 + int(signal.SIGTERM)
"""The runtime was asked to stop before the user command started."""
