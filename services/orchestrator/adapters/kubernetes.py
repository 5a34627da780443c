"""The Kubernetes executor: each task attempt is a pod; a watch on the pods reports their ends.

It offers the local executor's interface (start, adopt, probe, stop, report, exit_of, close), so
the orchestrator's handlers drive either one; `open()` must be awaited once before recovery,
because `probe` answers from the executor's cache of pods, synchronously, as the handlers expect.

How it stays right across restarts and lost watches:

- the pod's name is derived from (job id, task key) alone, so a second `start` of the same task
  attempt meets 409 AlreadyExists and becomes AlreadyRunningError: the task is adopted, never
  started twice;
- `open()` lists the managed pods (label selector) and then watches from the list's
  resourceVersion; a watch that ends is resumed from the last resourceVersion seen; a 410 Gone
  (history compacted) triggers a fresh list, and pods missing from it count as deleted;
- only task attempts this process started or adopted are reported, once each; a pod that ended
  while the orchestrator was down is found by `probe` ("ended") and reported when the handlers
  ask (`report`);
- a pod deleted by someone else ends its task with a platform failure (retried by policy); a
  container stuck on an image pull gets `pull_timeout` seconds, then its pod is deleted and the
  task fails with the stuck reason (ContainerImageNotExists under the default rules).

Every API call is blocking (the official client uses urllib3) and runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import structlog
import urllib3.exceptions
from kubernetes.client import ApiClient, CoreV1Api, V1Pod
from kubernetes.client.exceptions import ApiException

from libs.failures import default_rules
from runtime.spec import dump_spec
from services.orchestrator.adapters.executing import (
    AlreadyRunningError,
    ExitCallback,
    SecretsSource,
    TaskExit,
    to_failure_info,
)
from services.orchestrator.adapters.k8s_pods import (
    SELECTOR,
    PodSettings,
    TaskIdentity,
    build_pod,
    image_of,
    key_of,
    owned_by,
    pod_name,
    pull_secret,
    registry_config,
    task_secret,
)
from services.orchestrator.adapters.k8s_status import Observation, deleted, observe, timed_out, verdict
from services.orchestrator.adapters.k8s_watching import PodWatch
from services.orchestrator.adapters.specs import SPEC_FILE, build_spec, task_dir
from services.orchestrator.core.effects import Probe
from services.orchestrator.core.frameworks import Framework, TaskKey
from services.orchestrator.core.policies import KILLED_EXIT_CODE, PREEMPTED_EXIT_CODE, STOP_EXIT_CODE

log = structlog.get_logger(__name__)

# What the cluster's API answers when it is away or refuses: a retry loop waits these out.
API_ERRORS: tuple[type[Exception], ...] = (ApiException, urllib3.exceptions.HTTPError)

Ident = tuple[str, TaskKey]


class KubernetesExecutor:
    def __init__(
        self,
        api: ApiClient,
        data_dir: Path,
        on_exit: ExitCallback,
        secrets: SecretsSource,
        settings: PodSettings,
        *,
        pull_timeout: float = 300.0,
        watch_timeout: int = 60,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.data_dir = data_dir
        self.settings = settings
        self.api = api
        self._core = CoreV1Api(api)
        self._on_exit = on_exit
        self._secrets = secrets
        self._pull_timeout = pull_timeout
        self._clock = clock
        self._rules = default_rules()
        self._pods: dict[str, V1Pod] = {}
        self._seen: dict[str, Observation] = {}
        self._tracked: set[Ident] = set()
        self._stopping: dict[Ident, int] = {}  # tasks told to end, with the code their end is reported as
        self._stuck_since: dict[str, float] = {}
        self._watch = PodWatch(api, settings.namespace, SELECTOR, self._on_event, timeout=watch_timeout)
        self._reports: set[asyncio.Task[None]] = set()

    # -- the executor interface ---------------------------------------------------------

    def task_dir(self, job_id: str, key: TaskKey) -> Path:
        return task_dir(self.data_dir, job_id, key)

    async def open(self) -> None:
        """List the managed pods (so `probe` can answer) and start watching them."""
        await self._watch.start()

    async def start(self, framework: Framework, key: TaskKey) -> tuple[int, Path]:
        """Create the task attempt's pod (and its secrets); returns pid 0 and the task directory."""
        job_id = framework.job_id
        directory = self.task_dir(job_id, key)
        directory.mkdir(parents=True, exist_ok=True)
        secrets = await self._secrets(job_id)
        spec = build_spec(self.data_dir, framework, key, directory, bool(secrets))
        (directory / SPEC_FILE).write_text(dump_spec(spec, indent=2), encoding="utf-8")
        attempt, role, index, _ = key
        current = next((a for a in framework.attempts if a.attempt == attempt), None)
        task = current.task(role, index) if current is not None else None
        node = task.placement.node if task is not None and task.placement is not None else None
        image, auth = image_of(framework.config, role)
        docker_config = registry_config(image, auth, secrets) if auth else None
        who = TaskIdentity(job_id, framework.user or "unknown", framework.name or job_id, key)
        name = pod_name(job_id, key)
        pod = build_pod(
            spec,
            who,
            self.settings,
            node=node,
            image=image,
            secret=f"{name}-secrets" if secrets else None,
            image_pull_secret=f"{name}-registry" if docker_config else None,
        )
        ns = self.settings.namespace
        try:
            created = await asyncio.to_thread(self._core.create_namespaced_pod, ns, pod)
        except ApiException as exc:
            if exc.status == 409:
                raise AlreadyRunningError(name) from None
            raise
        uid = created.metadata.uid if created.metadata is not None else None
        owners = owned_by(name, uid) if uid else None
        # The secrets come after the pod so the pod can own them; the kubelet waits for them.
        bodies = []
        if secrets:
            bodies.append(task_secret(f"{name}-secrets", who, self.settings, secrets))
        if docker_config:
            bodies.append(pull_secret(f"{name}-registry", who, self.settings, docker_config))
        try:
            for body in bodies:
                body.metadata.owner_references = owners  # type: ignore[union-attr]
                await asyncio.to_thread(self._core.create_namespaced_secret, ns, body)
        except Exception:
            # A pod without its secrets would wait forever: remove it, the launch failed.
            await self._delete(name)
            raise
        self._tracked.add((job_id, key))
        self._pods.setdefault(name, created)
        log.info("task pod created", job_id=job_id, key=list(key), pod=name, node=node)
        return 0, directory

    def adopt(self, job_id: str, key: TaskKey, pid: int, directory: Path) -> None:
        """Watch a pod found alive after a restart (reporting at once if it ended meanwhile)."""
        ident = (job_id, key)
        if ident in self._tracked:
            return
        self._tracked.add(ident)
        seen = self._seen.get(pod_name(job_id, key))
        if pod_name(job_id, key) not in self._pods or (seen is not None and seen.kind == "ended"):
            self._finish(ident, self.exit_of(job_id, key))

    def probe(self, job_id: str, key: TaskKey) -> Probe:
        name = pod_name(job_id, key)
        directory = str(self.task_dir(job_id, key))
        if name not in self._pods:
            return Probe("absent", None, directory)
        seen = self._seen.get(name)
        if seen is not None and seen.kind == "ended":
            return Probe("ended", None, directory)
        return Probe("alive", 0, directory)

    async def stop(self, job_id: str, key: TaskKey, exit_code: int = -220) -> None:
        """Delete the task's pod (the kubelet gives it the grace period); its end is then reported."""
        ident = (job_id, key)
        name = pod_name(job_id, key)
        seen = self._seen.get(name)
        if name not in self._pods or (seen is not None and seen.kind == "ended"):
            if ident not in self._tracked:
                await self.report(job_id, key, default=exit_code)
            return
        self._stopping[ident] = exit_code
        self._tracked.add(ident)
        await self._delete(name)

    async def report(
        self, job_id: str, key: TaskKey, *, returncode: int | None = None, default: int = KILLED_EXIT_CODE
    ) -> None:
        await self._on_exit(self.exit_of(job_id, key, returncode=returncode, default=default))

    def exit_of(
        self, job_id: str, key: TaskKey, *, returncode: int | None = None, default: int = KILLED_EXIT_CODE
    ) -> TaskExit:
        """The task's exit as the pod tells it; a pod that is gone is a platform failure."""
        seen = self._seen.get(pod_name(job_id, key))
        if seen is not None and seen.kind == "ended":
            return self._exit(job_id, key, seen)
        if (job_id, key) in self._stopping:
            return TaskExit(job_id, key, self._stopping[(job_id, key)], None, "ended by the platform")
        if default in (STOP_EXIT_CODE, PREEMPTED_EXIT_CODE):
            return TaskExit(job_id, key, default, None, "ended by the platform")
        if returncode is not None:
            return self._exit(job_id, key, Observation("ended", returncode))
        return self._exit(job_id, key, deleted(seen))

    def release(self, job_id: str, attempt: int) -> None:
        """Nothing to free here: ports and devices belong to the pods, which the cluster reclaims."""
        del job_id, attempt

    async def pod_log(self, job_id: str, key: TaskKey, *, tail_lines: int = 1000) -> str:
        """The end of the task's output (the runtime's and the user's), as the kubelet keeps it."""
        try:
            text: str = await asyncio.to_thread(
                self._core.read_namespaced_pod_log,
                pod_name(job_id, key),
                self.settings.namespace,
                container="main",
                tail_lines=tail_lines,
            )
        except ApiException as exc:
            if exc.status in (400, 404):  # not started yet, or gone
                return ""
            raise
        return text

    async def close(self) -> None:
        """Stop watching; pods keep running and a restarted orchestrator adopts them."""
        await self._watch.close()
        for task in list(self._reports):
            task.cancel()
        await asyncio.gather(*self._reports, return_exceptions=True)

    # -- exits ---------------------------------------------------------------------------

    def _exit(self, job_id: str, key: TaskKey, seen: Observation) -> TaskExit:
        result = verdict(self._rules, seen)
        code = seen.exit_code if seen.exit_code is not None else result.code
        failure = None if code == 0 else to_failure_info(result)
        why = seen.status.message or seen.reason or ("" if code == 0 else result.reason)
        return TaskExit(job_id, key, code, failure, why)

    def _finish(self, ident: Ident, exit_: TaskExit) -> None:
        """Hand one tracked task attempt's exit to the callback, once."""
        if ident not in self._tracked:
            return
        self._tracked.discard(ident)
        self._stopping.pop(ident, None)
        task = asyncio.ensure_future(self._on_exit(exit_))
        self._reports.add(task)
        task.add_done_callback(self._reports.discard)

    # -- the watch -----------------------------------------------------------------------

    async def _delete(self, name: str) -> None:
        try:
            await asyncio.to_thread(
                self._core.delete_namespaced_pod,
                name,
                self.settings.namespace,
                grace_period_seconds=self.settings.grace_seconds,
            )
        except ApiException as exc:
            if exc.status != 404:
                raise

    def _on_event(self, kind: str, pod: V1Pod) -> None:
        meta = pod.metadata
        owner = key_of(meta.annotations if meta is not None else None)
        if meta is None or meta.name is None or owner is None:
            return
        name = meta.name
        if kind == "DELETED":
            self._pods.pop(name, None)
            self._stuck_since.pop(name, None)
            before = self._seen.get(name)
            ended = before if before is not None and before.kind == "ended" else deleted(before)
            self._seen[name] = ended
            if owner in self._stopping:
                self._finish(owner, TaskExit(owner[0], owner[1], STOP_EXIT_CODE, None, "stopped"))
            else:
                self._finish(owner, self._exit(owner[0], owner[1], ended))
            return
        self._pods[name] = pod
        seen = observe(pod)
        self._seen[name] = seen
        if seen.kind == "ended":
            self._stuck_since.pop(name, None)
            if owner not in self._stopping:
                self._finish(owner, self._exit(owner[0], owner[1], seen))
        elif seen.kind == "stuck":
            if name not in self._stuck_since:
                self._stuck_since[name] = self._clock()
                asyncio.get_running_loop().call_later(self._pull_timeout, self._check_stuck, name, owner)
        else:
            self._stuck_since.pop(name, None)

    def _check_stuck(self, name: str, owner: Ident) -> None:
        since = self._stuck_since.get(name)
        seen = self._seen.get(name)
        if since is None or seen is None or seen.kind != "stuck":
            return
        remaining = self._pull_timeout - (self._clock() - since)
        if remaining > 0:
            asyncio.get_running_loop().call_later(remaining, self._check_stuck, name, owner)
            return
        ended = timed_out(seen, self._pull_timeout)
        self._seen[name] = ended
        self._stuck_since.pop(name, None)
        log.warning("task pod stuck; failing it", pod=name, reason=seen.reason)
        self._finish(owner, self._exit(owner[0], owner[1], ended))
        task = asyncio.ensure_future(self._delete(name))
        self._reports.add(task)
        task.add_done_callback(self._reports.discard)
