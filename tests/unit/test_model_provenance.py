"""How a run names the model answering it (llm/provenance.py), and `loops up`'s choice of
model when nothing chose one (deploy/local.py)."""

from __future__ import annotations

import pytest

from loopworks.deploy.one_machine import OFFLINE_WITHOUT_KEY, local_model
from loopworks.llm.base import ModelCall
from loopworks.llm.offline.model import OfflineModels, OfflineScript
from loopworks.llm.provenance import model_source
from loopworks.schemas.settings import Settings

pytestmark = pytest.mark.unit


class OtherModels:
    """Any ModelSource but the offline one: the Anthropic API or a compatible server."""

    strict_output = True

    def strict_rejected(self) -> None:
        pass

    def model(self, call: ModelCall) -> object:
        raise NotImplementedError


def test_the_offline_model_says_whether_a_script_answers() -> None:
    assert model_source(OfflineModels()) == "offline"
    scripted = OfflineScript.model_validate({"critic": {"*": {"delay_ms": 1}}})
    assert model_source(OfflineModels(script=scripted)) == "offline (scripted)"


def test_anthropic_names_the_host_of_a_compatible_server() -> None:
    assert model_source(OtherModels()) == "anthropic"  # type: ignore[arg-type]
    named = model_source(OtherModels(), "http://litellm.llm.svc:4000/v1")  # type: ignore[arg-type]
    assert named == "anthropic (litellm.llm.svc)"


def test_loops_up_runs_the_offline_model_only_when_nothing_chose_one() -> None:
    nothing = Settings(LOOPS_LLM=None, ANTHROPIC_API_KEY=None)
    assert nothing.llm is None  # a worker alone refuses (tests/worker/test_startup.py)
    assert local_model(nothing) == ({"LOOPS_LLM": "offline"}, OFFLINE_WITHOUT_KEY)
    assert "no ANTHROPIC_API_KEY" in OFFLINE_WITHOUT_KEY
    assert local_model(Settings(LOOPS_LLM=None, ANTHROPIC_API_KEY="sk-test")) == ({}, "anthropic")
    assert local_model(Settings(LOOPS_LLM="offline", ANTHROPIC_API_KEY=None)) == ({}, "offline")
