"""Which sampling controls of a call make its sample off-policy, and what the gateway does then.

A trained token must be one the policy sampled, with the logprob the policy
gave it. Some request fields that vLLM's OpenAI server (and SGLang) accept
change what is sampled without the recorded logprobs saying so: a token
forced by `logit_bias`, `allowed_token_ids`, `bad_words`, `min_tokens`,
`ignore_eos` or a thinking budget, an output constrained by guided decoding
(`response_format` json_object / json_schema / structural_tag,
`structured_outputs`, the older `guided_*` fields, and a forced
`tool_choice`, which vLLM implements with guided decoding), beam search, the
per-request logits processors of `vllm_xargs`, or a per-request
`chat_template` (or template kwargs other than the thinking switches, which
the builders render the same way) in place of the policy's own template.
Ordinary sampling parameters (temperature, top_p, top_k, min_p, penalties,
stop) are the policy's sampling distribution and stay allowed.

`POLAR_OFF_POLICY` decides: `refuse` (the default) answers such a call 400 in
the caller's shape, before anything is sampled; `record_untrainable` answers
it and records it with `untrainable` set, so no builder trains on it (the
same exclusion as a call whose caller hung up, `polar.builders.base.unseen_records`).
"""

from __future__ import annotations

from typing import Any

from polar.providers import APIError

FORCING_FIELDS = (
    "logit_bias",
    "allowed_token_ids",
    "bad_words",
    "structured_outputs",
    "vllm_xargs",
    "logits_processors",
    "chat_template",
    "thinking_token_budget",
    "regex",  # SGLang's constrained decoding
    "json_schema",
    "ebnf",
)
"""Fields that change what is sampled whenever they hold anything."""
TRUE_FIELDS = ("ignore_eos", "use_beam_search")
THINKING_KWARGS = frozenset({"enable_thinking", "thinking"})
"""chat_template_kwargs the builders render the same way (`polar.tokenization`)."""
CODE = "off_policy_sampling"


def _set(value: Any) -> bool:
    return value not in (None, "", [], {}, False, 0)


def off_policy_controls(chat: dict[str, Any]) -> list[str]:
    """The fields of the Chat Completions request `chat` that make its sample off-policy."""
    found = [name for name in FORCING_FIELDS if _set(chat.get(name))]
    found += [name for name in TRUE_FIELDS if chat.get(name) is True]
    found += sorted(k for k, v in chat.items() if k.startswith("guided_") and _set(v))
    min_tokens = chat.get("min_tokens")
    if isinstance(min_tokens, int | float) and not isinstance(min_tokens, bool) and min_tokens > 0:
        found.append("min_tokens")
    response_format = chat.get("response_format")
    if isinstance(response_format, dict) and response_format.get("type") not in (None, "text"):
        found.append("response_format")
    choice = chat.get("tool_choice")
    if choice == "required" or isinstance(choice, dict):
        found.append("tool_choice")
    kwargs = chat.get("chat_template_kwargs")
    if isinstance(kwargs, dict) and set(kwargs) - THINKING_KWARGS:
        found.append("chat_template_kwargs")
    return found


def check_on_policy(chat: dict[str, Any], rule: str) -> str | None:
    """Under `rule` (POLAR_OFF_POLICY): None for an on-policy call; why it is untrainable
    (`record_untrainable`); or a 400 in the caller's shape (`refuse`)."""
    found = off_policy_controls(chat)
    if not found:
        return None
    fields = ", ".join(found)
    if rule == "record_untrainable":
        return f"off-policy sampling controls: {fields}"
    raise APIError(
        400,
        f"this gateway records samples for on-policy training and refuses sampling controls "
        f"that change what the policy samples: {fields} (POLAR_OFF_POLICY=refuse)",
        param=found[0],
        code=CODE,
    )
