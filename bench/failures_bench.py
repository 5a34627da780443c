"""How long failure analysis takes: a typical end-of-job log, and the worst logs for the worst rules.

Run: .venv/bin/python bench/failures_bench.py
The runtime analyses every task exit and the orchestrator every platform event, so analysis must
stay cheap. Python's regex engine cannot be interrupted; the adversarial cases measure the bound
that the load-time pattern checks and the input limits (last 64 KiB, 1 KiB per line) give.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path

from libs.failures import FailureVerdict, PodStatus, RuleSet, analyze, default_rules, load_rules

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / ".." / "shared" / "anchors" / "openpai" / "exit-spec" / "k8s-job-exit-spec.yaml"


def timed(label: str, runs: int, call: Callable[[], object]) -> None:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    median, worst = statistics.median(samples) * 1000, max(samples) * 1000
    print(f"{label:72} median {median:8.2f} ms  max {worst:8.2f} ms")


def probe(regex: str) -> RuleSet:
    pattern = f"    runtimeContainerPatterns:\n    - userLogRegex: '{regex}'\n"
    return load_rules(f"- code: 9\n  phrase: Probe\n  pattern:\n{pattern}")


def container(rules: RuleSet, log: str) -> Callable[[], FailureVerdict]:
    return lambda: analyze(rules, exit_code=1, user_log=log)


def main() -> None:
    ours = default_rules()
    spec_text = SPEC.read_text(encoding="utf-8")
    spec = load_rules(spec_text)
    shipped_text = (ROOT / "libs" / "failures" / "rules.yaml").read_text(encoding="utf-8")
    training = "".join(
        f"epoch 3 step {i} loss 0.{i % 97:02d} lr 1e-4 throughput 512 img/s\n" for i in range(20_000)
    )
    failing = training + 'Traceback (most recent call last):\n  File "train.py", line 9\nSyntaxError: bad\n'
    unknown = training + "the end\n"
    print(f"typical log: {len(training) // 1024} KiB, of which analysis reads the last 64 KiB")
    timed("load the shipped rules (27 rules)", 20, lambda: load_rules(shipped_text))
    timed("load OpenPAI's spec (62 rules)", 20, lambda: load_rules(spec_text))
    timed("container, shipped rules, syntax error at the end", 20, container(ours, failing))
    timed("container, shipped rules, nothing recognised", 20, container(ours, unknown))
    timed("container, OpenPAI spec, nothing recognised", 20, container(spec, unknown))
    node_lost = PodStatus(reason="NodeLost")
    timed(
        "platform, shipped rules, node lost",
        200,
        lambda: analyze(ours, stage="platform", exit_code=None, pod=node_lost),
    )
    timed("container, SIGKILL, no log", 200, lambda: analyze(ours, exit_code=137))

    # Worst cases: 64 lines as long as is read (1 KiB), built to make one accepted pattern backtrack.
    lines_a = ("a" * 1023 + "\n") * 64

    def lines_of(text: str) -> str:
        return ((text * (1024 // len(text) + 1))[:1023] + "\n") * 64

    worst = [
        ("[a-z].*0", "a"),
        ("Error.*memory.*x", "Errormemory"),
        ("(?mi)torch/install/share/lua.*c.* exception", "torch/install/share/lua" + "c" * 40),
        ("(?mi)tensorflow.*ResourceExhaustedError.*OOM.*", "tensorflow ResourceExhaustedError "),
    ]
    for regex, text in worst:
        timed(f"worst: {regex!r} on lines of {text[:24]!r}...", 3, container(probe(regex), lines_of(text)))
    timed("worst: OpenPAI spec, lines of 'a'", 3, container(spec, lines_a))
    timed("worst: shipped rules, lines of 'a'", 3, container(ours, lines_a))


if __name__ == "__main__":
    main()
