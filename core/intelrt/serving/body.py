"""A request body read and validated: JSON (a clear ``400`` when it is not), no lone surrogate
in any string (``"\\ud800"`` is valid JSON but no character: the tokenizer cannot encode it), the
endpoint's pydantic model (strict types), then the model's own ``check()`` across fields."""

from __future__ import annotations

import json
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from .errors import ApiError, from_validation

Body = TypeVar("Body", bound=BaseModel)


def lone_surrogate(value: Any, where: str = "") -> str | None:
    """The path (``messages[0].content``) of the first string in ``value`` that holds a lone
    surrogate, or ``None``."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return where or "body"
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            found = lone_surrogate(key, where) or lone_surrogate(item, f"{where}.{key}" if where else str(key))
            if found:
                return found
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found = lone_surrogate(item, f"{where}[{i}]")
            if found:
                return found
    return None


def parse_json(raw: bytes) -> Any:
    """``raw`` as JSON, or a ``400`` saying where it is not."""
    try:
        data = json.loads(raw)
    except UnicodeDecodeError as exc:
        raise ApiError(400, f"the request body is not UTF-8 ({exc.reason} at byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise ApiError(400, f"the request body is not valid JSON ({exc.msg} at line {exc.lineno} column "
                            f"{exc.colno})") from None
    where = lone_surrogate(data)
    if where is not None:
        raise ApiError(400, f"{where}: the text holds a lone surrogate (a \\ud800-\\udfff escape without its "
                            "pair), which is no character; send valid UTF-8 or complete surrogate pairs",
                       param=where if where != "body" else None)
    return data


def validate(model: type[Body], data: Any) -> Body:
    """``data`` (parsed JSON) as ``model``, checked; a ``400`` naming the field otherwise."""
    if not isinstance(data, dict):
        raise ApiError(400, f"the request body must be a JSON object, not {type(data).__name__}")
    try:
        body = model.model_validate(data)
    except ValidationError as exc:
        raise from_validation(exc) from None
    check = getattr(body, "check", None)
    if check is not None:
        check()
    return body
