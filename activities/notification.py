"""Sending one notification (docs/notifications.md): a signed POST to one webhook.

The workflow starts this activity and goes on; Temporal retries it with backoff until the
plan's give-up time, and the workflow records a `notify_failed` event if it never
succeeds. The signing secret and the deployment's webhooks are read here, from the
worker's settings: they never travel in a workflow's input or history. The URL is checked
again against the worker's origin rules before anything connects to it, the connection
made to an address that check admitted (never to what the name resolves to afterwards),
and a redirect is never followed (it would lead past that check).

A webhook's path is its credential (a Slack webhook's is), so it is named in errors,
events and logs as `where` names it, and nowhere in full: httpx's own request lines are
dropped while a delivery is made (`_QuietDeliveries`), a failed attempt is one line of
ours and an error whose message holds no URL, and Temporal logs that error at DEBUG, not
with a traceback at every retry (docs/notifications.md#retries).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hashlib
import hmac
import json
import logging
import time
from urllib.parse import urlsplit

import httpx
from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from loopworks.activities.deps import StepDeps
from loopworks.schemas.notify import (
    EVENT_HEADER,
    IDEMPOTENCY_HEADER,
    NOTIFY_SECRET,
    NOTIFY_WEBHOOKS,
    SIGNATURE_HEADER,
    SIGNATURE_VERSION,
    TIMESTAMP_HEADER,
    Notification,
    NotificationBody,
    NotifyOutcome,
    Webhook,
    WebhookFormat,
    slack_text,
)
from loopworks.schemas.settings import ANY_ADDRESS, Settings
from loopworks.workspace.origin_access import refusal, webhook_verdict

NOT_SENT = "NotificationNotSent"
# An error's own text in a failed attempt's message, at most.
REASON_CHARS = 200

# Set while this task makes a delivery: httpx logs each request with its whole URL.
_delivering: contextvars.ContextVar[bool] = contextvars.ContextVar("delivering", default=False)


class _QuietDeliveries(logging.Filter):
    """Drops httpx's records made while a delivery is made (in that task's context): its
    `HTTP Request: POST <url> ...` line carries the webhook's path. Other requests of the
    worker (the model API's) keep theirs."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not _delivering.get()


_QUIET = _QuietDeliveries()


def quiet_deliveries() -> None:
    """Keep httpx's request lines out of the log while deliveries are made; idempotent (a
    logger holds a filter once)."""
    logging.getLogger("httpx").addFilter(_QUIET)


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """`v1=<hex HMAC-SHA256 of "<timestamp>.<body>">`, as `X-Loops-Signature` carries it."""
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return f"{SIGNATURE_VERSION}={mac.hexdigest()}"


def verify(secret: str, timestamp: str, body: bytes, header: str) -> bool:
    """Whether `header` is the signature of `body` sent at `timestamp`."""
    return hmac.compare_digest(signature(secret, timestamp, body), header)


def links(settings: Settings, body: NotificationBody, namespace: str) -> dict[str, str]:
    """Where a person follows the run or graph: the API's route and the Temporal UI. With
    no `LOOPS_PUBLIC_API_URL`, the API's own address, unless it listens on every address
    (a container's 0.0.0.0): no person reaches that, so there is no API link then."""
    found: dict[str, str] = {}
    api = settings.public_api_url
    if api is None and settings.api_host.strip("[]") not in ANY_ADDRESS:
        api = f"http://{_host(settings.api_host)}:{settings.api_port}"
    if api is not None:
        found["api"] = f"{api.rstrip('/')}/{body.kind}s/{body.id}"
    if settings.temporal_ui_url:
        ui = settings.temporal_ui_url.rstrip("/")
        found["temporal_ui"] = f"{ui}/namespaces/{namespace}/workflows/{body.id}"
    return found


def _host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def encoded(body: NotificationBody, webhook: Webhook) -> bytes:
    """The bytes POSTed: the body as compact JSON, or Slack's `{"text": ...}`."""
    if webhook.format == WebhookFormat.SLACK:
        document: object = {"text": slack_text(body)}
    else:
        document = body.model_dump(mode="json", exclude_none=True)
    return json.dumps(document, separators=(",", ":"), sort_keys=True).encode()


def where(url: str) -> str:
    """A webhook as errors and events name it: its scheme, host and port, never its path
    or query (a Slack webhook's path is its credential)."""
    try:
        parts = urlsplit(url)
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "a malformed webhook URL"
    return f"{parts.scheme}://{parts.hostname or ''}{port}/…"


def _not_sent(message: str, retry: bool) -> ApplicationError:
    """A failed attempt. Benign to Temporal: an unreachable receiver is expected, so the
    worker logs it at DEBUG, not as a warning with a traceback at every retry; the
    activity logs its own one line."""
    return ApplicationError(
        message,
        type=NOT_SENT,
        non_retryable=not retry,
        category=ApplicationErrorCategory.BENIGN,
    )


def _reason(err: Exception, url: str) -> str:
    """An error's type and text, short, with the webhook's URL and path cut out of it
    (some of httpx's errors quote the request's URL)."""
    text = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
    parts = urlsplit(url)
    secret = [url, parts.path, parts.query, f"{parts.path}?{parts.query}"]
    with contextlib.suppress(httpx.InvalidURL, UnicodeDecodeError):
        secret += [str(httpx.URL(url)), httpx.URL(url).raw_path.decode("ascii")]
    for piece in sorted({p for p in secret if len(p) > 1}, key=len, reverse=True):
        text = text.replace(piece, "…")
    return text[:REASON_CHARS]


class NotificationActivities:
    def __init__(self, deps: StepDeps) -> None:
        self.deps = deps
        quiet_deliveries()

    def _webhook(self, notification: Notification) -> Webhook:
        target = notification.target
        if target.webhook is not None:
            return target.webhook
        configured = self.deps.settings.deployment_webhooks()
        if target.deployment is None or target.deployment >= len(configured):
            raise _not_sent(f"this worker's {NOTIFY_WEBHOOKS} has no {target.label()}", False)
        return configured[target.deployment]

    @activity.defn(name="send_notification")
    async def send_notification(self, notification: Notification) -> NotifyOutcome:
        """POST one notification, signed; any answer but 2xx is an attempt that failed,
        logged as one line that names the webhook without its path."""
        attempt = activity.info().attempt
        token = _delivering.set(True)
        try:
            outcome = await self._deliver(notification)
        except ApplicationError as err:
            activity.logger.warning(
                "notification %s, attempt %d, not sent: %s", notification.key, attempt, err.message
            )
            raise
        except Exception as err:
            # A bug's text may quote the URL, and Temporal would log it with a traceback.
            failed = _not_sent(self._unexpected(notification, err), True)
            activity.logger.warning(
                "notification %s, attempt %d, not sent: %s",
                notification.key,
                attempt,
                failed.message,
            )
            raise failed from None
        finally:
            _delivering.reset(token)
        activity.logger.info(
            "notification %s, attempt %d, delivered: %d",
            notification.key,
            attempt,
            outcome.status_code,
        )
        return outcome

    def _unexpected(self, notification: Notification, err: Exception) -> str:
        try:
            url = self._webhook(notification).url
        except ApplicationError:
            return type(err).__name__
        return f"{where(url)}: {_reason(err, url)}"

    async def _deliver(self, notification: Notification) -> NotifyOutcome:
        settings = self.deps.settings
        if not settings.notify_secret:
            raise _not_sent(f"{NOTIFY_SECRET} is not set on this worker", False)
        webhook = self._webhook(notification)
        rules = settings.origin_rules()
        verdict = await asyncio.to_thread(webhook_verdict, webhook.url, rules)
        if not verdict:
            raise _not_sent(f"webhook {where(webhook.url)} refused: {refusal(verdict)}", False)
        info = activity.info()
        body = notification.body.model_copy(
            update={
                "links": links(
                    settings, notification.body, info.workflow_namespace or notification.namespace
                )
            }
        )
        data = encoded(body, webhook)
        timestamp = str(int(time.time()))
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "loopworks-notify/1",
            TIMESTAMP_HEADER: timestamp,
            SIGNATURE_HEADER: signature(settings.notify_secret, timestamp, data),
            IDEMPOTENCY_HEADER: notification.key,
            EVENT_HEADER: body.event.value,
        }
        seconds = settings.notify_attempt_seconds
        try:
            # httpx's timeout bounds each read, and a receiver that answers a byte at a time
            # never meets it: the attempt as a whole is bounded too.
            async with (
                asyncio.timeout(seconds),
                httpx.AsyncClient(
                    follow_redirects=False, timeout=httpx.Timeout(seconds), trust_env=False
                ) as client,
            ):
                answer = await _post(client, webhook.url, verdict.addresses, data, headers)
        except httpx.HTTPError as err:
            raise _not_sent(f"{where(webhook.url)}: {_reason(err, webhook.url)}", True) from None
        except TimeoutError:
            raise _not_sent(f"{where(webhook.url)}: no answer in {seconds:g}s", True) from None
        if not 200 <= answer.status_code < 300:
            # Its status only: a reply's body would make any host the origin rules admit a
            # POST target whose answers a client reads back in the run's events.
            raise _not_sent(f"{where(webhook.url)} answered {answer.status_code}", True)
        return NotifyOutcome(status_code=answer.status_code, attempt=info.attempt)


