"""Mutation testing of the rules that matter: ``make mutants ARGS="<module>..."``.

Each named module (a file, a folder or a glob, relative to the repository root) is mutated on
its own by mutmut 3, and the tests that cover it (``COVERING`` below) are run against each
mutant; the run ends with one line per module::

    mutants: killed K of N (P%) in services/marketplace/core/items.py

With no ARGS the default set runs (``DEFAULT``), highest value first: the protocol's validation
and limits, the orchestrator's core, the scheduler's policy, the task environment, the
isolation rules, the marketplace's and the events' filters, then every other pure core.

Why mutmut rather than cosmic-ray: mutmut 3 runs the selected tests once, records which tests
call each function, then forks one worker per mutant from the warm interpreter and runs only
those tests (its ``trampoline`` picks the mutated function by an environment variable), so a
mutant costs a fork and a few tests rather than a new interpreter with the whole selection.
cosmic-ray rewrites the file in place and starts the test command afresh for every mutant:
with pydantic, the protocol and pytest to import that is about two seconds each before any
test runs, several hours for the default set on two cores. mutmut also never touches the work
tree (it mutates a copy in ``mutants/``), which matters here because other work goes on in
the same checkout. What mutmut 3 does not mutate: code outside functions (module constants,
class bodies, dataclass defaults); those are covered by the tests of the functions using them.

How a run goes, per module: the sources (libs, services, runtime), the tests and
pyproject.toml are copied to ``mutants/<slug>/`` (a snapshot: files moved meanwhile in the
work tree do not disturb it), a ``[tool.mutmut]`` section naming the module and its tests is
added to that copy's pyproject.toml, and ``mutmut run`` runs there under a wall-clock limit
(``--timeout``, default 1200 s). Killed counts mutmut's killed, timeout and crash verdicts;
N counts every mutant, including those no selected test reaches ("no tests") and those not
checked before the limit (the line then says so just above it). The survivors of each module,
with their diffs, are written to ``mutants/<slug>.survivors.txt``.

On a larger machine, ``--parallel N`` runs N modules at once and ``--jobs J`` tests J mutants of
each at a time. ``--deselect-failing`` first runs the covering tests once and leaves out (and
names) those red on the unmutated code, such as root-only cases on a machine without Podman:
mutmut refuses a red clean run. Covering tests missing from the tree (an older commit's tests/,
to score the tests as they were) are named and left out of the selection.

Mutation runs are not part of ``make test``.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "mutants"
SOURCES = ("libs", "services", "runtime")
# mutmut's script beside this interpreter (a virtualenv), else the module through it (packages
# installed elsewhere, e.g. with pip --target); --mutmut or PAI_MUTMUT names another.
MUTMUT = Path(sys.executable).parent / "mutmut"

# The default set, highest value first; each entry is a file, a folder or a glob, resolved when
# the run starts (modules move: services/scheduler/core/hived_*.py became hived/*.py).
DEFAULT = (
    "libs/protocol/validation.py",
    "libs/protocol/limits.py",
    "services/orchestrator/core",
    "services/scheduler/core/**/*policy.py",
    "runtime/environment.py",
    "services/orchestrator/adapters/isolation.py",
    "services/marketplace/core",
    "services/marketplace/adapters/storing.py",
    "services/events/core/filters.py",
    "libs/protocol",
    "services/*/core",
)


@dataclass(frozen=True)
class Covering:
    """The tests that cover the modules matching ``pattern`` (fnmatch, ``*`` crosses folders)."""

    pattern: str
    tests: tuple[str, ...]
    # Extra pytest arguments for these runs, e.g. one database of two: the rule is the same.
    pytest_args: tuple[str, ...] = ()


SQLITE_ONLY = ("-k", "not postgresql")
NO_RANDOM_SEQUENCES = ("-k", "not random_sequences")

# First match wins. A pure core is held to its own tests (they run in milliseconds); the service
# tests that reach the same rules through HTTP and the bus take a second each, which would make a
# module of 600 mutants an hour's run. Service tests only where no pure test reaches the rule.
COVERING: tuple[Covering, ...] = (
    # The protocol's small modules, each against its own pure tests: the whole of tests/protocol
    # reaches some of them from hundreds of cases (every job parsed), minutes a mutant.
    Covering("libs/protocol/wording.py", ("tests/protocol/test_wording_and_errors.py",)),
    Covering("libs/protocol/errors.py", ("tests/protocol/test_wording_and_errors.py",)),
    Covering("libs/protocol/jsvalues.py", ("tests/protocol/test_jsvalues.py",)),
    Covering("libs/protocol/gpu_enforcement.py", ("tests/protocol/test_declarations.py",)),
    Covering("libs/protocol/simulated_gpus.py", ("tests/protocol/test_declarations.py",)),
    Covering("libs/protocol/subjects.py", ("tests/protocol/test_subjects.py",)),
    Covering("libs/protocol/telemetry.py", ("tests/protocol/test_subjects.py",)),
    Covering("libs/protocol/fencing.py", ("tests/protocol/test_fencing.py",)),
    Covering(
        "libs/protocol/gpu_share.py",
        ("tests/protocol/test_gpu_share.py", "tests/protocol/test_gpu_share_rules.py"),
    ),
    Covering("libs/protocol/pinning.py", ("tests/protocol/test_pinning.py",)),
    Covering(
        "libs/protocol/rendering.py",
        ("tests/protocol/test_rendering.py", "tests/protocol/test_rendering_rules.py"),
    ),
    Covering(
        "libs/protocol/templating.py",
        ("tests/protocol/test_rendering.py", "tests/protocol/test_templating.py"),
    ),
    Covering(
        "libs/protocol/yamlsource.py",
        # Not test_validation.py: each of its cases parses whole jobs, seconds a mutant.
        ("tests/protocol/test_yaml_depth.py", "tests/protocol/test_yaml_source.py"),
    ),
    Covering(
        "libs/protocol/jobs.py",
        (
            "tests/protocol/test_validation.py",
            "tests/protocol/test_validation_cross_fields.py",
            "tests/protocol/test_gpu_share.py",
            "tests/protocol/test_limits.py",
            "tests/protocol/test_job_model.py",
        ),
    ),
    Covering(
        "libs/protocol/events.py", ("tests/contracts/test_events.py", "tests/contracts/test_event_rules.py")
    ),
    Covering("libs/protocol/catalog/*", ("tests/contracts/test_events.py",)),
    Covering("services/marketplace/core/starters.py", ("tests/marketplace/test_core_starters.py",)),
    Covering(
        "libs/protocol/*",
        ("tests/protocol", "tests/contracts", "tests/marketplace/test_starter_templates.py"),
        ("--ignore=tests/protocol/test_cli_validate.py",),
    ),
    # The containers' pure rules against their own cases (test_core_property.py, reached by the
    # glob below, draws whole jobs: seconds a mutant for rules these cases state).
    Covering(
        "services/orchestrator/core/containers.py",
        ("tests/orchestrator/test_core_containers.py", "tests/orchestrator/test_storage_groups.py"),
    ),
    # The bubblewrap runner's translation of the engine's configuration, and its seccomp compiler.
    Covering(
        "services/orchestrator/core/image_sandboxes.py", ("tests/orchestrator/test_core_image_sandboxes.py",)
    ),
    Covering(
        "services/orchestrator/adapters/seccomp_filters.py", ("tests/orchestrator/test_seccomp_filters.py",)
    ),
    # The limits' pure tests; the service tests that apply them (tests/security) need root.
    Covering("services/orchestrator/core/limits.py", ("tests/orchestrator/test_core_limits.py",)),
    # Deciders without test_core_property.py: its hypothesis cases (300 examples) take about 10 s
    # a mutant, some 2.5 h for the module's 927; its own example tests state the same rules.
    Covering(
        "services/orchestrator/core/deciders.py",
        (
            "tests/orchestrator/test_core_deciders.py",
            "tests/orchestrator/test_core_inputs.py",
            "tests/orchestrator/test_core_policies.py",
            "tests/orchestrator/test_core_recovery.py",
            "tests/orchestrator/test_core_retry_counts.py",
            "tests/orchestrator/test_core_states.py",
            "tests/orchestrator/test_large_job_state.py",
        ),
    ),
    Covering(
        "services/orchestrator/core/*",
        (
            "tests/orchestrator/test_core_containers.py",
            "tests/orchestrator/test_core_deciders.py",
            "tests/orchestrator/test_core_frameworks.py",
            "tests/orchestrator/test_core_inputs.py",
            "tests/orchestrator/test_core_policies.py",
            "tests/orchestrator/test_core_property.py",
            "tests/orchestrator/test_core_recovery.py",
            "tests/orchestrator/test_core_retry_counts.py",
            "tests/orchestrator/test_core_states.py",
            "tests/orchestrator/test_large_job_state.py",
        ),
    ),
    Covering(
        "services/orchestrator/adapters/isolation.py",
        # Its own cases (the root platform's service tests in tests/security take a second and
        # more each: an hour for the module's mutants).
        (
            "tests/orchestrator/test_task_users.py",
            "tests/orchestrator/test_tenant_uids.py",
            "tests/orchestrator/test_containment_line.py",
        ),
    ),
    # The cgroup files over fake v1 and v2 hierarchies (what is detected and said, each file
    # written, what a task's memory group saw), the node's reserve and the containment line;
    # tests/security applies the same limits to real tasks (root, a second and more each).
    Covering(
        "services/orchestrator/adapters/confinement.py",
        (
            "tests/orchestrator/test_confinement_fakes.py",
            "tests/orchestrator/test_cgroup_files.py",
            "tests/orchestrator/test_node_reserve.py",
            "tests/orchestrator/test_containment_line.py",
        ),
    ),
    # The engine's commands against a fake engine that records each call (each argument, the
    # environment, the messages), and the bundles runc
    # is given; tests/e2e/test_job_images.py runs real images (Podman, minutes).
    Covering(
        "services/orchestrator/adapters/engines.py",
        (
            "tests/orchestrator/test_engine_calls.py",
            "tests/orchestrator/test_engines.py",
            "tests/orchestrator/test_core_bundles.py",
            "tests/orchestrator/test_bundling.py",
        ),
    ),
    # The bus's adapters over an in-memory bucket (their retry paths, milliseconds a test), then
    # against a real nats-server (a fresh one per test: a second or so each).
    Covering(
        "libs/backbone/kv.py",
        (
            "tests/backbone/test_kv_retries.py",
            "tests/backbone/test_kv.py",
            "tests/backbone/test_kv_cluster.py",
            "tests/backbone/test_errors_by_type.py",
        ),
    ),
    Covering(
        "libs/backbone/leasing.py",
        (
            "tests/backbone/test_lease_retries.py",
            "tests/backbone/test_leasing.py",
            "tests/orchestrator/test_leaders.py",
            "tests/rest/test_projection_leader.py",
        ),
    ),
    Covering(
        "libs/backbone/fencing.py",
        (
            "tests/backbone/test_fence_record.py",
            "tests/services/test_scheduler_fencing.py",
            "tests/rest/test_fenced_decisions.py",
            "tests/orchestrator/test_leaders.py",
        ),
    ),
    # Webhook deliveries: over fakes first (the failing mark and its alert, the records' writes,
    # redelivery, deletion, lanes, the checking resolver, each attempt and the retry policy; each
    # lane's consumers and loops, the start, the watch, a new subscription's id and start, the
    # handler's filter; milliseconds a test), then their records
    # in KV, and receivers met over HTTP by the gateway.
    Covering(
        "services/events/adapters/delivering.py",
        (
            "tests/events/test_delivery_fakes.py",
            "tests/events/test_delivery_policy.py",
            "tests/events/test_delivery_lanes.py",
            "tests/events/test_delivery_records.py",
            "tests/events/test_webhook_receivers.py",
            "tests/events/test_webhooks.py",
        ),
    ),
    # The scheduler core, each module against the pure tests that reach it; the random
    # schedule/release sequences (hypothesis, 60 to 100 examples) are left out: seconds a
    # mutant, for rules the example tests state. No simulator or trace replay either.
    Covering(
        "services/scheduler/core/hived/policy.py",
        (
            "tests/scheduler/test_hived_policy.py",
            "tests/scheduler/test_hived_policy_rules.py",
            "tests/scheduler/test_hived_shares.py",
            "tests/scheduler/test_reconfigure.py",
            "tests/unit/test_scheduler_queueing.py",
            "tests/unit/test_scheduler_refusals.py",
        ),
        NO_RANDOM_SEQUENCES,
    ),
    Covering(
        "services/scheduler/core/hived/*",
        (
            "tests/scheduler/test_hived_core.py",
            "tests/scheduler/test_hived_defaults.py",
            "tests/scheduler/test_hived_share_hosts.py",
            "tests/scheduler/test_hived_config_skus.py",
            "tests/scheduler/test_hived_replay.py",
            "tests/scheduler/test_hived_algorithm_rules.py",
            "tests/scheduler/test_hived_pod_specs.py",
            "tests/scheduler/test_cell_list.py",
            "tests/scheduler/test_hived_policy.py",
            "tests/scheduler/test_hived_policy_rules.py",
            "tests/scheduler/test_hived_shares.py",
            "tests/scheduler/test_reconfigure.py",
        ),
        NO_RANDOM_SEQUENCES,
    ),
    Covering(
        "services/scheduler/core/gpu_share.py",
        ("tests/scheduler/test_gpu_share.py", "tests/scheduler/test_hived_shares.py"),
        NO_RANDOM_SEQUENCES,
    ),
    Covering(
        "services/scheduler/core/queueing.py",
        (
            "tests/scheduler/test_queueing_rules.py",
            "tests/unit/test_scheduler_queueing.py",
            "tests/unit/test_scheduler_refusals.py",
            "tests/unit/test_scheduler_status_while_rebuilding.py",
        ),
    ),
    Covering(
        "services/scheduler/core/[pru]*.py",  # placements.py, reconfigure.py, user_limits.py
        (
            "tests/scheduler/test_reconfigure.py",
            "tests/scheduler/test_reconfigure_rules.py",
            "tests/scheduler/test_user_limits.py",
            "tests/scheduler/test_hived_shares.py",
        ),
        NO_RANDOM_SEQUENCES,
    ),
    Covering("services/scheduler/core/vc_status.py", ("tests/scheduler/test_vc_status.py",)),
    Covering(
        "services/scheduler/core/*",
        (
            "tests/scheduler",
            "tests/unit/test_scheduler_queueing.py",
            "tests/unit/test_scheduler_refusals.py",
            "tests/unit/test_scheduler_status_while_rebuilding.py",
        ),
        ("--ignore=tests/scheduler/test_hived_replay.py", "--ignore=tests/scheduler/test_simulator.py"),
    ),
    Covering("runtime/environment.py", ("tests/runtime/test_environment.py",)),
    Covering(
        "services/marketplace/core/*",
        (
            "tests/marketplace/test_core.py",
            "tests/marketplace/test_core_fields.py",
            "tests/marketplace/test_core_jobs.py",
            "tests/marketplace/test_starter_templates.py",
        ),
    ),
    Covering(
        "services/marketplace/adapters/storing.py",
        # The store met directly on SQLite; the service tests (test_rights.py, test_items.py) reach
        # the same rules through HTTP and the bus, a second and more each.
        ("tests/marketplace/test_store.py",),
    ),
    Covering(
        "services/events/core/*",
        (
            "tests/events/test_core.py",
            "tests/events/test_core_rules.py",
            "tests/events/test_core_webhooks.py",
        ),
    ),
    # The pure tests only: test_storages.py and test_node_sizes.py also hold service tests (a
    # NATS server, the API), 150 s for the pair, which every module's run would pay twice.
    Covering(
        "services/rest/core/*",
        (
            "tests/rest/test_views.py",
            "tests/rest/test_task_table.py",
            "tests/rest/test_storages.py::test_a_bad_storages_file_names_the_entry_and_the_fix",
            "tests/rest/test_storages.py::test_storage_defaults_fill_what_an_entry_leaves_out",
            "tests/rest/test_node_sizes.py::test_a_task_is_judged_against_the_largest_node_of_each_resource",
            "tests/rest/test_node_sizes.py::test_a_gpu_task_on_a_cluster_without_gpus_is_told_there_are_none",
            "tests/rest/test_node_sizes.py::test_nothing_is_judged_without_nodes",
            "tests/rest/test_core_rules.py",
            "tests/rest/test_core_storages.py",
            "tests/rest/test_core_kubernetes.py",
            "tests/rest/test_core_job_events.py",
            "tests/rest/test_core_views.py",
        ),
    ),
    Covering(
        "services/alerter/core/*",
        (
            "tests/alerter/test_core_config.py",
            "tests/alerter/test_core_engine.py",
            "tests/alerter/test_core_restart.py",
            "tests/alerter/test_core_expressions.py",
            "tests/alerter/test_core_payloads.py",
            "tests/alerter/test_core_config_rules.py",
            "tests/alerter/test_core_evaluating.py",
            "tests/alerter/test_core_dispatching.py",
            "tests/alerter/test_core_observing.py",
            "tests/alerter/test_core_engine_reading.py",
        ),
    ),
    Covering("services/portal/core/*", ("tests/portal/test_core.py", "tests/portal/test_core_rules.py")),
)

KILLED = {"killed", "timeout", "segfault"}
# mutmut's verdicts by the exit code of a mutant's test run (mutmut/stats.py).
VERDICTS = {1: "killed", 3: "killed", 0: "survived", 5: "no tests", 33: "no tests", 34: "skipped"}
VERDICTS |= {36: "timeout", -24: "timeout", 24: "timeout", 152: "timeout", 255: "timeout"}
VERDICTS |= {-11: "segfault", -9: "segfault"}


@dataclass(frozen=True)
class Outcome:
    module: str
    killed: int
    total: int
    unchecked: int
    seconds: float
    survivors: tuple[str, ...]
    error: str = ""
    notes: tuple[str, ...] = ()

    def line(self) -> str:
        percent = 100.0 * self.killed / self.total if self.total else 100.0
        return f"mutants: killed {self.killed} of {self.total} ({percent:.1f}%) in {self.module}"


def resolve(patterns: list[str]) -> list[str]:
    """Files to mutate, in order, each once: a file, a folder (its .py files) or a glob."""
    found: list[str] = []
    for pattern in patterns:
        pattern = pattern.rstrip("/")
        matches = sorted(ROOT.glob(pattern)) if any(c in pattern for c in "*?[") else [ROOT / pattern]
        if not any(path.exists() for path in matches):
            raise SystemExit(f"mutants: nothing at {pattern} (modules move: check the path)")
        for path in matches:
            files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
            for file in files:
                module = file.relative_to(ROOT).as_posix()
                if module not in found and "__pycache__" not in module and _has_functions(file):
                    found.append(module)
    return found


def _has_functions(file: Path) -> bool:
    text = file.read_text(encoding="utf-8")
    return "def " in text


def covering(module: str) -> Covering:
    for entry in COVERING:
        if fnmatch.fnmatch(module, entry.pattern):
            return entry
    raise SystemExit(f"mutants: no tests named for {module}; add it to COVERING in bench/mutants.py")


def _toml_list(values: list[str]) -> str:
    return "[" + ", ".join(json.dumps(value) for value in values) + "]"


def present(tests: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """The covering tests this tree holds, and those it lacks (an older tree's tests, say)."""
    held = [test for test in tests if (ROOT / test.split("::")[0]).exists()]
    return held, [test for test in tests if test not in held]


def prepare(module: str, entry: Covering, timeout_per_test: int) -> Path:
    """A snapshot of the sources and tests with mutmut's configuration for this module."""
    workspace = WORK / module.replace("/", "__").removesuffix(".py")
    if workspace.exists():
        shutil.rmtree(workspace)
    (WORK / (workspace.name + ".survivors.txt")).unlink(missing_ok=True)
    workspace.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "node_modules", "*.pyc")
    for name in (*SOURCES, "tests"):
        shutil.copytree(ROOT / name, workspace / name, ignore=ignore, symlinks=True)
    pytest_args = [
        "-p",
        "no:cacheprovider",
        f"--timeout={timeout_per_test}",
        *entry.pytest_args,
    ]
    configure(workspace, module, present(entry.tests)[0], pytest_args)
    return workspace


