"""docker-compose.yml, .env, the image and the Temporal/OTel files the stack mounts.

The static checks read the files with PyYAML; the last tests run a real Compose
implementation (`docker-compose config`, no daemon needed) over the same file.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import time
import tomllib
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
    GIT_SERVER_SCRIPT,
    SEARCH_ATTRIBUTES,
    WORKER_COMMAND,
    WORKER_ENV,
)
from loopworks.schemas.settings import Settings
from tests.deploy._support import (
    ENV_FILE_NAMES,
    REPO,
    mentioned_env_names,
    read_dotenv,
    require_tool,
    run,
)

pytestmark = pytest.mark.deploy

COMPOSE_FILE = REPO / "docker-compose.yml"
SECRETS_FILE = "loopworks.secrets.env"
SECRETS_EXAMPLE = REPO / "loopworks.secrets.env.example"
# Each app service's env files: what both need, then its own secrets only.
ENV_FILES = {
    "api": [SECRETS_FILE, "loopworks.api.env"],
    "worker": [SECRETS_FILE, "loopworks.worker.env"],
}


def _mentioned(files: list[str]) -> set[str]:
    """Names the examples of `files` assign (commented out or not)."""
    return set().union(*(mentioned_env_names(REPO / f"{name}.example") for name in files))


DOCKERFILE = REPO / "deploy" / "Dockerfile"

LONG_RUNNING = {
    "postgresql",
    "temporal",
    "temporal-ui",
    "jaeger",
    "otel-collector",
    "git-server",
    "api",
    "worker",
}
APPS = ("api", "worker")
ONE_SHOT = {"temporal-schema", "temporal-namespace"}
PUBLISHED = {"api": 8000, "temporal-ui": 8080, "jaeger": 16686, "temporal": 7233}
# ${VAR:-default} overrides a user may export; everything else must come from .env.
RUNTIME_OVERRIDES = {"LOOPS_BIND_ADDRESS", "TEMPORAL_DB_PASSWORD", "LOOPS_API_ALLOWED_HOSTS"}
PINNED_IMAGE = re.compile(r"^[a-z0-9][a-z0-9._/-]*:(?P<tag>[0-9][A-Za-z0-9._-]*)$")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE_FILE.read_text())


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, Any]:
    return compose["services"]


@pytest.fixture(scope="module")
def dotenv() -> dict[str, str]:
    return read_dotenv(REPO / ".env")


def _resolve(value: str, env: dict[str, str]) -> str:
    return re.sub(r"\$\{([A-Z0-9_]+)\}", lambda m: env[m.group(1)], value)


def _environment(service: dict[str, Any]) -> dict[str, Any]:
    env = service.get("environment", {})
    assert isinstance(env, dict), "use the mapping form of `environment`"
    return env


def _published_ports(service: dict[str, Any]) -> set[int]:
    ports = set()
    for entry in service.get("ports", []):
        host_and_container = str(entry).rsplit(":", 2)
        assert len(host_and_container) == 3, f"publish with an explicit bind address: {entry}"
        assert host_and_container[1] == host_and_container[2], entry
        ports.add(int(host_and_container[2]))
    return ports


# ---------------------------------------------------------------- services and images


def test_the_stack_has_every_service(services: dict[str, Any]) -> None:
    assert set(services) == LONG_RUNNING | ONE_SHOT


def test_dotenv_holds_only_pinned_image_versions(dotenv: dict[str, str]) -> None:
    assert dotenv, ".env is empty"
    for key, value in dotenv.items():
        assert key.endswith("_IMAGE"), f".env is for image versions only, found {key}"
        match = PINNED_IMAGE.match(value)
        assert match, f"{key}={value} is not pinned to a version tag"
        assert "latest" not in match["tag"], f"{key}={value}"


def test_every_image_is_a_variable_from_dotenv(
    services: dict[str, Any], dotenv: dict[str, str]
) -> None:
    for name, service in services.items():
        image = service["image"]
        match = re.fullmatch(r"\$\{([A-Z0-9_]+)\}", image)
        assert match, f"{name}: image must be ${{VAR}} from .env, is {image!r}"
        assert match.group(1) in dotenv, f"{name}: {match.group(1)} missing from .env"
        assert PINNED_IMAGE.match(_resolve(image, dotenv)), name


def test_every_interpolation_resolves_from_dotenv_or_has_a_default(dotenv: dict[str, str]) -> None:
    text = COMPOSE_FILE.read_text()
    for match in re.finditer(r"\$\{([A-Z0-9_]+)(:-[^}]*)?\}", text):
        name, default = match.group(1), match.group(2)
        if name in RUNTIME_OVERRIDES:
            assert default, f"${{{name}}} needs a :-default"
        else:
            assert name in dotenv, f"${{{name}}} is neither in .env nor a known override"


def test_versions_agree_across_files(dotenv: dict[str, str]) -> None:
    arg = re.search(r"^ARG PYTHON_IMAGE=(\S+)$", DOCKERFILE.read_text(), re.M)
    assert arg and arg.group(1) == dotenv["PYTHON_IMAGE"], "Dockerfile ARG default != .env"
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert dotenv["LOOPWORKS_IMAGE"].endswith(f":{version}"), "image tag != pyproject version"
    server_tag = dotenv["TEMPORAL_SERVER_IMAGE"].rsplit(":", 1)[1]
    tools_tag = dotenv["TEMPORAL_ADMIN_TOOLS_IMAGE"].rsplit(":", 1)[1]
    assert server_tag == tools_tag, "admin-tools must match the server (schema versions)"


def test_api_and_worker_run_one_image_built_from_deploy_dockerfile(
    services: dict[str, Any],
) -> None:
    api, worker, git_server = services["api"], services["worker"], services["git-server"]
    assert api["image"] == worker["image"] == git_server["image"]
    for service in (api, worker, git_server):
        assert service["build"]["context"] == "."
        assert service["build"]["dockerfile"] == "deploy/Dockerfile"
        assert service["build"]["args"]["PYTHON_IMAGE"] == "${PYTHON_IMAGE}"


# ---------------------------------------------------------------- health and ordering


def test_long_running_services_have_healthchecks(services: dict[str, Any]) -> None:
    for name in LONG_RUNNING:
        check = services[name].get("healthcheck")
        assert check and check.get("test"), f"{name} has no healthcheck"
        assert check["test"][0] in {"CMD", "CMD-SHELL"}, name
        assert not check.get("disable"), name
        assert services[name].get("restart") == "unless-stopped", name


def test_one_shot_jobs_do_not_restart_or_publish(services: dict[str, Any]) -> None:
    for name in ONE_SHOT:
        assert services[name].get("restart") == "no", name
        assert not services[name].get("ports"), name


def test_depends_on_waits_for_health_or_completion(services: dict[str, Any]) -> None:
    for name, service in services.items():
        for target, spec in service.get("depends_on", {}).items():
            assert isinstance(spec, dict), f"{name}: depends_on {target} needs a condition"
            condition = spec["condition"]
            if target in ONE_SHOT:
                assert condition == "service_completed_successfully", (name, target)
            else:
                assert condition == "service_healthy", (name, target)
                assert "healthcheck" in services[target], (name, target)


def test_start_up_order(services: dict[str, Any]) -> None:
    def waits_for(name: str) -> set[str]:
        return set(services[name].get("depends_on", {}))

    assert "postgresql" in waits_for("temporal-schema")
    assert {"postgresql", "temporal-schema"} <= waits_for("temporal")
    assert "temporal" in waits_for("temporal-namespace")
    assert "temporal" in waits_for("temporal-ui")
    assert "jaeger" in waits_for("otel-collector")
    for app in APPS:
        assert {"temporal-namespace", "git-server", "otel-collector"} <= waits_for(app)


# ---------------------------------------------------------------- the app containers


def test_app_commands_are_the_ones_the_tests_run(services: dict[str, Any]) -> None:
    assert services["api"]["command"] == list(API_COMMAND)
    assert services["worker"]["command"] == list(WORKER_COMMAND)


def test_the_workers_make_the_gc_schedule_on_the_queue_the_api_starts_the_gc_on(
    services: dict[str, Any],
) -> None:
    """Each worker makes the gc's Schedule at start, one per namespace and task queue
    (worker/schedule.py; tests/integration/test_retention.py sees this command make it):
    the compose workers run that command, where `POST /gc` starts its gc, and their env
    file says how to set the policy they read."""
    worker, api = (_environment(services[name]) for name in ("worker", "api"))
    assert services["worker"]["command"] == list(WORKER_COMMAND)
    for name in ("TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE", "LOOPS_TASK_QUEUE"):
        assert worker[name] == api[name], name
    settings = {
        str(field.alias)
        for name, field in Settings.model_fields.items()
        if name.startswith("retention_")
    }
    mentioned = _mentioned(ENV_FILES["worker"])
    assert settings and settings <= mentioned
    assert "LOOPS_API_ADMIN_TOKENS" in _mentioned(ENV_FILES["api"])


@pytest.mark.parametrize(("service_name", "names"), [("api", API_ENV), ("worker", WORKER_ENV)])
def test_app_environment_covers_deploy_processes(
    services: dict[str, Any], service_name: str, names: tuple[str, ...]
) -> None:
    service = services[service_name]
    environment = _environment(service)
    files = ENV_FILES[service_name]
    assert service["env_file"] == files
    from_file = _mentioned(files)
    for name in names:
        if name in ENV_FILE_NAMES:
            assert name not in environment, f"{name} in environment would override {files}"
            assert name in from_file, f"{name} missing from the examples of {files}"
        else:
            assert name in environment, f"{service_name}: {name} not in environment"
    assert environment["LOOPS_DATA_DIR"] == "/data"
    assert environment["LOOPS_TASK_QUEUE"] == "loopworks"
    assert environment["TEMPORAL_ADDRESS"] == "temporal:7233"
    assert environment["OTEL_SERVICE_NAME"] == f"loopworks-{service_name}"
    assert environment["OTEL_EXPORTER_OTLP_ENDPOINT"].startswith("http://otel-collector:")


def test_api_listens_on_all_interfaces_on_its_published_port(services: dict[str, Any]) -> None:
    environment = _environment(services["api"])
    assert environment["LOOPS_API_HOST"] == "0.0.0.0"
    assert int(environment["LOOPS_API_PORT"]) == PUBLISHED["api"]
    probe = " ".join(services["api"]["healthcheck"]["test"])
    assert "/healthz" in probe and "urllib" in probe


def test_secrets_come_only_from_the_ignored_env_file(services: dict[str, Any]) -> None:
    secret_names = {"ANTHROPIC_API_KEY", "LOOPS_API_TOKENS", "LOOPS_GIT_CREDENTIALS"}
    assert secret_names <= _mentioned(ENV_FILES["api"] + ENV_FILES["worker"])
    for name, service in services.items():
        leaked = secret_names & set(_environment(service))
        assert not leaked, f"{name} sets {leaked} in environment"
    for env_file in {*ENV_FILES["api"], *ENV_FILES["worker"]}:
        ignored = run(["git", "check-ignore", "-q", env_file], cwd=REPO)
        assert ignored.returncode == 0, f"{env_file} must be git-ignored"
    dotenv_ignored = run(["git", "check-ignore", "-q", ".env"], cwd=REPO)
    assert dotenv_ignored.returncode == 1, ".env (image versions) must stay committable"


def test_the_deploy_readmes_compose_steps_make_every_env_file(
    services: dict[str, Any], tmp_path: Path
) -> None:
    """Compose refuses a service whose env file is missing: the steps copied only the
    shared one, so `docker compose up` stopped at `Couldn't find env file`."""
    text = (REPO / "deploy" / "README.md").read_text()
    block = text.split("## Compose", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    steps = "\n".join(line for line in block.splitlines() if not line.startswith("docker "))
    copy = tmp_path / "checkout"
    copy.mkdir()
    for example in REPO.glob("loopworks.*.env.example"):
        shutil.copy(example, copy / example.name)
    done = subprocess.run(["sh", "-ec", steps], cwd=copy, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    wanted = {name for service in ("api", "worker") for name in services[service]["env_file"]}
    assert wanted == {*ENV_FILES["api"], *ENV_FILES["worker"]}
    assert sorted(name for name in wanted if not (copy / name).is_file()) == []


def test_each_app_service_gets_only_its_own_secrets(services: dict[str, Any]) -> None:
    """The API never calls the model and the worker serves no HTTP: neither holds the
    other's secret. Both read origins, so both get the git credentials."""
    api, worker = _mentioned(ENV_FILES["api"]), _mentioned(ENV_FILES["worker"])
    assert "LOOPS_API_TOKENS" in api and "LOOPS_API_TOKENS" not in worker
    assert "ANTHROPIC_API_KEY" in worker and "ANTHROPIC_API_KEY" not in api
    assert "LOOPS_GIT_CREDENTIALS" in api & worker
    for name in APPS:
        assert "GIT_TOKEN" not in _mentioned(ENV_FILES.get(name, [])), "the old askpass token"


