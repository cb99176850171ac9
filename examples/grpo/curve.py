"""The GRPO learning curve: `reward.csv` and its PNG (mean reward ± std, logprob gap, per step)."""

from __future__ import annotations

import argparse
import csv
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path

from examples.grpo.train import StepReport

COLUMNS = [
    "step",
    "policy_version",
    "mean_reward",
    "reward_std",
    "max_logprob_gap",
    "stale_traces_dropped",
    "stale_groups_dropped",
    "unscored_sessions",
    "groups",
    "traces",
    "trained_tokens",
    "loss",
    "seconds",
]


def write_csv(reports: Sequence[StepReport], path: Path) -> None:
    """One row per step (missing figures: empty cells)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(COLUMNS)
        for report in reports:
            row = [getattr(report, name) for name in COLUMNS]
            writer.writerow(["" if value is None else value for value in row])


def read_csv(path: Path) -> list[StepReport]:
    """The step reports a `write_csv` file holds (columns it lacks: their defaults)."""
    fields = {f.name: f.type for f in dataclasses.fields(StepReport)}
    reports = []
    with path.open(newline="") as src:
        for row in csv.DictReader(src):
            values = {}
            for name, text in row.items():
                if name not in fields:
                    continue
                kind = fields[name]
                number = float if "float" in str(kind) else int
                values[name] = None if text == "" else number(text)
            reports.append(StepReport(**(_EMPTY | values)))
    return reports


_EMPTY = {
    "step": 0,
    "policy_version": 0,
    "groups": 0,
    "traces": 0,
    "trained_tokens": 0,
    "mean_reward": None,
    "reward_std": None,
    "loss": 0.0,
    "max_logprob_gap": None,
    "stale_groups_dropped": 0,
    "stale_traces_dropped": 0,
    "unscored_sessions": 0,
    "failed_groups": 0,
    "seconds": 0.0,
}


def plot(reports: Sequence[StepReport], path: Path, title: str = "") -> None:
    """Mean reward with a ±1 std band (top), trainer/sampler logprob gap (bottom)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    scored = [r for r in reports if r.mean_reward is not None]
    steps = [r.step for r in scored]
    mean = [r.mean_reward or 0.0 for r in scored]
    std = [r.reward_std or 0.0 for r in scored]
    fig, (top, bottom) = plt.subplots(
        2, 1, figsize=(7, 5.5), sharex=True, gridspec_kw={"height_ratios": [2, 1]}
    )
    top.fill_between(
        steps,
        [m - s for m, s in zip(mean, std, strict=True)],
        [m + s for m, s in zip(mean, std, strict=True)],
        alpha=0.25,
        label="± 1 std (sessions)",
    )
    top.plot(steps, mean, marker="o", markersize=3, label="mean reward")
    top.axhline(0.9, color="grey", linestyle="--", linewidth=1, label="0.9")
    top.set_ylim(-0.05, 1.05)
    top.set_ylabel("reward (digit share)")
    top.legend(loc="center right")
    if title:
        top.set_title(title)
    gaps = [(r.step, r.max_logprob_gap) for r in reports if r.max_logprob_gap is not None]
    if gaps:
        floor = 1e-9  # an exact 0 (a saturated, deterministic policy) is drawn at the floor
        bottom.semilogy([s for s, _ in gaps], [max(g, floor) for _, g in gaps], marker=".")
        if any(g == 0 for _, g in gaps):
            bottom.text(0.01, 0.05, "0 drawn at 1e-9", transform=bottom.transAxes, fontsize=8)
    bottom.set_ylabel("max |trainer − vLLM|\nlogprob gap")
    bottom.set_xlabel("step (policy version)")
    bottom.xaxis.set_major_locator(MaxNLocator(integer=True))
    dropped = sum(r.stale_traces_dropped for r in reports)
    bottom.set_title(f"stale traces dropped: {dropped}", fontsize=9, loc="right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str]) -> None:
    """Redraw a curve from its CSV: `python -m examples.grpo.curve reward.csv reward.png`."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("csv", type=Path)
    parser.add_argument("png", type=Path)
    parser.add_argument("--title", default="")
    args = parser.parse_args(argv)
    plot(read_csv(args.csv), args.png, title=args.title)


if __name__ == "__main__":
    main(sys.argv[1:])
