"""Keep secrets out of everything intelrt writes: plans, doctor reports, log records, error
messages and saved files all go through this one redaction.

A secret is
* the value of an environment variable whose name says it holds one (``TOKEN``, ``KEY``,
  ``SECRET``, ``PASSWORD``, ``AUTH``, ``CREDENTIAL`` …, in any case);
* the ``user:password`` part of any URL (``HF_ENDPOINT=https://alice:S3cret@host``, a proxy), or of
  an address written without a scheme (``MASTER_ADDR=user:pw@host``);
* the value of a URL query parameter whose name says it holds one (``…?token=hf_…``,
  ``&api_key=…``, a presigned URL's ``sig=`` / ``X-Amz-Signature=``);
* the credentials of an ``Authorization:`` header (``Bearer …``, ``Basic …``) and a Hugging Face
  token (``hf_`` and 30 or more letters and digits) wherever it stands;
* a value handed to :func:`register_secret` — a ``token=`` passed to ``intelrt.load``.

Each is replaced by :data:`MASK` wherever it appears.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import unquote

from ..errors import mask_messages_with

#: Names of variables (and keywords, dict keys) that hold a secret. ``TOKENIZERS_PARALLELISM`` and
#: ``max_new_tokens`` name a tokenizer setting and a count, not a token.
SECRET_NAME = re.compile(r"TOKEN(?!IZER|S)|KEY|SECRET|PASSWORD|PASSWD|AUTH|CREDENTIAL", re.I)
MASK = "***"
#: ``scheme://userinfo@`` — the userinfo (``user:password``, or a token used as the user name).
URL_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^\s/@?#]+)@")
#: ``user:password@host`` without a scheme (``MASTER_ADDR=user:pw@host``, a proxy written bare): the
#: userinfo. Not an address like ``git@host`` (no password) and not inside a URL (matched above).
BARE_USERINFO = re.compile(r"(?<![\w.%+~:/@-])(?P<userinfo>[\w.%+~-]+:[^\s/@:]+)@(?=[\w\[])")
#: ``?name=value`` / ``&name=value`` of a URL's query: the value, when the name holds a secret.
URL_QUERY = re.compile(r"(?P<lead>[?&;](?P<name>[A-Za-z0-9_.\-\[\]]+)=)(?P<value>[^&;#\s\"'<>]+)")
#: Query names that sign a URL rather than name a secret: the signature is the secret.
_QUERY_SECRET_NAME = re.compile(r"(?i)^(sig|signature|x-amz-signature|x-goog-signature)$")
#: An ``Authorization`` (or ``Proxy-Authorization``) header's credentials, as a header or a ``Bearer`` token.
AUTH_HEADER = re.compile(r"(?i)(?P<lead>\b(?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?(?:(?:bearer|basic|token)\s+)?)"
                         r"(?P<value>[^\s\"',}]+)|(?P<bearer>\bbearer\s+)(?P<token>[A-Za-z0-9._~+/=\-]{8,})")
#: A Hugging Face access token (``hf_`` and 34 letters and digits today): masked wherever it stands.
HF_TOKEN = re.compile(r"\bhf_[A-Za-z0-9]{30,}\b")
#: Values too common to be a secret: masking them would garble every "true" or "1" in a report.
_NOT_SECRET = re.compile(r"(?i)(true|false|yes|no|on|off|none|null|[0-9.]*)")
_MIN_SECRET_LENGTH = 4
_registered: set[str] = set()


def is_secret_name(name: str) -> bool:
    return bool(SECRET_NAME.search(name))


def _could_be_secret(value: str) -> bool:
    return len(value) >= _MIN_SECRET_LENGTH and not _NOT_SECRET.fullmatch(value.strip())


def register_secret(value: object) -> None:
    """Mask ``value`` (a ``str``) in everything redacted from now on, in this process."""
    if isinstance(value, str) and _could_be_secret(value):
        _registered.add(value)


def _is_query_secret(name: str) -> bool:
    return is_secret_name(name) or bool(_QUERY_SECRET_NAME.match(name))


def _url_secrets(value: str) -> Iterable[str]:
    """The passwords and secret query values of the URLs in ``value`` (as written, and unquoted)."""
    for match in (*URL_USERINFO.finditer(value), *BARE_USERINFO.finditer(value)):
        userinfo = match.group("userinfo")
        secret = userinfo.split(":", 1)[1] if ":" in userinfo else userinfo
        yield from {secret, unquote(secret)}
    for match in URL_QUERY.finditer(value):
        if _is_query_secret(match.group("name")):
            yield from {match.group("value"), unquote(match.group("value"))}


def secret_values(env: Mapping[str, str] | None = None) -> list[str]:
    """Every secret value known now (environment, URL passwords, registered), longest first."""
    env = os.environ if env is None else env
    values = set(_registered)
    for name, value in env.items():
        if is_secret_name(name):
            values.add(value)
        values.update(_url_secrets(value))
    return sorted((v for v in values if _could_be_secret(v)), key=len, reverse=True)


def redact_text(text: str, env: Mapping[str, str] | None = None) -> str:
    """``text`` with URL credentials, secret query values, ``Authorization`` credentials, Hugging
    Face tokens and every known secret value replaced by :data:`MASK`."""
    found = set(_url_secrets(text))  # also where the same value stands again, outside its URL
    text = URL_USERINFO.sub(lambda m: f"{m.group('scheme')}{MASK}@", text)
    text = BARE_USERINFO.sub(f"{MASK}@", text)
    text = URL_QUERY.sub(lambda m: m.group("lead") + MASK if _is_query_secret(m.group("name")) else m.group(0), text)
    text = AUTH_HEADER.sub(lambda m: (m.group("lead") or m.group("bearer")) + MASK, text)
    text = HF_TOKEN.sub(MASK, text)
    for value in sorted((v for v in found if _could_be_secret(v)), key=len, reverse=True):
        text = text.replace(value, MASK)
    for value in secret_values(env):
        text = text.replace(value, MASK)
    return text


def redact(data: Any, env: Mapping[str, str] | None = None) -> Any:
    """A copy of JSON-like ``data`` with secrets masked: the ``str`` value of a secret-named key,
    and secret values wherever they appear."""
    if isinstance(data, Mapping):
        return {k: (MASK if is_secret_name(str(k)) and isinstance(v, str) else redact(v, env)) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [redact(v, env) for v in data]
    if isinstance(data, str):
        return redact_text(data, env)
    return data


def redact_record(record: logging.LogRecord) -> None:
    """Mask secrets in a log record's message, exception and stack text, in place."""
    try:
        message = record.getMessage()
    except (TypeError, ValueError, KeyError):  # a malformed logging call: logging reports it when it formats
        return
    clean = redact_text(message)
    if clean != message:
        record.msg, record.args = clean, None
    if record.exc_info and not record.exc_text:
        record.exc_text = logging.Formatter().formatException(record.exc_info)
    if record.exc_text:
        record.exc_text = redact_text(record.exc_text)
    if record.stack_info:
        record.stack_info = redact_text(record.stack_info)


