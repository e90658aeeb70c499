"""A saved report as Markdown: the summary table README.md quotes, and each op's cases."""

from __future__ import annotations

from typing import Any, Sequence

from .report import CASE, HOST, LARGE_BYTES, Row, describe_commit, fmt_us, geomean, ratio, sig3
from .verdict import FASTER, SLOWER, TIE, TIE_AT_CEILING


def _header(meta: dict[str, Any]) -> list[str]:
    return [f"{meta['date']}, {meta['device']}, jax {meta['jax_version']}, {describe_commit(meta)},",
            f"`{meta['command']}`.", ""]


def _pct_range(rows: Sequence[Row]) -> str:
    pcts = [r.bench["pct_of_ceiling"] for r in rows
            if r.bytes_moved >= LARGE_BYTES and (r.bench or {}).get("pct_of_ceiling")]
    return f"{min(pcts):.0f}–{max(pcts):.0f}%" if pcts else "-"


def summary_table(rows: Sequence[Row]) -> list[str]:
    """Per op, dtype and backend: the standalone ratio against XLA (geometric mean and worst case),
    the device-time ratio, and the share of the copy ceiling at 256 MB moved and more."""
    cases = [r for r in rows if r.kind == CASE]
    out = ["| op | dtype | backend | faster / tie / slower | vs XLA, geomean | worst (shape, verdict) "
           "| device time vs XLA, geomean | % of ceiling at ≥256 MB: ours (XLA) |",
           "|---|---|---|---|---|---|---|---|"]
    groups: dict[tuple[str, str], list[Row]] = {}
    for r in cases:
        groups.setdefault((r.op, r.dtype), []).append(r)
    for (op, dtype), members in groups.items():
        xla = [r for r in members if r.backend == "xla"]
        for backend in dict.fromkeys(r.backend for r in members if r.backend != "xla"):
            mine = [r for r in members if r.backend == backend]
            compared = [(r.bench["vs_xla"]["ratio"], r) for r in mine if (r.bench or {}).get("vs_xla")]
            device = [r.device["ratio_vs_xla"] for r in mine if (r.device or {}).get("ratio_vs_xla")]
            verdicts = [r.bench["vs_xla"]["verdict"] for _, r in compared]
            counts = (f"{verdicts.count(FASTER)} / {verdicts.count(TIE) + verdicts.count(TIE_AT_CEILING)} "
                      f"/ {verdicts.count(SLOWER)}")
            worst_text = "-"
            if compared:
                worst, row = min(compared, key=lambda pair: pair[0])
                worst_text = f"{ratio(worst)} ({row.shape}, {row.bench['vs_xla']['verdict']})"
            out.append(f"| {op} | {dtype} | {backend} | {counts} | {ratio(geomean([v for v, _ in compared]))} "
                       f"| {worst_text} | {ratio(geomean(device))} | {_pct_range(mine)} ({_pct_range(xla)}) |")
    return out


def case_table(rows: Sequence[Row], op: str) -> list[str]:
    """Every case of one op: each side's time a call, our ratio and verdict, and device times."""
    out = ["| shape | dtype | backend | µs a call (±%) | % of ceiling | vs XLA [range] | verdict "
           "| device µs | device vs XLA |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r.op != op or r.kind not in (CASE, HOST):
            continue
        b, d = r.bench or {}, r.device or {}
        if not b.get("valid"):
            why = "not run" if r.skipped else "error" if r.error else f"invalid: {b.get('invalid', '-')}"
            out.append(f"| {r.shape} | {r.dtype} | {r.backend} | {why} | | | | | |")
            continue
        vs = b.get("vs_xla")
        vs_text = f"{ratio(vs['ratio'])} [{ratio(vs['ratio_low'])}–{ratio(vs['ratio_high'])}]" if vs else "-"
        shape = r.shape + (" (in cache)" if b.get("in_cache") else "") + (" (host-bound)" if r.kind == HOST else "")
        out.append(f"| {shape} | {r.dtype} | {r.backend} | {fmt_us(b['median_us'])} ({b['spread_pct']:.1f}) "
                   f"| {sig3(b.get('pct_of_ceiling'))} | {vs_text} | {vs['verdict'] if vs else '-'} "
                   f"| {fmt_us(d.get('span_us') if d.get('valid') else None)} | {ratio(d.get('ratio_vs_xla'))} |")
    return out


def markdown_report(rows: Sequence[Row], meta: dict[str, Any]) -> str:
    lines = ["# Benchmark run", ""] + _header(meta)
    ceiling = meta.get("ceiling") or {}
    if ceiling:
        lines += [f"Copy ceiling {ceiling['tbps']:.3f} TB/s ({ceiling['best_method']}). Ratios are XLA's "
                  "time over ours: above 1, ours is faster.", ""]
    lines += ["## Summary", ""] + summary_table(rows) + [""]
    for op in dict.fromkeys(r.op for r in rows):
        lines += [f"## {op}", ""] + case_table(rows, op) + [""]
    return "\n".join(lines)
