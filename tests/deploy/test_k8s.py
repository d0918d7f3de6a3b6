"""deploy/k8s: rendered with `kubectl kustomize`, validated with kubernetes-validate.

Both run offline: kustomize is built into kubectl, and kubernetes-validate ships
the Kubernetes OpenAPI schemas it checks against.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from loopworks.deploy.processes import API_COMMAND, API_ENV, WORKER_COMMAND, WORKER_ENV
from tests.deploy._support import ENV_FILE_NAMES, REPO, require_tool, run

pytestmark = pytest.mark.deploy

K8S = REPO / "deploy" / "k8s"
# The oldest Kubernetes the manifests promise to work on (autoscaling/v2,
# policy/v1 and pod-security labels are all older).
KUBERNETES_VERSION = "1.30.0"
UID = 10001


@pytest.fixture(scope="module")
def kustomization() -> dict[str, Any]:
    return yaml.safe_load((K8S / "kustomization.yaml").read_text())


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    kubectl = require_tool("kubectl")
    result = run([kubectl, "kustomize", str(K8S)])
    assert result.returncode == 0, result.stderr
    out = tmp_path_factory.mktemp("k8s") / "rendered.yaml"
    out.write_text(result.stdout)
    return out


@pytest.fixture(scope="module")
def resources(rendered: Path) -> dict[tuple[str, str], dict[str, Any]]:
    docs = [doc for doc in yaml.safe_load_all(rendered.read_text()) if doc]
    by_key = {(doc["kind"], doc["metadata"]["name"]): doc for doc in docs}
    assert len(by_key) == len(docs), "two resources share a kind and name"
    return by_key


def _pod_spec(resources: dict[tuple[str, str], Any], name: str) -> dict[str, Any]:
    return resources[("Deployment", name)]["spec"]["template"]["spec"]


def _container(resources: dict[tuple[str, str], Any], name: str) -> dict[str, Any]:
    containers = _pod_spec(resources, name)["containers"]
    assert len(containers) == 1
    return containers[0]


def test_renders_every_resource(resources: dict[tuple[str, str], Any]) -> None:
    assert set(resources) == {
        ("Namespace", "loopworks"),
        ("ServiceAccount", "loopworks"),
        ("ConfigMap", "loopworks-config"),
        ("PersistentVolumeClaim", "loopworks-data"),
        ("Deployment", "loopworks-api"),
        ("Service", "loopworks-api"),
        ("Deployment", "loopworks-worker"),
        ("HorizontalPodAutoscaler", "loopworks-worker"),
        ("PodDisruptionBudget", "loopworks-api"),
        ("PodDisruptionBudget", "loopworks-worker"),
    }
    for (kind, name), doc in resources.items():
        if kind != "Namespace":
            assert doc["metadata"]["namespace"] == "loopworks", (kind, name)


def test_the_example_secret_is_never_applied(kustomization: dict[str, Any]) -> None:
    assert "secret.example.yaml" not in kustomization["resources"]
    assert not kustomization.get("secretGenerator")


def test_containers_run_the_processes_commands(resources: dict[tuple[str, str], Any]) -> None:
    assert _container(resources, "loopworks-api")["command"] == list(API_COMMAND)
    assert _container(resources, "loopworks-worker")["command"] == list(WORKER_COMMAND)


def test_image_comes_from_the_kustomization(
    resources: dict[tuple[str, str], Any], kustomization: dict[str, Any]
) -> None:
    (image,) = kustomization["images"]
    expected = f"{image['newName']}:{image['newTag']}"
    assert re.fullmatch(r"[0-9][\w.-]*", image["newTag"]), "pin a version tag"
    for name in ("loopworks-api", "loopworks-worker"):
        assert _container(resources, name)["image"] == expected


@pytest.mark.parametrize(
    ("deployment", "names"), [("loopworks-api", API_ENV), ("loopworks-worker", WORKER_ENV)]
)
def test_environment_covers_deploy_processes(
    resources: dict[tuple[str, str], Any], deployment: str, names: tuple[str, ...]
) -> None:
    container = _container(resources, deployment)
    config = resources[("ConfigMap", "loopworks-config")]["data"]
    sources = {
        ref.get("configMapRef", ref.get("secretRef"))["name"] for ref in container["envFrom"]
    }
    assert sources == {"loopworks-config", "loopworks-secrets"}
    own = {item["name"] for item in container.get("env", [])}
    secret_example = (K8S / "secret.example.yaml").read_text()
    for name in names:
        if name in ENV_FILE_NAMES:
            assert name in secret_example, f"{name}: document it in secret.example.yaml"
            assert name not in config and name not in own
        else:
            assert name in config or name in own, f"{deployment}: {name} not set"


def test_temporal_connection_uses_the_sdk_environment_configuration(
    resources: dict[tuple[str, str], Any],
) -> None:
    config = resources[("ConfigMap", "loopworks-config")]["data"]
    assert {"TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE", "TEMPORAL_TLS"} <= set(config)
    configmap_text = (K8S / "configmap.yaml").read_text()
    for name in ("TEMPORAL_TLS_CLIENT_CERT_PATH", "TEMPORAL_TLS_CLIENT_KEY_PATH"):
        assert f'{name}: "/etc/temporal/tls/' in configmap_text, name
    secret = yaml.safe_load((K8S / "secret.example.yaml").read_text())
    assert "TEMPORAL_API_KEY" in secret["stringData"]
    for name in ("loopworks-api", "loopworks-worker"):
        mounts = {m["name"]: m for m in _container(resources, name)["volumeMounts"]}
        assert mounts["temporal-tls"]["mountPath"] == "/etc/temporal/tls"
        volume = next(
            v for v in _pod_spec(resources, name)["volumes"] if v["name"] == "temporal-tls"
        )
        assert volume["secret"]["optional"] is True


def test_pods_run_non_root_with_a_read_only_root(resources: dict[tuple[str, str], Any]) -> None:
    for name in ("loopworks-api", "loopworks-worker"):
        pod = _pod_spec(resources, name)
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] == UID
        assert pod["securityContext"]["fsGroup"] == UID
        assert pod["serviceAccountName"] == "loopworks"
        assert pod["automountServiceAccountToken"] is False
        context = _container(resources, name)["securityContext"]
        assert context["readOnlyRootFilesystem"] is True
        assert context["allowPrivilegeEscalation"] is False
        assert context["capabilities"]["drop"] == ["ALL"]
        writable = {m["mountPath"] for m in _container(resources, name)["volumeMounts"]}
        assert {"/data", "/tmp"} <= writable


def test_every_pod_mounts_the_shared_data_volume(resources: dict[tuple[str, str], Any]) -> None:
    pvc = resources[("PersistentVolumeClaim", "loopworks-data")]
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    data_dir = resources[("ConfigMap", "loopworks-config")]["data"]["LOOPS_DATA_DIR"]
    for name in ("loopworks-api", "loopworks-worker"):
        volumes = {v["name"]: v for v in _pod_spec(resources, name)["volumes"]}
        assert volumes["data"]["persistentVolumeClaim"]["claimName"] == "loopworks-data"
        mounts = {m["name"]: m["mountPath"] for m in _container(resources, name)["volumeMounts"]}
        assert mounts["data"] == data_dir


def test_api_probes_and_service(resources: dict[tuple[str, str], Any]) -> None:
    api = _container(resources, "loopworks-api")
    assert api["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert api["readinessProbe"]["httpGet"]["path"] == "/readyz"
    (port,) = api["ports"]
    env = {item["name"]: item["value"] for item in api["env"]}
    assert int(env["LOOPS_API_PORT"]) == port["containerPort"]
    assert env["LOOPS_API_HOST"] == "0.0.0.0"
    service = resources[("Service", "loopworks-api")]["spec"]
    assert (
        service["selector"]
        == resources[("Deployment", "loopworks-api")]["spec"]["selector"]["matchLabels"]
    )
    assert service["ports"][0]["targetPort"] == port["name"]


def test_workers_autoscale_on_cpu(resources: dict[tuple[str, str], Any]) -> None:
    hpa = resources[("HorizontalPodAutoscaler", "loopworks-worker")]
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "loopworks-worker",
    }
    assert 1 <= hpa["spec"]["minReplicas"] < hpa["spec"]["maxReplicas"]
    (metric,) = hpa["spec"]["metrics"]
    assert metric["type"] == "Resource" and metric["resource"]["name"] == "cpu"
    worker = resources[("Deployment", "loopworks-worker")]
    assert "replicas" not in worker["spec"], "the HPA owns the replica count"
    assert _container(resources, "loopworks-worker")["resources"]["requests"]["cpu"]
    assert worker["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] >= 60


def test_manifests_validate_against_kubernetes_schemas(rendered: Path) -> None:
    validator = require_tool("kubernetes-validate")
    for path in (rendered, K8S / "secret.example.yaml"):
        result = run([validator, "--strict", "--quiet", "-k", KUBERNETES_VERSION, str(path)])
        assert result.returncode == 0, f"{path.name}:\n{result.stdout}{result.stderr}"