class RedactingFilter(logging.Filter):
    """A ``logging.Filter`` for a handler: every record it lets through has its secrets masked."""

    def filter(self, record: logging.LogRecord) -> bool:
        redact_record(record)
        return True


def redact_log_output(handler: logging.Handler) -> None:
    """Mask secrets in what a program's log ``handler`` prints, and in what libraries print
    through handlers of their own (huggingface_hub's retry warnings carry ``HF_ENDPOINT`` with
    its password): records are redacted where they are made, once per process."""
    if not any(isinstance(f, RedactingFilter) for f in handler.filters):
        handler.addFilter(RedactingFilter())
    make_record = logging.getLogRecordFactory()
    if getattr(make_record, "redacts", False):
        return

    def make_redacted_record(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make_record(*args, **kwargs)
        redact_record(record)
        return record

    make_redacted_record.redacts = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(make_redacted_record)


class SecretText(str):
    """A ``str`` (a hub token for ``TrainingArguments``) that pickles as :data:`MASK`: ``Trainer``
    pickles its arguments into every checkpoint's ``training_args.bin`` (``torch.save(self.args, …)``),
    and the token must not be stored in clear there. In memory, and in copies of the arguments, it
    is the real value (``Trainer`` hands it to the hub)."""

    def __reduce_ex__(self, protocol: object) -> tuple[type[str], tuple[str]]:
        return str, (MASK,)

    def __copy__(self) -> SecretText:
        return self

    def __deepcopy__(self, memo: object) -> SecretText:
        return self


mask_messages_with(redact_text)  # every IntelrtError's text, wherever it is printed or logged
