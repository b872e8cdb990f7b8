"""The markdown of ``transformer-hessian bench scale`` (:mod:`.scale`): a table per part."""

from __future__ import annotations

from .scale_methods import METHODS

_MIB = 2**20


def _f(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def _met(v, goal) -> str:
    return "-" if v is None or goal is None else ("yes" if v <= goal else "no")


def _methods_table(res: dict) -> list[str]:
    lines = [
        f"## One batch, 1 x T tokens: build, one Hessian-vector product (median of {res['repeats']}), peak memory",
        "",
        "| tokens | method | P | build s | product s | peak MiB | above base MiB | rel. err vs "
        + " | vs ".join(METHODS)
        + " | note |",
        "|" + "---|" * (7 + len(METHODS) + 1),
    ]
    for T, part in res.get("lengths", {}).items():
        for m in METHODS:
            r = part["methods"][m]
            if "error" in r:
                lines.append(f"| {T} | {m} | - | - | - | - | - |" + " - |" * len(METHODS) + f" fails: {r['error']} |")
                continue
            errs = " | ".join(_f(r["rel_err"].get(o), ".1e") for o in METHODS)
            note = f"fused attention kernel: {r['fused_kernel']}" if "fused_kernel" in r else ""
            above = (r["peak_bytes"] - r["base_bytes"]) / _MIB
            lines.append(
                f"| {T} | {m} | {r['P']} | {r['build_s']:.3f} | {r['hvp_s']:.3f} | {r['peak_bytes'] / _MIB:.0f} | "
                f"{above:.0f} | {errs} | {note} |"
            )
    return lines


def _ratios_table(res: dict) -> list[str]:
    lines = ["", "## The goals' ratios (from the timings above)", "", "| tokens | ratio | value | goal (<=) | met |"]
    lines.append("|---|---|---|---|---|")
    for T, part in res.get("lengths", {}).items():
        q = part["ratios"]
        rows = [("engine build / engine product", q.get("engine_build_over_hvp"), q.get("goal_build"))]
        for peer in METHODS[1:]:
            rows += [
                (f"engine product / {peer} product", q.get(f"engine_over_{peer}_hvp"), q.get("goal_hvp")),
                (f"engine peak / {peer} peak", q.get(f"engine_over_{peer}_peak"), q.get("goal_peak")),
                (
                    f"engine peak above base / {peer}'s",
                    q.get(f"engine_over_{peer}_peak_above_base"),
                    None,
                ),
            ]
        for name, v, goal in rows:
            lines.append(f"| {T} | {name} | {_f(v, '.3f')} | {_f(goal, '.1f')} | {_met(v, goal)} |")
        lines.append(f"| {T} | fastest correct peer | {q.get('fastest_correct_peer')} | - | - |")
    return lines


def _data_table(res: dict) -> list[str]:
    d = res.get("data")
    if d is None:
        return []
    c = d["config"]
    lines = [
        "",
        f"## Data set: {c['batches']} batches of {c['B']} x {c['T']} tokens, one torch thread per process",
        "",
        "| processes | batches each | values kept | build s | product s (rank 0) | product s (slowest rank) | "
        "peak MiB per rank | note |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for world in (1, 2):
        r = d[f"world{world}"]
        if "error" in r:
            lines.append(f"| {world} | - | - | - | - | - | - | fails: {r['error'][-300:]} |")
            continue
        peaks = ", ".join(f"{p / _MIB:.0f}" for p in r["peak_bytes_per_rank"])
        lines.append(
            f"| {world} | {r['batches_here']} | {'yes' if r['kept_values'] else 'no'} | {r['build_s']:.3f} | {r['hvp_s']:.3f} | "
            f"{r['hvp_slowest_rank_s']:.3f} | {peaks} | |"
        )
    if "two_over_one_hvp" in d:
        lines += [
            "",
            f"- two processes / one process, product time: {d['two_over_one_hvp']:.3f} "
            f"(goal <= {d['goal_two_over_one']}: {_met(d['two_over_one_hvp'], d['goal_two_over_one'])})",
            f"- relative error of the two-process product against the one-process product "
            f"({res['dtype']}): {d['rel_err_two_vs_one']:.1e}",
        ]
    return lines


def markdown(res: dict) -> str:
    """scale_bench.md of a record of :func:`.scale.bench_scale`."""
    la, lb = res["load_after"], res["load_before"]
    head = [
        f"# bench scale: {res['model']}, {res['dtype']}",
        "",
        f"{res['device_name']} ({res['device']}), torch {res['torch']}, {res['threads']} threads, "
        f"{res['date']}, commit {res['commit']}; load average before "
        f"{lb[0]:.2f} {lb[1]:.2f} {lb[2]:.2f}, after {la[0]:.2f} {la[1]:.2f} {la[2]:.2f}. "
        f"A peer is correct when its product is within {res['tol']:.0e} of the engine's (relative).",
        "",
    ]
    return "\n".join(head + _methods_table(res) + _ratios_table(res) + _data_table(res)) + "\n"
