"""One place that configures structured logs for a service.

Every service logs through structlog: JSON lines in production (one object per line, easy to
ship and query), a readable console rendering on a terminal. Context such as ``job_id`` and
``msg_id`` is bound with contextvars by the consume loop, so every line a handler writes carries
them without passing a logger around. Standard-library loggers (nats-py, aiohttp) are routed
through the same renderer so a service writes one format only. A line the log's file refuses
(its disk full) is dropped: the service goes on, and an error answer being logged still leaves.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from typing import Any, TextIO

import structlog
from opentelemetry import trace
from structlog.typing import EventDict, Processor, WrappedLogger

from libs.backbone.settings import BackboneSettings

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def add_trace_ids(_logger: WrappedLogger, _method: str, event_dict: EventDict) -> EventDict:
    """Add the current OpenTelemetry trace and span ids so a log line can be found from a trace."""
    context = trace.get_current_span().get_span_context()
    if context.is_valid:
        event_dict.setdefault("trace_id", format(context.trace_id, "032x"))
        event_dict.setdefault("span_id", format(context.span_id, "016x"))
    return event_dict


class DroppingPrintLogger(structlog.PrintLogger):
    """structlog's PrintLogger, but a line its file cannot take (ENOSPC: the disk of a service's
    log is full) is dropped instead of raised: logging a failed request must not fail the request
    (REST's error boundary answered a bare 500 when its log line met a full disk)."""

    def msg(self, message: str) -> None:
        with contextlib.suppress(OSError):
            super().msg(message)

    log = debug = info = warn = warning = msg
    fatal = failure = err = error = critical = exception = msg


class DroppingPrintLoggerFactory(structlog.PrintLoggerFactory):
    def __call__(self, *args: Any) -> DroppingPrintLogger:
        return DroppingPrintLogger(self._file)


def configure_logging(settings: BackboneSettings, *, stream: TextIO | None = None) -> None:
    """Configure structlog and the standard library once, at a service's start."""
    output = stream if stream is not None else sys.stderr
    level = _LEVELS[settings.log_level]
    shared: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        add_trace_ids,
    ]
    renderer: Processor
    if settings.resolved_log_format() == "json":
        shared.append(structlog.processors.dict_tracebacks)
        renderer = structlog.processors.JSONRenderer()
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=output.isatty())

    def add_service(_logger: WrappedLogger, _method: str, event_dict: EventDict) -> EventDict:
        event_dict.setdefault("service", settings.service_name)
        return event_dict

    shared.insert(1, add_service)
    structlog.configure(
        processors=[*shared, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=DroppingPrintLoggerFactory(file=output),
        cache_logger_on_first_use=False,
    )

    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
    )
    handler = logging.StreamHandler(output)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    # Libraries chat at INFO about reconnect details the bus callbacks already report.
    root.setLevel(max(level, logging.WARNING))


def get_logger(name: str | None = None, **initial: Any) -> Any:
    """A structlog logger; typed loosely because structlog's bound loggers are dynamic."""
    return structlog.get_logger(name, **initial)
