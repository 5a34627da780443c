"""Shared plumbing of every service: the bus, its events' delivery rules, logs, traces, settings.

Services import from here only; the submodules are organised by what they do (connecting,
provisioning, publishing, consuming) so each stays small and testable on its own.

A service's shape::

    async def main(stop: asyncio.Event) -> None:
        bus = await connect(settings)
        await ensure_stream(bus.js, StreamSpec("JOBS", ("pai.job.>",)))
        await ensure_consumer(bus.js, ConsumerSpec("JOBS", "orchestrator"))
        await consume(bus.js, "JOBS", "orchestrator", handle, stop=stop, key=by_job_id)
        await bus.close()

    run_service(main)   # SIGTERM sets stop; exit status 0 once main returns
"""

from libs.backbone.connecting import Bus, connect
from libs.backbone.consuming import (
    Handler,
    KeyFunction,
    Outcome,
    by_job_id,
    consume,
    handle_message,
    job_id_of,
)
from libs.backbone.errors import (
    BackboneError,
    KVConflictError,
    PermanentError,
    ProvisioningError,
    TemporaryError,
)
from libs.backbone.kv import Change, ModelStore, Versioned
from libs.backbone.logging import configure_logging, get_logger
from libs.backbone.natsserver import EmbeddedNats, NatsServerError, find_nats_server
from libs.backbone.provisioning import (
    ConsumerSpec,
    KVSpec,
    StreamSpec,
    ensure_consumer,
    ensure_kv,
    ensure_stream,
)
from libs.backbone.publishing import MSG_ID_HEADER, publish, publish_bytes
from libs.backbone.queueing import KeyedWorkQueue
from libs.backbone.running import run_service, run_until_stopped
from libs.backbone.settings import BackboneSettings, SettingsError, load_settings
from libs.backbone.tracing import configure_tracing, extract_context, inject_headers

__all__ = [
    "MSG_ID_HEADER",
    "BackboneError",
    "BackboneSettings",
    "Bus",
    "Change",
    "ConsumerSpec",
    "EmbeddedNats",
    "Handler",
    "KVConflictError",
    "KVSpec",
    "KeyFunction",
    "KeyedWorkQueue",
    "ModelStore",
    "NatsServerError",
    "Outcome",
    "PermanentError",
    "ProvisioningError",
    "SettingsError",
    "StreamSpec",
    "TemporaryError",
    "Versioned",
    "by_job_id",
    "configure_logging",
    "configure_tracing",
    "connect",
    "consume",
    "ensure_consumer",
    "ensure_kv",
    "ensure_stream",
    "extract_context",
    "find_nats_server",
    "get_logger",
    "handle_message",
    "inject_headers",
    "job_id_of",
    "load_settings",
    "publish",
    "publish_bytes",
    "run_service",
    "run_until_stopped",
]
