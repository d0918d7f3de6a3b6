#!/usr/bin/env bash
# mypy over every package of the `loopworks` import name. The repository root *is* the
# `loopworks` package (pyproject maps it), but mypy cannot follow setuptools' editable
# import hook, so it reads the tree through a `loopworks` link in a scratch directory.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
ln -s "$PWD" "$scratch/loopworks"
packages=()
for package in $(.venv/bin/python -c "import tomllib; print(' '.join(tomllib.load(open('pyproject.toml', 'rb'))['tool']['setuptools']['packages']))"); do
    # -p takes subpackages along: name only loopworks.<folder>.
    [[ "$package" =~ ^loopworks\.[a-z_]+$ ]] && packages+=(-p "$package")
done
MYPYPATH="$scratch" exec .venv/bin/python -m mypy "${packages[@]}"
