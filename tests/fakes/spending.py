"""A model that spends: the offline model's answers, each response reporting the tokens a
real provider would, and honouring the request's `max_tokens` as a provider does.

Budgets are about counts only a provider knows: this fake counts a request's input as half
a token for each byte of its messages as JSON (a real tokenizer gives about a quarter, so
this is the meaner), and answers with the output tokens `wants` says each role would
spend, cut at the request's `max_tokens` with `finish_reason` `length` when that is
smaller. What it was asked and what it reported is kept in `requests`, so a test can say
a step would have spent more than it did.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelResponse
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.settings import ModelSettings
from pydantic_ai.usage import RequestUsage

from loopworks.llm.base import ModelCall
from loopworks.llm.offline.model import OfflineModels, OfflineScript
from loopworks.schemas.roles import Role


@dataclass(frozen=True)
class Spent:
    role: Role
    max_tokens: int | None
    wanted: int
    input_tokens: int
    output_tokens: int


@dataclass
class SpendingModels:
    """A ModelSource: `wants[role]` output tokens a response of that role would take
    (`default_wants` for the others); a list, one for each request of a call in turn, the
    last repeated. `max_tokens`: the model's own cap, as `LOOPS_ANTHROPIC_MAX_TOKENS`
    sets the Anthropic model's."""

    wants: dict[Role, int | list[int]] = field(default_factory=dict)
    default_wants: int = 100
    script: OfflineScript | None = None
    max_tokens: int | None = None
    requests: list[Spent] = field(default_factory=list)
    strict_output = False

    def __post_init__(self) -> None:
        self.offline = OfflineModels(script=self.script)

    def strict_rejected(self) -> None:
        pass

    def model(self, call: ModelCall) -> FunctionModel:
        settings = ModelSettings(max_tokens=self.max_tokens) if self.max_tokens else None
        return FunctionModel(
            functools.partial(self.respond, call), model_name=call.model, settings=settings
        )

    async def respond(
        self, call: ModelCall, messages: list[ModelMessage], info: AgentInfo
    ) -> ModelResponse:
        answered = await self.offline.respond(call, messages, info)
        asked = (info.model_settings or {}).get("max_tokens")
        wants = self.wants.get(call.role, self.default_wants)
        if isinstance(wants, list):
            turn = sum(isinstance(m, ModelResponse) for m in messages)
            wants = wants[min(turn, len(wants) - 1)]
        wanted = wants
        output = wanted if asked is None else min(wanted, asked)
        sent = len(ModelMessagesTypeAdapter.dump_json(messages)) // 2
        self.requests.append(Spent(call.role, asked, wanted, sent, output))
        answered.usage = RequestUsage(input_tokens=sent, output_tokens=output)
        if output < wanted:
            answered.finish_reason = "length"
        return answered

    def for_role(self, role: Role) -> list[Spent]:
        return [spent for spent in self.requests if spent.role == role]
