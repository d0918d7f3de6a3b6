"""A local stand-in for the Anthropic Messages API: a real HTTP server on 127.0.0.1.

The real SDK talks to it over a socket, so everything between `AnthropicModel` and the
wire (headers, retries, error mapping) is the production path. Every request is
recorded; each is answered by the next scripted responder for its role, else by the
default one, which answers the forced tool with what loopworks' offline model would
answer for that role and context. A request that offers tools without forcing one is an
agent's turn (PRODUCE, REFINE): it is answered as the offline model converses, with
`write_file` calls for the role's draft first and a closing text once tool results are
in. The role is recognised from the system prompt (the agent definition's prompt), the
context from the first user message's sections (`tests.fakes.sections`).

    with FakeMessagesAPI(api_key="test-key") as api:
        api.script(Role.PLANNER, error(429, headers={"retry-after": "1"}))
        ... AsyncAnthropic(base_url=api.base_url, api_key="test-key", max_retries=0) ...
        assert len(api.requests_for(Role.PLANNER)) == 2
"""

from __future__ import annotations

import json
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from loopworks.llm.facts import ANSWER_TOOL
from loopworks.llm.offline.answers import closing_line, default_answer, draft_files
from loopworks.llm.offline.model import RUN_COMMAND_TOOL, WRITE_FILE_TOOL
from loopworks.prompts.catalog import AgentDefinition, load_agents
from loopworks.schemas.roles import Role
from tests.fakes.sections import context_from_sections

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    409: "conflict_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    504: "timeout_error",
    529: "overloaded_error",
}


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]  # lower-cased names
    body: dict[str, Any]
    received_at: float
    role: Role | None = None
    # The `usage` of the message the fake answered with (None for an error reply).
    reply_usage: dict[str, Any] | None = None

    @property
    def api_key(self) -> str | None:
        """The key sent: SDK 2.x sends `Authorization: Bearer`, older ones `x-api-key`."""
        bearer = self.headers.get("authorization", "")
        if bearer.lower().startswith("bearer "):
            return bearer[len("bearer ") :]
        return self.headers.get("x-api-key")

    @property
    def system_text(self) -> str:
        system = self.body.get("system") or ""
        if isinstance(system, str):
            return system
        return "".join(block.get("text", "") for block in system)

    @property
    def user_text(self) -> str:
        """The text of the last message."""
        return _text_of(self.body["messages"][-1])

    @property
    def context(self) -> dict[str, Any]:
        """The inputs, read back from the sections of the first user message."""
        first = next((m for m in self.body.get("messages") or [] if m.get("role") == "user"), None)
        if first is None or self.role is None:
            return {}
        return context_from_sections(_text_of(first), self.role)

    @property
    def tool(self) -> dict[str, Any]:
        """The forced tool: the one `tool_choice` names, or with `any` the only one, or
        the answer tool among a verifier's tools (it answers once the commands its answer
        cites have run, as the offline model does)."""
        choice = self.body.get("tool_choice") or {}
        tools = self.body.get("tools") or []
        name = choice.get("name")
        if choice.get("type") == "any":
            if len(tools) == 1:
                return dict(tools[0])
            name = ANSWER_TOOL
        for tool in tools:
            if tool.get("name") == name:
                return dict(tool)
        raise LookupError(f"no forced tool in the request (tool_choice {name!r})")

    @property
    def is_agent_turn(self) -> bool:
        """Tools offered and none forced: the model may call any of them, or none."""
        forced = (self.body.get("tool_choice") or {}).get("type") in ("tool", "any")
        return bool(self.body.get("tools")) and not forced

    @property
    def tool_results(self) -> list[dict[str, Any]]:
        """Every tool_result block sent back in this request's messages, in order."""
        return [
            block
            for message in self.body.get("messages") or []
            if message.get("role") == "user" and isinstance(message.get("content"), list)
            for block in message["content"]
            if isinstance(block, dict) and block.get("type") == "tool_result"
        ]


