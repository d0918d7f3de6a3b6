"""The payload keys reach the API and the workers from one place in each deployment: a
worker without them could run nothing the API started, an API without them read nothing
a worker wrote (service/codec.py). And nowhere in plain configuration."""

from __future__ import annotations

import pytest
import yaml

from tests.deploy._support import REPO, mentioned_env_names

pytestmark = pytest.mark.deploy

NAME = "LOOPS_PAYLOAD_KEYS"


def test_compose_gives_both_the_keys_from_the_file_they_share() -> None:
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]
    shared = "loopworks.secrets.env"
    for service in ("api", "worker"):
        assert shared in compose[service]["env_file"], service
        assert NAME not in (compose[service].get("environment") or {}), service
    assert NAME in mentioned_env_names(REPO / f"{shared}.example")
    for own in ("loopworks.api.env", "loopworks.worker.env"):
        assert NAME not in mentioned_env_names(REPO / f"{own}.example"), own
    # The quick start makes the key it needs.
    quick_start = f'echo "{NAME}=k1:$(openssl rand -base64 32)"'
    assert quick_start in (REPO / "docker-compose.yml").read_text()


def test_kubernetes_keeps_the_keys_in_the_secret_both_mount() -> None:
    k8s = REPO / "deploy" / "k8s"
    shared = yaml.safe_load((k8s / "secret.example.yaml").read_text())
    assert shared["metadata"]["name"] == "loopworks-secrets"
    assert NAME in shared["stringData"]
    for deployment in ("api-deployment.yaml", "worker-deployment.yaml"):
        spec = yaml.safe_load((k8s / deployment).read_text())["spec"]["template"]["spec"]
        [container] = spec["containers"]
        mounted = {ref["secretRef"]["name"] for ref in container["envFrom"] if "secretRef" in ref}
        assert "loopworks-secrets" in mounted, deployment
    configmap = yaml.safe_load((k8s / "configmap.yaml").read_text())
    assert NAME not in configmap["data"]
    for own in ("secret-api.example.yaml", "secret-worker.example.yaml"):
        assert NAME not in (k8s / own).read_text(), own
