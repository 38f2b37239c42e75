"""Fault catalogue: secrets where a user puts them without thinking — a hub token in a URL's query
string (``…?token=hf_…``: the error paragraph printed it twice, three times with ``-vv``, while
``user:password@`` was masked), an endpoint carrying one, an ``Authorization`` header or a bare
``hf_…`` token quoted by a library's log record. One masking function
(``intelrt.support.redaction.redact_text``) serves every output: error paragraphs, ``-v`` / ``-vv``
tracebacks, ``--json``, log records, plans and doctor.
"""

from __future__ import annotations

import logging
from typing import Any

from faults import Catalogue, Fault, Seen, call, check, cli, error, no_secret, works

import intelrt

catalogue = Catalogue(__file__)
TOKEN = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"
MODEL_URL = f"https://huggingface.co/org/model?token={TOKEN}"
ENDPOINT = f"https://hub.example/?token={TOKEN}&mirror=1"

IN_A_URL = [
    error("secrets-query-token-run", "secrets", "a hub token in the model URL's query string (printed twice, three "
          "times with -vv)", "no such directory", risk="leak", trigger="intelrt run 'https://…/model?token=hf_…'",
          data=("run", MODEL_URL, "--prompt", "hi")),
    error("secrets-query-token-plan", "secrets", "… for plan", "no such directory", risk="leak",
          trigger="intelrt plan 'https://…/model?token=hf_…'", data=("plan", MODEL_URL)),
    error("secrets-query-token-run-json", "secrets", "… as --json", "token=***", risk="leak",
          trigger="intelrt run 'https://…/model?token=hf_…' --json", data=("run", MODEL_URL, "--json")),
]


@catalogue.cases(IN_A_URL)
def test_a_token_in_a_url_query_is_masked_in_the_error_and_every_verbosity(case: Fault) -> None:
    seen = cli(*case.data)
    if "--json" in case.data:  # the failure is the JSON on stdout
        seen.stderr += "intelrt: error: " + seen.stdout
    check(case, seen)
    for verbose in ("-v", "-vv"):
        again = cli(verbose, *case.data)
        assert again.code == seen.code and "Traceback" in again.stderr
        no_secret(again, TOKEN)
    no_secret(seen, TOKEN)


@catalogue.cases(error("secrets-query-token-api", "secrets", "… passed to intelrt.load", "token=***",
                       "no such directory", risk="leak", error="ModelSourceError",
                       trigger="intelrt.load('https://…/model?token=hf_…')"))
def test_a_token_in_a_url_query_is_masked_in_the_api_error(case: Fault) -> None:
    no_secret(check(case, call(lambda: intelrt.load(MODEL_URL))), TOKEN)


IN_THE_ENVIRONMENT = [
    works("secrets-endpoint-query-doctor", "secrets", "a token in HF_ENDPOINT's query string, for doctor",
          "HF_ENDPOINT=https://hub.example/?token=***&mirror=1", risk="leak",
          trigger="HF_ENDPOINT='https://hub.example/?token=hf_…' intelrt doctor", data=("doctor",)),
    works("secrets-endpoint-query-doctor-json", "secrets", "… as doctor --json", "token=***", risk="leak",
          trigger="HF_ENDPOINT=… intelrt doctor --json", data=("doctor", "--json")),
    works("secrets-endpoint-query-plan-json", "secrets", "… for plan --json", risk="leak",
          trigger="HF_ENDPOINT=… intelrt plan --json", data=("plan", "--json")),
]


@catalogue.cases(IN_THE_ENVIRONMENT)
def test_a_token_in_an_endpoints_query_is_masked_in_reports(case: Fault) -> None:
    no_secret(check(case, cli(*case.data, env={"HF_ENDPOINT": ENDPOINT})), TOKEN)


def _logged(message: str, *args: Any) -> Seen:
    """``message`` logged by a library while intelrt's command line runs (its handler's filter and
    record factory: :func:`intelrt.support.redaction.redact_log_output`)."""
    from intelrt.support.redaction import redact_log_output

    handler = logging.StreamHandler()
    before = logging.getLogRecordFactory()
    redact_log_output(handler)
    try:
        return call(lambda: logging.getLogger("urllib3.connectionpool").warning(message, *args))
    finally:
        logging.setLogRecordFactory(before)


IN_A_LOG = [
    works("secrets-log-query-api-key", "secrets", "a library logs a URL with &api_key=…", "api_key=***",
          risk="leak", trigger="log.warning('GET %s', 'https://host/v1?model=m&api_key=sk-…')",
          data=("GET %s", "https://host/v1?model=m&api_key=sk-live-4f3e2d1c", "sk-live-4f3e2d1c")),
    works("secrets-log-presigned-signature", "secrets", "a library logs a presigned download URL", "Signature=***",
          risk="leak", trigger="log.warning('GET %s', 'https://bucket/x?X-Amz-Signature=…')",
          data=("GET %s", "https://bucket/w.safetensors?X-Amz-Expires=60&X-Amz-Signature=9f8e7d6c5b4a",
                "9f8e7d6c5b4a")),
    works("secrets-log-authorization-header", "secrets", "a library logs its request headers",
          "'Authorization': 'Bearer ***'", risk="leak", trigger="log.warning('headers %s', {'Authorization': 'Bearer …'})",
          data=("headers %s", {"Authorization": "Bearer sk-live-0a1b2c3d4e"}, "sk-live-0a1b2c3d4e")),
    works("secrets-log-bare-hf-token", "secrets", "a library quotes a hub token on its own", "token ***",
          risk="leak", trigger="log.warning('token %s rejected', 'hf_…')", data=("token %s rejected", TOKEN, TOKEN)),
]


@catalogue.cases(IN_A_LOG)
def test_a_secret_a_library_logs_is_masked(case: Fault) -> None:
    message, arg, secret = case.data
    no_secret(check(case, _logged(message, arg)), secret)