def result_text(block: dict[str, Any]) -> str:
    """The text of a tool_result block, whether its content is a string or text blocks."""
    return _text_of(block)


def _text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    return "".join(block.get("text", "") for block in content or [] if isinstance(block, dict))


@dataclass(frozen=True)
class Reply:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


Responder = Callable[["FakeMessagesAPI", RecordedRequest], Reply]


# --- responders --------------------------------------------------------------------------


def answer(
    answer_input: dict[str, Any] | None = None,
    *,
    stop_reason: str | None = None,
    usage: Mapping[str, int | None] | None = None,
    delay_s: float = 0.0,
) -> Responder:
    """A tool_use answer: `answer_input`, or the offline model's answer for the request.

    To an agent's turn, `answer_input` is the draft its `write_file` calls write (by
    default the offline model's), and the reply is the offline model's next turn.
    """

    def respond(api: FakeMessagesAPI, request: RecordedRequest) -> Reply:
        if request.is_agent_turn:
            content, agent_stop = api.agent_turn(request, answer_input)
            return api.message(request, content, stop_reason or agent_stop, usage, delay_s)
        tool_input = answer_input if answer_input is not None else api.offline_answer(request)
        if pending := api.evidence_to_run(request, tool_input):
            # A verifier runs what it cites before it answers, as the offline model does.
            runs = [api.tool_use(RUN_COMMAND_TOOL, {"command": command}) for command in pending]
            return api.message(request, runs, "tool_use", usage, delay_s)
        block = {
            "type": "tool_use",
            "id": f"toolu_{uuid.uuid4().hex[:20]}",
            "name": request.tool["name"],
            "input": tool_input,
        }
        return api.message(request, [block], stop_reason or "tool_use", usage, delay_s)

    return respond


def tool_calls(*calls: tuple[str | None, dict[str, Any]]) -> Responder:
    """A reply of several tool_use blocks, each `(name, input)`; a None name is the
    forced tool's."""

    def respond(api: FakeMessagesAPI, request: RecordedRequest) -> Reply:
        blocks = [
            {
                "type": "tool_use",
                "id": f"toolu_{uuid.uuid4().hex[:20]}",
                "name": name or request.tool["name"],
                "input": tool_input,
            }
            for name, tool_input in calls
        ]
        return api.message(request, blocks, "tool_use", None, 0.0)

    return respond


def truncated(partial_input: dict[str, Any]) -> Responder:
    """An answer cut off at max_tokens: the tool input is what was generated so far."""
    return answer(partial_input, stop_reason="max_tokens")


def refusal() -> Responder:
    def respond(api: FakeMessagesAPI, request: RecordedRequest) -> Reply:
        return api.message(request, [], "refusal", None, 0.0)

    return respond


def text_only(text: str) -> Responder:
    """A reply without the forced tool call (a compatible server that ignores tool_choice)."""

    def respond(api: FakeMessagesAPI, request: RecordedRequest) -> Reply:
        return api.message(request, [{"type": "text", "text": text}], "end_turn", None, 0.0)

    return respond


def error(
    status: int,
    message: str | None = None,
    *,
    headers: Mapping[str, str] | None = None,
    error_type: str | None = None,
) -> Responder:
    """An error response shaped like the API's: {"type": "error", "error": {...}}."""

    def respond(api: FakeMessagesAPI, request: RecordedRequest) -> Reply:
        request_id = f"req_fake_{uuid.uuid4().hex[:12]}"
        body = {
            "type": "error",
            "error": {
                "type": error_type or ERROR_TYPES.get(status, "api_error"),
                "message": message or f"fake error {status}",
            },
            "request_id": request_id,
        }
        return Reply(status, body, {"request-id": request_id, **(headers or {})})

    return respond


# --- the server --------------------------------------------------------------------------


