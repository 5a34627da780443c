"""The machine's container engine: found at start, asked for images, told to remove containers.

``PAI_TASK_ENGINE`` says which: ``auto`` (the default: Podman, else Docker, the first that
answers; else tasks run on the host), ``podman``, ``docker`` (that one or the orchestrator does
not start), or ``host``. Podman gets a containers.conf of the platform's own, passed through
CONTAINERS_CONF to every call the platform makes and nothing else's: the OCI runtime ``runc``
where it is installed (crun cannot run on a machine whose cgroups are in hybrid mode) and no
default ulimits (raising them fails where the platform itself runs under a lower hard limit).

``PAI_CONTAINER_RUNNER`` says what runs a task's containers under Podman, on a bundle the
executor prepares from Podman's image and configuration (adapters/bundling.py): ``auto`` (the
default: bubblewrap where the platform runs as root and bubblewrap makes a user namespace here,
core/image_sandboxes.py; else runc itself where it is installed beside Podman; else the engine),
``bwrap`` or ``runc`` (that one, or the orchestrator does not start) or ``engine`` (``podman
run`` for each script). An image the task's runtime pulls first runs through the engine.

``PAI_IMAGE_PULL`` says when images are pulled: ``missing`` (the default), ``never`` or
``always``. An image that is not on the machine and cannot be pulled fails the task once with
OpenPAI's 254 (ContainerImageNotExists, never retried). The registry credentials of a
``dockerimage`` prerequisite (``auth``) go to the engine in an auth file only root can read,
removed after the pull, and are never logged.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import platform
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from runtime.container import digest_of
from runtime.exitcodes import IMAGE_NOT_EXISTS
from services.orchestrator.adapters.executing import ContainmentError
from services.orchestrator.core.bundles import native_profile

PullPolicy = Literal["missing", "never", "always"]
Runner = Literal["engine", "runc", "bwrap"]
ENGINES = ("podman", "docker")
RUNNERS = ("auto", "bwrap", "runc", "engine")
CONTAINERS_CONF = "containers.conf"
SECCOMP_PROFILE = "seccomp-native.json"
"""In the data dir: the engine's default seccomp profile for the machine's own ABI only."""
ENGINE_SECCOMP = Path("/usr/share/containers/seccomp.json")
PROBE_TIMEOUT_S = 30.0
PULL_TIMEOUT_S = 1800.0
CDI_SPECS = (Path("/etc/cdi"), Path("/var/run/cdi"))


class EngineError(ContainmentError):
    """The container engine did not answer: the task did not run (a platform failure, retried)."""


class ImageMissingError(ContainmentError):
    """The task's image is not on the machine and could not be pulled (OpenPAI's 254)."""

    exit_code = IMAGE_NOT_EXISTS


@dataclass(frozen=True)
class Engine:
    name: str
    program: str
    runtime: str
    env: dict[str, str] = field(default_factory=dict)
    cdi: bool = False
    runner: Runner = "engine"
    """What runs the containers: the engine's ``run``, or ``runc`` on bundles the executor makes."""
    runc: str = ""
    """runc's program, where it runs them."""
    sandbox: tuple[str, str] = ("", "")
    """bubblewrap's and setpriv's programs, where bubblewrap runs them."""
    images_file: str = ""
    """Podman's list of its images (``<graph root>/<driver>-images/images.json``), rewritten at
    every change of an image: what was looked up holds until it changes (ImageLookups)."""

    def describe(self) -> str:
        if self.runner == "runc":
            return f"tasks run in their docker images: {self.name}'s images, run by runc itself"
        if self.runner == "bwrap":
            return (
                f"tasks run in their docker images: {self.name}'s images and configuration, run by "
                "bubblewrap in a user namespace of the tenant's uid"
            )
        return f"tasks run in their docker images through {self.name} ({self.runtime})"


@dataclass(frozen=True)
class EngineChoice:
    engine: Engine | None
    why: str = ""

    def describe(self) -> str:
        if self.engine is not None:
            return self.engine.describe()
        return f"tasks run on the host: {self.why}"


@dataclass(frozen=True)
class ResolvedImage:
    """An image as it will run: its id, and the digest the user can pin."""

    run: str
    digest: str | None
    pull: bool = False
    """Not on the node: the task's runtime pulls ``run`` (a reference) first."""


def platform_label(data_dir: Path) -> str:
    """The value of the platform label on every container a platform starts (its data dir's)."""
    return hashlib.sha256(str(data_dir.resolve()).encode()).hexdigest()[:16]


