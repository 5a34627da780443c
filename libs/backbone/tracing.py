"""OpenTelemetry set-up and the trace-context helpers that carry a trace across services.

A job's journey (REST -> scheduler -> orchestrator -> runtime) crosses several processes over
JetStream; the W3C ``traceparent`` travels in message headers so every hop's span joins one
trace. Exporting is chosen by settings: nothing, the console (for a developer), or OTLP over
HTTP (for a collector in production).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Mapping
from typing import TextIO

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

from libs.backbone.settings import BackboneSettings

TRACER_NAME = "pai.backbone"


def build_tracer_provider(settings: BackboneSettings, *, console: TextIO | None = None) -> TracerProvider:
    """A tracer provider with the exporter the settings ask for.

    With no exporter, spans still carry trace and span ids (logs name them, message headers pass
    them on) but record nothing: a recorded span that nobody exports cost REST about a sixth of
    its CPU, one per message it consumes. ``console`` is where the console exporter writes
    (standard output by default).
    """
    resource = Resource.create({SERVICE_NAME: settings.service_name})
    if settings.otel_exporter == "none":
        return TracerProvider(resource=resource, sampler=ALWAYS_OFF)
    provider = TracerProvider(resource=resource)
    exporter: SpanExporter | None = None
    if settings.otel_exporter == "console":
        exporter = ConsoleSpanExporter(service_name=settings.service_name, out=console or sys.stdout)
    elif settings.otel_exporter == "otlp":
        # Imported here so a service that never exports does not pay for protobuf at start.
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter(endpoint=settings.otel_endpoint)
    if exporter is not None:
        processor: SpanProcessor = BatchSpanProcessor(exporter)
        provider.add_span_processor(processor)
    return provider


def configure_tracing(settings: BackboneSettings) -> TracerProvider:
    """Install the global tracer provider once, in ``__main__``; call ``shutdown()`` on exit to flush."""
    provider = build_tracer_provider(settings)
    trace.set_tracer_provider(provider)
    return provider


_tracer: tuple[trace.TracerProvider, trace.Tracer, bool] | None = None


def _current() -> tuple[trace.TracerProvider, trace.Tracer, bool]:
    global _tracer
    provider = trace.get_tracer_provider()
    if _tracer is None or _tracer[0] is not provider:
        records = isinstance(provider, TracerProvider) and provider.sampler is not ALWAYS_OFF
        _tracer = (provider, provider.get_tracer(TRACER_NAME), records)
    return _tracer


def get_tracer() -> trace.Tracer:
    """The tracer the backbone's own spans use (publish and process).

    Made once per tracer provider: every published and consumed message asks for it, and the
    SDK builds a new tracer on each request.
    """
    return _current()[1]


@contextlib.contextmanager
def message_span(
    name: str,
    *,
    kind: trace.SpanKind,
    attributes: dict[str, str | int],
    context: otel_context.Context | None = None,
) -> Iterator[trace.Span]:
    """A span for one published or consumed message, current while the block runs.

    Where no provider records spans (none is installed, or it samples nothing), no span is made:
    `context` (the trace a consumed message carries) is made current instead, so what the block
    logs and publishes still carries that trace, for a fraction of a span's cost (a process sends
    and takes tens of thousands of messages for one large job).
    """
    _provider, tracer, records = _current()
    if records:
        with tracer.start_as_current_span(name, context=context, kind=kind, attributes=attributes) as span:
            yield span
        return
    token = otel_context.attach(context) if context is not None else None
    try:
        yield trace.get_current_span()
    finally:
        if token is not None:
            otel_context.detach(token)


def inject_headers(headers: dict[str, str] | None = None) -> dict[str, str]:
    """Return ``headers`` plus the current trace context (``traceparent``, ``tracestate``)."""
    carrier = dict(headers or {})
    propagate.inject(carrier)
    return carrier


def extract_context(headers: Mapping[str, str] | None) -> otel_context.Context:
    """The trace context a message's headers carry (an empty context when they carry none)."""
    return propagate.extract(dict(headers or {}))
