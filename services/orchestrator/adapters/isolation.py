"""What a local task may see of the machine it shares with the platform.

A task is a user's code. It gets an environment of its own, built from a short list of the
host's variables that programs need (PATH, locale, time zone, library paths), never the
orchestrator's: nothing of the bus (PAI_NATS_URL, its user and password), the data dir, the
database or any other platform setting reaches it. The runtime adds the task's PAI_* variables.
"""

from __future__ import annotations

from collections.abc import Mapping

# Host variables a task inherits: what finds programs and libraries and how text is shown.
# Everything else of the orchestrator's environment (PAI_*, credentials, proxies with
# passwords, cloud keys) stays with the platform.
_PASSED = frozenset({"PATH", "LANG", "LANGUAGE", "TZ", "TERM", "LD_LIBRARY_PATH", "TMPDIR"})
_PASSED_PREFIXES = ("LC_",)
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def task_environment(host: Mapping[str, str], **extra: str) -> dict[str, str]:
    """The environment a task's runtime starts with: the passed host variables, then ``extra``."""
    env = {
        name: value for name, value in host.items() if name in _PASSED or name.startswith(_PASSED_PREFIXES)
    }
    env.setdefault("PATH", DEFAULT_PATH)
    env.update(extra)
    return env