def configure(workspace: Path, module: str, tests: list[str], pytest_args: list[str]) -> None:
    config = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    config += (
        "\n[tool.mutmut]\n"
        f"source_paths = {_toml_list(list(SOURCES))}\n"
        f"only_mutate = {_toml_list([module])}\n"
        f"pytest_add_cli_args_test_selection = {_toml_list(tests)}\n"
        f"pytest_add_cli_args = {_toml_list(pytest_args)}\n"
        "use_git_change_detection = false\n"
    )
    (workspace / "pyproject.toml").write_text(config, encoding="utf-8")


def failing_tests(
    workspace: Path, tests: list[str], pytest_args: list[str], env: dict[str, str], timeout: float
) -> list[str]:
    """The selected tests that fail on the unmutated code here (mutmut stops at a red clean run):
    a collection error names its file, any other failure its test."""
    command = [sys.executable, "-m", "pytest", "-q", "-rfE", "--no-header", "--continue-on-collection-errors"]
    shown = subprocess.run(
        [*command, *pytest_args, *tests],
        cwd=workspace,
        capture_output=True,
        text=True,
        env=env,
        timeout=max(timeout, 1),
        check=False,
        start_new_session=True,
    )
    failing: list[str] = []
    # The summary's rows only: a captured log line can start with "ERROR " too.
    rows = shown.stdout.splitlines()
    summary = [i for i, row in enumerate(rows) if "short test summary info" in row]
    for row in rows[summary[-1] + 1 :] if summary else []:
        for verdict in ("FAILED ", "ERROR "):
            if row.startswith(verdict):
                node = row.removeprefix(verdict).split(" - ")[0].strip()
                if node and node not in failing:
                    failing.append(node)
    return failing


