"""The scheduler's control plane over request/reply: VC status, the config in force, a waiting
job's place in its VC's queue, and run-time reconfiguration.

Status and reconfiguration are questions, not facts, so they travel on `pai.rpc.scheduler.*`
subjects answered by the leader alone. A reconfiguration (a whole document, or one VC set or
removed: `core.vc_admin`) is checked against every running job before anything changes (see
`core.reconfigure`), stored in KV `PAI_SCHEDULER_CONFIG` under `hived` so a restarted scheduler
starts from it, and only then swapped in; the service lock keeps events from being applied
half-way through the swap.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import nats.errors
import structlog
import yaml
from nats.aio.msg import Msg
from nats.js.errors import KeyNotFoundError
from nats.js.kv import KeyValue

from libs.backbone.settings import SettingsError
from libs.protocol.subjects import QUEUE_RPC, RECONFIGURE_RPC, SCHEDULER_CONFIG_RPC, VC_STATUS_RPC
from services.scheduler.core.hived import HivedPolicy
from services.scheduler.core.queueing import SchedulerCore
from services.scheduler.core.reconfigure import (
    ReconfigurationError,
    SchedulerConfig,
    build_policy,
    config_from_document,
    merge_document,
    readd_running,
)
from services.scheduler.core.user_limits import UserLimitedPolicy
from services.scheduler.core.vc_admin import (
    Change,
    VcChangeError,
    config_in_force,
    remove_vc,
    request_from,
    set_vc,
)
from services.scheduler.core.vc_status import status_report

log = structlog.get_logger(__name__)

VC_STATUS_SUBJECT = VC_STATUS_RPC
RECONFIGURE_SUBJECT = RECONFIGURE_RPC
CONFIG_SUBJECT = SCHEDULER_CONFIG_RPC
QUEUE_SUBJECT = QUEUE_RPC
CONFIG_KEY = "hived"


def file_config(path: Path | None) -> dict[str, Any] | None:
    """The HiveD config in PAI_HIVED_CONFIG (plain, or a deployment file with it under config)."""
    if path is None:
        return None
    try:
        document = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise SettingsError(f"PAI_HIVED_CONFIG: cannot read {path}: {exc}") from None
    if isinstance(document, dict) and isinstance(document.get("physicalCluster"), dict | None):
        return document
    inner = document.get("config") if isinstance(document, dict) else None
    return inner if isinstance(inner, dict) else None


async def initial_config(kv: KeyValue, path: Path | None) -> tuple[SchedulerConfig, str]:
    """The stored config if an admin set one, else the file, else cells derived from nodes."""
    try:
        entry = await kv.get(CONFIG_KEY)
    except KeyNotFoundError:
        entry = None
    if entry is not None and entry.value:
        try:
            return config_from_document(json.loads(entry.value)), "kv"
        except (ValueError, ReconfigurationError) as err:
            raise SettingsError(
                f"KV PAI_SCHEDULER_CONFIG/{CONFIG_KEY} is not a usable scheduler config ({err}); "
                "set a valid one with `pai vc set-config` or delete the key"
            ) from None
    hived = file_config(path)
    return SchedulerConfig(hived), "file" if hived is not None else "nodes"


async def answer_queue(core: SchedulerCore, msg: Msg) -> None:
    """A waiting job's place in its VC's queue: `{"waiting", "position", "of", "virtualCluster"}`."""
    try:
        job_id = str(json.loads(msg.data or b"{}").get("jobId", ""))
    except (ValueError, AttributeError):
        job_id = ""
    place = core.queue_position(job_id)
    answer: dict[str, Any] = {"waiting": False}
    if place is not None:
        position, total, vc = place
        answer = {"waiting": True, "position": position, "of": total, "virtualCluster": vc}
    await msg.respond(json.dumps(answer).encode())


class Control:
    """Answers status and reconfiguration requests for one running scheduler."""

    def __init__(
        self, core: SchedulerCore, kv: KeyValue, config: SchedulerConfig, source: str, lock: asyncio.Lock
    ) -> None:
        self.core = core
        self.kv = kv
        self.config = config
        self.source = source
        self.lock = lock

    def status(self) -> dict[str, Any]:
        core = self.core
        return status_report(
            core.policy, core.running(), core.waiting_reasons(), core.demands(), core.nodes, self.source
        )

    async def answer_status(self, msg: Msg) -> None:
        await msg.respond(json.dumps(self.status()).encode())

    def _hived(self) -> HivedPolicy | None:
        policy = self.core.policy
        inner = policy.inner if isinstance(policy, UserLimitedPolicy) else policy
        return inner if isinstance(inner, HivedPolicy) else None

    def in_force(self) -> dict[str, Any]:
        """The config in force as `pai vc config` shows it, where its cells come from, and notes."""
        hived = self._hived()
        cells = hived.config_document() if hived is not None else self.config.hived
        return {
            "source": self.source,
            "cells": "nodes" if self.config.hived is None else "config",
            "config": config_in_force(self.config, cells),
            "notes": list(hived.notes) if hived is not None else [],
        }

    async def answer_config(self, msg: Msg) -> None:
        await msg.respond(json.dumps(self.in_force()).encode())

    async def answer_reconfigure(self, msg: Msg) -> bool:
        """Check, store and apply a new config; True when the policy changed."""
        async with self.lock:
            try:
                request = json.loads(msg.data or b"{}")
                force = bool(request.get("force"))
                if "set" in request or "remove" in request:
                    answer = await self._change_vc(request, force)
                else:
                    answer = await self._reconfigure(request.get("document"), force)
            except (ValueError, AttributeError) as err:
                answer = {"error": "invalid", "message": f"the request is not JSON with a document: {err}"}
        await msg.respond(json.dumps(answer).encode())
        return bool(answer.get("applied"))

    async def _change_vc(self, request: dict[str, Any], force: bool) -> dict[str, Any]:
        """`pai vc set NAME ...` (`{"set": {"name", ...}}`) or `pai vc remove NAME` (`{"remove": NAME}`)."""
        hived = self._hived()
        cells = hived.config_document() if hived is not None else self.config.hived
        try:
            change: Change
            if "remove" in request:
                change = remove_vc(self.config, cells, str(request["remove"]))
            else:
                asked = dict(request["set"])
                name = str(asked.pop("name", ""))
                change = set_vc(self.config, cells, self.core.nodes, name, request_from(asked))
        except VcChangeError as err:
            return {"error": "invalid", "message": str(err)}
        answer = await self._apply(change.config, force)
        if answer.get("applied"):
            answer["message"] = change.message
        return answer

    async def _reconfigure(self, document: Any, force: bool) -> dict[str, Any]:
        hived = self._hived()
        current = hived.config_document() if hived is not None else self.config.hived
        try:
            new = merge_document(document, self.config, current)
        except ReconfigurationError as err:
            return {"error": "invalid", "message": str(err)}
        return await self._apply(new, force)

    async def _apply(self, new: SchedulerConfig, force: bool) -> dict[str, Any]:
        """Check `new` against the running jobs, store it and swap it in (or say why not)."""
        inner = self._hived()
        try:
            candidate = build_policy(new, self.core.nodes)
        except ReconfigurationError as err:
            return {"error": "invalid", "message": str(err)}
        before = inner.demoted_jobs() if inner is not None else {}
        impact = readd_running(candidate, self.core.running(), before)
        result: dict[str, Any] = {
            "killed": impact.killed,
            "downgraded": impact.downgraded,
            "jobVirtualClusters": {j: impact.vcs[j] for j in [*impact.killed, *impact.downgraded]},
        }
        if not impact.safe and not force:
            message = (
                f"the change would harm running jobs: {impact.summary()}. Nothing was changed; "
                "stop those jobs first, or force the change (?force=true, `--force`) to apply it anyway"
            )
            return {"error": "conflict", "message": message, **result}
        try:
            await self.kv.put(CONFIG_KEY, json.dumps(new.document()).encode())
        except (nats.errors.Error, TimeoutError) as err:
            return {"error": "unavailable", "message": f"the config could not be stored in KV: {err}"}
        self.core.replace_policy(candidate)
        self.config = new
        self.source = "kv"
        log.warning(
            "scheduler reconfigured",
            virtual_clusters=sorted(new.vc_names or []),
            forced=force and not impact.safe,
            killed=sorted(impact.killed),
            downgraded=sorted(impact.downgraded),
        )
        vcs = [vc.name for vc in candidate.virtual_clusters()]
        return {"applied": True, "virtualClusters": vcs, **result}
