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
    view = trace_view(trace([1, 2], [3, 4, 5], [1, 0, 1]), None, every_token=True)
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


@pytest.mark.skipif(not TINY_MODEL.is_dir(), reason="the tiny model is built by infra/setup.sh")
def test_a_secret_split_over_tokens_is_redacted_with_its_ids() -> None:
    from app.console.safety import Redactor
    from polar.settings import Settings
    from polar.tokenization import load_tokenizer

    key = "pk-eyJzZXNzaW9uIjoiczEifQ.bWFjLW9mLXRoZS1zZXNzaW9u"
    secret = "s3-secret-of-the-console-test"
    redactor = Redactor(Settings(s3_secret_key=secret))
    tokenizer = load_tokenizer(str(TINY_MODEL))
    prompt = tokenizer.encode(f"env: OPENAI_API_KEY={key} ok", add_special_tokens=False)
    response = tokenizer.encode(f"the secret is {secret}!", add_special_tokens=False)
    assert len(prompt) > 10 and len(response) > 8  # each secret spans several tokens
    for every_token in (True, False):
        view = trace_view(
            trace(prompt, response, [1] * len(response)), TINY_MODEL, redactor.spans, every_token
        )
        shown = "".join(t.text for t in view.prompt), "".join(t.text for t in view.response)
        assert shown == ("env: OPENAI_API_KEY=[redacted] ok", "the secret is [redacted]!")
    hidden = [t for t in view.prompt + view.response if t.title == "redacted"]
    assert len(hidden) >= 4 and all("id " not in t.title for t in hidden)
    assert not any(str(i) in " ".join(t.title for t in hidden) for i in prompt[5:8])


def test_secrets_that_share_a_token_are_both_taken_out() -> None:
    from app.console.tokens import redacted

    texts = ["a ", "SEC", "RETxSEC", "RET b"]  # two secrets meet inside the third token

    def spans(text: str) -> list[tuple[int, int]]:
        return [(m, m + 6) for m in range(len(text)) if text.startswith("SECRET", m)]

    out, hidden = redacted(texts, spans)
    assert out == ["a ", "[redacted]", "x[redacted]", " b"] and hidden == {1, 2, 3}
    assert "".join(out) == "a [redacted]x[redacted] b"


def test_runs_of_prompt_and_context_tokens_are_one_span_unless_asked() -> None:
    view = trace_view(trace([1, 2], [3, 4, 5, 6, 7], [1, 0, 0, 1, 1]), None)
    assert [(t.text, t.kind) for t in view.prompt] == [("#1#2", "prompt")]
    assert [(t.text, t.kind) for t in view.response] == [
        ("#3", "trained"),
        ("#4#5", "context"),
        ("#6", "trained"),
        ("#7", "trained"),
    ]
    assert view.prompt[0].title == "prompt · 2 tokens · policy v7"
    assert view.response[0].title == "id 3 · logprob -0.0100 · policy v7"
    assert view.trained == 3 and not view.every_token
