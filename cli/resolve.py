"""A run named by its alias: which run `loops status|stop|... ALIAS` means
(docs/cli.md#naming-a-run).

The rule: a RUN argument shaped like a run id the API makes (`<alias>-<yyyyMMdd>-<HHmmss>-
<6 hex>`, or `key-<hex>` for an Idempotency-Key) is that run. One shaped like an alias is
looked up among the runs with that alias
(`GET /runs?alias=`, newest first). None: the argument is a run id, as given. Otherwise the
run still live (not finished) is meant, or, with none live, the newest. Two or more live
runs with that alias are ambiguous: steering the wrong one is worse than asking, so the
command fails and lists them, for the user to pick by id.
"""

from __future__ import annotations

import re

from loopworks.cli.client import ApiClient, CliError
from loopworks.cli.render import timestamp

# What an alias looks like (a lowercase hyphen slug); anything else is taken as a run id.
ALIAS = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")
ALIAS_MAX_CHARS = 100
# The ids the API gives runs (api/launch.py `new_run_id`, api/idempotency.py): no lookup.
RUN_ID = re.compile(r"[a-z0-9-]+-\d{8}-\d{6}-[0-9a-f]{6}|key-[0-9a-f]{32}")
# Runs with one alias looked at: the newest this many.
CANDIDATES = 50


def resolve_run(client: ApiClient, ref: str) -> str:
    """The run id `ref` names: a run id as given, or an alias's run (see the module)."""
    if len(ref) > ALIAS_MAX_CHARS or not ALIAS.fullmatch(ref) or RUN_ID.fullmatch(ref):
        return ref
    runs = client.list_runs(limit=CANDIDATES, alias=ref)
    if not runs:
        return ref
    live = [run for run in runs if not run.status.is_terminal]
    if len(live) > 1:
        listed = "\n".join(
            f"  {run.run_id}  {run.status.value}  started {timestamp(run.started_at)}"
            for run in live
        )
        raise CliError(
            f"alias {ref!r} names {len(live)} unfinished runs; give one of their ids:\n{listed}"
        )
    return (live or runs)[0].run_id
