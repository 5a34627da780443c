"""Runtime plugins: what extras."com.microsoft.pai.runtimeplugin" asks to happen around a command.

Each plugin is prepared in the job's order before the user command: preparing may act at once
(ssh writes keys, storage makes links) and returns commands to run before the user command and
after it succeeds (cmd). Post commands run in reverse plugin order, as OpenPAI runs taskSucceeds
callbacks. A plugin's failurePolicy decides what a failure means: ``fail`` ends the task,
``ignore`` logs it and goes on.
"""

from __future__ import annotations

from collections.abc import Callable

from runtime.errors import PluginError
from runtime.spec import PluginSpec, TaskSpec

TYPE_CHECKING = False  # not `typing`'s: importing it costs every task's start-up
if TYPE_CHECKING:
    from typing import Any

PLUGIN_PREFIX = "com.microsoft.pai.runtimeplugin."
_PRE_EVENTS = ("taskStarts", "containerStarts")
_POST_EVENTS = ("taskSucceeds", "containerEnds")

Log = Callable[[str], None]


class PreparedPlugin:
    def __init__(
        self,
        spec: PluginSpec,
        pre_commands: list[str] | None = None,
        post_commands: list[str] | None = None,
        report: dict[str, Any] | None = None,
    ) -> None:
        self.spec = spec
        self.pre_commands = pre_commands or []
        self.post_commands = post_commands or []
        self.report = report or {}

    @property
    def name(self) -> str:
        return plugin_name(self.spec)


def plugin_name(spec: PluginSpec) -> str:
    """``cmd`` and ``com.microsoft.pai.runtimeplugin.cmd`` name the same plugin."""
    return spec.plugin.removeprefix(PLUGIN_PREFIX)


def applicable(spec: TaskSpec) -> list[PluginSpec]:
    """The plugins that apply to this task's role, in the job's order."""
    return [p for p in spec.plugins if p.taskroles is None or spec.role in p.taskroles]


def _string_list(parameters: dict[str, Any], key: str, where: str) -> list[str]:
    value = parameters.get(key, [])
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise PluginError(f"{where}.{key}: must be a list of shell commands")
    return list(value)


def prepare_cmd(spec: PluginSpec) -> PreparedPlugin:
    """cmd: preCommands/postCommands, or callbacks on taskStarts/taskSucceeds (not both)."""
    params = spec.parameters
    where = f"plugin {spec.plugin}.parameters"
    prepared = PreparedPlugin(spec)
    if "callbacks" in params:
        if "preCommands" in params or "postCommands" in params:
            raise PluginError(f"{where}: use either callbacks or preCommands/postCommands, not both")
        callbacks = params["callbacks"]
        if not isinstance(callbacks, list):
            raise PluginError(f"{where}.callbacks: must be a list of {{event, commands}}")
        for i, callback in enumerate(callbacks):
            if not isinstance(callback, dict):
                raise PluginError(f"{where}.callbacks[{i}]: must be a mapping with event and commands")
            event = callback.get("event")
            commands = _string_list(callback, "commands", f"{where}.callbacks[{i}]")
            if event in _PRE_EVENTS:
                prepared.pre_commands.extend(commands)
            elif event in _POST_EVENTS:
                prepared.post_commands.extend(commands)
            else:
                raise PluginError(
                    f"{where}.callbacks[{i}].event: {event!r} is not one of taskStarts, taskSucceeds"
                )
    else:
        prepared.pre_commands = _string_list(params, "preCommands", where)
        prepared.post_commands = _string_list(params, "postCommands", where)
    return prepared


def prepare_plugin(spec: PluginSpec, task: TaskSpec, env: dict[str, str], log: Log) -> PreparedPlugin:
    """Prepare one plugin whose parameters already have their secrets rendered."""
    # Imported here so each plugin module stays independent of the others.
    from runtime import ssh, storage

    name = plugin_name(spec)
    if name == "cmd":
        return prepare_cmd(spec)
    if name == "ssh":
        return PreparedPlugin(spec, report=ssh.prepare_ssh(spec.parameters, task, env, log))
    if name in ("storage", "teamwise_storage"):
        return PreparedPlugin(spec, report=storage.link_storages(spec.parameters, task, log))
    raise PluginError(f"plugin {spec.plugin!r} is not supported; supported plugins are cmd, ssh, storage")


def command_script(commands: list[str], failure_policy: str) -> str:
    """A bash script running ``commands``; under ``fail`` the first failing command stops it."""
    header = "set -o errexit\n" if failure_policy == "fail" else ""
    return header + "".join(c if c.endswith("\n") else c + "\n" for c in commands)
