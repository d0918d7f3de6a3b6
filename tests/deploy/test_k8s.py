"""deploy/k8s: rendered with `kubectl kustomize`, validated with kubernetes-validate.

Both run offline: kustomize is built into kubectl, and kubernetes-validate ships
the Kubernetes OpenAPI schemas it checks against.
"""

from __future__ import annotations

import re
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
import yaml

from loopworks.api.hosts import allowed_hosts, host_allowed
from loopworks.deploy.processes import (
    API_COMMAND,
    API_ENV,
    GIT_SERVER_COMMAND,
    WORKER_COMMAND,
    WORKER_ENV,
)
from loopworks.schemas.settings import Settings
from tests.deploy._support import ENV_FILE_NAMES, REPO, require_tool, run

pytestmark = pytest.mark.deploy

K8S = REPO / "deploy" / "k8s"
# The oldest Kubernetes the manifests promise to work on (autoscaling/v2,
# policy/v1 and pod-security labels are all older).
KUBERNETES_VERSION = "1.30.0"
UID = 10001
APPS = ("loopworks-api", "loopworks-worker")
GIT_SERVER = "loopworks-git-server"


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
        ("PersistentVolumeClaim", "loopworks-git"),
        ("Deployment", "loopworks-git-server"),
        ("Service", "loopworks-git"),
        ("NetworkPolicy", "loopworks-git-server"),
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
    for example in K8S.glob("secret*.example.yaml"):
        assert example.name not in kustomization["resources"]
    assert not kustomization.get("secretGenerator")


def test_containers_run_the_processes_commands(resources: dict[tuple[str, str], Any]) -> None:
    assert _container(resources, "loopworks-api")["command"] == list(API_COMMAND)
    assert _container(resources, "loopworks-worker")["command"] == list(WORKER_COMMAND)
    assert _container(resources, GIT_SERVER)["command"] == list(GIT_SERVER_COMMAND)


def test_image_comes_from_the_kustomization(
    resources: dict[tuple[str, str], Any], kustomization: dict[str, Any]
) -> None:
    (image,) = kustomization["images"]
    expected = f"{image['newName']}:{image['newTag']}"
    assert re.fullmatch(r"[0-9][\w.-]*", image["newTag"]), "pin a version tag"
    for name in (*APPS, GIT_SERVER):
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
    kind = deployment.removeprefix("loopworks-")
    assert sources == {"loopworks-config", "loopworks-secrets", f"loopworks-{kind}-secrets"}
    own = {item["name"] for item in container.get("env", [])}
    secret_example = (K8S / "secret.example.yaml").read_text() + (
        K8S / f"secret-{kind}.example.yaml"
    ).read_text()
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
    for name in (*APPS, GIT_SERVER):
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
        assert {"/srv/git" if name == GIT_SERVER else "/data", "/tmp"} <= writable


def test_the_api_and_workers_share_no_volume(resources: dict[tuple[str, str], Any]) -> None:
    # Temporal and the git server are all they share: each pod's data directory is its
    # own cache, so workers run on any node and no storage needs ReadWriteMany.
    data_dir = resources[("ConfigMap", "loopworks-config")]["data"]["LOOPS_DATA_DIR"]
    for name in APPS:
        volumes = {v["name"]: v for v in _pod_spec(resources, name)["volumes"]}
        assert "emptyDir" in volumes["data"], name
        assert not any("persistentVolumeClaim" in v for v in volumes.values()), name
        mounts = {m["name"]: m["mountPath"] for m in _container(resources, name)["volumeMounts"]}
        assert mounts["data"] == data_dir
    claims = [doc for (kind, _), doc in resources.items() if kind == "PersistentVolumeClaim"]
    assert [claim["metadata"]["name"] for claim in claims] == ["loopworks-git"]
    assert claims[0]["spec"]["accessModes"] == ["ReadWriteOnce"]
    volumes = {v["name"]: v for v in _pod_spec(resources, GIT_SERVER)["volumes"]}
    assert volumes["repositories"]["persistentVolumeClaim"]["claimName"] == "loopworks-git"
    server = resources[("Deployment", GIT_SERVER)]["spec"]
    assert server["replicas"] == 1 and server["strategy"]["type"] == "Recreate"


def test_the_default_origin_is_the_git_servers_repository(
    resources: dict[tuple[str, str], Any],
) -> None:
    url = urllib.parse.urlsplit(
        resources[("ConfigMap", "loopworks-config")]["data"]["LOOPS_DEFAULT_ORIGIN"]
    )
    service = resources[("Service", "loopworks-git")]["spec"]
    server = _container(resources, GIT_SERVER)
    env = {item["name"]: item["value"] for item in server["env"]}
    (port,) = server["ports"]
    assert url.scheme == "git"
    assert url.hostname == "loopworks-git"
    assert url.port == service["ports"][0]["port"] == int(env["LOOPS_GIT_PORT"])
    assert port["containerPort"] == int(env["LOOPS_GIT_PORT"])
    assert service["ports"][0]["targetPort"] == port["name"]
    assert url.path == f"/{env['LOOPS_GIT_REPO']}"
    assert (
        service["selector"]
        == (resources[("Deployment", GIT_SERVER)]["spec"]["selector"]["matchLabels"])
    )
    probe = server["readinessProbe"]["exec"]["command"]
    assert url._replace(netloc=f"127.0.0.1:{url.port}").geturl() in probe


