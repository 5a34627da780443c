"""The suite's own logging: service log lines of in-process servers never reach the terminal."""

from __future__ import annotations

import threading

import pytest
import structlog


def test_a_service_line_from_a_server_thread_is_captured_as_a_log_record(
    caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    # A server thread of a REST or CLI test logs as a service does: through structlog.
    thread = threading.Thread(
        target=lambda: structlog.get_logger("services.rest.app").info("message handled", outcome="acked")
    )
    thread.start()
    thread.join()
    assert any("message handled" in record.getMessage() for record in caplog.records)
    out, err = capfd.readouterr()
    assert "message handled" not in out + err, "written to the process's stdout or stderr"