def test_the_image_answers_no_git_prompt_for_any_host() -> None:
    """The any-host askpass helper and the system-wide `safe.directory '*'` are gone: git
    credentials come only from loopworks' own host-scoped helper (workspace/runner.py)."""
    dockerfile = (REPO / "deploy" / "Dockerfile").read_text()
    instructions = [line for line in dockerfile.splitlines() if not line.lstrip().startswith("#")]
    text = "\n".join(instructions)
    assert "GIT_ASKPASS" not in text and "askpass" not in text
    assert "safe.directory" not in text


def test_workers_scale(services: dict[str, Any]) -> None:
    for name, service in services.items():
        assert "container_name" not in service, f"{name}: container_name blocks --scale"
    assert not services["worker"].get("ports"), "a fixed host port blocks --scale worker=N"


def test_published_ports(services: dict[str, Any]) -> None:
    for name, service in services.items():
        assert _published_ports(service) == ({PUBLISHED[name]} if name in PUBLISHED else set())


def _bind_addresses(service: dict[str, Any]) -> set[str]:
    return {str(entry).rsplit(":", 2)[0] for entry in service.get("ports", [])}


def test_only_the_api_may_be_published_beyond_loopback(services: dict[str, Any]) -> None:
    """Temporal's frontend and UI and Jaeger have no authentication: whatever
    LOOPS_BIND_ADDRESS says, they stay on 127.0.0.1; only the API, which wants tokens
    when it is exposed, follows it."""
    assert _bind_addresses(services["api"]) == {"${LOOPS_BIND_ADDRESS:-127.0.0.1}"}
    for name in PUBLISHED.keys() - {"api"}:
        assert _bind_addresses(services[name]) == {"127.0.0.1"}, name


