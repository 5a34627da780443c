"""Whether host tasks run sandboxed here: bubblewrap and setpriv found, and bubblewrap working.

``PAI_TASK_SANDBOX`` says: ``auto`` (the default: sandboxed where the platform runs as root and
both tools work; else unsandboxed, and ``pai up`` says why), ``required`` (the orchestrator does
not start without a working sandbox) or ``off``. What the sandbox is: core/sandboxes.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

from services.orchestrator.core.sandboxes import SandboxTools, wrap_arguments

PROBE_TIMEOUT_S = 10.0
INSTALL_HINT = "install bubblewrap (Debian: apt-get install bubblewrap; make setup does)"


@dataclass(frozen=True)
class SandboxChoice:
    tools: SandboxTools | None
    why: str = ""

    def describe(self) -> str:
        if self.tools is not None:
            return (
                "host tasks sandboxed: a PID namespace and /proc of their own (bubblewrap), "
                "no capability and no_new_privs (setpriv)"
            )
        return f"host tasks not sandboxed: {self.why}"


def _probe(tools: SandboxTools) -> str:
    """Empty when bubblewrap makes a sandbox here; else what went wrong."""
    try:
        done = subprocess.run(
            [*wrap_arguments(tools), "--", "/bin/true"],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap did not run ({exc})"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        return f"bubblewrap cannot make a sandbox here: {last}"
    return ""


def detect_sandbox(setting: str, *, euid: int | None = None) -> SandboxChoice:
    """The sandbox host tasks run in, or why they run without one. ``required`` without a
    working one is an error (ValueError): the operator asked for it."""
    setting = (setting or "auto").strip().lower()
    if setting not in ("auto", "required", "off"):
        raise ValueError(f"PAI_TASK_SANDBOX={setting!r}: must be auto, required or off")
    if setting == "off":
        return SandboxChoice(None, "PAI_TASK_SANDBOX=off")
    why = ""
    if (os.geteuid() if euid is None else euid) != 0:
        why = "the platform is not root (tasks run as its own user)"
    else:
        bwrap, setpriv = shutil.which("bwrap"), shutil.which("setpriv")
        if bwrap is None:
            why = f"no bwrap: {INSTALL_HINT}"
        elif setpriv is None:
            why = "no setpriv: install util-linux"
        else:
            tools = SandboxTools(bwrap, setpriv)
            why = _probe(tools)
            if not why:
                return SandboxChoice(tools)
    if setting == "required":
        raise ValueError(f"PAI_TASK_SANDBOX=required: {why}")
    return SandboxChoice(None, why)
