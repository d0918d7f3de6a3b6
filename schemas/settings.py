"""The one Settings class: read once in each entry point, never at import, never in workflows."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from loopworks.schemas.git_credentials import parse_credentials
from loopworks.schemas.notify import (
    DEFAULT_EVENTS,
    NotifyEvent,
    NotifyPlan,
    NotifyRequest,
    NotifyTiming,
    Webhook,
    WebhookFormat,
)
from loopworks.schemas.origin_rules import OriginRules, rules_from, schemes_from
from loopworks.schemas.payload_keys import parse_payload_keys
from loopworks.schemas.playbook import PlaybookLimits
from loopworks.schemas.retention import RetentionPolicy

TRUSTED_ORIGINS = "LOOPS_API_TRUSTED_ORIGINS"


class LLMProvider(StrEnum):
    OFFLINE = "offline"
    ANTHROPIC = "anthropic"


class ModelPrice(BaseModel):
    """US dollars per million tokens."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cache_read: float = Field(default=0.0, ge=0)
    cache_write: float = Field(default=0.0, ge=0)


# The fields of Settings that hold a credential, by field name: what leaves a command (its
# output in history, events and trajectories) is redacted of their values
# (`loopworks.checks.redaction`). tests/unit/test_redaction.py fails when a field whose name
# says key, token, secret or password is neither here nor known not to be a secret.
SECRET_FIELDS: tuple[str, ...] = (
    "anthropic_api_key",
    "api_tokens",
    "api_read_tokens",
    "api_admin_tokens",
    "git_credentials",
    "notify_secret",
    "notify_webhooks",
    "payload_keys",
)


# Addresses a server binds to take every interface's connections: they name no host a
# client could use.
ANY_ADDRESS = frozenset({"", "0.0.0.0", "::"})


