"""The command of a task's container: its script read from stdin, a stop passed to all it started.

The runtime runs each of a task's command scripts (the user's command, a plugin's pre and post
commands) as ``<engine> run <arguments> <image> <this command>`` with the script on the
container's stdin (services/orchestrator/core/containers.py decides the arguments). The script,
secrets rendered in, is thus never an argument of any process, where another could read it.
"""

from __future__ import annotations

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
