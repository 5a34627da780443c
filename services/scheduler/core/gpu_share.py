"""Where a task that asks for a fraction of a GPU (or whole GPUs) goes: the sharing placement policies.

One code path serves the scheduler and `pai sim`: a `SharePlacer` holds every node's free CPU,
memory and per-device GPU thousandths in numpy arrays, filters the nodes a task fits on, scores
them with the cluster's policy and records the binding. The policies are the six of the FGD paper
(Weng et al., "Beware of Fragmentation", USENIX ATC'23), defined as its authors' simulator
defines them, and the platform's own:

- ``random``: any node that fits, any device that fits.
- ``dotprod``: Tetris' alignment of (free CPU, free GPU) with the request, both scaled by the
  largest node (128 cores, 8 GPUs); the least aligned node wins.
- ``gpuclustering``: nodes already running tasks of the same GPU kind (share, 1, 2, 4, 8 GPUs).
- ``gpupacking``: partly used devices first, then free devices of a used node, then free nodes.
- ``bestfit``: the least free CPU and GPU left after placing (weights 0.5/0.5, min-max scaled).
- ``fgd``: fragmentation gradient descent: the node and device whose placement grows the
  expected fragmentation of the node the least, scores squashed to integers 0..100 by a sigmoid
  as the kube-scheduler framework needs.
- ``fragpack`` (the platform's default): FGD's fragmentation growth, scored on a coarser scale
  (the sigmoid over growth in units of two GPUs, `FRAGPACK_SCALE`), so more nodes score equal and
  the first of the fixed order wins (tighter packing); a share takes the device whose exact growth
  is least (the fullest that fits among equals); a task without GPUs goes, among the nodes
  scored equal, to the one with the most CPU to spare for the GPUs it has
  left (CPU beyond about 11 cores per free GPU, what the expected GPU task brings), so GPU nodes
  keep the cores their GPU tasks will need.

Equal scores go to the first node of one shuffled order, fixed per seed, as in the authors'
simulator; this consistency matters: FGD with a fresh random pick per task leaves about twice as
many GPUs unallocated, and comparing FGD's measure exactly (no integer scores) leaves about 20%
more (bench/RESULTS.md).

The fragmentation measure (FGD's): for the expected task mix (the typical tasks: the most common
task shapes covering 95% of tasks, with their frequencies), a node's fragmentation is the free GPU
capacity the average task cannot use there: all of it when the task does not fit the node, else
the free thousandths on devices too small for it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

MILLI = 1000
MAX_GPUS = 8
MAX_SPEC_CPU = 128_000  # thousandths of a core: the largest node, the scale of dotprod and bestfit
MAX_SPEC_GPU = 8_000
MAX_SCORE = 100
TYPICAL_COVERAGE = 0.95
FRAGPACK_SCALE = 2.0  # fragpack scores a node's fragmentation growth in units of 2 GPUs, FGD of 1

POLICIES = ("random", "dotprod", "gpuclustering", "gpupacking", "bestfit", "fgd", "fragpack")
DEFAULT_POLICY = "fragpack"

IntArray = npt.NDArray[Any]
FloatArray = npt.NDArray[Any]


class ShareConfigError(ValueError):
    """A placement policy or node list that cannot be used; the text names the field."""


@dataclass(frozen=True)
class ShareNode:
    """A node as sharing sees it: CPU in thousandths of a core, memory in MiB, whole devices."""

    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str = ""


@dataclass(frozen=True)
class ShareDemand:
    """One task's need: `gpus` devices with `gpu_milli` thousandths of each (< 1000 only with 1 GPU)."""

    cpu_milli: int
    memory_mib: int
    gpus: int
    gpu_milli: int
    models: tuple[str, ...] = ()

    @property
    def total_gpu_milli(self) -> int:
        return self.gpus * self.gpu_milli if self.gpus else 0

    @property
    def shares_a_gpu(self) -> bool:
        return self.gpus == 1 and 0 < self.gpu_milli < MILLI

    @property
    def kind(self) -> int:
        """GPU kind as gpuclustering groups tasks: 0 none, 1 shared, else 1 + devices."""
        if not self.gpus or not self.gpu_milli:
            return 0
        return 1 if self.shares_a_gpu else 1 + min(self.gpus, MAX_GPUS)

    def shape(self) -> tuple[int, int, int, tuple[str, ...]]:
        return (
            self.cpu_milli,
            self.gpu_milli if self.gpus else 0,
            self.gpus if self.gpu_milli else 0,
            self.models,
        )


