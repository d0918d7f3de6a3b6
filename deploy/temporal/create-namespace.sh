#!/bin/sh
# One-shot job (temporalio/admin-tools image): wait for the Temporal server, create
# the namespace if it is missing and register loopworks' search attributes.
#
# Idempotent: an existing namespace is kept and an attribute that is already
# registered counts as done, so the job passes on every `docker compose up`.
#
#   TEMPORAL_ADDRESS          host:port of the frontend, e.g. temporal:7233
#   TEMPORAL_NAMESPACE        namespace to create, e.g. default
#   NAMESPACE_RETENTION       retention of closed runs for a new namespace, e.g. 168h
#   LOOPS_SEARCH_ATTRIBUTES   "Name=Type Name=Type ...": exactly the attributes the
#                             workflow keeps current (deploy/processes.py)
set -eu

: "${TEMPORAL_ADDRESS:?}" "${TEMPORAL_NAMESPACE:?}" "${LOOPS_SEARCH_ATTRIBUTES:?}"
NAMESPACE_RETENTION="${NAMESPACE_RETENTION:-168h}"
ns="$TEMPORAL_NAMESPACE"
addr="$TEMPORAL_ADDRESS"

# retry N DELAY CMD...: run CMD until it succeeds, at most N times.
retry() {
  tries="$1"
  delay="$2"
  shift 2
  n=1
  until "$@"; do
    if [ "$n" -ge "$tries" ]; then
      return 1
    fi
    n=$((n + 1))
    sleep "$delay"
  done
}

echo "waiting for the Temporal server at $addr"
retry 60 2 temporal operator cluster health --address "$addr" >/dev/null
echo "Temporal server is serving"

if temporal operator namespace describe --namespace "$ns" --address "$addr" >/dev/null 2>&1; then
  echo "namespace $ns exists"
else
  echo "creating namespace $ns (retention $NAMESPACE_RETENTION)"
  retry 10 2 temporal operator namespace create --namespace "$ns" \
    --retention "$NAMESPACE_RETENTION" --address "$addr"
fi

# A new namespace takes a few seconds to reach every frontend cache: retry.
retry 30 2 temporal operator namespace describe --namespace "$ns" --address "$addr" >/dev/null

attribute_listed() {
  # $1 name, $2 type. True when the namespace lists the attribute.
  listing="$(temporal operator search-attribute list --namespace "$ns" --address "$addr")" || return 1
  line="$(printf '%s\n' "$listing" | grep -w -- "$1")" || return 1
  if ! printf '%s\n' "$line" | grep -qw -- "$2"; then
    echo "warning: $1 is registered but not listed as $2: $line" >&2
  fi
  return 0
}

register() {
  # $1 name, $2 type. Create, or accept an attribute that is already there.
  if temporal operator search-attribute create --namespace "$ns" --address "$addr" \
    --name "$1" --type "$2"; then
    return 0
  fi
  attribute_listed "$1" "$2"
}

for pair in $LOOPS_SEARCH_ATTRIBUTES; do
  name="${pair%%=*}"
  type="${pair#*=}"
  if [ -z "$name" ] || [ "$name" = "$pair" ] || [ -z "$type" ]; then
    echo "bad entry '$pair' in LOOPS_SEARCH_ATTRIBUTES (want Name=Type)" >&2
    exit 1
  fi
  if retry 10 3 register "$name" "$type"; then
    echo "search attribute $name ($type) registered"
  else
    echo "could not register search attribute $name ($type)" >&2
    exit 1
  fi
done

echo "namespace $ns is ready for loopworks"
