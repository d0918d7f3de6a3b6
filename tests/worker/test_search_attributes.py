"""The search attributes a worker (and the API) requires of its namespace: one list, the
workflows' own keys, and what each says when the namespace lacks some it cannot add."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from temporalio.service import RPCError, RPCStatusCode

import loopworks.workflows
from loopworks.deploy.processes import SEARCH_ATTRIBUTES
from loopworks.service.search_attributes import (
    compare,
    create_commands,
    ensure_search_attributes,
    refusal,
    required_types,
)
from loopworks.workflows.search_attributes import REQUIRED

REQUIRED_TYPES = required_types(REQUIRED)

pytestmark = pytest.mark.unit

WORKFLOWS = Path(loopworks.workflows.__file__).parent


def test_every_key_the_workflows_write_is_required_and_defined_once() -> None:
    defined = [
        path.name
        for path in WORKFLOWS.glob("*.py")
        if re.search(r"SearchAttributeKey\.for_", path.read_text())
    ]
    assert defined == ["search_attributes.py"], "define search attribute keys there only"
    source = (WORKFLOWS / "search_attributes.py").read_text()
    names = re.findall(r'SearchAttributeKey\.for_\w+\("(\w+)"\)', source)
    assert sorted(names) == sorted(key.name for key in REQUIRED)
    assert REQUIRED_TYPES == SEARCH_ATTRIBUTES
    assert REQUIRED_TYPES["LoopScore"] == "Double" and REQUIRED_TYPES["LoopBlocked"] == "Bool"


def test_a_namespace_with_them_all_needs_nothing() -> None:
    present = {**REQUIRED_TYPES, "ExecutionStatus": "Keyword"}
    assert compare(REQUIRED_TYPES, present).complete


def test_what_is_missing_and_what_has_another_type() -> None:
    required = {"LoopStatus": "Keyword", "LoopScore": "Double", "LoopIteration": "Int"}
    comparison = compare(required, {"LoopScore": "Int"})
    assert comparison.missing == {"LoopStatus": "Keyword", "LoopIteration": "Int"}
    assert comparison.mistyped == {"LoopScore": ("Double", "Int")}
    assert not comparison.complete


def test_the_commands_add_the_missing_ones_one_type_at_a_time() -> None:
    missing = {"LoopStatus": "Keyword", "LoopIteration": "Int", "LoopPhase": "Keyword"}
    assert create_commands(missing, "loops", "temporal:7233") == [
        "temporal operator search-attribute create --address temporal:7233 --namespace loops"
        " --name LoopStatus --name LoopPhase --type Keyword",
        "temporal operator search-attribute create --address temporal:7233 --namespace loops"
        " --name LoopIteration --type Int",
    ]


def test_a_worker_that_cannot_add_them_names_them_why_and_the_commands() -> None:
    comparison = compare({"LoopStatus": "Keyword", "LoopBlocked": "Bool"}, {})
    said = refusal(comparison, "loops", "temporal:7233", "Request unauthorized.")
    assert said.startswith("namespace loops lacks search attributes the workflows write:")
    assert "LoopStatus (Keyword), LoopBlocked (Bool)" in said
    assert "this worker cannot add them (Request unauthorized.)" in said
    assert "--name LoopStatus --type Keyword" in said and "--name LoopBlocked --type Bool" in said


def test_a_wrong_type_is_refused_with_what_to_do() -> None:
    said = refusal(compare({"LoopScore": "Double"}, {"LoopScore": "Int"}), "loops", "t:7233")
    assert "LoopScore is Int, the workflows write Double" in said
    assert "another namespace" in said and "create" not in said


def test_the_deployment_guide_names_each_with_its_type() -> None:
    """deploy/README.md lists them for an operator who registers them by hand."""
    guide = (Path(__file__).resolve().parents[2] / "deploy" / "README.md").read_text()
    section = guide[guide.index("search attributes the workflows write") :][:1200]
    for kind in set(REQUIRED_TYPES.values()):
        names = [name for name, k in REQUIRED_TYPES.items() if k == kind]
        listed = re.search(rf"((?:`\w+`,?\s*)+){kind}\b", section)
        assert listed, kind
        assert sorted(re.findall(r"`(\w+)`", listed.group(1))) == sorted(names), kind


class Operator:
    """The two operator-service calls the check makes, answered from a dict (name ->
    the API's type number) or with an RPCError."""

    def __init__(
        self, known: dict[str, int], list_error: RPCError | None, add_error: RPCError | None
    ) -> None:
        self.known, self.list_error, self.add_error = known, list_error, add_error
        self.added: dict[str, int] = {}

    async def list_search_attributes(self, request: Any) -> Any:
        if self.list_error:
            raise self.list_error
        return SimpleNamespace(system_attributes={}, custom_attributes=dict(self.known))

    async def add_search_attributes(self, request: Any) -> None:
        if self.add_error:
            raise self.add_error
        self.added.update(request.search_attributes)


ALL = {key.name: key.indexed_value_type.value for key in REQUIRED}
DENIED = RPCError("Request unauthorized.", RPCStatusCode.PERMISSION_DENIED, b"")


@pytest.mark.parametrize(
    ("known", "list_error", "add_error", "refused", "added"),
    [
        (ALL, None, None, None, {}),
        ({}, None, None, None, ALL),
        ({}, None, DENIED, "this worker cannot add them (Request unauthorized.)", {}),
        ({**ALL, "LoopScore": 3}, None, None, "LoopScore is Int, the workflows write Double", {}),
        # Not allowed to look: not checked (said in the log), not refused.
        ({}, DENIED, None, None, {}),
    ],
    ids=["complete", "registered", "cannot-register", "wrong-type", "cannot-list"],
)
async def test_the_check_registers_what_it_may_and_refuses_what_it_may_not(
    known: dict[str, int],
    list_error: RPCError | None,
    add_error: RPCError | None,
    refused: str | None,
    added: dict[str, int],
) -> None:
    operator = Operator(known, list_error, add_error)
    client = SimpleNamespace(operator_service=operator)
    said = await ensure_search_attributes(client, "loops", "t:7233", REQUIRED_TYPES)  # type: ignore[arg-type]
    assert (said is None) == (refused is None), said
    if refused is not None:
        assert said is not None and refused in said
    assert operator.added == added


UNANSWERED = RPCError("connection refused", RPCStatusCode.UNAVAILABLE, b"")


@pytest.mark.parametrize(("list_error", "add_error"), [(UNANSWERED, None), (None, UNANSWERED)])
async def test_a_server_that_does_not_answer_is_asked_again_not_taken_as_checked(
    list_error: RPCError | None, add_error: RPCError | None
) -> None:
    """No answer is no verdict: the caller (the API, the worker) asks again later."""
    client = SimpleNamespace(operator_service=Operator({}, list_error, add_error))
    with pytest.raises(RPCError):
        await ensure_search_attributes(client, "loops", "t:7233", REQUIRED_TYPES)  # type: ignore[arg-type]


async def test_the_api_names_itself_when_it_cannot_add_them() -> None:
    client = SimpleNamespace(operator_service=Operator({}, None, DENIED))
    said = await ensure_search_attributes(
        client,  # type: ignore[arg-type]
        "loops",
        "t:7233",
        REQUIRED_TYPES,
        who="the API",
    )
    assert said is not None and "the API cannot add them (Request unauthorized.)" in said
