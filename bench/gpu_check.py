"""The project's own end-to-end check on a real NVIDIA machine: `python bench/gpu_check.py`.

Brings up the embedded platform (`pai up`'s code, NATS and every service, tasks as local
processes) in a temporary data dir on this machine's GPUs, and runs three jobs one after the
other, each task's commands in this very interpreter:

  (a) `whole`: one task of one whole GPU: matmul TFLOP/s (bf16, 8192^3) for MEASURE_S seconds,
      then TRAIN_STEPS steps of a small MLP on a fixed regression (loss must fall);
  (b) `shared`: two tasks of `gpuShare: {gpuMilli: 500, gpuMemoryMiB: CAP_MIB}` on one GPU,
      released together by the gang barrier: each measures its matmul TFLOP/s for MEASURE_S
      seconds while the other does, then tries to allocate CAP_MIB + OVER_MIB MiB (more than
      its cap) and says whether CUDA refused;
  (c) `ddp`: the marketplace's pytorch-ddp starter (three workers, torch.distributed).

It prints one JSON line: the GPU model, whether the platform says shares are enforced (NVIDIA
MPS) and why, TFLOP/s alone and per shared task (and as a fraction of alone), whether each
over-cap allocation was refused, the training's first and last loss, every job's state, and the
monitor's GPU use (the highest gpu_utilization and task GPU memory it exposed while (a) and (b)
ran). `ok` is true when both over-cap allocations were refused, each shared task ran at 35-65%
of the task alone, the loss fell and all three jobs SUCCEEDED; the exit status is 0 then, else 1.

On a machine without an NVIDIA GPU it prints "no NVIDIA GPU: nothing checked" and exits 0;
without PyTorch in this interpreter it says so and exits 0 (nothing could be checked either).
It needs only a Python with the project's dependencies (and PyTorch): no virtualenv of ours,
no `pai` on PATH. Tasks run as this user (PAI_TASK_USER=none): this checks GPUs, not isolation.

Command: python bench/gpu_check.py [--keep DIR] [--measure-s S]
(--keep: the data dir to use and leave behind; --measure-s: each task's matmul seconds, 15)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
ADMIN_PASSWORD = "gpu-check-pass"
MEASURE_S = 15.0
TRAIN_STEPS = 300
CAP_MIB = 8192
OVER_MIB = 12288  # asks for CAP_MIB + OVER_MIB: far past the cap, well inside any datacenter GPU
JOB_TIMEOUT_S = 600.0
MARK = "GPU_CHECK "
SHARE_RANGE = (0.35, 0.65)

# The task programs: each prints one line, MARK + JSON.
MATMUL = """
import json, os, time, torch
assert torch.cuda.is_available(), "CUDA is not available to the task"
n, measure = 8192, float(os.environ["MEASURE_S"])
a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
for _ in range(5):
    a @ b
torch.cuda.synchronize()
done, start = 0, time.perf_counter()
while time.perf_counter() - start < measure:
    for _ in range(10):
        a @ b
    torch.cuda.synchronize()
    done += 10
elapsed = time.perf_counter() - start
result = {"tflops": 2 * n**3 * done / elapsed / 1e12, "seconds": elapsed,
          "device": torch.cuda.get_device_name(0),
          "mps_pipe": os.environ.get("CUDA_MPS_PIPE_DIRECTORY", ""),
          "visible": os.environ.get("CUDA_VISIBLE_DEVICES", "")}
del a, b
torch.cuda.empty_cache()
"""
TRAIN = """
torch.manual_seed(0)
x = torch.randn(4096, 64, device="cuda")
y = (x @ torch.randn(64, 1, device="cuda")).tanh()
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1)).cuda()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
losses = []
for step in range(int(os.environ["TRAIN_STEPS"])):
    loss = torch.nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
