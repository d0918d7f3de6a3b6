"""Notifications (docs/notifications.md): the webhooks a run or graph request names, the
plan the workflow carries, one notification as its activity is given it, what a run or
graph hands its delivery workflow and what that workflow keeps, and the signature a
receiver checks.

A notification is sent when a run or graph starts waiting for a person or finishes. The
body is small JSON (or Slack's incoming-webhook shape), signed with HMAC-SHA256 over
`<timestamp>.<body>` with the deployment's LOOPS_NOTIFY_SECRET; the secret is read by the
activity from its settings and never travels in a workflow's input or history.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from loopworks.schemas.payloads import NotifyFailedPayload

NOTIFY_SECRET = "LOOPS_NOTIFY_SECRET"
NOTIFY_WEBHOOKS = "LOOPS_NOTIFY_WEBHOOKS"

# The headers every notification carries (docs/notifications.md#verifying-a-notification).
SIGNATURE_HEADER = "X-Loops-Signature"
TIMESTAMP_HEADER = "X-Loops-Timestamp"
IDEMPOTENCY_HEADER = "Idempotency-Key"
EVENT_HEADER = "X-Loops-Event"
SIGNATURE_VERSION = "v1"

# What a `blocked` notification carries of the block's write-up at most.
REPORT_CHARS = 4000

# Schemes a webhook may use, of those LOOPS_ALLOWED_SCHEMES allows.
WEBHOOK_SCHEMES = frozenset({"https", "http"})


class NotifyEvent(StrEnum):
    """What a notification is sent for: waiting for a person, then finishing."""

    AWAITING_APPROVAL = "awaiting_approval"
    BLOCKED = "blocked"
    PAUSED = "paused"
    COMPLETED = "completed"
    FAILED = "failed"
    HALTED = "halted"
    STOPPED = "stopped"
    # A run stopped because QA rejected its result: said apart from other stops.
    QA_REJECTED = "qa_rejected"


DEFAULT_EVENTS: tuple[NotifyEvent, ...] = tuple(NotifyEvent)
# What a graph's task loops send on its plan (docs/notifications.md#a-graphs-task-loops):
# a task loop waits for a person only when the custodiet blocks it.
TASK_LOOP_EVENTS: tuple[NotifyEvent, ...] = (NotifyEvent.BLOCKED,)


class WebhookFormat(StrEnum):
    JSON = "json"
    # Slack's incoming webhooks: `{"text": ...}`.
    SLACK = "slack"


class Webhook(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str = Field(min_length=1, max_length=2000, description="http(s) URL to POST to")
    format: WebhookFormat = WebhookFormat.JSON

    @model_validator(mode="before")
    @classmethod
    def _bare_url(cls, value: Any) -> Any:
        return {"url": value} if isinstance(value, str) else value


class NotifyRequest(BaseModel):
    """A request's `notify`: where to POST, and for which events."""

    model_config = ConfigDict(extra="forbid")

    webhooks: list[Webhook] = Field(
        min_length=1, max_length=5, description="where to POST: 1 to 5 URLs or {url, format}"
    )
    events: list[NotifyEvent] = Field(
        default_factory=lambda: list(DEFAULT_EVENTS),
        min_length=1,
        description="default: every event (waiting for a person, and finishing)",
    )

    @field_validator("events")
    @classmethod
    def _unique(cls, events: list[NotifyEvent]) -> list[NotifyEvent]:
        return list(dict.fromkeys(events))


class NotifyTiming(BaseModel):
    """How long one attempt may take, the first retry's wait (doubling after), and when
    the notification is given up (then it is a `notify_failed` event)."""

    attempt_seconds: float = Field(default=10.0, gt=0)
    retry_seconds: float = Field(default=5.0, gt=0)
    give_up_seconds: float = Field(default=900.0, gt=0)


class NotifyPlan(BaseModel):
    """What a workflow is given (by the API, from the request and its settings) to know
    which transitions to send and where. The deployment's webhooks are counted, not
    named: the activity reads them from its own settings."""

    webhooks: list[Webhook] = Field(default_factory=list)
    events: list[NotifyEvent] = Field(default_factory=lambda: list(DEFAULT_EVENTS))
    deployment_webhooks: int = Field(default=0, ge=0)
    deployment_events: list[NotifyEvent] = Field(default_factory=lambda: list(DEFAULT_EVENTS))
    timing: NotifyTiming = Field(default_factory=NotifyTiming)

    def targets(self, event: NotifyEvent) -> list[NotifyTarget]:
        """The webhooks that want `event`: the request's, then the deployment's."""
        found: list[NotifyTarget] = []
        if event in self.events:
            found += [NotifyTarget(webhook=w) for w in self.webhooks]
        if event in self.deployment_events:
            found += [NotifyTarget(deployment=i) for i in range(self.deployment_webhooks)]
        return found

    def for_task_loops(self) -> NotifyPlan | None:
        """The plan a graph hands each of its task loops: the same webhooks, for the
        events of `TASK_LOOP_EVENTS` the graph's plan wants; None when it wants none."""
        plan = self.model_copy(
            update={
                "events": [e for e in self.events if e in TASK_LOOP_EVENTS],
                "deployment_events": [e for e in self.deployment_events if e in TASK_LOOP_EVENTS],
            }
        )
        return plan if any(plan.targets(e) for e in TASK_LOOP_EVENTS) else None