def write_containers_conf(data_dir: Path) -> Path:
    """The platform's containers.conf for Podman (its own calls only; /etc is not touched)."""
    path = data_dir / CONTAINERS_CONF
    lines = ["[containers]", "default_ulimits = []"]
    profile = _native_seccomp(data_dir)
    if profile is not None:
        lines.append(f"seccomp_profile = {json.dumps(str(profile))}")
    lines.append("")
    if shutil.which("runc"):
        lines += ["[engine]", 'runtime = "runc"', ""]
    text = "\n".join(lines)
    if not path.exists() or path.read_text() != text:
        tmp = path.with_name(f".{CONTAINERS_CONF}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
    return path


def _native_seccomp(data_dir: Path) -> Path | None:
    """The engine's default seccomp profile narrowed to this machine's ABI (core/bundles.py
    native_profile), written beside the containers.conf; None where the engine has no profile
    file or it names no rules for this machine (the engine's own profile stands)."""
    try:
        profile = json.loads(ENGINE_SECCOMP.read_bytes())
    except (OSError, ValueError):
        return None
    narrowed = native_profile(profile, platform.machine()) if isinstance(profile, dict) else None
    if narrowed is None:
        return None
    path = data_dir / SECCOMP_PROFILE
    text = json.dumps(narrowed, indent=1)
    if not path.exists() or path.read_text() != text:
        tmp = path.with_name(f".{SECCOMP_PROFILE}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
    return path


def _has_cdi_nvidia() -> bool:
    for directory in CDI_SPECS:
        if directory.is_dir() and any(p.name.startswith("nvidia") for p in directory.iterdir()):
            return True
    return False


def _probe(name: str, program: str, env: Mapping[str, str]) -> tuple[Engine | None, str]:
    template = (
        "{{.Host.OCIRuntime.Name}} {{.Store.GraphRoot}} {{.Store.GraphDriverName}}"
        if name == "podman"
        else "{{.DefaultRuntime}}"
    )
    try:
        done = subprocess.run(
            [program, "info", "--format", template],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            env={**os.environ, **env},
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{name} did not answer ({exc})"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        return None, f"{name} info failed: {last}"
    runtime, *store = done.stdout.split() or ["default runtime"]
    images = str(Path(store[0]) / f"{store[1]}-images" / "images.json") if len(store) == 2 else ""
    return Engine(name, program, runtime, dict(env), cdi=_has_cdi_nvidia(), images_file=images), ""


def _userns_probe(bwrap: str, setpriv: str) -> str:
    """Empty where bubblewrap, as an unprivileged user, makes a user namespace here; else why not."""
    nobody = "65534"
    argv = [
        setpriv,
        f"--reuid={nobody}",
        f"--regid={nobody}",
        "--clear-groups",
        "--no-new-privs",
        "--",
        bwrap,
        "--unshare-user",
        "--unshare-pid",
        "--ro-bind",
        "/",
        "/",
        "--proc",
        "/proc",
        "--",
        "/bin/true",
    ]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap did not run ({exc})"
    if done.returncode != 0:
        return (
            "bubblewrap cannot make a user namespace here: " + (done.stderr.strip().splitlines() or ["?"])[-1]
        )
    return ""


def _bwrap_runner(engine: Engine) -> tuple[Engine | None, str]:
    bwrap, setpriv = shutil.which("bwrap"), shutil.which("setpriv")
    if bwrap is None or setpriv is None:
        return None, "no bwrap or no setpriv (Debian: apt-get install bubblewrap util-linux)"
    try:
        import pyseccomp  # noqa: F401 - libseccomp through it compiles the engine's filter
    except (ImportError, OSError) as exc:
        return None, f"libseccomp cannot be loaded ({exc})"
    why = _userns_probe(bwrap, setpriv)
    if why:
        return None, why
    # runc too where it runs Podman's containers: a task without a tenant's uid runs with it.
    runc = shutil.which("runc") if engine.runtime == "runc" else None
    return replace(engine, runner="bwrap", sandbox=(bwrap, setpriv), runc=runc or ""), ""


def choose_runner(engine: Engine, setting: str) -> Engine:
    """The engine with what runs its containers (PAI_CONTAINER_RUNNER); ValueError where a runner
    is asked for and cannot be."""
    setting = (setting or "auto").strip().lower()
    if setting not in RUNNERS:
        raise ValueError(f"PAI_CONTAINER_RUNNER={setting!r}: must be auto, bwrap, runc or engine")
    if setting == "engine":
        return engine
    common = ""
    if engine.name != "podman":
        common = f"bundles are made from Podman's images, not {engine.name}'s"
    elif os.geteuid() != 0:
        common = "mounting an image's files needs root"
    if setting in ("auto", "bwrap"):
        chosen, why = _bwrap_runner(engine) if not common else (None, common)
        if chosen is not None:
            return chosen
        if setting == "bwrap":
            raise ValueError(f"PAI_CONTAINER_RUNNER=bwrap: {why}")
    runc = shutil.which("runc")
    why = common
    if why:
        pass
    elif runc is None:
        why = "no runc"
    elif engine.runtime != "runc":
        why = f"Podman runs {engine.runtime}, not runc"
    if why and setting == "runc":
        raise ValueError(f"PAI_CONTAINER_RUNNER=runc: {why}")
    if why or runc is None:
        return engine
    return replace(engine, runner="runc", runc=runc)


def detect_engine(setting: str, data_dir: Path, runner: str = "auto") -> EngineChoice:
    """The engine tasks run through, or why they run on the host. An engine named outright that
    does not work is an error (ValueError): the operator asked for containers; so is a runner
    (``runner``, PAI_CONTAINER_RUNNER) that cannot be."""
    setting = (setting or "auto").strip().lower()
    if setting == "host":
        return EngineChoice(None, "PAI_TASK_ENGINE=host")
    if setting not in ("auto", *ENGINES):
        raise ValueError(f"PAI_TASK_ENGINE={setting!r}: must be auto, podman, docker or host")
    wanted = ENGINES if setting == "auto" else (setting,)
    reasons: list[str] = []
    for name in wanted:
        program = shutil.which(name)
        if program is None:
            reasons.append(f"no {name}")
            continue
        env = {"CONTAINERS_CONF": str(write_containers_conf(data_dir))} if name == "podman" else {}
        engine, why = _probe(name, program, env)
        if engine is not None:
            return EngineChoice(choose_runner(engine, runner))
        reasons.append(why)
    why = "; ".join(reasons)
    if setting != "auto":
        raise ValueError(f"PAI_TASK_ENGINE={setting}: {why}")
    return EngineChoice(None, f"no container engine works ({why})")


def pull_policy(value: str) -> PullPolicy:
    value = (value or "missing").strip().lower()
    if value == "missing":
        return "missing"
    if value == "never":
        return "never"
    if value == "always":
        return "always"
    raise ValueError(f"PAI_IMAGE_PULL={value!r}: must be missing, never or always")


async def _call(engine: Engine, *args: str, limit_s: float = PROBE_TIMEOUT_S) -> tuple[int, str, str]:
    try:
        proc = await asyncio.create_subprocess_exec(
            engine.program,
            *args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, **engine.env},
        )
    except OSError as exc:
        raise EngineError(f"the container engine {engine.name} cannot be run: {exc}") from exc
    try:
        out, err = await asyncio.wait_for(proc.communicate(), limit_s)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise EngineError(f"the container engine {engine.name} did not answer in {limit_s:g}s") from None
    return proc.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace")


async def _inspect(engine: Engine, image: str) -> ResolvedImage | None:
    template = "{{.Id}} {{json .RepoDigests}}"
    code, out, err = await _call(engine, "image", "inspect", "--format", template, image)
    if code != 0:
        text = err.lower()
        if "no such" in text or "not known" in text or "not found" in text or "unknown" in text:
            return None
        raise EngineError(f"{engine.name} image inspect {image} failed: {err.strip()[-300:]}")
    ident, _, digests_json = out.strip().partition(" ")
    try:
        digests = [str(d) for d in json.loads(digests_json or "[]") or []]
    except ValueError:
        digests = []
    return ResolvedImage(ident, digest_of(digests, image))


def _auth_file(directory: Path, registry: str, username: str, password: str) -> Path:
    """Credentials in the engines' auth file format (Docker reads it as config.json in
    DOCKER_CONFIG), in a folder of their own that only root can read."""
    token = base64.b64encode(f"{username}:{password}".encode()).decode()
    folder = directory / ".registry-auth"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = folder / "config.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump({"auths": {registry or "docker.io": {"auth": token}}}, f)
    return path


async def resolve_image(
    engine: Engine,
    image: str,
    policy: PullPolicy,
    *,
    auth: Mapping[str, str] | None = None,
    scratch: Path | None = None,
) -> ResolvedImage:
    """The image as it will run, pulled first where the policy says so.

    ImageMissingError (254) when it is not here and may not or cannot be pulled; EngineError
    when the engine itself fails."""
    found = None if policy == "always" else await _inspect(engine, image)
    if found is not None:
        return found
    if policy == "never":
        raise ImageMissingError(
            f"the image {image} is not on this machine and images are not pulled (PAI_IMAGE_PULL=never)"
        )
    args = ["pull", "--quiet", image]
    auth_path: Path | None = None
    if auth and auth.get("username") and scratch is not None:
        registry, username = auth.get("registryuri", ""), auth["username"]
        auth_path = _auth_file(scratch, registry, username, auth.get("password", ""))
        if engine.name == "podman":
            args[1:1] = ["--authfile", str(auth_path)]
    try:
        env_extra = {"DOCKER_CONFIG": str(auth_path.parent)} if auth_path and engine.name == "docker" else {}
        pulling = replace(engine, env={**engine.env, **env_extra})
        code, _, err = await _call(pulling, *args, limit_s=PULL_TIMEOUT_S)
    finally:
        if auth_path is not None:
            auth_path.unlink(missing_ok=True)
    if code != 0:
        last = (err.strip().splitlines() or ["no message"])[-1]
        raise ImageMissingError(f"the image {image} could not be pulled: {last[-300:]}")
    found = await _inspect(engine, image)
    if found is None:
        raise ImageMissingError(f"the image {image} was pulled but is not on this machine")
    return found


class ImageLookups:
    """What ``image inspect`` said of each reference, kept while the engine's list of images is
    the same file (inode, time, size): any pull, tag, import or removal rewrites it, and the next
    look asks the engine again. A look costs a Podman client, some 30 ms of CPU; a task in its
    image needs one per attempt. Without the file (Docker) every look asks the engine."""

    KEPT = 256

    def __init__(self) -> None:
        self._found: dict[tuple[str, str], tuple[tuple[int, int, int], ResolvedImage]] = {}

    @staticmethod
    def _stamp(engine: Engine) -> tuple[int, int, int] | None:
        if not engine.images_file:
            return None
        try:
            info = os.stat(engine.images_file)
        except OSError:
            return None
        return (info.st_ino, info.st_mtime_ns, info.st_size)

    async def inspect(self, engine: Engine, image: str) -> ResolvedImage | None:
        key = (engine.program, image)
        stamp = self._stamp(engine)
        kept = self._found.get(key)
        if stamp is not None and kept is not None and kept[0] == stamp:
            return kept[1]
        found = await _inspect(engine, image)
        if stamp is not None and found is not None:
            self._found.pop(key, None)
            self._found[key] = (stamp, found)
            while len(self._found) > self.KEPT:
                del self._found[next(iter(self._found))]
        return found


async def find_image(
    engine: Engine, image: str, policy: PullPolicy, lookups: ImageLookups | None = None
) -> ResolvedImage:
    """The image as it will run when it is on the node; else, where the policy allows a pull, a
    reference the task's runtime pulls first (so the task shows it pulls, in its note and log);
    ImageMissingError (254) where it does not."""
    if policy == "always":
        return ResolvedImage(image, None, pull=True)
    found = await (lookups.inspect(engine, image) if lookups is not None else _inspect(engine, image))
    if found is not None:
        return found
    if policy == "never":
        raise ImageMissingError(
            f"the image {image} is not on this machine and images are not pulled (PAI_IMAGE_PULL=never)"
        )
    return ResolvedImage(image, None, pull=True)


def write_auth_file(directory: Path, auth: Mapping[str, str]) -> Path:
    """A task's registry credentials for its runtime's pull (root-only; the runtime removes it)."""
    return _auth_file(
        directory, auth.get("registryuri", ""), auth.get("username", ""), auth.get("password", "")
    )


async def remove_container(engine: Engine, name: str) -> None:
    """Remove a task's container, running or not; nothing when there is none."""
    args = ["rm", "--force", "--ignore", name] if engine.name == "podman" else ["rm", "--force", name]
    await _call(engine, *args)


async def containers_of(engine: Engine, label: str, value: str) -> list[str]:
    """Names of the containers (running or not) carrying the label ``label=value``."""
    code, out, _ = await _call(
        engine, "ps", "--all", "--filter", f"label={label}={value}", "--format", "{{.Names}}"
    )
    return out.split() if code == 0 else []
