"""Results of one workload: raw per-round figures, medians, ratios, checks; table/JSON/PNG."""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.config import BASELINE_SYSTEM
from benchmarks.stats import median, ratio

REFERENCE = "bare"
AFTER, BEFORE = "aiopgq", BASELINE_SYSTEM  # current tree vs the `--baseline` tree


@dataclass
class Metric:
    key: str
    unit: str
    higher_is_better: bool = True


@dataclass
class Check:
    """A target the project holds itself to, evaluated on medians."""

    name: str
    value: float
    op: str  # ">=" or "<="
    threshold: float

    @property
    def passed(self) -> bool | None:
        if math.isnan(self.value):
            return None
        return self.value >= self.threshold if self.op == ">=" else self.value <= self.threshold

    @property
    def verdict(self) -> str:
        return {True: "PASS", False: "FAIL", None: "n/a"}[self.passed]

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "value": None if math.isnan(self.value) else self.value,
            "op": self.op,
            "threshold": self.threshold,
            "passed": self.passed,
        }


@dataclass
class Results:
    workload: str
    systems: list[str]
    metrics: dict[str, Metric] = field(default_factory=dict)
    raw: list[dict[str, Any]] = field(default_factory=list)
    configs: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    headline: list[str] = field(default_factory=list)  # metrics on the before/after line

    def metric(self, key: str, unit: str, higher_is_better: bool = True) -> str:
        self.metrics.setdefault(key, Metric(key, unit, higher_is_better))
        return key

    def add(self, system: str, metric: str, round_no: int, value: float, **extra: Any) -> None:
        if metric not in self.metrics:
            raise KeyError(f"declare metric {metric!r} first")
        self.raw.append(
            {"system": system, "metric": metric, "round": round_no, "value": value, **extra}
        )

    def values(self, system: str, metric: str) -> list[float]:
        return [
            float(r["value"]) for r in self.raw if r["system"] == system and r["metric"] == metric
        ]

    def median(self, system: str, metric: str) -> float:
        return median(self.values(system, metric))

    def medians(self) -> dict[str, dict[str, float | None]]:
        out: dict[str, dict[str, float | None]] = {}
        for system in self.systems:
            row = {}
            for key in self.metrics:
                m = self.median(system, key)
                if not math.isnan(m):
                    row[key] = m
            if row:
                out[system] = dict(row)
        return out

    def ran(self, system: str) -> bool:
        return any(r["system"] == system for r in self.raw)

    def before_after(self) -> dict[str, float]:
        """aiopgq / aiopgq-base per metric (medians), when both ran; else empty."""
        if not (self.ran(AFTER) and self.ran(BEFORE)):
            return {}
        return {
            key: ratio(self.median(AFTER, key), self.median(BEFORE, key))
            for key in self.metrics
            if self.values(AFTER, key) and self.values(BEFORE, key)
        }

    def check(self, name: str, value: float, op: str, threshold: float) -> None:
        self.checks.append(Check(name, value, op, threshold))

    def ratio_check(
        self, name: str, metric: str, num: str, den: str, op: str, threshold: float
    ) -> None:
        """Check median(num)/median(den) on `metric` when both systems ran."""
        if num in self.systems and den in self.systems:
            self.check(
                name, ratio(self.median(num, metric), self.median(den, metric)), op, threshold
            )


def _fmt(value: float) -> str:
    if math.isnan(value):
        return "-"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def _cell(results: Results, system: str, metric: str) -> str:
    values = results.values(system, metric)
    if not values:
        return "-"
    m = median(values)
    if len(values) > 1 and m and not math.isnan(m):
        spread = (max(values) - min(values)) / abs(m) * 100
        return f"{_fmt(m)} ±{spread / 2:.0f}%"
    return _fmt(m)


def ratio_pairs(systems: list[str]) -> list[tuple[str, str]]:
    """Ratio columns: each system to the bare loop, then aiopgq to aiopgq-base."""
    pairs = [(s, REFERENCE) for s in systems if s != REFERENCE] if REFERENCE in systems else []
    if AFTER in systems and BEFORE in systems:
        pairs.append((AFTER, BEFORE))
    return pairs