def test_the_api_answers_its_service_name_and_its_healthcheck(
    services: dict[str, Any],
) -> None:
    environment = _environment(services["api"])
    allowed = re.sub(
        r"\$\{LOOPS_API_ALLOWED_HOSTS:-([^}]*)\}", r"\1", environment["LOOPS_API_ALLOWED_HOSTS"]
    )
    settings = Settings(
        LOOPS_API_HOST=environment["LOOPS_API_HOST"], LOOPS_API_ALLOWED_HOSTS=allowed
    )
    hosts = allowed_hosts(settings)
    assert host_allowed(f"api:{PUBLISHED['api']}", hosts), "other containers use `api`"
    probe = " ".join(services["api"]["healthcheck"]["test"])
    probed = re.search(r"http://([^:/']+)", probe)
    assert probed and host_allowed(f"{probed.group(1)}:8000", hosts), probe
    assert not host_allowed("evil.example", hosts)


# ---------------------------------------------------------------- volumes and mounts


def test_named_volumes_hold_the_state(compose: dict[str, Any], services: dict[str, Any]) -> None:
    assert set(compose["volumes"]) == {"postgres-data", "git-data"}
    assert "postgres-data:/var/lib/postgresql/data" in services["postgresql"]["volumes"]
    root = _environment(services["git-server"])["LOOPS_GIT_ROOT"]
    assert services["git-server"]["volumes"] == [f"git-data:{root}"]


