"""NVIDIA MPS on this node: the control daemon that makes a share of a GPU hold.

A task holding a share (`extras.gpuShare`) is told its limits in CUDA_MPS_ACTIVE_THREAD_PERCENTAGE
and CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, but only an MPS client reads them: a process whose CUDA
runtime finds a control daemon in CUDA_MPS_PIPE_DIRECTORY. So where the node has NVIDIA GPUs
the embedded platform starts one `nvidia-cuda-mps-control -d`, with its pipe and log directories
of its own under <data dir>/mps (never /tmp/nvidia-mps, which another MPS on the machine may
use), watches it and starts it again if it dies, and asks it to quit (`echo quit |
nvidia-cuda-mps-control`) when the platform stops. Shared tasks get the pipe directory (the
orchestrator puts it in their spec); tasks of whole GPUs do not, and keep their devices to
themselves.

Where it cannot run (simulated GPUs, no GPU, no MPS binary, `PAI_GPU_MPS=off`, a daemon that
will not start) shares are advisory, and the platform says why (libs/protocol/gpu_enforcement.py).

`-d` daemonises: the daemon is not this process's child. It is found by the pid file it writes in
its pipe directory, or else by its command line and environment (a process named
nvidia-cuda-mps-control whose CUDA_MPS_PIPE_DIRECTORY is ours), and its end is awaited on a
pidfd. One left running by an earlier `pai up` on the same data dir (killed, or stopped while
tasks still used it) is adopted rather than started twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import structlog

from libs.backbone.running import process_ended
from libs.protocol import simulated_gpus
from libs.protocol.gpu_enforcement import ENV as ENFORCEMENT_ENV
from libs.protocol.gpu_enforcement import GpuShareEnforcement
from pai.embedded.supervising import Supervisor

log = structlog.get_logger(__name__)

CONTROL = "nvidia-cuda-mps-control"
SETTING = "PAI_GPU_MPS"  # auto (the default): MPS where there are NVIDIA GPUs; off: never
SETTINGS = ("auto", "off")
# The pipe directory the orchestrator gives shared tasks (services/orchestrator/app.py).
PIPE_ENV = "PAI_GPU_MPS_PIPE_DIRECTORY"
MPS_DIR = "mps"
PID_FILE = "nvidia-cuda-mps-control.pid"  # the daemon's own, in its pipe directory
START_TIMEOUT = 30.0  # `-d` returns once the daemon has forked: seconds, not minutes
FIND_WITHIN = 5.0
QUIT_GRACE = 5.0


class MpsError(RuntimeError):
    """The control daemon did not start, or cannot be found once started."""


def setting_of(environ: Mapping[str, str]) -> str:
    """PAI_GPU_MPS, checked: `auto` or `off` (ValueError naming both otherwise)."""
    value = environ.get(SETTING, "auto").strip().lower() or "auto"
    if value not in SETTINGS:
        raise ValueError(f"{SETTING}={value!r}: expected auto (MPS where there are NVIDIA GPUs) or off")
    return value


def why_not(
    setting: str, real_gpus: int, simulated: simulated_gpus.SimulatedGpus | None, control: str | None
) -> str | None:
    """None when the daemon is to be started; else why shares stay advisory on this node."""
    if setting == "off":
        return f"{SETTING}=off: no MPS control daemon; a task is told its share and may use more"
    if real_gpus == 0:
        if simulated is not None:
            return (
                f"the GPUs are simulated (pai up --gpus {simulated}): there is no device to hold "
                "a share on; a task is told its share only"
            )
        return "no NVIDIA GPU was found on this node"
    if control is None:
        return (
            f"{CONTROL} was not found on PATH (it comes with the NVIDIA driver's utilities); "
            "a task is told its share and may use more"
        )
    return None


def _is_control(cmdline: list[str]) -> bool:
    return "-d" in cmdline and any(Path(part).name == CONTROL for part in cmdline[:2])


def _daemon_pids(pipe_dir: Path) -> list[int]:
    """Control daemons serving ``pipe_dir``: the pid the daemon writes there when it is still a
    control daemon, else any process named nvidia-cuda-mps-control, run with -d, whose
    CUDA_MPS_PIPE_DIRECTORY is ours."""
    with contextlib.suppress(OSError, ValueError, psutil.Error):
        pid = int((pipe_dir / PID_FILE).read_text().strip())
        process = psutil.Process(pid)
        if process.status() != psutil.STATUS_ZOMBIE and _is_control(process.cmdline()):
            return [pid]
    found = []
    for process in psutil.process_iter(["pid", "cmdline"]):
        if not _is_control(process.info.get("cmdline") or []):
            continue
        try:
            if process.environ().get("CUDA_MPS_PIPE_DIRECTORY") == str(pipe_dir):
                found.append(process.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


@dataclass
class MpsDaemon:
    """The control daemon as a supervised child (pai/embedded/supervising.py's Supervised)."""

    control: str
    pipe_dir: Path
    log_dir: Path
    # True while tasks of this platform still run: a stop then leaves the daemon to them (they
    # outlive `pai up`, and the next one adopts them and it).
    in_use: Callable[[], bool] = lambda: False
    name: str = "mps"
    restarts: int = 0
    first_delay: float = 0.5
    max_delay: float = 30.0
    starts: int = 0
    _pid: int | None = None
    _started: asyncio.Condition = field(default_factory=asyncio.Condition)

    @property
    def pid(self) -> int | None:
        pid = self._pid
        if pid is None:
            return None
        try:
            process = psutil.Process(pid)
            return None if process.status() == psutil.STATUS_ZOMBIE else pid
        except psutil.NoSuchProcess:
            return None

    def environment(self) -> dict[str, str]:
        """The daemon's environment: its directories and the few host variables a program needs,
        none of the platform's settings (its MPS servers start with it)."""
        host = {
            name: value
            for name, value in os.environ.items()
            if name in ("PATH", "HOME", "LANG", "TZ", "LD_LIBRARY_PATH") or name.startswith("LC_")
        }
        return {
            **host,
            "CUDA_MPS_PIPE_DIRECTORY": str(self.pipe_dir),
            "CUDA_MPS_LOG_DIRECTORY": str(self.log_dir),
        }

    def _directories(self) -> None:
        # Tasks may run as other users (a uid per tenant): they pass through mps/ and reach the
        # pipes, and list nothing else of the data dir. The daemon sets its pipes' own modes.
        self.pipe_dir.parent.mkdir(mode=0o711, parents=True, exist_ok=True)
        self.pipe_dir.parent.chmod(0o711)
        self.pipe_dir.mkdir(mode=0o755, exist_ok=True)
        self.pipe_dir.chmod(0o755)
        self.log_dir.mkdir(mode=0o700, exist_ok=True)

    async def start(self) -> None:
        """Adopt the daemon of this pipe directory if one runs, else start one with -d."""
        self._directories()
        running = await asyncio.to_thread(_daemon_pids, self.pipe_dir)
        if running:
            self._pid = running[0]
            log.info("MPS control daemon adopted", pid=self._pid, pipe=str(self.pipe_dir))
        else:
            self._pid = await self._launch()
            log.info("MPS control daemon started", pid=self._pid, pipe=str(self.pipe_dir))
        async with self._started:
            self.starts += 1
            self._started.notify_all()

    async def _launch(self) -> int:
        # What `-d` says goes to a file, not a pipe: a daemon that kept the pipe open would hold
        # a reader waiting for its end for as long as it runs.
        said_path = self.log_dir / "control-start.out"
        with said_path.open("wb") as said_file:
            process = await asyncio.create_subprocess_exec(
                self.control,
                "-d",
                env=self.environment(),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=said_file,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C on the terminal reaches the platform only
            )
        try:
            await asyncio.wait_for(process.wait(), START_TIMEOUT)
        except TimeoutError:
            process.kill()
            await process.wait()
            raise MpsError(f"{self.control} -d did not return within {START_TIMEOUT:g}s") from None
        said = said_path.read_text(errors="replace").strip()[-500:]
        if process.returncode != 0:
            root = "" if os.geteuid() == 0 else " (the platform does not run as root)"
            raise MpsError(f"{self.control} -d exited {process.returncode}{root}: {said or 'no output'}")
        # The daemon forked before `-d` returned; it is named once its process is readable.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + FIND_WITHIN
        while not (found := await asyncio.to_thread(_daemon_pids, self.pipe_dir)):
            if loop.time() > deadline:
                raise MpsError(
                    f"{self.control} -d returned, but no daemon serves {self.pipe_dir}: {said or 'no output'}"
                )
            await asyncio.sleep(0.05)  # another process's table: there is no event to await
        return found[0]

    async def wait_started(self, times: int) -> None:
        """Until the daemon has been started (or adopted) ``times`` times in all."""
        async with self._started:
            await self._started.wait_for(lambda: self.starts >= times)

    async def wait(self) -> int:
        """Until the daemon ends (its exit status is its parent's to know: 0 is returned)."""
        pid = self._pid
        if pid is None:
            return 0
        while not await process_ended(pid):  # no pidfds here: its table is polled
            if not psutil.pid_exists(pid):
                break
            await asyncio.sleep(0.5)
        return 0

    async def stop(self, grace: float) -> None:
        """`quit` to the daemon, then SIGTERM and SIGKILL if it lingers; nothing while tasks use it."""
        pid = self.pid
        if pid is None:
            return
        if await asyncio.to_thread(self.in_use):
            log.info("MPS control daemon left running for the tasks still running", pid=pid)
            return
        quitting = await asyncio.create_subprocess_exec(
            self.control,
            env=self.environment(),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(quitting.communicate(b"quit\n"), grace)
        if quitting.returncode is None:
            quitting.kill()
            await quitting.wait()
        try:
            await asyncio.wait_for(self.wait(), grace)
        except TimeoutError:
            log.warning("MPS control daemon did not quit in time; terminating it", pid=pid)
            for sig in (signal.SIGTERM, signal.SIGKILL):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.wait(), grace)
                    break
        log.info("MPS control daemon stopped", pid=pid)

    def kill(self) -> None:
        pid = self.pid
        if pid is not None and not self.in_use():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


class NodeMps:
    """This node's MPS, decided and run: what `pai up` starts before its services and stops after."""

    def __init__(
        self,
        data_dir: Path,
        environ: Mapping[str, str],
        *,
        gpu_count: Callable[[], int],
        in_use: Callable[[], bool] = lambda: False,
    ) -> None:
        self.data_dir = data_dir
        self.environ = environ
        self.gpu_count = gpu_count
        self.in_use = in_use
        self.daemon: MpsDaemon | None = None
        self.enforcement = GpuShareEnforcement(False, "the platform has not started")
        self._supervisor: Supervisor | None = None

    @property
    def pipe_dir(self) -> Path:
        return self.data_dir / MPS_DIR / "pipe"

    async def start(self) -> GpuShareEnforcement:
        """Start and supervise the daemon where it belongs; what holds shares, stated either way."""
        setting = setting_of(self.environ)
        real = 0 if setting == "off" else await asyncio.to_thread(self.gpu_count)
        simulated = simulated_gpus.from_env(dict(self.environ))
        control = shutil.which(CONTROL, path=self.environ.get("PATH"))
        reason = why_not(setting, real, simulated, control)
        if reason is not None or control is None:
            self.enforcement = GpuShareEnforcement(False, reason or "")
            log.info("GPU shares are advisory", why=reason)
            return self.enforcement
        self.daemon = MpsDaemon(control, self.pipe_dir, self.data_dir / MPS_DIR / "log", in_use=self.in_use)
        try:
            await self.daemon.start()
        except (MpsError, OSError) as exc:
            self.daemon = None
            self.enforcement = GpuShareEnforcement(False, f"the MPS control daemon did not start: {exc}")
            log.warning("GPU shares are advisory", why=self.enforcement.reason)
            return self.enforcement
        # `quit` waits for the MPS servers to end: a little longer than a service gets.
        self._supervisor = Supervisor([self.daemon], grace=QUIT_GRACE)
        await self._supervisor.start()
        self.enforcement = GpuShareEnforcement(
            True, f"NVIDIA MPS: a control daemon for this node's {real} GPU(s), pipe {self.pipe_dir}"
        )
        return self.enforcement

    def service_environment(self) -> dict[str, str]:
        """What the services are told: the statement (REST), the pipe for shared tasks (orchestrator)."""
        env = {ENFORCEMENT_ENV: str(self.enforcement)}
        if self.enforcement.enforced:
            env[PIPE_ENV] = str(self.pipe_dir)
        return env

    async def stop(self) -> None:
        if self._supervisor is not None:
            await self._supervisor.stop()
            self._supervisor = None

    def kill(self) -> None:
        if self._supervisor is not None:
            self._supervisor.kill()
