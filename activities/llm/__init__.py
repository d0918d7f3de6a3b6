"""The model layer: one small interface, the offline model, and answer validation."""

from activities.llm.base import InvalidOutput, LanguageModel, ModelAnswer, ModelCall, ask

__all__ = ["InvalidOutput", "LanguageModel", "ModelAnswer", "ModelCall", "ask"]
