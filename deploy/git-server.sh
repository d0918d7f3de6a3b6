#!/bin/sh
# The git server workers and the API share when they run on more than one machine:
# `git daemon` (part of git itself, so the loopworks image already carries it) serving
# every bare repository under $LOOPS_GIT_ROOT over git://, pushes included.
#
# At start it creates the service's default origin, $LOOPS_GIT_ROOT/$LOOPS_GIT_REPO, with
# one commit on `main` unless it exists: workers never create a repository behind a URL.
#
# git:// has no authentication and no encryption: keep the port inside the cluster or the
# compose network (docker-compose.yml publishes nothing; deploy/k8s/git-server.yaml
# admits only loopworks pods). Across untrusted networks use an HTTPS or SSH git server
# and give the workers credentials (deploy/README.md, "Scaling out").
set -eu

root="${LOOPS_GIT_ROOT:-/srv/git}"
repo="${LOOPS_GIT_REPO:-loopworks.git}"
listen="${LOOPS_GIT_LISTEN:-0.0.0.0}"
port="${LOOPS_GIT_PORT:-9418}"

mkdir -p "$root"
if [ ! -f "$root/$repo/HEAD" ]; then
    # Built aside and renamed into place: a restart mid-seed leaves no half-made origin.
    staging=$(mktemp -d "$root/.seed.XXXXXX")
    bare="$staging/repo.git"
    git init --quiet --bare --initial-branch=main "$bare"
    blob=$(printf '%s\n' \
        '# loopworks runs' \
        '' \
        'This repository holds loopworks run branches: each run works on its own branch,' \
        'and its in-progress commits are kept under refs/loopworks/<run id>.' |
        git --git-dir="$bare" hash-object -w --stdin)
    tree=$(printf '100644 blob %s\tREADME.md\n' "$blob" | git --git-dir="$bare" mktree)
    commit=$(GIT_AUTHOR_NAME=loopworks GIT_AUTHOR_EMAIL=loopworks@localhost \
        GIT_COMMITTER_NAME=loopworks GIT_COMMITTER_EMAIL=loopworks@localhost \
        git --git-dir="$bare" commit-tree -m "Initial commit" "$tree")
    git --git-dir="$bare" update-ref refs/heads/main "$commit"
    mv "$bare" "$root/$repo"
    rmdir "$staging"
    echo "git-server: created $root/$repo"
fi

# --max-connections=0: no limit. At the default (32) a busy daemon drops new clients and
# kills running ones, which a worker would see as a failed fetch or push.
echo "git-server: serving $root on git://$listen:$port/"
exec git daemon \
    --reuseaddr \
    --export-all \
    --enable=receive-pack \
    --base-path="$root" \
    --listen="$listen" \
    --port="$port" \
    --max-connections=0 \
    "$root"