class Settings(BaseSettings):
    # A refused value is not quoted in the error: the worker and the API log it as they
    # exit, and a secret setting's cut head or tail is past what redaction knows.
    model_config = SettingsConfigDict(
        env_prefix="", extra="ignore", populate_by_name=True, hide_input_in_errors=True
    )

    temporal_address: str = Field(default="127.0.0.1:7233", alias="TEMPORAL_ADDRESS")
    temporal_namespace: str = Field(default="default", alias="TEMPORAL_NAMESPACE")
    # gRPC compression to Temporal. The SDK always gzips; on a host or a cluster's network
    # that is CPU spent in the worker, the API and the server for bytes that cost nothing
    # to send. `auto`: gzip over TLS (Temporal Cloud, a server far away), none without.
    temporal_compression: Literal["auto", "none", "gzip"] = Field(
        default="auto", alias="LOOPS_TEMPORAL_COMPRESSION"
    )
    task_queue: str = Field(default="loopworks", alias="LOOPS_TASK_QUEUE")
    # Temporal payloads encrypted with these keys (service/codec.py): `id:base64key`,
    # comma-separated, each 32 bytes; the first encrypts, all decrypt. Every process that
    # talks to Temporal needs the same list (SECURITY.md, docs/operations.md). Unset: plain.
    payload_keys: str | None = Field(default=None, alias="LOOPS_PAYLOAD_KEYS")
    # How long a run's next task (or a query) waits for the worker that has it cached
    # before any worker may take it. Temporal's default, 10 s, is how long a live run stays
    # unreadable after its worker dies; a lower value costs a busy worker a replay now and
    # then (histories are short: runs continue-as-new).
    sticky_timeout_seconds: float = Field(default=1.0, gt=0, alias="LOOPS_STICKY_TIMEOUT_S")
    # Agent commands and command checks run in the bubblewrap sandbox (checks/sandbox.py);
    # a worker that cannot sandbox refuses to start unless this is `off`.
    sandbox: Literal["auto", "off"] = Field(default="auto", alias="LOOPS_SANDBOX")
    # One evaluation group's pattern and command checks, all together: a check not done by
    # then fails as "check budget spent" (docs/loop.md#bounded-checks). At most 25 minutes,
    # inside the group's 30-minute activity timeout (workflows/policies.py, CHECK_GROUP).
    check_budget_seconds: float = Field(default=1200.0, gt=0, le=1500, alias="LOOPS_CHECK_BUDGET_S")
    # Temporal's workflow sandbox guards workflow code against non-deterministic calls at
    # run time, and costs a fifth of the worker's CPU (the SDK enters it for each payload it
    # converts: docs/benchmarks.md#figures-behind-individual-choices). The only workflow
    # code a worker runs is loopworks' own, and the tests run it all inside the sandbox
    # (every workflow test, every recorded history replayed, tests/workflows/conftest.py)
    # and check its modules for the calls it would stop
    # (tests/unit/test_workflow_determinism.py): the guard is kept where a mistake can be
    # made, before release. `true` keeps it at run time too.
    workflow_sandbox: bool = Field(default=False, alias="LOOPS_WORKFLOW_SANDBOX")
    # Where runs' working clones live; default `<LOOPS_DATA_DIR>/workspaces`. The sandbox's
    # user must reach them (`loops up` picks a place when the data directory is private).
    workspaces_root: Path | None = Field(default=None, alias="LOOPS_WORKSPACES_DIR")
    data_dir: Path = Field(default=Path(".loops-data"), alias="LOOPS_DATA_DIR")
    # The origin of runs that name no repo: a git server's URL, so that workers on many
    # machines and the API share it and nothing on disk (workspace/default_origin.py), or a
    # path. Unset: `<LOOPS_DATA_DIR>/origin.git`, created on first use (one machine).
    default_origin_location: str | None = Field(default=None, alias="LOOPS_DEFAULT_ORIGIN")
    api_host: str = Field(default="127.0.0.1", alias="LOOPS_API_HOST")
    api_port: int = Field(default=8000, alias="LOOPS_API_PORT")
    # Comma-separated bearer tokens, `name:token` (a bare token is named `token-<n>`); when
    # any token is set, every route but health and docs needs one.
    api_tokens: str | None = Field(default=None, alias="LOOPS_API_TOKENS")
    # A request body past this is refused (413) before it is read whole: the largest a
    # route takes is a graph with a prep package, about 2.2 MB of text.
    api_max_body_bytes: int = Field(
        default=8 * 1024 * 1024, ge=64 * 1024, alias="LOOPS_API_MAX_BODY_BYTES"
    )
    # --- API access and quotas: who may use the API, from where, and how much
    # (api/tokens.py, api/hosts.py, api/quotas.py). 0 turns a cap off.
    # Tokens that may only read (GET, streams), `name:token` or bare, comma-separated.
    api_read_tokens: str | None = Field(default=None, alias="LOOPS_API_READ_TOKENS")
    # Tokens that may also administer the service (`POST /gc`), `name:token` or bare,
    # comma-separated; in LOOPS_API_TOKENS_FILE a line `name:token:admin`.
    api_admin_tokens: str | None = Field(default=None, alias="LOOPS_API_ADMIN_TOKENS")
    # One `name:token` or `name:token:read` a line, beside (not instead of) the two above.
    api_tokens_file: Path | None = Field(default=None, alias="LOOPS_API_TOKENS_FILE")
    # Host headers served besides loopback names and LOOPS_API_HOST: the names clients use
    # (a service name, an ingress host), comma-separated; `*.example.com` and `*` allowed.
    api_allowed_hosts: str | None = Field(default=None, alias="LOOPS_API_ALLOWED_HOSTS")
    # Web origins (`https://loops.example.com`) whose pages may send changes besides the
    # API's own: those a proxy in front of the API serves it under while handing it another
    # Host (api/same_origin.py); comma-separated.
    api_trusted_origins: str | None = Field(default=None, alias=TRUSTED_ORIGINS)
    # Runs and graphs in progress, per token (by name) and in all on the task queue.
    max_runs_per_client: int = Field(default=20, ge=0, alias="LOOPS_MAX_RUNS_PER_CLIENT")
    max_runs: int = Field(default=100, ge=0, alias="LOOPS_MAX_RUNS")
    max_graphs_per_client: int = Field(default=5, ge=0, alias="LOOPS_MAX_GRAPHS_PER_CLIENT")
    max_graphs: int = Field(default=20, ge=0, alias="LOOPS_MAX_GRAPHS")
    # A run's budget when its request names none, and the most a request may ask for; a
    # graph's task loops each get it too.
    run_budget_tokens: int = Field(default=10_000_000, ge=0, alias="LOOPS_RUN_BUDGET_TOKENS")
    run_budget_usd: float = Field(default=50.0, ge=0, alias="LOOPS_RUN_BUDGET_USD")
    # A graph's total budget, all its task loops together, when its request names none,
    # and the most a request may ask for (docs/graphs.md#budget).
    graph_budget_tokens: int = Field(default=50_000_000, ge=0, alias="LOOPS_GRAPH_BUDGET_TOKENS")
    graph_budget_usd: float = Field(default=250.0, ge=0, alias="LOOPS_GRAPH_BUDGET_USD")
    # What one client (a token's name) may spend in a rolling day, all its runs and graphs
    # together: a new one's budget is at most what is left (api/spend.py). 0: no limit.
    client_day_tokens: int = Field(default=0, ge=0, alias="LOOPS_CLIENT_DAY_TOKENS")
    client_day_usd: float = Field(default=0.0, ge=0, alias="LOOPS_CLIENT_DAY_USD")
    max_rules_per_request: int = Field(default=100, ge=0, alias="LOOPS_MAX_RULES")
    # Open event and ledger streams per token, in each API process.
    max_streams_per_client: int = Field(default=32, ge=0, alias="LOOPS_MAX_STREAMS_PER_CLIENT")
    llm: LLMProvider | None = Field(default=None, alias="LOOPS_LLM")
    anthropic_api_key: str | None = Field(default=None, alias="ANTHROPIC_API_KEY")
    # Any Anthropic-compatible server (a proxy, LiteLLM, Ollama); None means the SDK's default.
    anthropic_base_url: str | None = Field(default=None, alias="ANTHROPIC_BASE_URL")
    anthropic_max_tokens: int = Field(default=4096, gt=0, alias="LOOPS_ANTHROPIC_MAX_TOKENS")
    # Ask for strict (schema-constrained) tool input; a server that rejects it is asked
    # without it for the rest of the worker's life, so this only turns the first try off.
    anthropic_strict_output: bool = Field(default=True, alias="LOOPS_ANTHROPIC_STRICT")
    # One HTTP request; Temporal's retry policy decides whether to try again.
    anthropic_timeout_seconds: float = Field(default=300, gt=0, alias="LOOPS_ANTHROPIC_TIMEOUT_S")
    # PRODUCE and REFINE end after this many model turns even if the agent wants more.
    agent_max_turns: int = Field(default=12, ge=1, alias="LOOPS_AGENT_MAX_TURNS")
    # The chance, before each tool call of PRODUCE's and REFINE's agents, that the custodiet
    # audits the work first (docs/loop.md#steps); a run's `tool_audit_probability` wins.
    tool_audit_probability: float = Field(
        default=0.05, ge=0, le=1, alias="LOOPS_TOOL_AUDIT_PROBABILITY"
    )
    # The QA verifier's agent: its turn budget, and how much of the run's patch it is sent.
    qa_max_turns: int = Field(default=12, ge=1, alias="LOOPS_QA_MAX_TURNS")
    qa_patch_cap_chars: int = Field(default=40_000, ge=0, alias="LOOPS_QA_PATCH_CAP_CHARS")
    offline_latency_ms: int = Field(default=0, ge=0, alias="LOOPS_OFFLINE_LATENCY_MS")
    offline_script: Path | None = Field(default=None, alias="LOOPS_OFFLINE_SCRIPT")
    # The model tiers (docs/models.md#models-per-role); agent definitions name a tier (or a
    # model id, used as is).
    model_haiku: str = Field(default="claude-haiku-4-5", alias="LOOPS_MODEL_HAIKU")
    model_sonnet: str = Field(default="claude-sonnet-4-6", alias="LOOPS_MODEL_SONNET")
    model_opus: str = Field(default="claude-opus-4-8", alias="LOOPS_MODEL_OPUS")
    # Agent definitions here replace the packaged ones by file name: markdown with YAML
    # front matter, like the packaged ones.
    agents_dir: Path | None = Field(default=None, alias="LOOPS_AGENTS_DIR")
    # Over the list prices (llm/pricing.py), by model id.
    prices: dict[str, ModelPrice] = Field(default_factory=dict, alias="LOOPS_PRICES")
    git_author_name: str = Field(default="loopworks", alias="LOOPS_GIT_AUTHOR_NAME")
    git_author_email: str = Field(default="loopworks@localhost", alias="LOOPS_GIT_AUTHOR_EMAIL")
    # otlp, console or off; unset means OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set, else off.
    tracing: str | None = Field(default=None, alias="LOOPS_TRACING")
    # The delta playbook (docs/playbook.md#budget-and-pruning): the whole playbook's token
    # budget, the versions after which an item nobody used is pruned, how similar an ADD
    # must be to merge into an item, and how much of it hydration is given.
    playbook_max_tokens: int = Field(default=4000, ge=100, alias="LOOPS_PLAYBOOK_MAX_TOKENS")
    playbook_unused_after: int = Field(default=50, ge=1, alias="LOOPS_PLAYBOOK_UNUSED_AFTER")
    playbook_similarity: float = Field(default=0.85, gt=0, le=1, alias="LOOPS_PLAYBOOK_SIMILARITY")
    playbook_context_tokens: int = Field(default=1200, ge=0, alias="LOOPS_PLAYBOOK_CONTEXT_TOKENS")
    # Worker disk quotas: the largest clone of an origin (its repository, and the tree a
    # checkout writes, each), and how long an idle clone is kept before the worker's sweep
    # removes it, oldest first beyond a total (workspace/retention.py; None: no total cap).
    max_clone_bytes: int = Field(default=2 * 1024**3, ge=1024 * 1024, alias="LOOPS_MAX_CLONE_BYTES")
    keep_clones_hours: float = Field(default=24.0, ge=0, alias="LOOPS_KEEP_CLONES_HOURS")
    clones_max_bytes: int | None = Field(default=None, ge=0, alias="LOOPS_CLONES_MAX_BYTES")
    # -- retention of finished runs' records (docs/operations.md#retention) ---------------
    # A finished run's work ref, its calls' refs and its clones go this many days after it
    # finished, or once this many runs of its repository finished after it, whichever comes
    # first; neither set, they are kept for good. Read by the workers, which run the gc.
    retention_days: float | None = Field(default=None, ge=0, alias="LOOPS_RETENTION_DAYS")
    retention_keep_per_repo: int | None = Field(
        default=None, ge=0, alias="LOOPS_RETENTION_KEEP_PER_REPO"
    )
    # Its result branch `loops/<run>` goes too (a graph's integration branch never does).
    retention_branches: bool = Field(default=False, alias="LOOPS_RETENTION_BRANCHES")
    # How often the gc's Temporal Schedule runs it (a worker creates the Schedule at start).
    retention_every_hours: float = Field(default=24.0, gt=0, alias="LOOPS_RETENTION_EVERY_HOURS")

    # -- git credentials and the origins a deployment allows (SECURITY.md) ----------------
    # Host -> git credential, JSON: {"github.com": {"username": "x-access-token",
    # "token": "..."}}. Answered to git over https for exactly those hosts, never over http
    # or to another host (schemas/git_credentials.py); unset: git gets no credential.
    git_credentials: str | None = Field(default=None, alias="LOOPS_GIT_CREDENTIALS")
    # Also ask the credential helpers of the user's own git config (osxkeychain, `gh`,
    # `store`), before ours: for one user on loopback, who is the operator there. `loops
    # up` sets it when it serves loopback without tokens; a shared deployment never should.
    git_user_helpers: bool = Field(default=False, alias="LOOPS_GIT_USER_HELPERS")
    # Comma-separated URL prefixes (`https://github.com/acme/`) or hosts (`git-server`,
    # `git.example.com:8443`) runs and graphs may name as repo. Unset: any URL of an
    # allowed scheme whose host resolves to public addresses only. A host named here is
    # admitted even on a private address (workspace/origin_policy.py).
    allowed_origins: str | None = Field(default=None, alias="LOOPS_ALLOWED_ORIGINS")
    # Schemes a repo URL may use: https and ssh by default; http, git and file only when
    # named. `ext::`, `fd::` and every other `<transport>::` form are never allowed.
    allowed_schemes: str = Field(default="https,ssh", alias="LOOPS_ALLOWED_SCHEMES")
    # Comma-separated directories local repositories (and file:// URLs) must be under,
    # symlinks resolved; never the data or workspaces directory. Unset: no local paths
    # (`loops up` on loopback without tokens sets it to the directory it started in).
    local_roots: str | None = Field(default=None, alias="LOOPS_LOCAL_ROOTS")

    # -- notifications (docs/notifications.md) --------------------------------------------
    # The HMAC-SHA256 key notifications are signed with; a request asking for `notify` is
    # refused while the API has none, and a worker without it sends none.
    notify_secret: str | None = Field(default=None, alias="LOOPS_NOTIFY_SECRET")
    # Webhooks told of every run and graph, comma-separated, each a URL or `slack:<URL>`;
    # admitted like a request's. The API counts them, the worker reads them: set both.
    notify_webhooks: str | None = Field(default=None, alias="LOOPS_NOTIFY_WEBHOOKS")
    # The events those webhooks are sent, comma-separated; unset: every one.
    notify_events: str | None = Field(default=None, alias="LOOPS_NOTIFY_EVENTS")
    # One attempt's time limit, the first retry's wait (doubling, at most 5 minutes), and
    # when a notification is given up: then it is a `notify_failed` event.
    notify_attempt_seconds: float = Field(default=10.0, gt=0, alias="LOOPS_NOTIFY_ATTEMPT_S")
    notify_retry_seconds: float = Field(default=5.0, gt=0, alias="LOOPS_NOTIFY_RETRY_S")
    notify_give_up_seconds: float = Field(default=900.0, gt=0, alias="LOOPS_NOTIFY_GIVE_UP_S")
    # Where people reach the API and the Temporal UI, for the links in a notification.
    # Unset: the API's own host and port, and no UI link.
    public_api_url: str | None = Field(default=None, alias="LOOPS_PUBLIC_API_URL")
    temporal_ui_url: str | None = Field(default=None, alias="LOOPS_TEMPORAL_UI_URL")

    @field_validator("git_credentials")
    @classmethod
    def _check_credentials(cls, value: str | None) -> str | None:
        parse_credentials(value)  # a malformed value stops the process, not a run
        return value

    @field_validator("payload_keys")
    @classmethod
    def _check_payload_keys(cls, value: str | None) -> str | None:
        parse_payload_keys(value)  # a malformed key stops the process, not a payload
        return value

    @field_validator("api_trusted_origins")
    @classmethod
    def _check_trusted_origins(cls, value: str | None) -> str | None:
        web_origins(value)
        return value

    @field_validator("allowed_schemes")
    @classmethod
    def _check_schemes(cls, value: str) -> str:
        schemes_from(value)
        return value

    def origin_rules(self) -> OriginRules:
        """The operator's allow-list, with the service's own default origin always in it and
        the data and workspaces directories never a local root."""
        return rules_from(
            allowed=self.allowed_origins,
            schemes=self.allowed_schemes,
            local_roots=self.local_roots,
            own=(self.default_origin_location or str(self.default_origin),),
            private_dirs=(self.data_dir, self.workspaces_dir),
        )

    @field_validator("notify_webhooks")
    @classmethod
    def _check_webhooks(cls, value: str | None) -> str | None:
        webhooks_from(value)
        return value

    @field_validator("notify_events")
    @classmethod
    def _check_events(cls, value: str | None) -> str | None:
        events_from(value)
        return value

    def deployment_webhooks(self) -> list[Webhook]:
        return webhooks_from(self.notify_webhooks)

    def notify_plan(self, asked: NotifyRequest | None) -> NotifyPlan | None:
        """What a new run or graph is to notify: the request's webhooks and the
        deployment's; None when there are neither."""
        count = len(self.deployment_webhooks())
        if asked is None and not count:
            return None
        timing = NotifyTiming(
            attempt_seconds=self.notify_attempt_seconds,
            retry_seconds=self.notify_retry_seconds,
            give_up_seconds=self.notify_give_up_seconds,
        )
        return NotifyPlan(
            webhooks=asked.webhooks if asked else [],
            events=asked.events if asked else [],
            deployment_webhooks=count,
            deployment_events=events_from(self.notify_events),
            timing=timing,
        )

    @model_validator(mode="after")
    def _choose_llm(self) -> Settings:
        # A key chooses Anthropic. Nothing chooses the offline model but LOOPS_LLM=offline
        # (`loops up` sets it when there is no key, and says so): a worker given neither
        # refuses to start (`no_model_chosen`) rather than answer runs with canned text.
        if self.llm is None and self.anthropic_api_key:
            self.llm = LLMProvider.ANTHROPIC
        return self

    def model_for(self, tier_or_id: str) -> str:
        tiers = {"haiku": self.model_haiku, "sonnet": self.model_sonnet, "opus": self.model_opus}
        return tiers.get(tier_or_id.strip().lower(), tier_or_id.strip())

    @property
    def workspaces_dir(self) -> Path:
        return self.workspaces_root or self.data_dir / "workspaces"

    @property
    def default_origin(self) -> Path:
        return self.data_dir / "origin.git"

    def retention_policy(self) -> RetentionPolicy:
        return RetentionPolicy(
            days=self.retention_days,
            keep_per_repo=self.retention_keep_per_repo,
            branches=self.retention_branches,
        )

    def playbook_limits(self) -> PlaybookLimits:
        return PlaybookLimits(
            max_tokens=self.playbook_max_tokens,
            unused_after=self.playbook_unused_after,
            similarity=self.playbook_similarity,
        )

    @property
    def insights_dir(self) -> Path:
        return self.data_dir / "insights"


