#!/bin/sh
# One-shot job (temporalio/admin-tools image): create Temporal's two PostgreSQL
# databases and bring both schemas to the version this admin-tools release ships.
#
# Safe to run on every `docker compose up`: an existing database is kept,
# setup-schema does not lower a schema that is already past 0.0, and update-schema
# only applies the versions that are missing. That is also how a Temporal upgrade
# migrates: bump TEMPORAL_SERVER_IMAGE and TEMPORAL_ADMIN_TOOLS_IMAGE together.
#
# temporal-sql-tool reads its connection from SQL_PLUGIN, SQL_HOST, SQL_PORT,
# SQL_USER and SQL_PASSWORD (set in docker-compose.yml).
set -eu

: "${SQL_PLUGIN:?}" "${SQL_HOST:?}" "${SQL_PORT:?}" "${SQL_USER:?}" "${SQL_PASSWORD:?}"
DBNAME="${DBNAME:-temporal}"
VISIBILITY_DBNAME="${VISIBILITY_DBNAME:-temporal_visibility}"
SCHEMA_ROOT="${SCHEMA_ROOT:-/etc/temporal/schema/postgresql/v12}"

echo "waiting for PostgreSQL at ${SQL_HOST}:${SQL_PORT}"
attempt=0
until nc -z -w 2 "$SQL_HOST" "$SQL_PORT"; do
  attempt=$((attempt + 1))
  if [ "$attempt" -ge 60 ]; then
    echo "PostgreSQL did not answer after 60 attempts" >&2
    exit 1
  fi
  sleep 1
done

for db in "$DBNAME" "$VISIBILITY_DBNAME"; do
  # The postgres image already creates a database named after POSTGRES_USER, and a
  # second run finds both: "already exists" is expected, anything else shows up
  # in setup-schema right below.
  temporal-sql-tool --db "$db" create || echo "database $db not created (it may already exist)"
done

echo "schema: $DBNAME"
temporal-sql-tool --db "$DBNAME" setup-schema -v 0.0
temporal-sql-tool --db "$DBNAME" update-schema -d "$SCHEMA_ROOT/temporal/versioned"

echo "schema: $VISIBILITY_DBNAME"
temporal-sql-tool --db "$VISIBILITY_DBNAME" setup-schema -v 0.0
temporal-sql-tool --db "$VISIBILITY_DBNAME" update-schema -d "$SCHEMA_ROOT/visibility/versioned"

echo "Temporal schemas are up to date"
