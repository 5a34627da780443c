"""Rotation keeps every byte in order within the size bound; masking survives split writes."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.capturing import ALL_LOG, LogCapture, RotatingFile
from runtime.secrets import Masker

chunks = st.lists(st.binary(min_size=1, max_size=3000).map(lambda b: b.replace(b"\0", b"\n")), max_size=30)


@settings(max_examples=40, deadline=None)
@given(data=chunks)
def test_rotated_files_hold_everything_in_order_and_stay_under_the_limit(data: list[bytes]) -> None:
    # A fresh directory per example: Hypothesis runs many examples in one test call.
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "log"
        log = RotatingFile(path, max_bytes=1024, backup_count=1000)
        for chunk in data:
            log.write(chunk)
        log.close()
        files = sorted(Path(tmp).iterdir(), key=lambda p: -int(p.name.split(".")[1]) if "." in p.name else 0)
        assert b"".join(p.read_bytes() for p in files) == b"".join(data)
        assert all(p.stat().st_size <= 1024 for p in files)


def test_a_secret_written_in_two_pieces_is_still_masked(tmp_path: Path) -> None:
    capture = LogCapture(tmp_path, 1 << 20, 1, Masker(["topsecret"]), 1024)
    read_end, write_end = os.pipe()
    with os.fdopen(read_end, "rb") as reader:
        pump = capture.pump(reader, to_stderr=False)
        os.write(write_end, b"value=top")
        os.write(write_end, b"secret\n")
        os.close(write_end)
        pump.join(10)
    capture.close()
    assert (tmp_path / ALL_LOG).read_text() == "value=******\n"
    assert capture.tail.text() == "value=******\n"
