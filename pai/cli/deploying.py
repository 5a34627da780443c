"""`pai deploy`: render, apply, inspect and upgrade the platform on Kubernetes (in the spirit of paictl).

Rendering is the subset of kustomize the manifests under k8s/ use, done in Python so an operator
needs no other tool: `resources` (files and directories with their own kustomization.yaml),
`patches` (strategic-merge-like: maps merge, lists of named items merge by name, other lists are
replaced), `replicas`, `images` and `labels`. A key it does not know is an error naming the file
and the key, never a silently different result. The rendered pai-rules ConfigMap carries the
packaged failure rules, so operators edit the rules in force rather than an empty file. The bus is
private: rendering adds to the NATS configuration a user per service with its permissions
(libs/backbone/busauth.py), each password read from the pai-credentials Secret by the NATS pods and
by that service's pods only (PAI_NATS_USER, PAI_NATS_PASSWORD).

Apply goes through the official kubernetes client, object by object: read it; create it when it
is missing, else replace it with the stored resourceVersion. The pai-credentials Secret is created
once with random values and never overwritten; a value a newer version needs is added to it.
"""

from __future__ import annotations

import base64
import copy
import secrets
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import typer
import yaml
from cryptography.fernet import Fernet

from libs.backbone.busauth import (
    ADMIN_USER,
    OFF_THE_BUS,
    authorization_config_from_env,
    new_password,
    password_variable,
    secret_key,
)