result.update(steps=len(losses), loss_first=losses[0], loss_last=losses[-1])
"""
OVER_CAP = """
want = int(os.environ["CAP_MIB"]) + int(os.environ["OVER_MIB"])
try:
    block = torch.empty(want * 2**20, dtype=torch.uint8, device="cuda")
    block.fill_(1)
    torch.cuda.synchronize()
    result.update(over_cap_mib=want, over_cap_refused=False, over_cap_error="")
    del block
except (RuntimeError, MemoryError) as exc:
    result.update(over_cap_mib=want, over_cap_refused=True, over_cap_error=str(exc).splitlines()[0][:200])
"""
PRINT = """
print("GPU_CHECK " + json.dumps(result), flush=True)
"""


def torch_path() -> str:
    """The folder this interpreter imports PyTorch from: the tasks import the same one (their HOME
    is their work dir, so a user site-packages of this user's is not theirs otherwise)."""
    spec = importlib.util.find_spec("torch")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    return str(Path(locations[0]).parent) if locations else ""


def job_yaml(name: str, role: str, instances: int, program: str, env: dict[str, str], share: str = "") -> str:
    env = {**env, "PYTHONPATH": f"{torch_path()}:$PYTHONPATH"}
    exports = " ".join(f"{key}={value}" for key, value in env.items())
    body = "\n".join("        " + line for line in program.strip().splitlines())
    extras = f"extras:\n  gpuShare:\n    taskRoles:\n      {role}: {share}\n" if share else ""
    return f"""protocolVersion: 2
name: {name}
type: job
jobRetryCount: 0
prerequisites:
  - {{name: image, type: dockerimage, uri: pytorch/pytorch:2.3.1-cuda12.1-cudnn8-runtime}}
taskRoles:
  {role}:
    instances: {instances}
    taskRetryCount: 0
    dockerImage: image
    resourcePerInstance: {{cpu: 2, memoryMB: 16384, gpu: 1}}
    commands:
      - |
        export {exports}
        {sys.executable} - <<'PY'
{body}
        PY
{extras}"""


def ddp_yaml() -> str:
    """The marketplace's pytorch-ddp starter, its workers run by this interpreter."""
    text = (REPO / "services/marketplace/starters/pytorch-ddp/job.yaml").read_text()
    python = f"PYTHONPATH={torch_path()}:$PYTHONPATH {sys.executable}"
    return text.replace("python3 - <<'PY'", f"{python} - <<'PY'").replace("name: pytorch-ddp", "name: ddp", 1)


def nvidia_gpus() -> list[str]:
    """The names of this machine's NVIDIA GPUs (NVML, else nvidia-smi), or none."""
    with contextlib.suppress(Exception):
        import pynvml  # type: ignore[import-untyped]  # nvidia-ml-py ships no type hints

        pynvml.nvmlInit()
        try:
            names = []
            for index in range(pynvml.nvmlDeviceGetCount()):
                name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(index))
                names.append(name.decode() if isinstance(name, bytes) else str(name))
            return names
        finally:
            pynvml.nvmlShutdown()
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run(
            [smi, "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=20
        )
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.stdout.splitlines() if line.strip()] if out.returncode == 0 else []


def results_in(text: str) -> list[dict[str, Any]]:
    """Every MARK line a task printed, decoded."""
    found = []
    for line in text.splitlines():
        if MARK in line:
            with contextlib.suppress(ValueError):
                found.append(json.loads(line.split(MARK, 1)[1]))
    return found


def gpu_use(metrics: str) -> dict[str, float]:
    """The GPU figures of one scrape of the monitor: the highest of each metric's samples."""
    wanted = ("gpu_utilization", "gpu_mem_utilization", "task_gpu_percent", "task_gpu_mem_usage_byte")
    seen: dict[str, float] = {}
    for line in metrics.splitlines():
        match = re.match(r"^([a-z_]+)(?:\{[^}]*\})? ([0-9.eE+-]+)$", line)
        if match and match.group(1) in wanted:
            name, value = match.group(1), float(match.group(2))
            seen[name] = max(seen.get(name, 0.0), value)
    return seen


