"""Keep secrets out of anything intelrt prints (plans, doctor reports)."""

from __future__ import annotations

import os
import re
from typing import Any

SECRET_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|APIKEY|CREDENTIAL|PRIVATE_KEY)", re.I)
MASK = "***"


def is_secret_name(name: str) -> bool:
    return bool(SECRET_NAME.search(name))


def secret_values() -> list[str]:
    """Values of secret-looking variables in the environment (4+ characters, longest first)."""
    values = {v for k, v in os.environ.items() if is_secret_name(k) and len(v) >= 4}
    return sorted(values, key=len, reverse=True)


def redact_text(text: str) -> str:
    for value in secret_values():
        text = text.replace(value, MASK)
    return text


def redact(data: Any) -> Any:
    """A copy of JSON-like ``data`` with secret values masked wherever they appear."""
    if isinstance(data, dict):
        return {k: (MASK if is_secret_name(str(k)) and isinstance(v, str) else redact(v)) for k, v in data.items()}
    if isinstance(data, list):
        return [redact(v) for v in data]
    if isinstance(data, str):
        return redact_text(data)
    return data