def test_the_api_and_workers_share_no_volume(services: dict[str, Any]) -> None:
    # Temporal and the git server are all they share: each data directory is the
    # container's own cache, so workers may run on any host.
    for app in APPS:
        assert not services[app].get("volumes"), f"{app} mounts {services[app]['volumes']}"
        assert _environment(services[app])["LOOPS_DATA_DIR"] == "/data"


def test_bind_mounts_point_at_committed_files(services: dict[str, Any]) -> None:
    for name, service in services.items():
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            if source.startswith("./"):
                assert (REPO / source).exists(), f"{name}: {source} does not exist"
                assert volume.endswith(":ro"), f"{name}: mount {source} read-only"


# ---------------------------------------------------------------- the git server


def _git_server_url(services: dict[str, Any]) -> str:
    server = _environment(services["git-server"])
    return f"git://git-server:{server['LOOPS_GIT_PORT']}/{server['LOOPS_GIT_REPO']}"


def test_the_default_origin_is_the_git_servers_repository(services: dict[str, Any]) -> None:
    url = _git_server_url(services)
    for app in APPS:
        assert _environment(services[app])["LOOPS_DEFAULT_ORIGIN"] == url, app
    git_server = services["git-server"]
    assert git_server["command"] == list(GIT_SERVER_COMMAND)
    assert not git_server.get("ports"), "git:// has no authentication: publish nothing"
    probe = git_server["healthcheck"]["test"]
    assert probe[:2] == ["CMD", "git"] and "ls-remote" in probe
    # The probe asks the server itself for the repository the apps use.
    served = urllib.parse.urlsplit(url)
    assert served._replace(netloc=f"127.0.0.1:{served.port}").geturl() in probe


