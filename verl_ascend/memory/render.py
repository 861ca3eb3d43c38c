"""The plan as people read it: a table per phase, the rollout's figures, a stacked-bar PNG, JSON.

Why a table and a plot: the table names each phase's dominant term and headroom (what a refusal quotes);
the bars show what the peak is made of against the card's line, resident terms hatched, so the phase of
verl #6772 (engine weights still there when the all-gather comes) is seen at a glance.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from verl_ascend.memory.plan import Plan, gib
from verl_ascend.memory.terms import GIB, Phase, Term


def table(plan: Plan) -> list[str]:
    """One row per phase: role, resident, active, peak, device, headroom, dominant term (GiB)."""
    head = ("phase", "role", "resident", "active", "peak", "device", "headroom", "dominant term")
    rows = [head]
    for p in plan.phases:
        dom = p.dominant()
        rows.append((p.name, p.role, gib(sum(t.bytes for t in p.resident)), gib(sum(t.bytes for t in p.active)),
                     gib(p.peak), gib(plan.card.bytes), gib(plan.headroom(p)),
                     f"{dom.name} ({gib(dom.bytes)})" if dom else "-"))
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(head))]
    fmt = lambda r: "  ".join(str(c).rjust(w) if 2 <= i <= 6 else str(c).ljust(w)  # noqa: E731
                              for i, (c, w) in enumerate(zip(r, widths))).rstrip()
    return [fmt(rows[0]), fmt(tuple("-" * w for w in widths)), *(fmt(r) for r in rows[1:])]


def rollout_lines(plan: Plan) -> list[str]:
    r = plan.rollout
    if r.engine != "vllm":
        return [f"rollout: {r.engine} server, engine weights {gib(r.weights.bytes)} GiB per card (no paged KV cache)"]
    return [f"rollout (per card, TP {r.tp}): weights {gib(r.weights.bytes)} GiB, "
            f"KV {r.kv_bytes_per_token // 1024} KiB per token, {r.num_blocks} blocks of {r.block_size} tokens "
            f"({r.kv_tokens:,} tokens, {gib(r.kv_cache.bytes)} GiB), profiling peak {gib(r.activation.bytes)} GiB",
            f"rollout holds at once per replica: {r.seqs_mean} sequences at the mean length ({r.mean_len:,} tokens), "
            f"{r.seqs_max} at the maximum ({r.max_len:,}); x {r.replicas} replicas = {r.seqs_mean * r.replicas} / "
            f"{r.seqs_max * r.replicas}"]


def terms_lines(plan: Plan, phase: Phase) -> list[str]:
    lines = [f"{phase.name} ({phase.role}):"]
    for kind, terms in (("resident", phase.resident), ("active", phase.active), ("host", phase.host)):
        for t in terms:
            lines.append(f"  {kind:8} {gib(t.bytes):>8} GiB  {t.name}  [{', '.join(t.keys) or '-'}]  ({t.source})")
    return lines


def report(plan: Plan, *, detail: bool = False) -> list[str]:
    lines = [f"# memory plan: {plan.card.name}, {gib(plan.card.bytes)} GiB per card ({plan.card.source})",
             *table(plan), *rollout_lines(plan),
             f"host memory per node for offloaded states: {gib(plan.host_per_node)} GiB"]
    if detail:
        for p in plan.phases:
            lines += terms_lines(plan, p)
    lines.append(f"verdict: {plan.verdict()}")
    return lines


def _term(t: Term) -> dict[str, Any]:
    return {"name": t.name, "bytes": t.bytes, "gib": round(t.bytes / GIB, 3), "source": t.source, "keys": list(t.keys)}


def to_json(plan: Plan) -> dict[str, Any]:
    r = plan.rollout
    return {
        "device": {"name": plan.card.name, "bytes": plan.card.bytes, "source": plan.card.source},
        "phases": [{"name": p.name, "role": p.role, "peak": p.peak, "headroom": plan.headroom(p),
                    "resident": [_term(t) for t in p.resident], "active": [_term(t) for t in p.active],
                    "host": [_term(t) for t in p.host]} for p in plan.phases],
        "rollout": {"engine": r.engine, "kv_bytes_per_token": r.kv_bytes_per_token, "block_size": r.block_size,
                    "num_blocks": r.num_blocks, "kv_tokens": r.kv_tokens, "seqs_mean": r.seqs_mean,
                    "seqs_max": r.seqs_max, "mean_len": r.mean_len, "max_len": r.max_len, "replicas": r.replicas},
        "host_per_node": plan.host_per_node,
        "fits": plan.fits,
        "verdict": plan.verdict(),
        "over": [{"phase": p.name, "role": p.role, "term": plan.culprit(p).name, "keys": list(plan.culprit(p).keys)}
                 for p in plan.over],
        "seconds": round(plan.seconds, 3),
    }


def plot(plan: Plan, path: Path, title: str = "") -> Path:
    """Stacked bars per phase (resident hatched, active solid), the card's line across them."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(plan.phases) + 2), 5))
    names = sorted({t.name for p in plan.phases for t in p.resident + p.active})
    cmap = plt.get_cmap("tab20")
    color = {n: cmap(i % 20) for i, n in enumerate(names)}
    shown: set[str] = set()
    for x, p in enumerate(plan.phases):
        bottom = 0.0
        for resident, terms in ((True, p.resident), (False, p.active)):
            for t in terms:
                height = t.bytes / GIB
                ax.bar(x, height, bottom=bottom, color=color[t.name], hatch="//" if resident else None,
                       edgecolor="white", label=None if t.name in shown else t.name)
                shown.add(t.name)
                bottom += height
    ax.axhline(plan.card.bytes / GIB, color="black", linestyle="--", linewidth=1.2)
    ax.text(len(plan.phases) - 0.5, plan.card.bytes / GIB, f" {plan.card.name} {gib(plan.card.bytes)} GiB",
            va="bottom", ha="right", fontsize=8)
    ax.set_xticks(range(len(plan.phases)), [f"{p.name}\n({p.role})" for p in plan.phases], fontsize=8)
    ax.set_ylabel("GiB per card (hatched: resident)")
    ax.set_title(title or f"memory plan: {'fits' if plan.fits else 'does NOT fit'}")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")  # renamed when complete: never half a PNG
    fig.savefig(partial, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    partial.replace(path)
    return path
