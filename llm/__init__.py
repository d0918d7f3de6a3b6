"""The model layer, on pydantic-ai: model sources (Anthropic, offline), structured answers
with one repair, and the errors a failed model run becomes."""

from loopworks.llm.base import InvalidOutput, ModelCall, ModelSource
from loopworks.llm.structured import Answered, ask

__all__ = ["Answered", "InvalidOutput", "ModelCall", "ModelSource", "ask"]
