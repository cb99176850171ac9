"""verl 0.9.1: Polar as an agent loop, registered as `polar` in verl's own registry.

    # the agent-loop config verl reads (actor_rollout_ref.rollout.agent.agent_loop_config_path)
    - name: polar
      _target_: polar.trainers.verl.PolarAgentLoop
      task: /path/to/task.json        # a TaskSpec (dict or JSON file): the template
      policy_version: null            # stamped on the sessions (or a row's `policy_version`)

    # and each dataset row says `agent_name: polar`, or the rollout config sets
    # actor_rollout_ref.rollout.agent.default_agent_loop=polar

Importing this module also registers the class under `polar` with verl's
`@register`, so `agent_name: polar` resolves without the YAML when the loop's
defaults are enough (the template then comes from the row's `polar_task`).

`run` runs one Polar session per sample: the template (with the row's
`polar_task` fields over it; the instruction, if none is set, is the row's
last user message of `raw_prompt`), one session, tagged with the policy
version. The `AgentLoopOutput` is built from that session's traces as Polar
stored them, never retokenised: `prompt_ids`, `response_ids`, `response_mask`
(Polar's loss mask), `response_logprobs` (the sampled logprobs), `reward_score`
(the trace's reward), `num_turns` (model calls in the chain), `metrics`
(Polar's run and evaluate stage seconds).

Multi-trace sessions: verl needs exactly one output per input row (its worker
pads and stacks one `_InternalAgentLoopOutput` per sample, and GRPO groups are
the rows sharing a uid), so a session whose prefix chain broke gives its
**first chain** (the root context: the trace whose first model call came
first) and `extra_fields["polar"]` says how many chains there were and how
many sampled tokens the others held (`chains`, `left_out_tokens`,
`left_out_traces`). Use a builder that keeps one chain (`prefix_merging` with
repairs) where that share matters, or TRL/slime, which take every chain.

A session that is not trainable (no reward, an `error`/`cancelled`/infra
status) cannot be left out of verl's fixed-shape batch, and must not become a
zero-reward row: the loop runs the sample again, up to `max_attempts`
sessions, then raises `UnscoredBatch` (polar/trainers/_sessions.py: the
counts, each outcome label with an example detail), and verl fails the step
loudly. A `task_error` (the task itself cannot run) raises at once: a rerun
would end the same. How many were rerun is in `extra_fields["polar"]["rerun"]`.
There is no `min_scored` here: the loop sees one sample, and verl's batch needs
every sample scored.

Versions: `extra_fields["min_global_steps"]`/`["max_global_steps"]` hold the
policy version Polar stamped on the trace, so verl's own staleness metrics
read Polar's version.
"""

from __future__ import annotations

import logging
from typing import Any

from verl.experimental.agent_loop.agent_loop import (
    AgentLoopBase,
    AgentLoopMetrics,
    AgentLoopOutput,
    register,
)

from polar.tasks.spec import TaskSpec
from polar.trainers._sessions import (
    SessionRun,
    Unscored,
    chains,
    load_template,
    row_task,
    run_task,
    shared_client,
    task_with,
    unscored_batch,
)
from polar.trainers.provenance import provenance_fields

log = logging.getLogger("polar.trainers.verl")
AGENT_NAME = "polar"


def agent_loop_output(run: SessionRun, rerun: int = 0) -> AgentLoopOutput:
    """verl's output for one trainable session: its first chain, exactly as Polar traced it."""
    session = run.session
    ordered = chains(run.traces)
    if not ordered:
        raise ValueError(f"session {session.session_id} has no traces")
    chain, rest = ordered[0], ordered[1:]
    version = chain.provenance.policy_version
    stages = session.stage_seconds
    polar = {
        **provenance_fields(chain),
        "workflow_id": run.workflow_id,
        "traces_key": session.traces_key,
        "session_status": session.status.value,
        "session_reward": session.reward,
        "chains": len(ordered),
        "left_out_traces": [t.trace_id for t in rest],
        "left_out_tokens": sum(sum(t.loss_mask) for t in rest),
        "rerun": rerun,
    }
    extra: dict[str, Any] = {"polar": polar}
    if version is not None:
        extra["min_global_steps"] = extra["max_global_steps"] = version
    return AgentLoopOutput(
        prompt_ids=list(chain.prompt_ids),
        response_ids=list(chain.response_ids),
        response_mask=list(chain.loss_mask),
        response_logprobs=list(chain.response_logprobs),
        reward_score=chain.reward,
        num_turns=len(chain.provenance.record_ids),
        metrics=AgentLoopMetrics(
            generate_sequences=float(stages.get("run", 0.0)),
            compute_score=float(stages.get("evaluate", 0.0)),
        ),
        extra_fields=extra,
    )


@register(AGENT_NAME)
class PolarAgentLoop(AgentLoopBase):
    """One Polar session per sample (see the module docstring).

    Constructor keywords beyond verl's own come from the agent-loop config entry:
    `task` (TaskSpec template: dict, JSON text or file), `policy_version`,
    `max_attempts` (sessions tried for one sample, default 2), `timeout_s` (per session).
    """

    def __init__(
        self,
        *args: Any,
        task: TaskSpec | dict[str, Any] | str | None = None,
        policy_version: int | None = None,
        max_attempts: int = 2,
        timeout_s: float = 1800.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.template = load_template(task)
        self.policy_version = policy_version
        self.max_attempts = max(1, int(max_attempts))
        self.timeout_s = float(timeout_s)

    def task_for(self, row: dict[str, Any]) -> TaskSpec:
        """The row's task: the template, the row's `polar_task` over it, one session."""
        spec = row_task(
            self.template,
            row.get("polar_task"),
            row.get("raw_prompt"),
            where="`task` in the polar agent loop's config or a `polar_task` column in the dataset",
        )
        version = row.get("policy_version", self.policy_version)
        return task_with(
            spec,
            num_sessions=1,
            policy_version=None if version is None else int(version),
        )

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        """Run the row's session (again, up to `max_attempts`, while it is not trainable).

        `sampling_params` are verl's; the harness makes its own model calls through Polar's
        gateway, which serves them from the policy's servers."""
        polar = await shared_client()
        reasons: list[Unscored | None] = []
        for attempt in range(self.max_attempts):
            spec = self.task_for(kwargs)
            (run,) = await run_task(polar, spec, timeout_s=self.timeout_s)
            why = run.unscored
            if why is None:
                return agent_loop_output(run, rerun=attempt)
            reasons.append(why)
            log.warning("polar session %s not trainable: %s", run.session.session_id, why)
            if why.label == "task_error":
                break  # the task cannot run: a rerun would end the same
        raise unscored_batch(
            reasons,
            1.0,
            what=f"verl sample (one session a try, {len(reasons)} of {self.max_attempts} tries)",
            note="verl's batch cannot leave a sample out: every sample must be scored",
        )
