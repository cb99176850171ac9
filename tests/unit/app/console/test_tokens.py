"""A trace token by token: trained tokens apart from context, a heat class per logprob,
decoded with the model's own tokenizer, or shown as ids when there is none."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.console.tokens import heat, trace_view
from polar.records import Trace, TraceProvenance

TINY_MODEL = Path(__file__).resolve().parents[4] / ".polar" / "models" / "tiny-qwen3"


def trace(prompt: list[int], response: list[int], mask: list[int]) -> Trace:
    return Trace(
        trace_id="s1/0",
        prompt_ids=prompt,
        response_ids=response,
        loss_mask=mask,
        response_logprobs=[-0.01 * (i + 1) for i in range(len(response))],
        provenance=TraceProvenance(
            session_id="s1",
            task_id="t1",
            harness="command",
            builder="prefix_merging",
            model="policy",
            completion_seqs=[1],
            record_ids=["r1"],
            policy_version=7,
        ),
    )


def test_heat_buckets_go_from_likely_to_unlikely() -> None:
    assert heat(0.0) == "lp0" and heat(-0.05) == "lp0"
    assert heat(-0.5) == "lp2" and heat(-3.0) == "lp5" and heat(-50.0) == "lp5"
    assert heat(None) == "" and heat(float("nan")) == ""


def test_without_a_tokenizer_ids_are_shown() -> None:
    view = trace_view(trace([1, 2], [3, 4, 5], [1, 0, 1]), None)
    assert view.decoded_by is None
    assert [t.text for t in view.prompt] == ["#1", "#2"]
    assert [(t.text, t.kind) for t in view.response] == [
        ("#3", "trained"),
        ("#4", "context"),
        ("#5", "trained"),
    ]
    assert view.trained == 2
    assert view.response[0].title == "id 3 · logprob -0.0100 · policy v7"
    assert view.response[1].title == "id 4 · logprob n/a (context) · policy v7"
    assert view.response[1].heat == "" and view.response[2].heat == "lp0"


@pytest.mark.skipif(not TINY_MODEL.is_dir(), reason="the tiny model is built by infra/setup.sh")
def test_the_models_own_tokenizer_decodes_each_token() -> None:
    from polar.tokenization import load_tokenizer

    tokenizer = load_tokenizer(str(TINY_MODEL))
    ids = tokenizer.encode("Hello rollout world", add_special_tokens=False)
    view = trace_view(trace(ids, ids, [1] * len(ids)), TINY_MODEL)
    assert view.decoded_by == str(TINY_MODEL)
    assert "".join(t.text for t in view.response) == "Hello rollout world"
    assert all(not t.text.startswith("#") for t in view.prompt)
