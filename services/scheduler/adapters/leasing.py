"""One active scheduler: the lease in KV (libs/backbone/leasing.py), which every single-active
service shares; named here for the scheduler's own imports."""

from __future__ import annotations

from libs.backbone.leasing import RENEW_EVERY, Lease, LeaseLost, while_leading

__all__ = ["RENEW_EVERY", "Lease", "LeaseLost", "while_leading"]