def render_table(results: Results) -> str:
    systems = [s for s in results.systems if results.ran(s)]
    pairs = ratio_pairs(systems)
    header = ["metric", *systems, *(f"{num}/{den}" for num, den in pairs)]
    rows = []
    for key, metric in results.metrics.items():
        if not any(r["metric"] == key for r in results.raw):
            continue
        row = [f"{key} [{metric.unit}]", *(_cell(results, s, key) for s in systems)]
        for num, den in pairs:
            row.append(_fmt(ratio(results.median(num, key), results.median(den, key))))
        rows.append(row)
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(
            h.ljust(w) if i == 0 else h.rjust(w)
            for i, (h, w) in enumerate(zip(header, widths, strict=True))
        )
    ]
    lines.append("  ".join("-" * w for w in widths))
    for r in rows:
        lines.append(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w)
                for i, (c, w) in enumerate(zip(r, widths, strict=True))
            )
        )
    return "\n".join(lines)


def render_before_after(results: Results) -> str | None:
    """One line: after/before ratios of the workload's headline metrics."""
    ratios = results.before_after()
    shown = [key for key in results.headline if key in ratios]
    if not shown:
        return None
    cells = []
    for key in shown:
        better = "higher" if results.metrics[key].higher_is_better else "lower"
        cells.append(f"{key} {_fmt(ratios[key])}x ({better} is better)")
    return f"  before/after: {AFTER} / {BEFORE}: " + ", ".join(cells)


def render(results: Results) -> str:
    parts = [f"== {results.workload} ==", render_table(results)]
    before_after = render_before_after(results)
    if before_after is not None:
        parts.append(before_after)
    if results.configs:
        parts.append("configs: " + "; ".join(f"{k}: {v}" for k, v in results.configs.items()))
    for c in results.checks:
        shown = "-" if math.isnan(c.value) else f"{c.value:.3g}"
        parts.append(f"  [{c.verdict}] {c.name}: {shown} (target {c.op} {c.threshold:g})")
    parts.extend(f"  note: {n}" for n in results.notes)
    return "\n".join(parts)


def before_after_json(results: Results) -> dict[str, Any]:
    """`{"aiopgq/aiopgq-base": {metric: ratio of medians}}` when both ran, else nothing."""
    ratios = results.before_after()
    if not ratios:
        return {}
    return {f"{AFTER}/{BEFORE}": {k: None if math.isnan(v) else v for k, v in ratios.items()}}


def write_json(results: Results, path: Path, context: dict[str, Any]) -> None:
    doc = {
        "workload": results.workload,
        "written_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        **context,
        "systems": results.systems,
        "configs": results.configs,
        "metrics": {
            k: {"unit": m.unit, "higher_is_better": m.higher_is_better}
            for k, m in results.metrics.items()
        },
        "medians": results.medians(),
        **before_after_json(results),
        "checks": [c.to_json() for c in results.checks],
        "notes": results.notes,
        "raw": results.raw,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2, default=str) + "\n")


def write_plot(results: Results, path: Path, subtitle: str) -> None:
    """One panel per metric: median per system, whiskers at min and max of the rounds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [k for k in results.metrics if any(r["metric"] == k for r in results.raw)]
    if not keys:
        return
    systems = [s for s in results.systems if any(r["system"] == s for r in results.raw)]
    colors = {
        "aiopgq": "#1f77b4",
        BEFORE: "#aec7e8",
        "bare": "#7f7f7f",
        "pgqueuer": "#2ca02c",
        "procrastinate": "#d62728",
    }
    cols = min(3, len(keys))
    rows = math.ceil(len(keys) / cols)
    fig, axes = plt.subplots(
        rows, cols, figsize=(5.2 * cols, 3.6 * rows + 0.6), squeeze=False, layout="constrained"
    )
    for ax, key in zip(axes.flat, keys, strict=False):
        shown = [s for s in systems if results.values(s, key)]
        meds = [results.median(s, key) for s in shown]
        lows = [m - min(results.values(s, key)) for s, m in zip(shown, meds, strict=True)]
        highs = [max(results.values(s, key)) - m for s, m in zip(shown, meds, strict=True)]
        ax.bar(
            shown,
            meds,
            yerr=[lows, highs],
            capsize=4,
            color=[colors.get(s, "#9467bd") for s in shown],
        )
        for x, m in enumerate(meds):
            ax.annotate(_fmt(m), (x, m), ha="center", va="bottom", fontsize=8)
        ax.set_title(key, fontsize=9)
        ax.set_ylabel(results.metrics[key].unit, fontsize=8)
        ax.tick_params(labelsize=8)
    for ax in list(axes.flat)[len(keys) :]:
        ax.axis("off")
    fig.suptitle(f"{results.workload} — {subtitle}", fontsize=10)
    fig.savefig(path, dpi=110)
    plt.close(fig)