class FakeMessagesAPI:
    def __init__(
        self,
        *,
        api_key: str | None = None,
        default: Responder | None = None,
        agents: Mapping[str, AgentDefinition] | None = None,
    ) -> None:
        self.api_key = api_key
        self.default = default or answer()
        self.requests: list[RecordedRequest] = []
        self.failures: list[Exception] = []  # responders that raised
        self._roles = {
            agent.prompt.strip(): Role(name)
            for name, agent in (agents or load_agents()).items()
            if name in Role._value2member_map_
        }
        self._scripts: dict[Role | None, deque[Responder]] = {}
        self._cached_systems: set[str] = set()
        self._lock = threading.Lock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- scripting and inspection

    def script(self, role: Role | None, *responders: Responder) -> None:
        """Answer the next requests of `role` (None: of any role) with `responders`, in
        order; scripted replies for the role come before those for any role."""
        with self._lock:
            self._scripts.setdefault(role, deque()).extend(responders)

    def requests_for(self, role: Role) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.role == role]

    @property
    def base_url(self) -> str:
        assert self._server is not None, "the fake is not running"
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    # -- lifecycle

    def __enter__(self) -> FakeMessagesAPI:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self._server = _Server(("127.0.0.1", 0), _handler_for(self))
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="fake-messages-api",
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._server = self._thread = None

    # -- answering

    def respond(self, request: RecordedRequest, rejection: Responder | None = None) -> Reply:
        """Record `request` and answer it (with `rejection` when it is malformed)."""
        if rejection is None:
            request.role = self._roles.get(request.system_text.strip())
        with self._lock:
            self.requests.append(request)
            if rejection is not None:
                responder = rejection
            elif self.api_key is not None and request.api_key != self.api_key:
                responder = error(401, "invalid x-api-key")
            else:
                responder = self._next_scripted(request.role) or self.default
        return responder(self, request)

    def _next_scripted(self, role: Role | None) -> Responder | None:
        for key in (role, None):
            queue = self._scripts.get(key)
            if queue:
                return queue.popleft()
        return None

    def offline_answer(self, request: RecordedRequest) -> dict[str, Any]:
        """What the offline model answers for this request's role and context."""
        if request.role is None:
            raise LookupError("the system prompt matches no agent definition")
        return default_answer(request.role, request.context)

    def evidence_to_run(self, request: RecordedRequest, answer: dict[str, Any]) -> list[str]:
        """The commands a verifier's answer cites that its conversation has not run yet,
        when the command tool is offered beside the answer tool."""
        tools = {tool.get("name") for tool in request.body.get("tools") or []}
        cited = answer.get("evidence")
        if RUN_COMMAND_TOOL not in tools or not isinstance(cited, list):
            return []
        ran = {
            block["input"].get("command")
            for message in request.body["messages"]
            if message.get("role") == "assistant" and isinstance(message.get("content"), list)
            for block in message["content"]
            if block.get("type") == "tool_use" and block.get("name") == RUN_COMMAND_TOOL
        }
        return [c for c in dict.fromkeys(cited) if isinstance(c, str) and c not in ran]

    @staticmethod
    def tool_use(name: str, tool_input: dict[str, Any]) -> dict[str, Any]:
        return {
            "type": "tool_use",
            "id": f"toolu_{uuid.uuid4().hex[:20]}",
            "name": name,
            "input": tool_input,
        }

    def agent_turn(
        self, request: RecordedRequest, draft: dict[str, Any] | None = None
    ) -> tuple[list[dict[str, Any]], str]:
        """(content, stop_reason) of the offline model's next turn in this conversation:
        `write_file` for each file of the draft not written yet, else a closing line."""
        if request.role is None:
            raise LookupError("the system prompt matches no agent definition")
        answer = draft if draft is not None else default_answer(request.role, request.context)
        written = {
            block["input"].get("path")
            for message in request.body["messages"]
            if message.get("role") == "assistant" and isinstance(message.get("content"), list)
            for block in message["content"]
            if block.get("type") == "tool_use" and block.get("name") == WRITE_FILE_TOOL
        }
        files = [f for f in draft_files(answer) if f["path"] not in written]
        if not files:
            return [{"type": "text", "text": closing_line(answer)}], "end_turn"
        blocks = [
            {
                "type": "tool_use",
                "id": f"toolu_{uuid.uuid4().hex[:20]}",
                "name": WRITE_FILE_TOOL,
                "input": {"path": f["path"], "content": f["content"]},
            }
            for f in files
        ]
        return blocks, "tool_use"

    def message(
        self,
        request: RecordedRequest,
        content: list[dict[str, Any]],
        stop_reason: str,
        usage: Mapping[str, int | None] | None,
        delay_s: float,
    ) -> Reply:
        reply_usage = dict(usage) if usage is not None else self._usage(request, content)
        request.reply_usage = reply_usage
        body = {
            "id": f"msg_fake_{uuid.uuid4().hex[:16]}",
            "type": "message",
            "role": "assistant",
            "model": request.body.get("model"),
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": reply_usage,
        }
        return Reply(200, body, {"request-id": f"req_fake_{uuid.uuid4().hex[:12]}"}, delay_s)

    def _usage(self, request: RecordedRequest, content: list[dict[str, Any]]) -> dict[str, int]:
        """Rough counts, four characters a token; a system block marked for caching is
        written to the cache the first time it is seen and read from it afterwards.
        (The real API caches only a prefix of at least 1024-4096 tokens, by model.)"""
        system = request.body.get("system")
        cacheable = isinstance(system, list) and any("cache_control" in b for b in system)
        system_tokens = max(1, len(request.system_text) // 4)
        with self._lock:
            seen = request.system_text in self._cached_systems
            if cacheable:
                self._cached_systems.add(request.system_text)
        # An agent's turn sends the whole conversation so far.
        sent = json.dumps(request.body["messages"]) if request.is_agent_turn else request.user_text
        return {
            "input_tokens": max(1, len(sent) // 4) + (0 if cacheable else system_tokens),
            "output_tokens": max(1, len(json.dumps(content)) // 4),
            "cache_creation_input_tokens": system_tokens if cacheable and not seen else 0,
            "cache_read_input_tokens": system_tokens if cacheable and seen else 0,
        }


class _Server(ThreadingHTTPServer):
    # A delayed reply may outlive the test that wanted it: never wait for it at shutdown.
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that gave up (a cancelled call, a timeout) is not the fake's problem.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def _handler_for(api: FakeMessagesAPI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length)
            if self.path.split("?")[0] != "/v1/messages":
                self._send(api.respond(self._recorded({}), error(404, f"no route {self.path}")))
                return
            try:
                body = json.loads(raw)
                if not isinstance(body, dict):
                    raise ValueError("the body must be a JSON object")
                for key in ("model", "max_tokens", "messages"):
                    if key not in body:
                        raise ValueError(f"{key}: Field required")
            except ValueError as exc:
                self._send(api.respond(self._recorded({}), error(400, str(exc))))
                return
            try:
                reply = api.respond(self._recorded(body))
            except Exception as exc:
                # A responder that cannot answer is a broken test: say so in the reply
                # and in `api.failures`, rather than drop the connection.
                api.failures.append(exc)
                reply = Reply(
                    500, {"type": "error", "error": {"type": "api_error", "message": repr(exc)}}
                )
            self._send(reply)

        def _recorded(self, body: dict[str, Any]) -> RecordedRequest:
            return RecordedRequest(
                method=self.command,
                path=self.path,
                headers={k.lower(): v for k, v in self.headers.items()},
                body=body,
                received_at=time.monotonic(),
            )

        def _send(self, reply: Reply) -> None:
            if reply.delay_s:
                time.sleep(reply.delay_s)
            payload = json.dumps(reply.body).encode()
            self.send_response(reply.status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(payload)))
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # the recorded requests are the log

    return Handler
