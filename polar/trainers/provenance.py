"""The provenance every trainer's export row carries: a trace's ids and origin, flat."""

from __future__ import annotations

from typing import Any

from polar.records import Trace


def provenance_fields(trace: Trace) -> dict[str, Any]:
    """The provenance every layout carries (flat, JSON- and Arrow-friendly)."""
    prov = trace.provenance
    return {
        "trace_id": trace.trace_id,
        "session_id": prov.session_id,
        "task_id": prov.task_id,
        "status": None if trace.status is None else trace.status.value,
        "policy_version": prov.policy_version,
        "reward_policy": prov.reward_policy,
        "builder": prov.builder,
        "harness": prov.harness,
        "model": prov.model,
        "record_ids": list(prov.record_ids),
        "completion_seqs": list(prov.completion_seqs),
    }
