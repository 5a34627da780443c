"""Settings come from PAI_* variables with readable errors; logs are JSON lines with bound ids."""

from __future__ import annotations

import errno
import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from libs.backbone.logging import configure_logging
from libs.backbone.settings import BackboneSettings, SettingsError, load_settings
from libs.backbone.tracing import build_tracer_provider, extract_context, get_tracer, inject_headers


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    previous = structlog.get_config()
    yield
    structlog.configure(**previous)  # the suite's own (tests/conftest.py), not structlog's defaults
    root.handlers[:] = handlers
    root.setLevel(level)


def test_settings_are_read_from_pai_variables(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PAI_NATS_URL", "nats://bus:4222")
    monkeypatch.setenv("PAI_SERVICE_NAME", "scheduler")
    monkeypatch.setenv("PAI_OTEL_EXPORTER", "console")
    monkeypatch.setenv("PAI_DATA_DIR", str(tmp_path))
    settings = load_settings()
    assert settings.nats_url == "nats://bus:4222"
    assert settings.service_name == "scheduler"
    assert settings.otel_exporter == "console"
    assert settings.data_dir == tmp_path
    with pytest.raises(ValueError, match="frozen"):
        settings.nats_url = "nats://other:4222"  # type: ignore[misc]


def test_a_bad_setting_names_the_variable_to_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAI_LOG_LEVEL", "loud")
    with pytest.raises(SettingsError, match="PAI_LOG_LEVEL") as caught:
        load_settings()
    assert "'loud'" in str(caught.value)


def test_auto_log_format_is_json_when_not_on_a_terminal() -> None:
    # Under pytest stderr is captured, never a terminal.
    assert BackboneSettings(log_format="auto").resolved_log_format() == "json"
    assert BackboneSettings(log_format="console").resolved_log_format() == "console"


@pytest.mark.usefixtures("restore_logging")
def test_json_logs_carry_the_service_and_the_bound_job_and_message_ids() -> None:
    out = io.StringIO()
    configure_logging(BackboneSettings(service_name="orchestrator", log_format="json"), stream=out)
    with structlog.contextvars.bound_contextvars(job_id="j1", msg_id="e1"):
        structlog.get_logger().info("task started", task="worker-0")
    structlog.get_logger().debug("hidden at info level")
    logging.getLogger("nats.aio.client").warning("library says %s", "hello")
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    assert first["event"] == "task started"
    assert (first["job_id"], first["msg_id"], first["task"]) == ("j1", "e1", "worker-0")
    assert first["service"] == "orchestrator"
    assert first["level"] == "info"
    assert second["event"] == "library says hello"
    assert "job_id" not in second


class FullDisk(io.StringIO):
    """A log file on a disk with no space left, until ``full`` is cleared."""

    full = True

    def write(self, text: str) -> int:
        if self.full:
            raise OSError(errno.ENOSPC, "No space left on device")
        return super().write(text)


@pytest.mark.usefixtures("restore_logging")
def test_a_log_line_a_full_disk_refuses_is_dropped_and_the_service_goes_on() -> None:
    out = FullDisk()
    configure_logging(BackboneSettings(service_name="rest", log_format="json"), stream=out)
    structlog.get_logger().error("request failed", path="/api/v2/jobs")  # raises nothing
    structlog.get_logger().exception("request failed too")
    out.full = False
    structlog.get_logger().warning("written once there is room")
    events = [json.loads(line)["event"] for line in out.getvalue().splitlines()]
    assert events == ["written once there is room"]


def test_a_trace_context_survives_injection_into_headers_and_extraction() -> None:
    provider = build_tracer_provider(BackboneSettings(otel_exporter="none"))
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("publish") as span:
        headers = inject_headers({"a": "b"})
    assert headers["a"] == "b"
    with get_tracer().start_as_current_span("other", context=extract_context(headers)):
        pass
    restored = extract_context(headers)
    from opentelemetry import trace

    carried = trace.get_current_span(restored).get_span_context()
    assert carried.trace_id == span.get_span_context().trace_id
    assert carried.span_id == span.get_span_context().span_id
    assert extract_context(None) is not None
    provider.shutdown()


def test_the_console_exporter_prints_finished_spans() -> None:
    out = io.StringIO()
    settings = BackboneSettings(service_name="monitor", otel_exporter="console")
    provider = build_tracer_provider(settings, console=out)
    with provider.get_tracer("test").start_as_current_span("scrape nodes"):
        pass
    provider.shutdown()  # flushes the batch processor
    printed = json.loads(out.getvalue())
    assert printed["name"] == "scrape nodes"
    assert printed["resource"]["attributes"]["service.name"] == "monitor"


def test_the_otlp_exporter_is_chosen_by_setting_and_gets_the_endpoint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from collections.abc import Sequence

    from opentelemetry.exporter.otlp.proto.http import trace_exporter
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    endpoints: list[str | None] = []
    exported: list[str] = []

    class RecordingExporter(SpanExporter):
        def __init__(self, endpoint: str | None = None) -> None:
            endpoints.append(endpoint)

        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            exported.extend(span.name for span in spans)
            return SpanExportResult.SUCCESS

    monkeypatch.setattr(trace_exporter, "OTLPSpanExporter", RecordingExporter)
    settings = BackboneSettings(otel_exporter="otlp", otel_endpoint="http://collector:4318/v1/traces")
    provider = build_tracer_provider(settings)
    with provider.get_tracer("test").start_as_current_span("place job"):
        pass
    provider.shutdown()
    assert endpoints == ["http://collector:4318/v1/traces"]
    assert exported == ["place job"]


def test_without_an_exporter_spans_record_nothing_but_keep_their_ids() -> None:
    provider = build_tracer_provider(BackboneSettings(otel_exporter="none"))
    with provider.get_tracer("test").start_as_current_span("process", attributes={"a": 1}) as span:
        assert not span.is_recording()
        context = span.get_span_context()
        assert context.is_valid  # logs and message headers still carry the trace
        assert inject_headers({})["traceparent"].split("-")[1] == format(context.trace_id, "032x")
    provider.shutdown()


def test_where_nothing_records_a_message_span_passes_the_messages_trace_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from opentelemetry import trace
    from opentelemetry.trace import SpanKind

    from libs.backbone.tracing import message_span

    quiet = build_tracer_provider(BackboneSettings(otel_exporter="none"))
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: quiet)
    carried = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    before = trace.get_current_span()
    with message_span(
        "process x", kind=SpanKind.CONSUMER, attributes={}, context=extract_context(carried)
    ) as span:
        assert not span.is_recording()
        assert format(span.get_span_context().trace_id, "032x") == "0af7651916cd43dd8448eb211c80319c"
        assert inject_headers({})["traceparent"] == carried["traceparent"]  # what it publishes carries it
    assert trace.get_current_span() is before
    quiet.shutdown()