def verdicts(workspace: Path, module: str) -> dict[str, str]:
    meta = workspace / "mutants" / (module + ".meta")
    if not meta.exists():
        return {}
    codes = json.loads(meta.read_text(encoding="utf-8"))["exit_code_by_key"]
    return {
        name: ("not checked" if code is None else VERDICTS.get(code, "suspicious"))
        for name, code in codes.items()
    }


def mutmut_command(named: str | None) -> list[str]:
    if named:
        return [named]
    return [str(MUTMUT)] if MUTMUT.exists() else [sys.executable, "-m", "mutmut"]


def run_module(
    module: str,
    *,
    jobs: int,
    timeout: int,
    timeout_per_test: int,
    log: Path,
    mutmut: str | None = None,
    deselect_failing: bool = False,
) -> Outcome:
    entry = covering(module)
    tests, missing = present(entry.tests)
    workspace = prepare(module, entry, timeout_per_test)
    started = time.monotonic()
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    # The snapshot's tests read the reference data beside this checkout (HiveD's own cases).
    anchors = ROOT.parent / "shared" / "anchors"
    if anchors.is_dir():
        env.setdefault("PAI_ANCHORS", str(anchors))
    notes = [f"{len(missing)} covering test file(s) not in this tree: {' '.join(missing)}"] if missing else []
    if not tests:
        return Outcome(module, 0, 0, 0, 0.0, (), "no covering test in this tree", tuple(notes))
    if deselect_failing:
        pytest_args = ["-p", "no:cacheprovider", f"--timeout={timeout_per_test}", *entry.pytest_args]
        try:
            failing = failing_tests(workspace, tests, pytest_args, env, timeout)
        except subprocess.TimeoutExpired:
            return Outcome(
                module, 0, 0, 0, time.monotonic() - started, (), "the clean run outlasted the limit"
            )
        if failing:
            notes.append(f"{len(failing)} failing on the clean code, left out: {' '.join(failing)}")
            pytest_args += [
                f"--ignore={node}" if "::" not in node else f"--deselect={node}" for node in failing
            ]
            configure(workspace, module, tests, pytest_args)
    error = ""
    with log.open("w", encoding="utf-8") as out:
        for note in notes:
            print(f"mutants: {note}", file=out, flush=True)
        process = subprocess.Popen(
            [*mutmut_command(mutmut), "run", "--max-children", str(jobs)],
            cwd=workspace,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        try:
            code = process.wait(timeout=max(timeout - (time.monotonic() - started), 1))
            if code:
                error = f"mutmut exited {code}; see {log.relative_to(ROOT)}"
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            error = f"stopped at the limit of {timeout} s"
    seconds = time.monotonic() - started
    found = verdicts(workspace, module)
    killed = sum(1 for verdict in found.values() if verdict in KILLED)
    unchecked = sum(1 for verdict in found.values() if verdict == "not checked")
    survivors = tuple(sorted(name for name, verdict in found.items() if verdict not in KILLED))
    if survivors:
        write_survivors(workspace, module, found, survivors)
    return Outcome(module, killed, len(found), unchecked, seconds, survivors, error, tuple(notes))


# Run in the workspace (mutmut reads its configuration from the current folder when imported):
# prints each named mutant's diff, separated by NUL bytes; one interpreter for all of them.
SHOW = """
import sys
from mutmut.mutation.diff_apply import get_diff_for_mutant
for name in sys.argv[2:]:
    try:
        print(get_diff_for_mutant(name, path=sys.argv[1]), end="\\0")
    except Exception as exc:
        print(f"(no diff: {exc})", end="\\0")
"""


def write_survivors(workspace: Path, module: str, found: dict[str, str], survivors: tuple[str, ...]) -> None:
    report = WORK / (workspace.name + ".survivors.txt")
    # Mutants a run stopped before checking are named without their diffs (a diff costs a parse of
    # the module; a run cut short can leave hundreds).
    unchecked = [name for name in survivors if found[name] == "not checked"]
    survivors = tuple(name for name in survivors if found[name] != "not checked")
    shown = subprocess.run(
        [sys.executable, "-c", SHOW, module, *survivors],
        cwd=workspace,
        capture_output=True,
        text=True,
        check=False,
    )
    diffs = shown.stdout.split("\0")
    parts = [f"# {module}: {len(survivors) + len(unchecked)} not killed\n"]
    for index, name in enumerate(survivors):
        diff = diffs[index].strip() if index < len(diffs) else shown.stderr.strip()[-500:]
        parts.append(f"## {name}: {found[name]}\n{diff}\n")
    if unchecked:
        parts.append(f"## not checked before the limit ({len(unchecked)}): " + " ".join(unchecked) + "\n")
    report.write_text("\n".join(parts), encoding="utf-8")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("modules", nargs="*", help="files, folders or globs (default: the default set)")
    parser.add_argument("--jobs", type=int, default=2, help="mutants tested at once per module (default 2)")
    parser.add_argument("--parallel", type=int, default=1, help="modules run at once (default 1)")
    parser.add_argument("--timeout", type=int, default=1200, help="wall-clock seconds per module")
    parser.add_argument("--timeout-per-test", type=int, default=60, help="pytest-timeout per test")
    parser.add_argument(
        "--mutmut",
        default=os.environ.get("PAI_MUTMUT"),
        help="mutmut's command (default: the script beside this Python, else python -m mutmut)",
    )
    parser.add_argument(
        "--deselect-failing",
        action="store_true",
        help="run the covering tests once first and leave out those failing on the clean code "
        "(mutmut refuses a red clean run): each is named in the module's log and the summary",
    )
    parser.add_argument("--summary", type=Path, help="also write the outcomes to this JSON file")
    parser.add_argument("--list", action="store_true", help="print the modules and their tests, run nothing")
    args = parser.parse_args(argv)
    modules = resolve(args.modules or list(DEFAULT))
    if args.list:
        for module in modules:
            print(module, " ".join(covering(module).tests))
        return 0
    WORK.mkdir(exist_ok=True)

    def one(module: str) -> Outcome:
        log = WORK / (module.replace("/", "__").removesuffix(".py") + ".log")
        outcome = run_module(
            module,
            jobs=args.jobs,
            timeout=args.timeout,
            timeout_per_test=args.timeout_per_test,
            log=log,
            mutmut=args.mutmut,
            deselect_failing=args.deselect_failing,
        )
        notes = [f"{outcome.seconds:.0f} s", *outcome.notes]
        if outcome.unchecked:
            notes.append(f"{outcome.unchecked} not checked")
        if outcome.error:
            notes.append(outcome.error)
        if outcome.survivors:
            notes.append(f"survivors in mutants/{log.name.removesuffix('.log')}.survivors.txt")
        print(f"{outcome.line()}  [{'; '.join(notes)}]", flush=True)
        return outcome

    with ThreadPoolExecutor(max_workers=max(args.parallel, 1)) as pool:
        outcomes = list(pool.map(one, modules))
    print()
    for outcome in outcomes:
        print(outcome.line())
    if args.summary:
        args.summary.write_text(
            json.dumps([asdict(outcome) for outcome in outcomes], indent=1), encoding="utf-8"
        )
    return 1 if any(outcome.error and not outcome.total for outcome in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
