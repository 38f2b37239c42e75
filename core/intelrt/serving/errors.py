"""OpenAI error objects: ``{"error": {"message", "type", "param", "code"}}``, and the one way a
request body's validation failure becomes one — the field it names as ``param``, the message
without pydantic's ``Value error, `` prefix. Checks across fields are not pydantic validators (whose
errors name no field) but the request's ``check()``, which raises :class:`ApiError` itself."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastapi.responses import JSONResponse
    from pydantic import ValidationError

#: pydantic's prefixes of a message raised by a validator (``pydantic_core`` adds them).
VALIDATOR_PREFIXES = ("Value error, ", "Assertion failed, ")


def error_body(message: str, kind: str = "invalid_request_error", param: str | None = None,
               code: str | None = None) -> dict[str, Any]:
    """An OpenAI error object."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


class ApiError(Exception):
    """An answer with an OpenAI error object (``status``, ``kind`` is OpenAI's ``type``)."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error", param: str | None = None,
                 code: str | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.param, self.code = status, message, kind, param, code
        self.headers = headers

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.kind, self.param, self.code)

    def response(self) -> JSONResponse:
        from fastapi.responses import JSONResponse

        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def _message(error: dict[str, Any]) -> str:
    message = str(error.get("msg", "invalid request"))
    for prefix in VALIDATOR_PREFIXES:
        message = message.removeprefix(prefix)
    return message


def _where(location: tuple[Any, ...]) -> str | None:
    """``messages.0.content`` → ``messages[0].content`` (OpenAI's spelling of a nested field);
    pydantic's union-member tags (``str``, ``list[int]``, ``function-after[…]``) are left out."""
    text = ""
    for part in location:
        if isinstance(part, int):
            text += f"[{part}]"
        elif part == "body" or "[" in str(part) or str(part) in _TYPE_TAGS:
            continue
        else:
            text += f".{part}" if text else str(part)
    return text or None


_TYPE_TAGS = {"str", "int", "float", "bool", "dict", "list", "none", "literal", "tagged-union"}


def from_validation(exc: ValidationError) -> ApiError:
    """The first of a body's validation errors, as a ``400`` naming its field."""
    errors = exc.errors(include_url=False)
    first: dict[str, Any] = dict(errors[0]) if errors else {}
    message = _message(first)
    param = _where(tuple(first.get("loc", ())))
    if first.get("type") == "extra_forbidden":
        message = "unrecognized request argument; intelrt serve accepts the fields of OpenAI's API (and vLLM's " \
                  "extras) listed in docs/serving.md"
    elif first.get("type") in ("missing",):
        message = "this field is required"
    return ApiError(400, f"{param}: {message}" if param else message, param=param)
