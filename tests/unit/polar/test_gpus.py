"""GPU offers and their fit (polar/gpus.py), and the GPU fields of a RuntimeSpec."""

from __future__ import annotations

import pytest

from polar.gpus import GpuOffer, fitting, gpu_refusal, type_matches
from polar.tasks.spec import RuntimeSpec


def test_an_offer_rides_in_the_worker_identity_and_back() -> None:
    offer = GpuOffer("gpu-node-1", 4, ("NVIDIA H100 80GB HBM3",))
    identity = offer.identity()
    pid_at_host = identity.split(" ", 1)[0]
    assert pid_at_host.endswith("@gpu-node-1")  # still `pid@host`, as the console reads it
    assert GpuOffer.parse(identity) == offer
    for other in ("123@host", "1@h polar-gpus={", '1@h polar-gpus={"host":"h","count":0}'):
        assert GpuOffer.parse(other) is None
    assert GpuOffer.parse('1@h polar-gpus={"host":"h","count":2,"types":[]}') == GpuOffer("h", 2)


@pytest.mark.parametrize(
    ("wanted", "declared", "matches"),
    [
        ("H100", "H100", True),
        ("h100", "NVIDIA H100 80GB HBM3", True),
        ("A100", "NVIDIA A100-SXM4-80GB", True),
        ("H10", "NVIDIA H100", False),
        ("T4", "NVIDIA H100", False),
        ("", "H100", False),
    ],
)
def test_types_match_whole_or_as_a_word(wanted: str, declared: str, matches: bool) -> None:
    assert type_matches(wanted, declared) is matches


def test_an_offer_fits_by_count_and_by_any_type_asked() -> None:
    offers = [GpuOffer("a", 1, ("T4",)), GpuOffer("b", 8, ("H100",)), GpuOffer("c", 2)]
    assert [o.host for o in fitting(offers, 1, [])] == ["a", "b", "c"]
    assert [o.host for o in fitting(offers, 2, [])] == ["b", "c"]
    assert [o.host for o in fitting(offers, 1, ["A100", "h100"])] == ["b"]
    assert fitting(offers, 16, []) == [] and fitting(offers, 1, ["A100"]) == []


def test_the_refusal_says_what_was_asked_and_what_is_declared() -> None:
    none = gpu_refusal([], 2, ["H100"], "polar")
    assert "asks for 2 GPUs of type H100" in none and "no worker" in none
    assert "POLAR_GPUS" in none
    some = gpu_refusal([GpuOffer("a", 1, ("T4",))], 1, ["A100", "H100"], "polar")
    assert "1 GPU of type A100 or H100" in some and "declared: a: 1 × T4" in some


def test_gpu_fields_of_the_runtime_spec() -> None:
    spec = RuntimeSpec(kind="docker", gpus=2, gpu_types=["H100"])
    assert spec.model_dump(mode="json")["gpus"] == 2
    plain = RuntimeSpec(kind="docker").model_dump_json()
    assert "gpus" not in plain and "gpu_types" not in plain  # older workers read the spec
    with pytest.raises(ValueError, match="gpus are for container runtimes"):
        RuntimeSpec(kind="local", gpus=1)
    with pytest.raises(ValueError, match="gpu_types is for a session that asks for gpus"):
        RuntimeSpec(kind="docker", gpu_types=["H100"])
    with pytest.raises(ValueError, match="gpu_types: each a type name"):
        RuntimeSpec(kind="docker", gpus=1, gpu_types=[" "])
    with pytest.raises(ValueError):
        RuntimeSpec(kind="docker", gpus=-1)