def web_origins(raw: str | None) -> list[str]:
    """LOOPS_API_TRUSTED_ORIGINS: comma-separated `scheme://host[:port]`, as a browser's
    Origin header spells them (lower-cased); ValueError naming one that is not."""
    found = []
    for item in (item.strip().lower().rstrip("/") for item in (raw or "").split(",")):
        if not item:
            continue
        try:
            parts = urlsplit(item)
            _ = parts.port  # raises for a port that is not a number
        except ValueError:
            parts = None
        if (
            parts is None
            or parts.scheme not in ("http", "https")
            or not parts.hostname
            or (parts.path or parts.query or parts.fragment or "@" in parts.netloc)
        ):
            raise ValueError(
                f"{TRUSTED_ORIGINS}: {item!r} is not a web origin: give scheme://host[:port],"
                " as in https://loops.example.com"
            )
        found.append(item)
    return found


def webhooks_from(raw: str | None) -> list[Webhook]:
    """LOOPS_NOTIFY_WEBHOOKS: comma-separated URLs, each optionally `slack:<URL>`."""
    found = []
    for item in (item.strip() for item in (raw or "").split(",")):
        if item:
            slack = item.startswith("slack:")
            url = item.removeprefix("slack:") if slack else item
            found.append(Webhook(url=url, format=WebhookFormat.SLACK if slack else "json"))
    return found


def events_from(raw: str | None) -> list[NotifyEvent]:
    """LOOPS_NOTIFY_EVENTS: comma-separated event names; unset, every one."""
    names = [item.strip() for item in (raw or "").split(",") if item.strip()]
    if not names:
        return list(DEFAULT_EVENTS)
    known = {event.value for event in NotifyEvent}
    if unknown := [name for name in names if name not in known]:
        raise ValueError(f"LOOPS_NOTIFY_EVENTS: unknown event(s) {unknown}; use {sorted(known)}")
    return list(dict.fromkeys(NotifyEvent(name) for name in names))
