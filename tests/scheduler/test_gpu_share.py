"""GPU-sharing placement: every policy places fractions and whole GPUs, releases exactly, and the
inflation experiment reports what `pai sim --inflate` promises."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pai.cli.main import app
from services.scheduler.core.gpu_share import (
    DEFAULT_POLICY,
    MILLI,
    POLICIES,
    Binding,
    ShareConfigError,
    ShareDemand,
    ShareNode,
    SharePlacer,
    typical_mix,
)
from services.scheduler.sim.inflation import (
    InflationError,
    inflated_arrivals,
    load_demands,
    simulate_inflation,
)

NODES = [
    ShareNode("a", 32_000, 131_072, 2, "V100"),
    ShareNode("b", 32_000, 131_072, 2, "V100"),
    ShareNode("t", 8_000, 65_536, 1, "T4"),
]
HALF = ShareDemand(4_000, 8_192, 1, 500)
WHOLE = ShareDemand(4_000, 8_192, 1, 1000)
MIX = typical_mix([HALF, HALF, WHOLE, ShareDemand(2_000, 1_024, 0, 0)])


@pytest.mark.parametrize("policy", POLICIES)
def test_every_policy_places_two_halves_per_gpu_and_releases_exactly(policy: str) -> None:
    placer = SharePlacer(NODES, policy, MIX, seed=1)
    before = (placer.cpu.copy(), placer.mem.copy(), placer.gpu.copy())
    bound: list[Binding] = []
    for _ in range(10):  # 5 GPUs hold 10 halves
        b = placer.choose(HALF)
        assert b is not None
        assert len(b.devices) == 1
        assert b.gpu_milli == 500
        placer.bind(b, HALF)
        bound.append(b)
    assert placer.allocated_gpu_milli == 5 * MILLI
    assert placer.choose(HALF) is None  # every device is full
    for b in bound:
        placer.release(b, HALF)
    assert (placer.cpu == before[0]).all()
    assert (placer.mem == before[1]).all()
    assert (placer.gpu == before[2]).all()


@pytest.mark.parametrize("policy", ["fgd", DEFAULT_POLICY, "bestfit", "gpupacking"])
def test_a_half_joins_the_half_used_device_rather_than_opening_a_new_one(policy: str) -> None:
    placer = SharePlacer(NODES[:1], policy, MIX, seed=3)
    placer.bind(Binding(0, (1,), 500), HALF)
    b = placer.choose(HALF)
    assert b == Binding(0, (1,), 500)


def test_whole_gpus_and_models_are_respected() -> None:
    placer = SharePlacer(NODES, DEFAULT_POLICY, MIX, seed=0)
    two = ShareDemand(1_000, 1_024, 2, 1000, models=("V100",))
    b = placer.choose(two)
    assert b is not None
    assert placer.names[b.node] in {"a", "b"}
    assert len(b.devices) == 2
    t4 = ShareDemand(1_000, 1_024, 1, 300, models=("T4",))
    b = placer.choose(t4)
    assert b is not None
    assert placer.names[b.node] == "t"
    assert placer.choose(ShareDemand(1_000, 1_024, 2, 1000, models=("T4",))) is None


def test_cpu_and_memory_limit_a_node_even_with_free_gpus() -> None:
    placer = SharePlacer([ShareNode("n", 4_000, 8_192, 2, "V100")], DEFAULT_POLICY, MIX)
    assert placer.choose(ShareDemand(5_000, 1, 1, 100)) is None
    assert placer.choose(ShareDemand(1_000, 9_000, 1, 100)) is None


def test_an_unknown_policy_names_the_allowed_ones() -> None:
    with pytest.raises(ShareConfigError, match="fragpack"):
        SharePlacer(NODES, "tetris")


def test_the_typical_mix_covers_most_tasks_with_frequencies_summing_to_one() -> None:
    demands = [HALF] * 60 + [WHOLE] * 36 + [ShareDemand(1, 1, 1, 100)] * 4
    mix = typical_mix(demands)
    assert [d.gpu_milli for d, _ in mix] == [500, 1000]
    assert sum(p for _, p in mix) == pytest.approx(1.0)


def test_inflation_reaches_the_target_without_passing_it() -> None:
    demands = [HALF, WHOLE, ShareDemand(1_000, 1, 0, 0)]
    arrivals = inflated_arrivals(demands, 10 * MILLI, 1.3, seed=5)
    total = sum(d.total_gpu_milli for d in arrivals)
    assert 13 * MILLI - MILLI < total <= 13 * MILLI
    assert arrivals.count(WHOLE) >= 1
    assert arrivals.count(HALF) >= 1


NODE_CSV = (
    "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,8,G2\nn1,64000,262144,8,G2\nn2,96000,393216,2,T4\n"
)
POD_CSV = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
    "p0,4000,8192,1,500,\np1,8000,8192,1,1000,\np2,12000,16384,2,1000,\n"
    "p3,3000,4096,1,810,\np4,16000,32768,0,0,\np5,4000,8192,1,230,T4\n"
)


def _files(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "nodes.csv").write_text(NODE_CSV)
    (tmp_path / "pods.csv").write_text(POD_CSV)
    return tmp_path / "nodes.csv", tmp_path / "pods.csv"


def test_cli_runs_the_inflation_experiment_and_reports_the_promised_keys(tmp_path: Path) -> None:
    nodes, pods = _files(tmp_path)
    args = ["sim", "--cluster", str(nodes), "--trace", str(pods), "--inflate", "1.3", "--seed", "7", "--json"]
    result = CliRunner().invoke(app, [*args, "--policy", "fgd"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["policy"] == "fgd"
    assert report["total_gpus"] == 18
    assert sorted(map(int, report["allocation_ratio"])) == list(range(131))
    assert 0 <= report["unallocated_gpus_end"] <= report["unallocated_gpus_at_100"] <= 18
    # Without --policy the platform's own policy runs; the same seed repeats exactly.
    default = json.loads(CliRunner().invoke(app, args).output)
    assert default["policy"] == DEFAULT_POLICY
    assert default == json.loads(CliRunner().invoke(app, args).output) | {
        "wall_time_s": default["wall_time_s"]
    }


def test_cli_refuses_an_unknown_policy_naming_the_choices(tmp_path: Path) -> None:
    nodes, pods = _files(tmp_path)
    result = CliRunner().invoke(
        app, ["sim", "--cluster", str(nodes), "--trace", str(pods), "--inflate", "1.3", "--policy", "tetris"]
    )
    assert result.exit_code == 2
    assert "bestfit" in result.output
    assert "fragpack" in result.output


def test_a_fraction_of_several_gpus_is_refused_with_the_line(tmp_path: Path) -> None:
    (tmp_path / "bad.csv").write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1000,1,2,500\n")
    with pytest.raises(InflationError, match=r"bad.csv:2: .*num_gpu 1"):
        load_demands(tmp_path / "bad.csv")
    nodes, _ = _files(tmp_path)
    with pytest.raises(InflationError, match="--inflate"):
        simulate_inflation(nodes, tmp_path / "bad.csv", 0.5)