class NotifyTarget(BaseModel):
    """One receiver: a request's webhook, or the deployment's `deployment`th."""

    webhook: Webhook | None = None
    deployment: int | None = Field(default=None, ge=0)

    def label(self) -> str:
        if self.webhook is not None:
            return "request webhook"
        return f"deployment webhook {self.deployment}"


class NextStep(BaseModel):
    """What moves the run or graph on: a command and the API route."""

    command: str = ""
    route: str = ""


class GraphTask(BaseModel):
    """The graph and the task a task loop's run is for."""

    id: str = Field(description="the graph's id")
    task: str = Field(description="the task's id in the graph")


class NotificationBody(BaseModel):
    """The JSON a receiver gets (docs/notifications.md#the-body)."""

    kind: str = Field(description="`run` or `graph`")
    id: str
    alias: str = ""
    event: NotifyEvent
    status: str
    stop_reason: str | None = None
    score: float | None = None
    message: str = ""
    # A `blocked` notification: the custodiet's write-up of the work (the `blocked` event's
    # report, `.loops/blocked.md`), cut at `REPORT_CHARS`.
    report: str | None = None
    next: NextStep | None = None
    # A graph's task loop: which graph and task (its `next` is the graph's command).
    graph: GraphTask | None = None
    links: dict[str, str] = Field(default_factory=dict)
    at: str = Field(description="when the transition happened (the workflow's clock)")


class Notification(BaseModel):
    """What one notification activity is given: the body (less its links, which the
    worker's settings make), the receiver, and the idempotency key."""

    body: NotificationBody
    target: NotifyTarget
    key: str
    namespace: str = "default"


class NotifyOutcome(BaseModel):
    status_code: int
    attempt: int


class NotificationBatch(BaseModel):
    """One transition as a run or graph hands it to its delivery workflow: a notification
    per webhook that wants it (one key for them all), and how each is retried."""

    notifications: list[Notification]
    timing: NotifyTiming = Field(default_factory=NotifyTiming)


class DeliveryInput(BaseModel):
    """What starts a delivery workflow: whose notifications it sends (the run's or
    graph's workflow id) and the transition that started it."""

    owner: str = Field(description="the run's or graph's workflow id")
    batches: list[NotificationBatch] = Field(default_factory=list)


class Delivered(BaseModel):
    key: str
    webhook: str = Field(description="the receiver: its scheme, host and port")
    status_code: int
    attempt: int


class GivenUp(BaseModel):
    """A notification given up after its retries, and whether its owner took it as its
    own: a run's `notify_failed` event, a graph's `notify_failed`. Not when the owner had
    closed by then: the delivery workflow's state is then its only record, and the API
    shows it with the owner's (docs/notifications.md#delivery)."""

    failed: NotifyFailedPayload
    at: str = Field(description="when it was given up (the workflow's clock)")
    recorded: bool = False


class DeliveryState(BaseModel):
    """A delivery workflow's state (its `status` query) and result."""

    owner: str
    delivered: list[Delivered] = Field(default_factory=list)
    given_up: list[GivenUp] = Field(default_factory=list)

    def unrecorded(self) -> list[GivenUp]:
        """The given-up notifications the owner never took: it had closed."""
        return [given for given in self.given_up if not given.recorded]


def delivery_workflow_id(owner: str) -> str:
    """The id of the workflow that sends `owner`'s notifications, one per run or graph."""
    return f"notify/{owner}"


def notify_key(workflow_id: str, transition: int, event: NotifyEvent) -> str:
    """The idempotency key of a transition: the same for every attempt and receiver, and
    different for every transition of every run or graph."""
    return f"{workflow_id}:{transition}:{event.value}"


def slack_escaped(text: str) -> str:
    """`text` as Slack shows it literally: its three control characters as the entities
    Slack documents (`&amp;`, `&lt;`, `&gt;`), so no `<!channel>`, `<@user>` or
    `<url|label>` in it is a mention or a link."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _slack_link(url: str, label: str) -> str:
    """One of our own links: the URL with what would end Slack's `<url|label>` early
    (`|`, `<`, `>`, spaces) percent-encoded, and `&` escaped as Slack reads it."""
    safe = quote(url, safe="/:?#[]@!$&'()*+,;=%~-._")
    return f"<{safe.replace('&', '&amp;')}|{slack_escaped(label)}>"


def slack_text(body: NotificationBody) -> str:
    """The notification as one Slack message. Every text in it is escaped
    (`slack_escaped`): the id, alias and status come from a request, a block's reason from
    the custodiet model, a stop's from whoever stopped the run. The only links are the
    body's `links`, which the worker makes from its settings."""
    e = slack_escaped
    name = f"{body.kind} `{e(body.id)}`" + (f" ({e(body.alias)})" if body.alias else "")
    if body.graph is not None:
        name = f"task {e(body.graph.task)} of graph `{e(body.graph.id)}` (run `{e(body.id)}`)"
    lines = [f"loopworks: {name} is *{body.event.value.replace('_', ' ')}*"]
    details = [f"status {e(body.status)}"]
    if body.stop_reason:
        details.append(f"stop reason {e(body.stop_reason)}")
    if body.score is not None:
        details.append(f"score {body.score:.2f}")
    lines.append(", ".join(details))
    if body.message:
        lines.append(e(body.message[:500]))
    if body.report:
        lines.append(f"```{e(body.report[:1500])}```")
    if body.next and body.next.command:
        lines.append(f"next: `{e(body.next.command)}`")
    lines += [_slack_link(url, label) for label, url in body.links.items()]
    return "\n".join(lines)