async def _post(
    client: httpx.AsyncClient,
    url: str | httpx.URL,
    addresses: tuple[str, ...],
    data: bytes,
    headers: dict[str, str],
) -> httpx.Response:
    """POST to one of `addresses`, the ones the check admitted for the URL's host, in turn
    until one takes the connection: the URL's host replaced by the address, while the
    Host header and TLS's server name (SNI, and the name the certificate must carry) stay
    the host's. None to pin (a URL naming an address): the URL as it is. Only the answer's
    status is read: its body, which the receiver chooses, is never read into memory."""
    if not addresses:
        return await _status_only(client, url, data, headers, {})
    target = httpx.URL(url)
    named = {**headers, "Host": target.netloc.decode("ascii")}
    sni = {"sni_hostname": target.raw_host.decode("ascii")}
    for address in addresses[:-1]:
        try:
            pinned = target.copy_with(host=address)
            return await _status_only(client, pinned, data, named, sni)
        except httpx.ConnectError:
            continue
    pinned = target.copy_with(host=addresses[-1])
    return await _status_only(client, pinned, data, named, sni)


async def _status_only(
    client: httpx.AsyncClient,
    url: str | httpx.URL,
    data: bytes,
    headers: dict[str, str],
    extensions: dict[str, str],
) -> httpx.Response:
    request = client.build_request(
        "POST", url, content=data, headers=headers, extensions=extensions
    )
    answer = await client.send(request, stream=True)
    await answer.aclose()
    return answer
