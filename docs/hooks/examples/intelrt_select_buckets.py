"""The example of the ``intelrt_select_buckets`` reference page (run by tests/contract/test_docs.py)."""

from intelrt.plugin import Buckets, Decision, hookimpl


@hookimpl(tryfirst=True)
def intelrt_select_buckets(backend, request, env):
    if backend.device_type != "hpu" or env.get("SITE_PROMPTS") != "short":
        return None
    # this site's Gaudi test servers answer short prompts, four at a time: fewer buckets warm faster
    return Decision(Buckets("exponential", prompt_batch_sizes=(1, 2, 4), prompt_lengths=(128, 256),
                            decode_batch_sizes=(1, 2, 4), decode_blocks=(1, 2, 4, 8), block_size=128,
                            prompt_tokens=1024, warmup=request.workload == "server"),
                    "SITE_PROMPTS=short: prompts of up to 256 tokens, 4 rows")