def test_the_image_installs_the_git_server_under_its_command() -> None:
    (command,) = GIT_SERVER_COMMAND
    assert f"COPY --chmod=0755 {GIT_SERVER_SCRIPT} /usr/local/bin/{command}" in (
        DOCKERFILE.read_text()
    )
    assert "/srv/git" in DOCKERFILE.read_text()
    result = run(["sh", "-n", str(REPO / GIT_SERVER_SCRIPT)])
    assert result.returncode == 0, result.stderr


def test_the_git_server_runs_outside_docker(services: dict[str, Any], tmp_path: Path) -> None:
    """The container's command with its environment (root and port moved to free ones):
    it seeds the default origin, answers the healthcheck, and takes a push."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {
        **_environment(services["git-server"]),
        "LOOPS_GIT_ROOT": str(tmp_path / "srv"),
        "LOOPS_GIT_LISTEN": "127.0.0.1",
        "LOOPS_GIT_PORT": str(port),
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
    }
    url = f"git://127.0.0.1:{port}/{env['LOOPS_GIT_REPO']}"
    probe = [
        url if arg.startswith("git://") else arg
        for arg in services["git-server"]["healthcheck"]["test"][1:]
    ]
    server = subprocess.Popen(
        ["sh", str(REPO / GIT_SERVER_SCRIPT)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        while (answer := run(probe)).returncode != 0:
            assert time.monotonic() < deadline, answer.stderr
            time.sleep(0.1)
        clone = tmp_path / "clone"
        assert run(["git", "clone", "--quiet", url, str(clone)]).returncode == 0
        assert run(["git", "-C", str(clone), "log", "--format=%s"]).stdout == "Initial commit\n"
        pushed = run(["git", "-C", str(clone), "push", "--quiet", url, "HEAD:refs/loopworks/run"])
        assert pushed.returncode == 0, pushed.stderr
        assert "refs/loopworks/run" in run(["git", "ls-remote", url]).stdout
    finally:
        server.terminate()
        server.wait(timeout=10)
    # The push landed in the repository under the root, beside the one seeded commit.
    bare = tmp_path / "srv" / env["LOOPS_GIT_REPO"]
    assert run(["git", "--git-dir", str(bare), "rev-list", "--count", "main"]).stdout == "1\n"
    assert run(["git", "--git-dir", str(bare), "rev-parse", "refs/loopworks/run"]).returncode == 0


# ---------------------------------------------------------------- Temporal


def test_namespace_job_registers_exactly_the_search_attributes(services: dict[str, Any]) -> None:
    job = services["temporal-namespace"]
    environment = _environment(job)
    pairs = environment["LOOPS_SEARCH_ATTRIBUTES"].split()
    registered = dict(pair.split("=", 1) for pair in pairs)
    assert len(registered) == len(pairs), "duplicate search attribute"
    assert registered == SEARCH_ATTRIBUTES
    assert (
        environment["TEMPORAL_NAMESPACE"] == _environment(services["worker"])["TEMPORAL_NAMESPACE"]
    )
    assert environment["TEMPORAL_NAMESPACE"] == "default"
    assert job["entrypoint"][-1].endswith("/create-namespace.sh")


def test_schema_job_creates_and_migrates_both_databases(services: dict[str, Any]) -> None:
    job, server = _environment(services["temporal-schema"]), _environment(services["temporal"])
    assert job["SQL_PLUGIN"] == server["DB"] == "postgres12"
    assert job["DBNAME"] == server["DBNAME"]
    assert job["VISIBILITY_DBNAME"] == server["VISIBILITY_DBNAME"]
    script = (REPO / "deploy" / "temporal" / "setup-schema.sh").read_text()
    for step in ("create", "setup-schema -v 0.0", "update-schema -d"):
        assert step in script
    assert "temporal/versioned" in script and "visibility/versioned" in script
    assert services["temporal-schema"]["entrypoint"][-1].endswith("/setup-schema.sh")


def test_temporal_scripts_are_valid_sh() -> None:
    for script in sorted((REPO / "deploy" / "temporal").glob("*.sh")):
        result = run(["sh", "-n", str(script)])
        assert result.returncode == 0, f"{script.name}: {result.stderr}"


def test_server_mounts_the_dynamic_config(services: dict[str, Any]) -> None:
    server = services["temporal"]
    target = _environment(server)["DYNAMIC_CONFIG_FILE_PATH"]
    assert f"./deploy/temporal/dynamicconfig.yaml:{target}:ro" in server["volumes"]
    config = yaml.safe_load((REPO / "deploy" / "temporal" / "dynamicconfig.yaml").read_text())
    assert config, "empty dynamic config"
    for key, entries in config.items():
        assert "." in key, key
        assert isinstance(entries, list) and entries, key
        for entry in entries:
            assert set(entry) == {"value", "constraints"}, key


# ---------------------------------------------------------------- tracing


def test_collector_config_wires_defined_components(services: dict[str, Any]) -> None:
    config = yaml.safe_load((REPO / "deploy" / "otel-collector.yaml").read_text())
    service = config["service"]
    for extension in service.get("extensions", []):
        assert extension in config["extensions"], extension
    assert "traces" in service["pipelines"]
    for name, pipeline in service["pipelines"].items():
        for kind in ("receivers", "processors", "exporters"):
            for component in pipeline.get(kind, []):
                assert component in config[kind], f"pipeline {name}: {component} not defined"
    grpc = config["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"]
    app_endpoint = _environment(services["api"])["OTEL_EXPORTER_OTLP_ENDPOINT"]
    assert app_endpoint.rsplit(":", 1)[1] == grpc.rsplit(":", 1)[1]
    exporter_host = config["exporters"]["otlp/jaeger"]["endpoint"].split(":")[0]
    assert exporter_host in services
    mounts = services["otel-collector"]["volumes"]
    assert "./deploy/otel-collector.yaml:/etc/otelcol-contrib/config.yaml:ro" in mounts


# ---------------------------------------------------------------- the image


def test_dockerfile_is_multi_stage_non_root_and_installs_git() -> None:
    text = DOCKERFILE.read_text()
    instructions = [
        line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")
    ]
    froms = [line for line in instructions if line.startswith("FROM ")]
    assert len(froms) >= 2 and all("${PYTHON_IMAGE}" in line for line in froms)
    users = [line.split()[1] for line in instructions if line.startswith("USER ")]
    assert users, "no USER: the image would run as root"
    uid = users[-1].split(":")[0]
    assert uid not in {"0", "root"}
    assert uid == "10001"
    assert re.search(r"apt-get install[^\n]*\bgit\b", text), "runtime stage must install git"
    assert "COPY --from=builder /opt/loopworks /opt/loopworks" in text
    assert "WORKDIR /app" in instructions
    assert "LOOPS_DATA_DIR=/data" in text and "chown 10001:10001 /data" in text
    cmd = next(line for line in reversed(instructions) if line.startswith("CMD "))
    assert json.loads(cmd.removeprefix("CMD ")) == list(API_COMMAND)


def test_dockerfile_passes_hadolint() -> None:
    hadolint = require_tool("hadolint")
    result = run([hadolint, "--no-color", str(DOCKERFILE)])
    assert result.returncode == 0, result.stdout + result.stderr


def test_dockerignore_keeps_secrets_and_clutter_out_of_the_build() -> None:
    patterns = {
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    for pattern in (".git", ".venv", ".env", "loopworks.secrets.env*", "tests"):
        assert pattern in patterns, pattern
    for kept in ("pyproject.toml", "README.md", "deploy", "deploy/*.py"):
        assert kept not in patterns, f"{kept} is needed to build the image"


# ---------------------------------------------------------------- a real Compose


def _host_ip(port: str | dict[str, Any]) -> str:
    """The bind address of a port as `config` resolves it: the long form's `host_ip`,
    or the short form's `host:published:target/proto` (docker-compose v1 prints that)."""
    if isinstance(port, dict):
        return str(port["host_ip"])
    return port.rsplit(":", 2)[0]