def test_only_the_api_and_workers_reach_the_git_server(
    resources: dict[tuple[str, str], Any],
) -> None:
    policy = resources[("NetworkPolicy", "loopworks-git-server")]["spec"]
    assert (
        policy["podSelector"]["matchLabels"]
        == (resources[("Deployment", GIT_SERVER)]["spec"]["selector"]["matchLabels"])
    )
    (rule,) = policy["ingress"]
    (source,) = rule["from"]
    (expression,) = source["podSelector"]["matchExpressions"]
    admitted = set(expression["values"])
    for name in APPS:
        labels = resources[("Deployment", name)]["spec"]["template"]["metadata"]["labels"]
        assert labels[expression["key"]] in admitted, name
    git_labels = resources[("Deployment", GIT_SERVER)]["spec"]["template"]["metadata"]["labels"]
    assert git_labels[expression["key"]] not in admitted
    assert rule["ports"] == [{"protocol": "TCP", "port": 9418}]


def test_api_probes_and_service(resources: dict[tuple[str, str], Any]) -> None:
    api = _container(resources, "loopworks-api")
    assert api["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert api["readinessProbe"]["httpGet"]["path"] == "/readyz"
    (port,) = api["ports"]
    env = {item["name"]: item["value"] for item in api["env"]}
    assert int(env["LOOPS_API_PORT"]) == port["containerPort"]
    assert env["LOOPS_API_HOST"] == "0.0.0.0"
    # The API answers only hosts it knows: the probes name one, clients the Service's.
    hosts = allowed_hosts(
        Settings(
            LOOPS_API_HOST=env["LOOPS_API_HOST"],
            LOOPS_API_ALLOWED_HOSTS=env["LOOPS_API_ALLOWED_HOSTS"],
        )
    )
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        headers = {h["name"]: h["value"] for h in api[probe]["httpGet"]["httpHeaders"]}
        assert host_allowed(headers["Host"], hosts), probe
    for name in ("loopworks-api", "loopworks-api.loopworks.svc.cluster.local"):
        assert host_allowed(f"{name}:8000", hosts), name
    assert not host_allowed("evil.example", hosts)
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


TEMPORAL_POLICY = K8S / "temporal-networkpolicy.yaml"


def test_temporal_frontend_admits_only_the_api_and_workers(
    resources: dict[tuple[str, str], Any], kustomization: dict[str, Any]
) -> None:
    """Temporal's frontend, where it runs in the cluster, admits loopworks' API and
    workers (and Temporal's own pods), nothing else; its UI only Temporal's own pods."""
    assert TEMPORAL_POLICY.name not in kustomization["resources"], "Temporal's namespace"
    policies = {
        doc["metadata"]["name"]: doc for doc in yaml.safe_load_all(TEMPORAL_POLICY.read_text())
    }
    frontend = policies["temporal-frontend-from-loopworks"]
    assert frontend["metadata"]["namespace"] == "temporal"
    spec = frontend["spec"]
    assert spec["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "frontend"
    assert spec["policyTypes"] == ["Ingress"]
    loopworks, own = spec["ingress"]
    (source,) = loopworks["from"]
    assert source["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": resources[("Namespace", "loopworks")]["metadata"]["name"]
    }
    (expression,) = source["podSelector"]["matchExpressions"]
    admitted = set(expression["values"])
    for name in APPS:
        labels = resources[("Deployment", name)]["spec"]["template"]["metadata"]["labels"]
        assert labels[expression["key"]] in admitted, name
    git_labels = resources[("Deployment", GIT_SERVER)]["spec"]["template"]["metadata"]["labels"]
    assert git_labels[expression["key"]] not in admitted
    assert loopworks["ports"] == [{"protocol": "TCP", "port": 7233}]
    # Temporal's own pods: a podSelector alone means this (Temporal's) namespace only.
    assert own == {"from": [{"podSelector": {}}]}
    web = policies["temporal-web-internal"]["spec"]
    assert web["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "web"
    assert web["ingress"] == [{"from": [{"podSelector": {}}]}]


def test_manifests_validate_against_kubernetes_schemas(rendered: Path) -> None:
    validator = require_tool("kubernetes-validate")
    for path in (rendered, *K8S.glob("secret*.example.yaml"), TEMPORAL_POLICY):
        result = run([validator, "--strict", "--quiet", "-k", KUBERNETES_VERSION, str(path)])
        assert result.returncode == 0, f"{path.name}:\n{result.stdout}{result.stderr}"


def test_each_app_gets_only_its_own_secrets(resources: dict[tuple[str, str], Any]) -> None:
    """The API never calls the model and the workers serve no HTTP: neither Secret it reads
    holds the other's. Both read origins, so the shared one has the git credentials."""

    def keys(name: str) -> set[str]:
        return set(yaml.safe_load((K8S / name).read_text())["stringData"])

    shared = keys("secret.example.yaml")
    api, worker = keys("secret-api.example.yaml"), keys("secret-worker.example.yaml")
    assert "LOOPS_GIT_CREDENTIALS" in shared
    assert not {"ANTHROPIC_API_KEY", "LOOPS_API_TOKENS", "GIT_TOKEN"} & shared
    assert "LOOPS_API_TOKENS" in api and "ANTHROPIC_API_KEY" not in api
    assert "ANTHROPIC_API_KEY" in worker and "LOOPS_API_TOKENS" not in worker
    for deployment, other in (("api", "worker"), ("worker", "api")):
        refs = [
            ref.get("secretRef", {}).get("name")
            for ref in _container(resources, f"loopworks-{deployment}")["envFrom"]
        ]
        assert f"loopworks-{other}-secrets" not in refs