KNOWN_KEYS = {"apiVersion", "kind", "resources", "patches", "replicas", "images", "labels"}
NAMESPACE = "pai"
CREDENTIALS = "pai-credentials"
# kind -> (API path prefix, plural, namespaced): the kinds the platform's manifests use.
KINDS: dict[str, tuple[str, str, bool]] = {
    "Namespace": ("/api/v1", "namespaces", False),
    "ConfigMap": ("/api/v1", "configmaps", True),
    "Secret": ("/api/v1", "secrets", True),
    "Service": ("/api/v1", "services", True),
    "ServiceAccount": ("/api/v1", "serviceaccounts", True),
    "PersistentVolumeClaim": ("/api/v1", "persistentvolumeclaims", True),
    "Deployment": ("/apis/apps/v1", "deployments", True),
    "StatefulSet": ("/apis/apps/v1", "statefulsets", True),
    "Role": ("/apis/rbac.authorization.k8s.io/v1", "roles", True),
    "RoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "rolebindings", True),
    "ClusterRole": ("/apis/rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    "Ingress": ("/apis/networking.k8s.io/v1", "ingresses", True),
    "PodDisruptionBudget": ("/apis/policy/v1", "poddisruptionbudgets", True),
}
ORDER = [
    "Namespace",
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "ConfigMap",
]


class DeployError(Exception):
    """A problem an operator can fix; the message names the file or object and the fix."""


# -- rendering -----------------------------------------------------------------------------


def merge(base: Any, patch: Any) -> Any:
    """Strategic-merge-like: maps merge, lists of named maps merge by name, anything else is replaced."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for key, value in patch.items():
            out[key] = merge(base[key], value) if key in base else copy.deepcopy(value)
        return out
    if isinstance(base, list) and isinstance(patch, list) and _named(base) and _named(patch):
        merged = [copy.deepcopy(item) for item in base]
        for item in patch:
            at = next((i for i, old in enumerate(merged) if _name(old) == _name(item)), None)
            if at is None:
                merged.append(copy.deepcopy(item))
            else:
                merged[at] = merge(merged[at], item)
        return merged
    return copy.deepcopy(patch)


def _name(item: dict[str, Any]) -> Any:
    return item.get("name", (item.get("metadata") or {}).get("name"))


def _named(items: list[Any]) -> bool:
    return bool(items) and all(isinstance(i, dict) and _name(i) is not None for i in items)


def _ident(obj: dict[str, Any]) -> tuple[str, str, str]:
    meta = obj.get("metadata") or {}
    return obj.get("kind", ""), meta.get("namespace", ""), meta.get("name", "")


def _load_docs(path: Path) -> list[dict[str, Any]]:
    try:
        docs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]
    except (OSError, yaml.YAMLError) as exc:
        raise DeployError(f"{path}: cannot read it as YAML: {exc}") from exc
    for doc in docs:
        if not isinstance(doc, dict) or "kind" not in doc:
            raise DeployError(f"{path}: every document must be a Kubernetes object with a kind")
    return docs


def load_kustomization(directory: Path) -> list[dict[str, Any]]:
    """The objects a kustomization directory renders to, in resource order."""
    file = directory / "kustomization.yaml"
    if not file.is_file():
        raise DeployError(f"{directory}: no kustomization.yaml; point --manifests at k8s/base or an overlay")
    spec = yaml.safe_load(file.read_text(encoding="utf-8")) or {}
    unknown = sorted(set(spec) - KNOWN_KEYS)
    if unknown:
        raise DeployError(f"{file}: unsupported keys {unknown}; supported: {sorted(KNOWN_KEYS)}")
    objects: list[dict[str, Any]] = []
    for entry in spec.get("resources") or []:
        target = (directory / entry).resolve()
        objects += load_kustomization(target) if target.is_dir() else _load_docs(target)
    for entry in spec.get("patches") or []:
        for patch in _load_docs(directory / entry["path"]):
            at = next((i for i, o in enumerate(objects) if _ident(o) == _ident(patch)), None)
            if at is None:
                kind, ns, name = _ident(patch)
                raise DeployError(
                    f"{file}: patch {entry['path']} targets {kind} {ns}/{name}, which no resource defines"
                )
            objects[at] = merge(objects[at], patch)
    for entry in spec.get("replicas") or []:
        hits = [
            o for o in objects if o["kind"] in ("Deployment", "StatefulSet") and _ident(o)[2] == entry["name"]
        ]
        if not hits:
            raise DeployError(f"{file}: replicas: no Deployment or StatefulSet is named {entry['name']!r}")
        for obj in hits:
            obj["spec"]["replicas"] = int(entry["count"])
    for entry in spec.get("images") or []:
        set_image(objects, entry["name"], entry.get("newName"), entry.get("newTag"))
    for entry in spec.get("labels") or []:
        for obj in objects:
            obj.setdefault("metadata", {}).setdefault("labels", {}).update(entry.get("pairs") or {})
    return objects


def _containers(obj: dict[str, Any]) -> Iterable[dict[str, Any]]:
    pod = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
    yield from pod.get("initContainers") or []
    yield from pod.get("containers") or []


def set_image(objects: list[dict[str, Any]], name: str, new_name: str | None, new_tag: str | None) -> int:
    """Retarget every container image named `name` (any tag); returns how many changed."""
    changed = 0
    for obj in objects:
        for container in _containers(obj):
            repo, _, tag = (
                container["image"].rpartition(":")
                if ":" in container["image"]
                else (container["image"], "", "")
            )
            if repo == name:
                container["image"] = f"{new_name or repo}:{new_tag or tag or 'latest'}"
                changed += 1
    return changed


def packaged_rules() -> dict[str, str]:
    from libs.alerting import default_text
    from libs.failures import default_rules_text

    return {"failure-rules.yaml": default_rules_text(), "alert-rules.yaml": default_text()}


def _env_value(container: dict[str, Any], name: str) -> str | None:
    for item in container.get("env") or []:
        if item.get("name") == name and "value" in item:
            return str(item["value"])
    return None


def _secret_env(name: str, key: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": CREDENTIALS, "key": key}}}


def bus_users(objects: list[dict[str, Any]]) -> list[str]:
    """The services of the rendered Deployments (their PAI_SERVICE_NAME): one bus user each."""
    users = set()
    for obj in objects:
        if obj.get("kind") == "Deployment":
            for container in _containers(obj):
                service = _env_value(container, "PAI_SERVICE_NAME")
                if service and service not in OFF_THE_BUS:
                    users.add(service)
    return sorted(users)


def secure_bus(objects: list[dict[str, Any]]) -> None:
    """Users and permissions in the NATS configuration; each service's own password in its pods."""
    users = bus_users(objects)
    for obj in objects:
        kind, namespace, name = _ident(obj)
        if (kind, namespace, name) == ("ConfigMap", NAMESPACE, "nats-config"):
            data = obj.setdefault("data", {})
            if "authorization" not in data.get("nats.conf", ""):
                data["nats.conf"] = data.get("nats.conf", "") + authorization_config_from_env(users)
        elif (kind, namespace, name) == ("StatefulSet", NAMESPACE, "nats"):
            for container in _containers(obj):
                env = container.setdefault("env", [])
                known = {item.get("name") for item in env}
                for user in [ADMIN_USER, *users]:
                    if password_variable(user) not in known:
                        env.append(_secret_env(password_variable(user), secret_key(user)))
        elif kind == "Deployment":
            for container in _containers(obj):
                service = _env_value(container, "PAI_SERVICE_NAME")
                env = container.get("env") or []
                if (
                    service
                    and service not in OFF_THE_BUS
                    and not any(item.get("name") == "PAI_NATS_USER" for item in env)
                ):
                    env.append({"name": "PAI_NATS_USER", "value": service})
                    env.append(_secret_env("PAI_NATS_PASSWORD", secret_key(service)))


def render(directory: Path) -> list[dict[str, Any]]:
    """The objects to apply: the kustomization, with empty rule files filled from the packaged ones
    and the bus's users added."""
    objects = load_kustomization(directory)
    for obj in objects:
        if _ident(obj) == ("ConfigMap", NAMESPACE, "pai-rules"):
            data = obj.setdefault("data", {})
            for key, text in packaged_rules().items():
                if not data.get(key):
                    data[key] = text
    secure_bus(objects)
    return sorted(objects, key=lambda o: ORDER.index(o["kind"]) if o["kind"] in ORDER else len(ORDER))


def dump(objects: list[dict[str, Any]]) -> str:
    return yaml.safe_dump_all(objects, sort_keys=False, default_flow_style=False)


# -- the cluster ---------------------------------------------------------------------------


def _path(obj: dict[str, Any], *, named: bool) -> str:
    kind, namespace, name = _ident(obj)
    if kind not in KINDS:
        raise DeployError(f"{kind} {name}: not a kind `pai deploy` applies; supported: {sorted(KINDS)}")
    prefix, plural, namespaced = KINDS[kind]
    base = f"{prefix}/namespaces/{namespace}/{plural}" if namespaced else f"{prefix}/{plural}"
    return f"{base}/{name}" if named else base


def _call(api: Any, method: str, path: str, body: Any = None) -> tuple[int, dict[str, Any] | None]:
    """One request through the client's own serialisation and auth; (status, body), body None on 404."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    headers = {"Accept": "application/json", "Content-Type": "application/json"}
    try:
        request = api.param_serialize(
            method, path, header_params=headers, body=body, auth_settings=["BearerToken"]
        )
        response = api.call_api(*request)
        response.read()
        result = api.response_deserialize(response, {"200": "object", "201": "object", "202": "object"})
    except ApiException as exc:
        if exc.status == 404:
            return 404, None
        raise DeployError(f"{method} {path}: {exc.status} {exc.reason}: {exc.body}") from exc
    except HTTPError as exc:
        host = api.configuration.host
        raise DeployError(
            f"cannot reach the cluster at {host}: {exc}; check --kubeconfig and --context"
        ) from exc
    data: dict[str, Any] | None = result.data
    return int(result.status_code), data


def apply(api: Any, objects: list[dict[str, Any]]) -> list[str]:
    """Create or replace every object; returns one line per object saying what happened."""
    lines: list[str] = []
    for obj in objects:
        kind, ns, name = _ident(obj)
        _status, current = _call(api, "GET", _path(obj, named=True))
        if current is None:
            _call(api, "POST", _path(obj, named=False), obj)
            lines.append(f"created {kind} {ns + '/' if ns else ''}{name}")
            continue
        body = copy.deepcopy(obj)
        body["metadata"]["resourceVersion"] = (current.get("metadata") or {}).get("resourceVersion")
        _call(api, "PUT", _path(obj, named=True), body)
        lines.append(f"configured {kind} {ns + '/' if ns else ''}{name}")
    return lines


def ensure_credentials(api: Any, users: Iterable[str] = ()) -> str:
    """The credentials Secret: created once with random values, never overwritten.

    A value it lacks (a bus user of a service added since) is added; existing ones are kept.
    """
    values = {
        "postgres-password": secrets.token_urlsafe(24),
        "admin-password": secrets.token_urlsafe(16),
        "jwt-secret": secrets.token_urlsafe(48),
        # the key job secrets are sealed with (libs/backbone/sealing.py): rest and orchestrator only
        "secrets-key": Fernet.generate_key().decode(),
        # the key the portal's session cookies are sealed with, shared by its replicas
        "portal-session-key": base64.urlsafe_b64encode(secrets.token_bytes(32)).decode(),
        **{secret_key(user): new_password() for user in sorted({ADMIN_USER, *users})},
    }
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": CREDENTIALS, "namespace": NAMESPACE},
        "type": "Opaque",
        "stringData": values,
    }
    _, current = _call(api, "GET", _path(secret, named=True))
    if current is not None:
        stored = dict(current.get("data") or {})
        # The API server turns stringData into data; a value not yet turned is as good.
        kept = set(stored) | set(current.get("stringData") or {})
        missing = {k: v for k, v in values.items() if k not in kept}
        if not missing:
            return f"kept Secret {NAMESPACE}/{CREDENTIALS}"
        body = copy.deepcopy(current)
        body["data"] = {
            **stored,
            **{k: base64.b64encode(v.encode()).decode() for k, v in missing.items()},
        }
        _call(api, "PUT", _path(secret, named=True), body)
        return f"kept Secret {NAMESPACE}/{CREDENTIALS}, added {', '.join(sorted(missing))}"
    _call(api, "POST", _path(secret, named=False), secret)
    return (
        f"created Secret {NAMESPACE}/{CREDENTIALS} (admin password: kubectl -n pai get secret {CREDENTIALS})"
    )


def rollout_status(api: Any, objects: list[dict[str, Any]]) -> list[tuple[str, int, int, bool]]:
    """(name, ready, desired, up to date) of every Deployment and StatefulSet rendered."""
    rows = []
    for obj in objects:
        if obj["kind"] not in ("Deployment", "StatefulSet"):
            continue
        _, current = _call(api, "GET", _path(obj, named=True))
        spec = (current or {}).get("spec") or {}
        status = (current or {}).get("status") or {}
        desired = int(spec.get("replicas", 1))
        ready = int(status.get("readyReplicas") or 0)
        updated = int(status.get("updatedReplicas") or 0)
        fresh = status.get("observedGeneration") == (current or {}).get("metadata", {}).get("generation")
        rows.append((f"{obj['kind']}/{_ident(obj)[2]}", ready, desired, bool(fresh and updated >= desired)))
    return rows


# -- the command ---------------------------------------------------------------------------

deploy_app = typer.Typer(
    no_args_is_help=True, help="Render, apply, inspect and upgrade the platform on Kubernetes."
)


def _manifests(overlay: str) -> Path:
    if Path(overlay).is_dir():
        return Path(overlay)
    root = Path(__file__).resolve().parents[2] / "k8s"
    path = root / "base" if overlay == "base" else root / "overlays" / overlay
    if not path.is_dir():
        raise typer.BadParameter(
            f"{overlay!r} is neither a directory nor one of base, small, large", param_hint="--overlay"
        )
    return path


def _client(kubeconfig: Path | None, context: str | None) -> Any:
    from kubernetes import config

    try:
        if kubeconfig is None and context is None:
            try:
                config.load_incluster_config()  # type: ignore[no-untyped-call]
                from kubernetes.client import ApiClient

                return ApiClient()
            except config.ConfigException:
                pass
        return config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=str(kubeconfig) if kubeconfig else None, context=context
        )
    except (config.ConfigException, OSError) as exc:
        raise typer.BadParameter(
            f"no usable cluster configuration: {exc}", param_hint="--kubeconfig"
        ) from exc


_OVERLAY = typer.Option("small", "--overlay", help="small, large, base, or a kustomization directory")
_KUBECONFIG = typer.Option(None, "--kubeconfig", help="defaults to $KUBECONFIG or ~/.kube/config")
_CONTEXT = typer.Option(None, "--context")


def _rendered(overlay: str) -> list[dict[str, Any]]:
    try:
        return render(_manifests(overlay))
    except DeployError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


@deploy_app.command("render")
def render_command(overlay: str = _OVERLAY, out: Path | None = typer.Option(None, "--out")) -> None:
    """Print (or write) the manifests of an overlay."""
    text = dump(_rendered(overlay))
    if out is None:
        typer.echo(text, nl=False)
    else:
        out.write_text(text, encoding="utf-8")
        typer.echo(f"wrote {out}")


@deploy_app.command("apply")
def apply_command(
    overlay: str = _OVERLAY, kubeconfig: Path | None = _KUBECONFIG, context: str | None = _CONTEXT
) -> None:
    """Create or update every object of an overlay in the cluster."""
    objects = _rendered(overlay)
    api = _client(kubeconfig, context)
    try:
        for line in apply(api, objects[:1]):
            typer.echo(line)
        typer.echo(ensure_credentials(api, bus_users(objects)))
        for line in apply(api, objects[1:]):
            typer.echo(line)
    except DeployError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None


@deploy_app.command("status")
def status_command(
    overlay: str = _OVERLAY, kubeconfig: Path | None = _KUBECONFIG, context: str | None = _CONTEXT
) -> None:
    """Show ready/desired replicas of every service, NATS and PostgreSQL."""
    api = _client(kubeconfig, context)
    try:
        rows = rollout_status(api, _rendered(overlay))
    except DeployError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    for name, ready, desired, fresh in rows:
        typer.echo(f"{name:<32} {ready}/{desired} {'ready' if ready >= desired and fresh else 'progressing'}")
    if not all(ready >= desired and fresh for _, ready, desired, fresh in rows):
        raise typer.Exit(3)


@deploy_app.command("upgrade")
def upgrade_command(
    tag: str = typer.Option(..., "--tag", help="the new version of the platform's images"),
    overlay: str = _OVERLAY,
    kubeconfig: Path | None = _KUBECONFIG,
    context: str | None = _CONTEXT,
    wait: float = typer.Option(600.0, "--wait", help="seconds to wait for the rollout; 0 does not wait"),
) -> None:
    """Move the services and the runtime image to another version, then wait for the rollout."""
    objects = _rendered(overlay)
    for image in ("ghcr.io/pai-platform/services", "ghcr.io/pai-platform/runtime"):
        set_image(objects, image, None, tag)
    for obj in objects:
        if _ident(obj) == ("ConfigMap", NAMESPACE, "pai-config"):
            obj["data"]["PAI_RUNTIME_IMAGE"] = f"ghcr.io/pai-platform/runtime:{tag}"
    api = _client(kubeconfig, context)
    try:
        # A newer version may need credentials the Secret lacks (a bus user per new service).
        typer.echo(ensure_credentials(api, bus_users(objects)))
        for line in apply(api, objects):
            typer.echo(line)
    except DeployError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    deadline = time.monotonic() + wait
    while wait > 0:
        try:
            rows = rollout_status(api, objects)
        except DeployError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from None
        if all(ready >= desired and fresh for _, ready, desired, fresh in rows):
            typer.echo(f"upgraded to {tag}")
            return
        if time.monotonic() > deadline:
            late = [name for name, ready, desired, fresh in rows if ready < desired or not fresh]
            typer.echo(f"error: not rolled out within {wait:g}s: {', '.join(late)}", err=True)
            raise typer.Exit(3)
        time.sleep(2)