@pytest.fixture(scope="module")
def compose_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The compose file, .env and deploy/ with the example as the secrets file.

    loopworks.secrets.env is git-ignored (and absent in CI); Compose refuses to
    load a missing env_file, so validation runs on a copy with the example.
    """
    project = tmp_path_factory.mktemp("compose")
    shutil.copy(COMPOSE_FILE, project / "docker-compose.yml")
    shutil.copy(REPO / ".env", project / ".env")
    for env_file in {*ENV_FILES["api"], *ENV_FILES["worker"]}:
        shutil.copy(REPO / f"{env_file}.example", project / env_file)
    (project / "deploy").symlink_to(REPO / "deploy", target_is_directory=True)
    return project


def test_compose_validates_with_docker_compose(compose_project: Path) -> None:
    docker_compose = require_tool("docker-compose")
    result = run([docker_compose, "config", "-q"], cwd=compose_project)
    assert result.returncode == 0, result.stderr


def test_compose_resolves_to_pinned_images(compose_project: Path, dotenv: dict[str, str]) -> None:
    docker_compose = require_tool("docker-compose")
    result = run([docker_compose, "config"], cwd=compose_project)
    assert result.returncode == 0, result.stderr
    resolved = yaml.safe_load(result.stdout)["services"]
    assert {service["image"] for service in resolved.values()} == set(dotenv.values()) - {
        dotenv["PYTHON_IMAGE"]
    }
    assert resolved["api"]["build"]["args"]["PYTHON_IMAGE"] == dotenv["PYTHON_IMAGE"]
    assert resolved["api"]["command"] == list(API_COMMAND)
    assert resolved["worker"]["command"] == list(WORKER_COMMAND)
    assert resolved["git-server"]["command"] == list(GIT_SERVER_COMMAND)
    for app in APPS:
        assert not resolved[app].get("volumes"), f"{app}: a volume shared between workers"
    for name, service in resolved.items():
        for port in service.get("ports", []):
            assert _host_ip(port) == "127.0.0.1", (name, port)
    # What the containers really get: `environment` merged with the env_files. A
    # worker chooses its model (LOOPS_LLM) explicitly: given neither it nor a key, it
    # refuses to start rather than run the offline model unasked.
    for service_name, names in (("api", API_ENV), ("worker", WORKER_ENV)):
        environment = resolved[service_name]["environment"]
        missing = set(names) - set(environment)
        assert not missing, f"{service_name} containers lack {missing}"
    assert resolved["worker"]["environment"]["LOOPS_LLM"] == "anthropic"
    assert "LOOPS_LLM" not in resolved["api"]["environment"], "the API never calls the model"


def test_exposing_the_api_leaves_temporal_on_loopback(compose_project: Path) -> None:
    docker_compose = require_tool("docker-compose")
    env = {**os.environ, "LOOPS_BIND_ADDRESS": "0.0.0.0"}
    result = subprocess.run(
        [docker_compose, "config"],
        cwd=compose_project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    resolved = yaml.safe_load(result.stdout)["services"]
    published = {
        name: {_host_ip(port) for port in service.get("ports", [])}
        for name, service in resolved.items()
        if service.get("ports")
    }
    assert published == {
        "api": {"0.0.0.0"},
        "temporal": {"127.0.0.1"},
        "temporal-ui": {"127.0.0.1"},
        "jaeger": {"127.0.0.1"},
    }
