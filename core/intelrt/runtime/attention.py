"""A backend's own attention implementation made known to transformers before the model is built.

When the plan's attention names an implementation the backend adds (``Backend.attention_implementation``:
Gaudi's fused SDPA kernel), intelrt registers its function in transformers' ``AttentionInterface``
and its mask function in ``AttentionMaskInterface`` under that name (``transformers/modeling_utils.py``
``AttentionInterface``; ``masking_utils.py`` ``AttentionMaskInterface``), so ``from_pretrained(
attn_implementation=name)`` accepts it and every model routed through the attention interface uses it.
"""

from __future__ import annotations

import logging

from ..hooks.plan import Plan
from ..host.manager import PluginHost, get_host

log = logging.getLogger(__name__)


def register_attention(plan: Plan, host: PluginHost | None = None) -> bool:
    """Register the plan's attention in transformers when the backend provides it; whether it did."""
    name = plan.decided.attention
    if not name:
        return False
    found = (host or get_host()).attention_implementation(plan.backend, name)
    if found is None:
        return False
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    attention, mask = found
    AttentionInterface.register(name, attention)
    AttentionMaskInterface.register(name, mask or sdpa_mask)
    log.info("attention %s: registered in transformers' AttentionInterface by the %s backend", name, plan.backend.name)
    return True
