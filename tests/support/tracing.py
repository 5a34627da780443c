"""An in-memory OpenTelemetry exporter installed once per test session.

OpenTelemetry allows setting the global tracer provider only once per process, so the first
test that needs spans installs a provider with an in-memory exporter and every later test
clears and reuses it.
"""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

_exporter: InMemorySpanExporter | None = None


def memory_exporter() -> InMemorySpanExporter:
    """The session's exporter, installing the global provider on first use."""
    global _exporter
    if _exporter is None:
        _exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_exporter))
        trace.set_tracer_provider(provider)
    return _exporter
