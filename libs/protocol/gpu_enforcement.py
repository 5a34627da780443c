"""Whether a share of a GPU holds on the device, and why: enforced or advisory.

The scheduler places shares (`extras.gpuShare`) wherever GPUs are; whether a task holding half
a GPU is kept to half depends on the node. On the embedded platform NVIDIA MPS enforces them
when its control daemon runs (pai/embedded/mps.py); with simulated GPUs, without the MPS binary
or with `PAI_GPU_MPS=off` they are advisory: the task is told its share (environment variables)
and nothing holds it to it. The platform states which in ``PAI_GPU_SHARE_ENFORCEMENT`` to every
service, as ``enforced: WHY`` or ``advisory: WHY``, and REST shows it in a job's detail. This
module only reads and writes that statement.
"""

from __future__ import annotations

from dataclasses import dataclass

ENV = "PAI_GPU_SHARE_ENFORCEMENT"
UNSTATED = (
    "this platform has not stated that GPU shares are enforced "
    f"({ENV} is not set): a task is told its share and may use more"
)


@dataclass(frozen=True)
class GpuShareEnforcement:
    enforced: bool
    reason: str

    def __str__(self) -> str:
        return f"{'enforced' if self.enforced else 'advisory'}: {self.reason}"

    def describe(self) -> str:
        """One line for people: `enforced (WHY)` or `advisory, not enforced (WHY)`."""
        return f"enforced ({self.reason})" if self.enforced else f"advisory, not enforced ({self.reason})"


def parse(text: str) -> GpuShareEnforcement:
    """`enforced: WHY` or `advisory: WHY`; anything else (or nothing) reads as advisory, unstated."""
    state, _, reason = text.partition(":")
    state, reason = state.strip().lower(), reason.strip()
    if state == "enforced" and reason:
        return GpuShareEnforcement(True, reason)
    if state == "advisory" and reason:
        return GpuShareEnforcement(False, reason)
    return GpuShareEnforcement(False, UNSTATED)