def verdict(summary: dict[str, Any]) -> dict[str, bool]:
    """What the issue asks of a real GPU, each check by name."""
    alone = summary.get("tflops_alone") or 0.0
    ratios = [t / alone for t in summary.get("tflops_shared", [])] if alone else []
    low, high = SHARE_RANGE
    refused = summary.get("over_cap_refused", [])
    first, last = summary.get("loss_first"), summary.get("loss_last")
    jobs = summary.get("jobs", {})
    return {
        "over_cap_refused": len(refused) == 2 and all(refused),
        "shares_35_to_65_percent": len(ratios) == 2 and all(low <= r <= high for r in ratios),
        "loss_fell": first is not None and last is not None and last < first,
        "all_succeeded": len(jobs) == 3 and all(state == "SUCCEEDED" for state in jobs.values()),
    }


class Check:
    def __init__(self, api_url: str, metrics_url: str) -> None:
        import httpx

        self.api = httpx.AsyncClient(base_url=api_url, timeout=60)
        self.metrics_url = metrics_url
        self.gpu_use: dict[str, float] = {}

    async def login(self) -> None:
        answer = await self.api.post(
            "/api/v2/authn/basic/login", json={"username": "admin", "password": ADMIN_PASSWORD}
        )
        answer.raise_for_status()
        self.api.headers["Authorization"] = f"Bearer {answer.json()['token']}"

    async def run(self, name: str, text: str) -> dict[str, Any]:
        """Submit, watch the monitor while it runs, return the final detail."""
        submitted = await self.api.post("/api/v2/jobs", content=text, headers={"Content-Type": "text/yaml"})
        if submitted.status_code != 202:
            raise RuntimeError(f"job {name} was refused: {submitted.status_code} {submitted.text}")
        deadline = time.monotonic() + JOB_TIMEOUT_S
        while True:
            detail = dict((await self.api.get(f"/api/v2/jobs/admin~{name}")).json())
            state = detail.get("jobStatus", {}).get("state")
            if state in ("SUCCEEDED", "FAILED", "STOPPED"):
                return detail
            if time.monotonic() > deadline:
                await self.api.put(f"/api/v2/jobs/admin~{name}/executionType", json={"value": "STOP"})
                detail.setdefault("jobStatus", {})["state"] = f"TIMED OUT ({state})"
                return detail
            await self._scrape()
            await asyncio.sleep(1.0)  # a job's progress over HTTP: polled, as the CLI does

    async def _scrape(self) -> None:
        with contextlib.suppress(Exception):
            answer = await self.api.get(self.metrics_url, headers={"Authorization": ""})
            for metric, value in gpu_use(answer.text).items():
                self.gpu_use[metric] = max(self.gpu_use.get(metric, 0.0), value)

    async def outputs(self, name: str, detail: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
        """The MARK results of every task of the job, and the tail of each task's log."""
        results, tails = [], []
        for role, status in (detail.get("taskRoles") or {}).items():
            for task in status.get("taskStatuses", []):
                path = (
                    f"/api/v2/jobs/admin~{name}/attempts/0/taskRoles/{role}/taskIndex/{task['taskIndex']}"
                    "/attempts/0/logs/all"
                )
                answer = await self.api.get(path, params={"tailMode": "true", "limit": 65536})
                content = str(answer.json().get("content", "")) if answer.status_code == 200 else answer.text
                results += results_in(content)
                tails.append(f"{role}[{task['taskIndex']}]: {content[-1500:]}")
        return results, tails

    async def close(self) -> None:
        await self.api.aclose()


async def check(data_dir: Path, measure_s: float = MEASURE_S) -> dict[str, Any]:
    from pai.embedded.platform import EmbeddedPlatform

    platform = EmbeddedPlatform(
        data_dir,
        admin_password=ADMIN_PASSWORD,
        services=("rest", "scheduler", "orchestrator", "monitor"),
        # As this user (this checks GPUs, not isolation), on the host (no registry to pull from).
        extra_env={"PAI_TASK_USER": "none", "PAI_TASK_ENGINE": "host"},
    )
    info = await platform.start()
    summary: dict[str, Any] = {
        "gpu_share_enforced": platform.mps.enforcement.enforced,
        "gpu_share_enforcement": platform.mps.enforcement.reason,
        "jobs": {},
    }
    check = Check(info.api_url, info.metrics_url)
    logs: dict[str, list[str]] = {}
    try:
        await check.login()
        env = {"MEASURE_S": str(measure_s), "TRAIN_STEPS": str(TRAIN_STEPS)}
        whole = await check.run("whole", job_yaml("whole", "train", 1, MATMUL + TRAIN + PRINT, env))
        summary["jobs"]["whole"] = whole["jobStatus"]["state"]
        results, logs["whole"] = await check.outputs("whole", whole)
        if results:
            first = results[0]
            summary |= {
                "gpu_model": first["device"],
                "tflops_alone": round(first["tflops"], 1),
                "train_steps": first["steps"],
                "loss_first": first["loss_first"],
                "loss_last": first["loss_last"],
            }

        env |= {"CAP_MIB": str(CAP_MIB), "OVER_MIB": str(OVER_MIB)}
        share = f"{{gpuMilli: 500, gpuMemoryMiB: {CAP_MIB}}}"
        shared = await check.run(
            "shared", job_yaml("shared", "half", 2, MATMUL + OVER_CAP + PRINT, env, share)
        )
        summary["jobs"]["shared"] = shared["jobStatus"]["state"]
        summary["shared_detail_gpu_share_enforced"] = shared.get("gpuShareEnforced")
        results, logs["shared"] = await check.outputs("shared", shared)
        summary["tflops_shared"] = [round(r["tflops"], 1) for r in results]
        if summary.get("tflops_alone"):
            summary["shared_fraction_of_alone"] = [
                round(t / summary["tflops_alone"], 3) for t in summary["tflops_shared"]
            ]
        summary["over_cap_mib"] = CAP_MIB + OVER_MIB
        summary["over_cap_refused"] = [r.get("over_cap_refused") for r in results]
        summary["over_cap_errors"] = [r.get("over_cap_error") for r in results]
        summary["shared_mps_pipe"] = [r.get("mps_pipe") for r in results]
        summary["shared_devices"] = [r.get("visible") for r in results]

        ddp = await check.run("ddp", ddp_yaml())
        summary["jobs"]["ddp"] = ddp["jobStatus"]["state"]
        _, logs["ddp"] = await check.outputs("ddp", ddp)
        summary["ddp_torch_distributed"] = any("torch.distributed" in tail for tail in logs["ddp"])
        summary["monitor_gpu_use"] = check.gpu_use
    finally:
        await check.close()
        await platform.stop()
    summary["checks"] = verdict(summary)
    summary["ok"] = all(summary["checks"].values())
    if not summary["ok"]:
        summary["task_logs"] = logs
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", type=Path, help="the data dir to use and leave behind")
    parser.add_argument(
        "--measure-s", type=float, default=MEASURE_S, help="seconds each task measures its matmuls"
    )
    args = parser.parse_args()
    gpus = nvidia_gpus()
    if not gpus:
        print("no NVIDIA GPU: nothing checked")
        return 0
    if importlib.util.find_spec("torch") is None:
        print(f"no PyTorch in {sys.executable}: nothing checked (the check's jobs run PyTorch on {gpus[0]})")
        return 0
    # One line on stdout, the JSON: the platform's own log lines go to stderr.
    import structlog

    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    # The services are `python -m services.NAME` children: they find the platform's code here.
    sys.path.insert(0, str(REPO))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    os.chdir(REPO)
    data_dir = args.keep or Path(tempfile.mkdtemp(prefix="pai-gpu-check-"))
    try:
        summary = asyncio.run(check(data_dir, args.measure_s))
    finally:
        if args.keep is None:
            shutil.rmtree(data_dir, ignore_errors=True)
    summary["gpus"] = gpus
    print(json.dumps(summary))
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
