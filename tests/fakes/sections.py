"""A first user message's sections read back into the step's context, as the fakes of the
Messages API need it to answer as the offline model would: the inverse of
`llm.base.render_context`, for a role whose context model is known.

A section starts at `## <Title>` for the next of the model's fields in field order (so a
`## ...` line inside an artifact is body, unless it names a later field); a string field's
body is taken as it is, any other as the JSON it was rendered as.
"""

from __future__ import annotations

import json
import re
import types
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel

from loopworks.llm.base import section_title
from loopworks.schemas.contexts import CONTEXTS, OPERATOR_NOTE
from loopworks.schemas.roles import Role


def context_from_sections(text: str, role: Role) -> dict[str, Any]:
    """The context the sections of `text` were rendered from, validated by the role's
    context model and dumped as the activity dumped it."""
    model = CONTEXTS[role]
    # In the order they are rendered: the operator's note last.
    fields = [name for name in model.model_fields if name != OPERATOR_NOTE] + [OPERATOR_NOTE]
    found: list[tuple[str, int, int]] = []  # field, where its heading starts, body start
    at, position = 0, 0
    while position < len(fields):
        pattern = "|".join(re.escape(section_title(name)) for name in fields[position:])
        heading = re.compile(rf"(?:^|\n\n)## ({pattern})\n")
        match = heading.search(text, at)
        if match is None:
            break
        name = next(n for n in fields[position:] if section_title(n) == match.group(1))
        found.append((name, match.start(), match.end()))
        position, at = fields.index(name) + 1, match.end()
    values: dict[str, Any] = {}
    for n, (name, _, body_start) in enumerate(found):
        end = found[n + 1][1] if n + 1 < len(found) else len(text)
        body = text[body_start:end]
        values[name] = body if _is_text(model, name) else _json_or_text(body)
    for name in fields:
        if name not in values and model.model_fields[name].is_required():
            values[name] = _empty(model, name)  # rendered as no section at all
    return model.model_validate(values).model_dump(mode="json")


def _empty(model: type[BaseModel], name: str) -> Any:
    """What an input with no section held: None, or an empty string, list or object."""
    annotation = model.model_fields[name].annotation
    if type(None) in _alternatives(annotation):
        return None
    origin = get_origin(annotation) or annotation
    if origin in (list, tuple, set, frozenset):
        return []
    if origin is dict:
        return {}
    return ""


def _is_text(model: type[BaseModel], name: str) -> bool:
    return str in _alternatives(model.model_fields[name].annotation)


def _alternatives(annotation: Any) -> tuple[Any, ...]:
    """A union's members, or the one type."""
    if get_origin(annotation) in (Union, types.UnionType):
        return get_args(annotation)
    return (annotation,)


def _json_or_text(body: str) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return body  # an enum's value, rendered as its string