@dataclass(frozen=True)
class Binding:
    """Where a demand went: the node's index and the devices with the thousandths taken on each."""

    node: int
    devices: tuple[int, ...]
    gpu_milli: int

    def shares(self) -> tuple[tuple[int, int], ...]:
        return tuple((d, self.gpu_milli) for d in self.devices)


def typical_mix(
    demands: Iterable[ShareDemand], coverage: float = TYPICAL_COVERAGE
) -> list[tuple[ShareDemand, float]]:
    """The commonest task shapes covering `coverage` of the tasks, with frequencies summing to 1."""
    counts: Counter[tuple[int, int, int, tuple[str, ...]]] = Counter(d.shape() for d in demands)
    total = sum(counts.values())
    if not total:
        return []
    # Most frequent first; equal counts keep a fixed order (larger shapes first) so runs repeat.
    ordered = sorted(counts.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
    chosen: list[tuple[tuple[int, int, int, tuple[str, ...]], int]] = []
    covered = 0
    for shape, n in ordered:
        if covered >= coverage * total:
            break
        chosen.append((shape, n))
        covered += n
    return [
        (ShareDemand(cpu, 0, gpus, milli, models), n / covered) for (cpu, milli, gpus, models), n in chosen
    ]


class _Fragmentation:
    """FGD's expected fragmentation of node states, vectorised over many states at once.

    F(state) = P * free - sum over typical GPU tasks t that fit: p_t * (free on devices with >= m_t),
    which is the same as summing, per typical task, all free capacity when t does not fit and the
    free capacity on too-small devices when it does. Tasks that need no GPU add p_t * free.
    """

    def __init__(self, mix: Sequence[tuple[ShareDemand, float]], models: Sequence[str]) -> None:
        self.total_p = float(sum(p for _, p in mix))
        groups: dict[tuple[int, int, tuple[str, ...]], list[tuple[int, float]]] = {}
        for demand, p in mix:
            if demand.gpus and demand.gpu_milli:
                groups.setdefault((demand.gpu_milli, demand.gpus, demand.models), []).append(
                    (demand.cpu_milli, p)
                )
        self.milli = np.array([g[0] for g in groups], dtype=np.int64)
        self.count = np.array([g[1] for g in groups], dtype=np.int64)
        # Which node models each group may use (an empty model list: any).
        self.access = np.array([[not g[2] or m in g[2] for m in models] for g in groups], dtype=bool).reshape(
            len(groups), len(models)
        )
        # Per group, the CPU each typical task needs and its frequency, padded to one width:
        # p_g(cpu) = sum of the frequencies of the group's tasks whose CPU need is <= cpu.
        width = max((len(v) for v in groups.values()), default=0)
        self.cpu_need = np.full((len(groups), width), np.iinfo(np.int64).max, dtype=np.int64)
        self.cpu_p = np.zeros((len(groups), width), dtype=np.float64)
        for g, entries in enumerate(groups.values()):
            for j, (c, p) in enumerate(entries):
                self.cpu_need[g, j], self.cpu_p[g, j] = c, p

    def __call__(self, cpu: IntArray, gpu: IntArray, model: IntArray) -> FloatArray:
        free = gpu.sum(axis=1).astype(np.float64)
        frag = free * self.total_p
        if not len(self.milli):
            return np.asarray(frag)
        ge = gpu[:, :, None] >= self.milli[None, None, :]  # states x devices x groups
        fits = ge.sum(axis=1) >= self.count[None, :]
        big = (gpu[:, :, None] * ge).sum(axis=1).astype(np.float64)
        fits &= self.access[:, model].T
        p = ((cpu[:, None, None] >= self.cpu_need[None, :, :]) * self.cpu_p[None, :, :]).sum(axis=2)
        frag -= (np.where(fits, big, 0.0) * p).sum(axis=1)
        return np.asarray(frag)


class SharePlacer:
    """Nodes' free resources, a policy that picks a node and devices, and the bindings made."""

    def __init__(
        self,
        nodes: Sequence[ShareNode],
        policy: str = DEFAULT_POLICY,
        mix: Sequence[tuple[ShareDemand, float]] = (),
        seed: int = 0,
    ) -> None:
        if policy not in POLICIES:
            raise ShareConfigError(
                f"placement policy {policy!r} is unknown; choose one of {', '.join(POLICIES)}"
            )
        for node in nodes:
            if not 0 <= node.gpus <= MAX_GPUS:
                raise ShareConfigError(f"node {node.name}: gpus is {node.gpus}; allowed 0..{MAX_GPUS}")
        self.policy = policy
        self.names = [n.name for n in nodes]
        self.models = sorted({n.model for n in nodes})
        n = len(nodes)
        self.cpu_cap = np.array([x.cpu_milli for x in nodes], dtype=np.int64)
        self.cpu = self.cpu_cap.copy()
        self.mem = np.array([x.memory_mib for x in nodes], dtype=np.int64)
        self.gpu_count = np.array([x.gpus for x in nodes], dtype=np.int64)
        self.gpu = np.zeros((n, MAX_GPUS), dtype=np.int64)
        for i, x in enumerate(nodes):
            self.gpu[i, : x.gpus] = MILLI
        self.model = np.array([self.models.index(x.model) for x in nodes], dtype=np.int64)
        self.kinds = np.zeros((n, 2 + MAX_GPUS), dtype=np.int64)  # tasks per GPU kind, for gpuclustering
        self.rng = np.random.default_rng(seed)
        # Equal scores go to the node first in one shuffled order (fixed per seed), as in the FGD
        # authors' simulator, where nodes carry a random prefix and the first in name order wins.
        self.rank = self.rng.permutation(n)
        self.fragmentation = _Fragmentation(mix, self.models)
        gpu_mix = [(d, p) for d, p in mix if d.total_gpu_milli]
        # CPU thousandths the expected GPU task brings per GPU thousandth (about 11 cores per GPU).
        self.cpu_per_gpu = (
            sum(d.cpu_milli * p for d, p in gpu_mix) / sum(d.total_gpu_milli * p for d, p in gpu_mix)
            if gpu_mix
            else 0.0
        )
        self.frag_now = np.zeros(n)
        self._frag_stale = np.ones(n, dtype=bool)  # frag_now is recomputed when next needed
        # FGD scores per task shape, recomputed only for nodes changed since: shape -> (valid, score, device).
        self._fgd_cache: dict[tuple[int, int, int], tuple[npt.NDArray[np.bool_], FloatArray, IntArray]] = {}

    # -- what fits -------------------------------------------------------------------------

    def _model_ok(self, demand: ShareDemand) -> npt.NDArray[np.bool_]:
        if not demand.models:
            return np.ones(len(self.cpu), dtype=bool)
        allowed = [i for i, m in enumerate(self.models) if m in demand.models]
        return np.isin(self.model, allowed)

    def feasible(self, demand: ShareDemand) -> npt.NDArray[np.bool_]:
        ok = (self.cpu >= demand.cpu_milli) & (self.mem >= demand.memory_mib)
        if demand.total_gpu_milli:
            ok &= (self.gpu >= demand.gpu_milli).sum(axis=1) >= demand.gpus
            ok &= self._model_ok(demand)
        return ok

    # -- choosing ----------------------------------------------------------------------------

    def choose(self, demand: ShareDemand) -> Binding | None:
        """The node and devices the policy picks, or None when the demand fits nowhere now."""
        ok = self.feasible(demand)
        idx = np.flatnonzero(ok)
        if not len(idx):
            return None
        if self.policy == "random":
            node = int(idx[self.rng.integers(len(idx))])
            return self._binding(node, demand, pick="random")
        if self.policy in ("fgd", "fragpack"):
            return self._choose_by_fragmentation(demand, idx)
        scores = getattr(self, f"_score_{self.policy}")(demand, idx)
        node = self._argmax(idx, scores)
        return self._binding(node, demand, pick="best")

    def _argmax(self, idx: IntArray, scores: npt.NDArray[np.generic]) -> int:
        best = idx[scores == scores.max()]
        return int(best[np.argmin(self.rank[best])])

    def _binding(self, node: int, demand: ShareDemand, pick: str) -> Binding:
        if not demand.total_gpu_milli:
            return Binding(node, (), 0)
        left = self.gpu[node]
        if demand.shares_a_gpu:
            fit = np.flatnonzero(left >= demand.gpu_milli)
            if pick == "random":
                device = int(fit[self.rng.integers(len(fit))])
            else:  # best fit: the fullest device that still fits, the lowest index among equals
                device = int(fit[np.argmin(left[fit])])
            return Binding(node, (device,), demand.gpu_milli)
        whole = np.flatnonzero(left == MILLI)[: demand.gpus]
        return Binding(node, tuple(int(d) for d in whole), demand.gpu_milli)

    def _score_dotprod(self, demand: ShareDemand, idx: IntArray) -> FloatArray:
        free_gpu = self.gpu[idx].sum(axis=1)
        dot = (self.cpu[idx] / MAX_SPEC_CPU) * (demand.cpu_milli / MAX_SPEC_CPU) + (
            free_gpu / MAX_SPEC_GPU
        ) * (demand.total_gpu_milli / MAX_SPEC_GPU)
        return np.asarray(np.floor(MAX_SCORE * (1 - dot / 2)))

    def _score_gpuclustering(self, demand: ShareDemand, idx: IntArray) -> IntArray:
        kind = demand.kind
        if not kind:
            return np.zeros(len(idx), dtype=np.int64)
        used = (MAX_SCORE // 4) * (MAX_SPEC_GPU - self.gpu[idx].sum(axis=1)) // MAX_SPEC_GPU
        kinds = self.kinds[idx, 1:]
        present = kinds > 0
        same = kinds[:, kind - 1] > 0
        only = same & (present.sum(axis=1) == 1)
        empty = ~present.any(axis=1)
        band = np.where(only, 3, np.where(same, 2, np.where(empty, 1, 0)))
        return np.asarray(used + band * (MAX_SCORE // 4))

    def _score_gpupacking(self, demand: ShareDemand, idx: IntArray) -> IntArray:
        if not demand.total_gpu_milli:
            return np.zeros(len(idx), dtype=np.int64)
        gpu = self.gpu[idx]
        whole = (gpu == MILLI).sum(axis=1)
        free_node = whole == self.gpu_count[idx]
        ordered = np.sort(gpu, axis=1)
        usable = ordered >= demand.gpu_milli
        chosen = usable & (np.cumsum(usable, axis=1) <= demand.gpus)
        whole_used = (chosen & (ordered == MILLI)).sum(axis=1)
        ratio = (np.where(chosen, ordered, 0) * 100 // MILLI).sum(axis=1)
        third, half = MAX_SCORE // 3, MAX_SCORE // 2
        scores: IntArray = np.where(
            free_node,
            np.maximum(third - whole, whole),
            np.where(
                whole_used > 0,
                np.maximum(half - whole_used, third),
                np.maximum(MAX_SCORE - ratio // 10, half),
            ),
        )
        return scores

    def _score_bestfit(self, demand: ShareDemand, idx: IntArray) -> IntArray:
        left = (
            0.5 * (self.cpu[idx] - demand.cpu_milli) / MAX_SPEC_CPU
            + 0.5 * (self.gpu[idx].sum(axis=1) - demand.total_gpu_milli) / MAX_SPEC_GPU
        )
        raw = ((1.0 - left) * MAX_SCORE).astype(np.int64)
        low, high = int(raw.min()), int(raw.max())
        if high == low:
            return np.zeros(len(idx), dtype=np.int64)
        return np.asarray((raw - low) * MAX_SCORE // (high - low))

    def _fgd_scores(self, demand: ShareDemand) -> tuple[FloatArray, IntArray]:
        """Per node: the fragmentation added by placing `demand` at its best device, and that device.

        Kept per task shape and recomputed only for nodes that changed since, so a replay of
        thousands of tasks evaluates a few states per task instead of every node's.
        """
        key = (demand.cpu_milli, demand.gpu_milli if demand.gpus else 0, demand.gpus)
        n = len(self.cpu)
        cached = self._fgd_cache.get(key)
        if cached is None:
            cached = (np.zeros(n, dtype=bool), np.full(n, np.inf), np.full(n, -1, dtype=np.int64))
            self._fgd_cache[key] = cached
        valid, growth, device = cached
        todo = np.flatnonzero(~valid)
        if not len(todo):
            return growth, device
        gpu = self.gpu[todo]
        cpu_after = self.cpu[todo] - demand.cpu_milli
        if demand.shares_a_gpu:
            # Devices with equal free thousandths give equal states: evaluate the first of each.
            same = (gpu[:, :, None] == gpu[:, None, :]) & np.tri(MAX_GPUS, k=-1, dtype=bool)[None]
            fits = gpu >= demand.gpu_milli
            rows, devs = np.nonzero(fits & ~same.any(axis=2))
            states = gpu[rows].copy()
            states[np.arange(len(rows)), devs] -= demand.gpu_milli
            cpus, models = cpu_after[rows], self.model[todo][rows]
        else:
            states = gpu.copy()
            if demand.total_gpu_milli:
                ordered = np.argsort(states, axis=1, kind="stable")
                usable = np.take_along_axis(states, ordered, axis=1) >= demand.gpu_milli
                take = usable & (np.cumsum(usable, axis=1) <= demand.gpus)
                delta = np.zeros_like(states)
                np.put_along_axis(delta, ordered, np.where(take, demand.gpu_milli, 0), axis=1)
                states -= delta
            rows, devs = np.arange(len(todo)), np.full(len(todo), -1)
            cpus, models = cpu_after, self.model[todo]
        stale = todo[self._frag_stale[todo]]
        frag = self.fragmentation(
            np.concatenate((cpus, self.cpu[stale])),
            np.concatenate((states, self.gpu[stale])),
            np.concatenate((models, self.model[stale])),
        )
        self.frag_now[stale] = frag[len(rows) :]
        self._frag_stale[stale] = False
        grow = frag[: len(rows)] - self.frag_now[todo][rows]
        if demand.shares_a_gpu:
            table = np.full((len(todo), MAX_GPUS), np.inf)
            table[rows, devs] = grow
            if self.policy == "fgd":
                # FGD picks the device by its integer score, the lowest index among equals.
                score = np.where(
                    np.isfinite(table), _sigmoid_score(np.where(np.isfinite(table), -table, 0.0)), -1
                )
                dev = np.argmax(score, axis=1)
            else:
                # Least growth; among equals the fullest device that fits (best fit), lowest index.
                tie = np.where(np.isfinite(table), gpu, MILLI + 1)
                dev = np.lexsort((tie, np.round(table, 6)), axis=1)[:, 0]
            growth[todo] = table[np.arange(len(todo)), dev]
            device[todo] = dev
        else:
            growth[todo] = grow
            device[todo] = devs
        valid[todo] = True
        return growth, device

    def _choose_by_fragmentation(self, demand: ShareDemand, idx: IntArray) -> Binding:
        growth, device = self._fgd_scores(demand)
        # fragpack compares nodes on a coarser scale than FGD (the sigmoid over growth in pairs of
        # GPUs): more nodes score equal and the first of the fixed order wins, which packs.
        scale = 1.0 if self.policy == "fgd" else FRAGPACK_SCALE
        score = _sigmoid_score(-growth[idx] / scale)
        if self.policy == "fgd" or demand.total_gpu_milli:
            node = self._argmax(idx, score)
        else:
            # A task without GPUs goes where CPU is most plentiful for the GPUs left there, so
            # GPU nodes keep the cores their GPU tasks will need.
            best = idx[score == score.max()]
            spare = (self.cpu[best] - demand.cpu_milli) - self.cpu_per_gpu * self.gpu[best].sum(axis=1)
            node = int(best[np.lexsort((self.rank[best], -spare))[0]])
        if demand.shares_a_gpu:
            return Binding(node, (int(device[node]),), demand.gpu_milli)
        return self._binding(node, demand, pick="best")

    # -- recording ---------------------------------------------------------------------------

    def bind(self, binding: Binding, demand: ShareDemand) -> None:
        self._apply(binding, demand, -1)

    def release(self, binding: Binding, demand: ShareDemand) -> None:
        """Free exactly what `bind` took: the CPU, memory and each device's thousandths."""
        self._apply(binding, demand, +1)

    def _apply(self, binding: Binding, demand: ShareDemand, sign: int) -> None:
        i = binding.node
        self.cpu[i] += sign * demand.cpu_milli
        self.mem[i] += sign * demand.memory_mib
        for d in binding.devices:
            self.gpu[i, d] += sign * binding.gpu_milli
            if not 0 <= self.gpu[i, d] <= MILLI:
                raise ValueError(
                    f"device {d} of node {self.names[i]} would hold {MILLI - self.gpu[i, d]} thousandths"
                )
        if demand.kind:
            self.kinds[i, demand.kind] -= sign
        self._frag_stale[i] = True
        for valid, _, _ in self._fgd_cache.values():
            valid[i] = False

    # -- reading -----------------------------------------------------------------------------

    @property
    def total_gpu_milli(self) -> int:
        return int(self.gpu_count.sum()) * MILLI

    @property
    def allocated_gpu_milli(self) -> int:
        return self.total_gpu_milli - int(self.gpu.sum())


def _sigmoid_score(x: FloatArray) -> IntArray:
    """FGD's score: sigmoid of the fragmentation decrease in GPUs, as an integer 0..100."""
    with np.errstate(over="ignore"):
        s = 1.0 / (1.0 + np.exp(-np.asarray(x, dtype=np.float64) / MILLI))
    return np.asarray(np.floor(s * MAX_SCORE).astype(np.int64))


def describe(policy: str) -> str:
    """One line per policy for help texts."""
    if policy not in POLICIES:
        raise ShareConfigError(f"placement policy {policy!r} is unknown; choose one of {', '.join(POLICIES)}")
    return policy + (" (default)" if policy == DEFAULT_POLICY else "")


__all__ = [
    "DEFAULT_POLICY",
    "MILLI",
    "POLICIES",
    "Binding",
    "ShareConfigError",
    "ShareDemand",
    "ShareNode",
    "SharePlacer",
    "describe",
    "typical_mix",
]
