"""A Messages API stand-in playing an obedient but literal model, knowing nothing of loopworks.

`tests.fakes.messages_api` answers with loopworks' own offline model, which already knows
what the code expects: a test run against it cannot tell whether the prompts and tool
schemas the loop sends are enough on their own. This one answers only from what each
request contains - the system prompt, the messages, the tools and their JSON schemas - so a
loop that gets through against it has proved its prompts:

- a forced tool (`tool_choice` `tool`, or `any`) is answered with a tool_use whose input is
  generated from the tool's `input_schema` alone (`answer_from_schema`): required fields
  only, first enum value, examples, patterns and bounds respected; and a list-of-strings
  field whose description names a tool the conversation called lists what it gave that
  tool (`inputs_cited`);
- an agent's turn (tools offered, none forced) writes, with the tool that takes `path` and
  `content`, exactly the backticked files its instructions tell it to write, each holding
  the first user message echoed, then ends its turn.

Knobs (settable while the server runs): `corrupt_answers` makes the next N forced answers
invalid, so that a repair round trip can be checked; `lazy_agent_turns` makes the next N
agent conversations end their first turn without writing; `reject_strict` refuses tools
marked `"strict": true` as an API that does not know the field would; `agent_reads` makes
the next agent conversation first read those paths, with the tool that takes a `path` and
reads, and quote what it read when it ends its turn (a model doing what a file told it);
`agent_commands` are run, once each per agent conversation, once its files are written,
with the tool that takes a string `command` (a prompt-injected model's doing, say); in a
conversation that must end with a forced answer (`any` among several tools, a verifier's),
they are run first, then the answer is given.

It imports nothing from the project (a unit test checks): standard library only. It does not
stream; mind that pydantic-ai streams a request whose `max_tokens` is past the SDK's
non-streaming limit (about 21,000), its default being the model's maximum output.

    with LiteralMessagesAPI() as api:
        client = AsyncAnthropic(base_url=api.base_url, api_key="k", max_retries=0)
        ...
        assert api.requests_with_tool_error()
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

WRITING_VERB = re.compile(  # `write_file` is no verb: `\b` fails before the underscore
    r"\b(?:writ(?:e|es|ing|ten)|wrote|(?:sav|creat|produc|updat)(?:e|es|ed|ing)|leav(?:e|es|ing)"
    r"|puts?|putting)\b",
    re.IGNORECASE,
)
BACKTICKED_PATH = re.compile(r"`([\w./-]+\.[A-Za-z0-9]+)`")
BACKTICKED_NAME = re.compile(r"`([^`\s]+)`")
SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n")
STRING_FORMATS = {
    "date-time": "2024-01-01T00:00:00Z",
    "date": "2024-01-01",
    "time": "00:00:00",
    "email": "someone@example.com",
    "uri": "https://example.com/",
    "uuid": "00000000-0000-4000-8000-000000000000",
}
INVALID_WORD = "NOT-A-VALID-WORD"


# --- answers generated from a JSON schema ---------------------------------------------------


def answer_from_schema(schema: dict[str, Any]) -> Any:
    """The value a literal model fills in for `schema`: required fields only, each with the
    first thing the schema allows. Deterministic."""
    return _generate(schema, schema.get("$defs") or schema.get("definitions") or {}, "value")


def _resolve(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """`schema` with `$ref` followed (its siblings win) and a one-item `allOf` unwrapped."""
    for _ in range(64):  # a ref cycle must not hang the server
        if "$ref" in schema:
            target = defs.get(schema["$ref"].rsplit("/", 1)[-1], {})
            schema = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
        elif "allOf" in schema:  # one item in practice; several are merged shallowly
            parts = [_resolve(part, defs) for part in schema["allOf"]]
            rest = {k: v for k, v in schema.items() if k != "allOf"}
            schema = {**{k: v for part in parts for k, v in part.items()}, **rest}
        else:
            return schema
    return schema


def _generate(schema: dict[str, Any], defs: dict[str, Any], name: str) -> Any:
    schema = _resolve(schema, defs)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            options = [o for o in schema[key] if _resolve(o, defs).get("type") != "null"]
            return _generate(options[0], defs, name) if options else None
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind is None:
        kind = "object" if "properties" in schema else "array" if "items" in schema else "string"
    if kind == "object":
        properties = schema.get("properties", {})
        return {
            prop: _generate(properties.get(prop, {}), defs, prop)
            for prop in schema.get("required", [])
        }
    if kind == "array":
        count = max(1, schema.get("minItems", 1))
        return [_generate(schema.get("items") or {}, defs, name) for _ in range(count)]
    if kind == "boolean":
        return schema.get("default", True)
    if kind in ("integer", "number"):
        return _number(schema, kind)
    if kind == "null":
        return None
    return _string(schema, name)


def _number(schema: dict[str, Any], kind: str) -> int | float:
    value = schema.get("default", schema.get("minimum", schema.get("exclusiveMinimum", 0) + 1))
    value = min(value, schema.get("maximum", value))
    return int(value) if kind == "integer" else value


def _string(schema: dict[str, Any], name: str) -> str:
    examples = [e for e in schema.get("examples") or [] if isinstance(e, str)]
    description = (schema.get("description") or "").strip().split("\n")[0]
    words = description or name.replace("_", " ").replace("-", " ").strip() or "value"
    sentence = words[:1].upper() + words[1:120].rstrip(".") + "."
    value = examples[0] if examples else STRING_FORMATS.get(schema.get("format", ""), sentence)
    if pattern := schema.get("pattern"):
        slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "item"
        default = [schema["default"]] if isinstance(schema.get("default"), str) else []
        candidates = [*examples, *default, f"{slug}-1", slug, "item-1", "item", value]
        value = next((c for c in candidates if re.search(pattern, c)), value)
    if len(value) < schema.get("minLength", 0):
        value = (value + " " + sentence * schema["minLength"])[: schema["minLength"]]
    if "maxLength" in schema:
        value = value[: schema["maxLength"]]
    return value


def inputs_cited(schema: dict[str, Any], uses: list[dict[str, Any]]) -> dict[str, list[str]]:
    """The list-of-strings fields of an answer whose description names (in backticks) a tool
    this conversation called, each with the string inputs it gave that tool, in order: a
    literal model asked to list what it gave a tool lists exactly that. Optional fields too:
    the description is what asks."""
    defs = schema.get("$defs") or schema.get("definitions") or {}
    cited: dict[str, list[str]] = {}
    for prop, sub in (_resolve(schema, defs).get("properties") or {}).items():
        sub = _resolve(sub, defs)
        items = _resolve(sub.get("items") or {}, defs)
        if sub.get("type") != "array" or items.get("type") != "string":
            continue
        for tool in BACKTICKED_NAME.findall(sub.get("description") or ""):
            given = [
                value
                for block in uses
                if block.get("name") == tool
                for value in (block.get("input") or {}).values()
                if isinstance(value, str)
            ]
            if given:
                cited[prop] = list(dict.fromkeys(given))
                break
    return cited


def _corrupt(answer: Any, schema: dict[str, Any]) -> bool:
    """Make `answer` invalid for `schema`, in place: drop its first required property, else
    put a word outside the enum in its first enum field. False when neither applies."""
    defs = schema.get("$defs") or schema.get("definitions") or {}
    schema = _resolve(schema, defs)
    if not isinstance(answer, dict):
        return False
    required = [p for p in schema.get("required", []) if p in answer]
    if required:
        del answer[required[0]]
        return True
    for prop, sub in schema.get("properties", {}).items():
        if _resolve(sub, defs).get("enum"):
            answer[prop] = INVALID_WORD
            return True
    return False


# --- reading a request -----------------------------------------------------------------------


@dataclass
class RecordedRequest:
    body: dict[str, Any]
    headers: dict[str, str]  # lower-cased names

    @property
    def system_text(self) -> str:
        system = self.body.get("system") or ""
        if isinstance(system, str):
            return system
        return "\n".join(b.get("text", "") for b in system if isinstance(b, dict))

    @property
    def messages(self) -> list[dict[str, Any]]:
        return [m for m in self.body.get("messages") or [] if isinstance(m, dict)]

    @property
    def tools(self) -> list[dict[str, Any]]:
        return [t for t in self.body.get("tools") or [] if isinstance(t, dict)]

    @property
    def forced_tool(self) -> dict[str, Any] | None:
        """The tool `tool_choice` forces: named, or the one of `any` (the system prompt's
        last backticked pick among several: a prompt ends by saying how to answer; else
        the first)."""
        choice = self.body.get("tool_choice") or {}
        tools = self.tools
        if choice.get("type") == "tool":
            return next((t for t in tools if t.get("name") == choice.get("name")), None)
        if choice.get("type") != "any" or not tools:
            return None
        by_name = {t.get("name"): t for t in tools}
        named = [by_name[n] for n in BACKTICKED_NAME.findall(self.system_text) if n in by_name]
        return named[-1] if named else tools[0]

    @property
    def is_agent_turn(self) -> bool:
        choice = (self.body.get("tool_choice") or {}).get("type", "auto")
        return bool(self.tools) and choice == "auto"

    @property
    def tool_error(self) -> bool:
        """The last user message returns a tool call's error (a forced answer's validation
        errors, asking for a repair, which is answered as the first answer was)."""
        users = [m for m in self.messages if m.get("role") == "user"]
        return any(
            block.get("type") == "tool_result" and block.get("is_error")
            for block in (_blocks(users[-1]) if users else [])
        )

    def tool_uses(self) -> list[dict[str, Any]]:
        """The tool_use blocks of the assistant messages so far."""
        return [
            block
            for m in self.messages
            if m.get("role") == "assistant"
            for block in _blocks(m)
            if block.get("type") == "tool_use"
        ]


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def text_of(message: dict[str, Any]) -> str:
    """A user message's text: its string content, or its text blocks and the text of its
    tool results, joined."""
    if isinstance(message.get("content"), str):
        return message["content"]
    parts: list[str] = []
    for block in _blocks(message):
        if block.get("type") == "text":
            parts.append(block.get("text", ""))
        elif block.get("type") == "tool_result":
            inner = block.get("content")
            if isinstance(inner, str):
                parts.append(inner)
            elif isinstance(inner, list):
                parts += [b.get("text", "") for b in inner if isinstance(b, dict)]
    return "\n".join(parts)


def files_to_write(text: str) -> list[str]:
    """Backticked relative paths named in the sentences of `text` that say to write."""
    found: list[str] = []
    for sentence in SENTENCE_END.split(text):
        if not WRITING_VERB.search(sentence):
            continue
        for path in BACKTICKED_PATH.findall(sentence):
            if not path.startswith("/") and ".." not in path and path not in found:
                found.append(path)
    return found


# --- the server ------------------------------------------------------------------------------


class LiteralMessagesAPI:
    def __init__(
        self,
        *,
        corrupt_answers: int = 0,
        lazy_agent_turns: int = 0,
        reject_strict: bool = False,
        agent_reads: list[str] | None = None,
        agent_commands: list[str] | None = None,
    ) -> None:
        self.corrupt_answers = corrupt_answers
        self.lazy_agent_turns = lazy_agent_turns
        self.reject_strict = reject_strict
        self.agent_reads = list(agent_reads or [])
        self.agent_commands = list(agent_commands or [])
        self.strict_rejections = 0
        self.requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        assert self._server is not None, "the stand-in is not running"
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def forced_requests(self) -> list[RecordedRequest]:
        return [r for r in self._recorded() if r.forced_tool is not None]

    def agent_requests(self) -> list[RecordedRequest]:
        return [r for r in self._recorded() if r.is_agent_turn]

    def requests_with_tool_error(self) -> list[RecordedRequest]:
        return [r for r in self._recorded() if r.tool_error]

    def _recorded(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self.requests)

    # -- lifecycle

    def __enter__(self) -> LiteralMessagesAPI:
        self._server = _Server(("127.0.0.1", 0), _handler_for(self))
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="literal-messages-api",
            daemon=True,
        )
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._server = self._thread = None

    # -- answering

    def respond(self, request: RecordedRequest) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.requests.append(request)
        if request.body.get("stream"):
            return _error(400, "stream: streaming is not supported by this stand-in")
        strict = [i for i, t in enumerate(request.tools) if t.get("strict") is True]
        if self.reject_strict and strict:
            with self._lock:
                self.strict_rejections += 1
            return _error(400, f"tools.{strict[0]}.strict: Extra inputs are not permitted")
        choice = request.body.get("tool_choice") or {}
        if choice.get("type") == "any" and (commands := self._commands_to_run(request)):
            return 200, self._message(request, commands, "tool_use")
        if choice.get("type") in ("tool", "any"):
            tool = request.forced_tool
            if tool is None:
                return _error(400, f"tool_choice: no such tool {choice.get('name')!r}")
            return 200, self._message(request, [self._forced_answer(tool, request)], "tool_use")
        if request.is_agent_turn:
            content, stop_reason = self._agent_turn(request)
            return 200, self._message(request, content, stop_reason)
        return 200, self._message(request, [_text("Nothing to write.")], "end_turn")

    def _commands_to_run(self, request: RecordedRequest) -> list[dict[str, Any]]:
        """Under `any` with several tools (an agent that must end with an answer tool),
        `agent_commands` not yet run in this conversation, with the command tool."""
        runner = _tool_taking(request.tools, "command")
        if runner is None or len(request.tools) < 2:
            return []
        ran = [
            (block.get("input") or {}).get("command")
            for block in request.tool_uses()
            if block.get("name") == runner
        ]
        with self._lock:
            pending = [c for c in self.agent_commands if c not in ran]
        return [_tool_use(runner, {"command": command}) for command in pending]

    def _forced_answer(self, tool: dict[str, Any], request: RecordedRequest) -> dict[str, Any]:
        schema = tool.get("input_schema") or {}
        answer = answer_from_schema(schema)
        answer.update(inputs_cited(schema, request.tool_uses()))
        with self._lock:
            if self.corrupt_answers > 0 and _corrupt(answer, schema):
                self.corrupt_answers -= 1
        return _tool_use(tool["name"], answer)

    def _agent_turn(self, request: RecordedRequest) -> tuple[list[dict[str, Any]], str]:
        messages = request.messages
        first_turn = not any(m.get("role") == "assistant" for m in messages)
        with self._lock:
            lazy = first_turn and self.lazy_agent_turns > 0
            if lazy:
                self.lazy_agent_turns -= 1
            reads = self.agent_reads if first_turn else []
            if reads:
                self.agent_reads = []
        if lazy:
            return [_text("I have finished.")], "end_turn"
        reader = _reading_tool(request.tools)
        if reads and reader is not None:
            return [_tool_use(reader, {"path": path}) for path in reads], "tool_use"
        users = [m for m in messages if m.get("role") == "user"]
        instructions = request.system_text + "\n" + (text_of(users[-1]) if users else "")
        writer = _writing_tool(request.tools, instructions)
        if writer is None:
            return [_text("Nothing to write.")], "end_turn"
        written = [
            str((block.get("input") or {}).get("path"))
            for block in request.tool_uses()
            if block.get("name") == writer
        ]
        missing = [p for p in files_to_write(instructions) if p not in written]
        if not missing:
            runner = _tool_taking(request.tools, "command")
            ran = [
                (block.get("input") or {}).get("command")
                for block in request.tool_uses()
                if block.get("name") == runner
            ]
            with self._lock:
                pending = [c for c in self.agent_commands if c not in ran]
            if runner is not None and pending:
                return [_tool_use(runner, {"command": command}) for command in pending], "tool_use"
            done = f"Done: wrote {', '.join(dict.fromkeys(written))}." if written else None
            ids = {b.get("id") for b in request.tool_uses() if b.get("name") == reader}
            read = _results_of(messages, {str(i) for i in ids})
            quoted = "".join(f"\nI read: {text}" for text in read)
            return [_text((done or "Nothing to write.") + quoted)], "end_turn"
        first = text_of(users[0]) if users else ""
        title = next((line for line in first.splitlines() if line.strip()), "Untitled")
        document = f"# {title.lstrip('# ').strip()[:80]}\n\n{first}"
        calls = [_tool_use(writer, {"path": path, "content": document}) for path in missing]
        return calls, "tool_use"

    def _message(
        self, request: RecordedRequest, content: list[dict[str, Any]], stop_reason: str
    ) -> dict[str, Any]:
        sent = json.dumps([request.body.get(k) for k in ("system", "messages", "tools")])
        return {
            "id": f"msg_literal_{uuid.uuid4().hex[:16]}",
            "type": "message",
            "role": "assistant",
            "model": request.body.get("model"),
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": {
                "input_tokens": max(1, len(sent) // 4),
                "output_tokens": max(1, len(json.dumps(content)) // 4),
            },
        }


def _writing_tool(tools: list[dict[str, Any]], instructions: str) -> str | None:
    """The tool taking string `path` and `content`; the one the instructions name, if any."""
    writers = [
        t["name"]
        for t in tools
        if all(
            ((t.get("input_schema") or {}).get("properties") or {}).get(p, {}).get("type")
            == "string"
            for p in ("path", "content")
        )
    ]
    named = set(BACKTICKED_NAME.findall(instructions))
    return next((w for w in writers if w in named), writers[0] if writers else None)


def _reading_tool(tools: list[dict[str, Any]]) -> str | None:
    """The tool taking a string `path` and no `content` whose name or description says it
    reads."""
    for tool in tools:
        properties = (tool.get("input_schema") or {}).get("properties") or {}
        says = f"{tool.get('name', '')} {tool.get('description', '')}".lower()
        takes_a_path = (properties.get("path") or {}).get("type") == "string"
        if takes_a_path and "content" not in properties and "read" in says:
            return str(tool["name"])
    return None


def _tool_taking(tools: list[dict[str, Any]], prop: str) -> str | None:
    """The first tool with a string property `prop`."""
    for tool in tools:
        properties = (tool.get("input_schema") or {}).get("properties") or {}
        if properties.get(prop, {}).get("type") == "string":
            return str(tool["name"])
    return None


def _results_of(messages: list[dict[str, Any]], tool_use_ids: set[str]) -> list[str]:
    """The texts of the tool results answering `tool_use_ids`, in order."""
    texts = []
    for message in messages:
        for block in _blocks(message):
            if block.get("type") == "tool_result" and block.get("tool_use_id") in tool_use_ids:
                content = block.get("content")
                if isinstance(content, list):
                    content = "".join(str(part.get("text", "")) for part in content)
                texts.append(str(content))
    return texts


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _tool_use(name: str, tool_input: Any) -> dict[str, Any]:
    tool_id = f"toolu_{uuid.uuid4().hex[:24]}"
    return {"type": "tool_use", "id": tool_id, "name": name, "input": tool_input}


def _error(
    status: int, message: str, kind: str = "invalid_request_error"
) -> tuple[int, dict[str, Any]]:
    return status, {"type": "error", "error": {"type": kind, "message": message}}


class _Server(ThreadingHTTPServer):
    daemon_threads = True


def _handler_for(api: LiteralMessagesAPI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("content-length") or 0))
            if self.path.split("?")[0] != "/v1/messages":
                self._send(*_error(404, f"no route {self.path}", "not_found_error"))
                return
            try:
                body = json.loads(raw)
                if not isinstance(body, dict):
                    raise ValueError("the body must be a JSON object")
                for key in ("model", "max_tokens", "messages"):
                    if key not in body:
                        raise ValueError(f"{key}: Field required")
            except ValueError as exc:
                self._send(*_error(400, str(exc)))
                return
            headers = {k.lower(): v for k, v in self.headers.items()}
            try:
                reply = api.respond(RecordedRequest(body=body, headers=headers))
            except Exception as exc:  # a bug here must reach the test as an answer
                reply = _error(500, repr(exc), "api_error")
            self._send(*reply)

        def _send(self, status: int, body: dict[str, Any]) -> None:
            payload = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(payload)))
            self.send_header("request-id", f"req_literal_{uuid.uuid4().hex[:12]}")
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # the recorded requests are the log

    return Handler
