"""Rows, the text table, the summary and the JSON report."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
from pathlib import Path
from typing import Any, Sequence

from .crosscheck import describe
from .trace import is_jax_camp_kernel
from .verdict import AT_CEILING_PCT, FASTER, SLOWER, TIE, TIE_AT_CEILING

CASE, HOST = "case", "host"  # a row of the shape matrix, or the host-bound tiny shape
LARGE_BYTES = 256 << 20


@dataclasses.dataclass
class Row:
    op: str
    shape: str
    dims: list[int]
    dtype: str
    backend: str
    bytes_moved: int
    kind: str = CASE
    test: dict[str, Any] | None = None
    bench: dict[str, Any] | None = None  # verdict.side_figures, plus "vs_xla" and how it was run
    device: dict[str, Any] | None = None  # verdict.device_figures, or {"note": why not}
    error: str | None = None
    skipped: str | None = None

    @property
    def label(self) -> str:
        return f"{self.shape} {self.dtype}"


def _num(value: float | None, spec: str) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def sig3(value: float | None) -> str:
    """Three significant digits, so that a small figure never reads as 0.00."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.0f}" if abs(value) >= 1000 else f"{value:.3g}"


def ratio(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.2f}" if value >= 0.095 else f"{value:.2g}"


def fmt_us(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def _vs(bench: dict[str, Any] | None) -> tuple[str, str]:
    vs = (bench or {}).get("vs_xla")
    if not vs:
        return "-", ""
    return f"{ratio(vs['ratio'])} [{ratio(vs['ratio_low'])}-{ratio(vs['ratio_high'])}]", vs["verdict"]


def _notes(r: Row) -> str:
    notes = []
    if r.error:
        notes.append("ERROR " + r.error.splitlines()[0][:70])
    b, d = r.bench or {}, r.device or {}
    if b and not b.get("valid", True):
        notes.append("invalid: " + b["invalid"])
    if b.get("in_cache") and r.kind == CASE:
        notes.append("in-cache")
    if d.get("note") or d.get("invalid"):
        notes.append("dev " + (d.get("note") or "invalid: " + d["invalid"])[:80])
    # What else a jax_camp call ran on the device: a conversion or a fusion of XLA's beside our
    # kernel is a pass over memory of its own, which this flags (a gradient's loss is one).
    others = [k for k in d.get("kernels", []) if not is_jax_camp_kernel(k["name"])]
    if r.backend != "xla" and others:
        notes.append("also " + ", ".join(f"{k['name'][:24]} {fmt_us(k['us_per_call'])} us" for k in others))
    return " ".join(notes)


def _test_cell(r: Row) -> str:
    if not r.test:
        return "-"
    return ("ok " if r.test["passed"] else "FAIL ") + _num(r.test["rel_error"], ".1e")


def _time_cells(r: Row) -> tuple[str, str]:
    b = r.bench or {}
    if r.skipped:
        return "not run", ""
    if b and not b.get("valid"):
        return "invalid", ""
    spread = b.get("spread_pct")
    return fmt_us(b.get("median_us")), _num(spread, ".0f" if spread is not None and spread >= 100 else ".1f")


# (header, width, alignment); cells are joined by one space.
CASE_COLUMNS = (("op", 16, "<"), ("shape", 11, "<"), ("dtype", 8, "<"), ("backend", 8, "<"), ("test", 12, "<"),
                ("us/call", 8, ">"), ("±%", 6, ">"), ("TB/s", 8, ">"), ("%ceil", 8, ">"),
                ("vs xla [range]", 20, "<"), ("verdict", 18, "<"), ("dev us", 8, ">"), ("dev x", 6, ">"),
                ("note", 0, "<"))
HOST_COLUMNS = CASE_COLUMNS[:7] + CASE_COLUMNS[9:11] + CASE_COLUMNS[-1:]


def _line(cells: Sequence[str], columns: Sequence[tuple[str, int, str]]) -> str:
    return " ".join(format(c, f"{align}{width}") for c, (_, width, align) in zip(cells, columns)).rstrip()


def _cells(r: Row) -> dict[str, str]:
    us, spread = _time_cells(r)
    b, d = r.bench or {}, r.device or {}
    vs, verdict = _vs(r.bench)
    return {"op": r.op, "shape": r.shape, "dtype": r.dtype, "backend": r.backend, "test": _test_cell(r),
            "us/call": us, "±%": spread, "TB/s": sig3(b.get("tbps")), "%ceil": sig3(b.get("pct_of_ceiling")),
            "vs xla [range]": vs, "verdict": verdict, "dev us": fmt_us(d.get("span_us")),
            "dev x": ratio(d.get("ratio_vs_xla")), "note": r.skipped or _notes(r)}


def print_rows(rows: Sequence[Row], columns: Sequence[tuple[str, int, str]] = CASE_COLUMNS) -> None:
    head = _line([name for name, _, _ in columns], columns)
    print(head)
    print("-" * len(head))
    for r in rows:
        cells = _cells(r)
        print(_line([cells[name] for name, _, _ in columns], columns))


LEGEND = (
    "us/call: a standalone jax.jit(f)(x), the same f on both sides, called back to back on rotating "
    "inputs until the device is busy; median of the samples, ±% = (max-min)/median. Nothing subtracted.",
    "vs xla: XLA's time over ours (above 1: ours is faster); [range]: min-max of the ratios of samples "
    "taken side by side. A range that holds 1.0 is a tie; both sides at "
    f"{AT_CEILING_PCT:.0f}% of the copy ceiling or more is a tie at the ceiling.",
    "dev us: device time a call from a profiler trace, its kernels and the gaps between them: what the "
    "op costs inside a larger jitted step. dev x: XLA's over ours.",
    "host-bound rows: the same figure at a tiny shape, where the host's dispatch is the cost.",
    "in-cache: even all rotating sets fit in twice the last-level cache, so they may be served from it.",
)


def geomean(values: Sequence[float]) -> float | None:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def _lowest(pairs: Sequence[tuple[float, Row]]) -> tuple[float | None, str | None]:
    if not pairs:
        return None, None
    value, row = min(pairs, key=lambda p: p[0])
    return value, row.label


def summarize(rows: Sequence[Row]) -> list[dict[str, Any]]:
    """Per op and backend: tests, verdicts, geometric means and the worst cases."""
    groups: dict[tuple[str, str], list[Row]] = {}
    for r in rows:
        groups.setdefault((r.op, r.backend), []).append(r)
    summary = []
    for (op, backend), members in groups.items():
        cases = [r for r in members if r.kind == CASE]
        compared = [(r.bench["vs_xla"], r) for r in cases if (r.bench or {}).get("vs_xla")]
        verdicts = [vs["verdict"] for vs, _ in compared]
        device = [(r.device["ratio_vs_xla"], r) for r in cases if (r.device or {}).get("ratio_vs_xla")]
        host = [r.bench["vs_xla"]["ratio"] for r in members
                if r.kind == HOST and (r.bench or {}).get("vs_xla")]
        large = [(r.bench["pct_of_ceiling"], r) for r in cases
                 if r.bytes_moved >= LARGE_BYTES and (r.bench or {}).get("pct_of_ceiling")]
        min_ratio, min_case = _lowest([(vs["ratio"], r) for vs, r in compared])
        min_device, min_device_case = _lowest(device)
        min_pct, min_pct_case = _lowest(large)
        tested = [r for r in members if r.test]
        summary.append({
            "op": op, "backend": backend, "cases": len(cases),
            "tests": len(tested), "tests_passed": sum(r.test["passed"] for r in tested),
            "errors": sum(r.error is not None for r in members),
            "invalid": sum(bool(r.bench) and not r.bench.get("valid") for r in members),
            "not_run": sum(r.skipped is not None for r in members),
            "compared": len(compared), "faster": verdicts.count(FASTER), "slower": verdicts.count(SLOWER),
            "ties": verdicts.count(TIE), "ties_at_ceiling": verdicts.count(TIE_AT_CEILING),
            "geomean_ratio_vs_xla": geomean([vs["ratio"] for vs, _ in compared]),
            "min_ratio_vs_xla": min_ratio, "min_ratio_case": min_case,
            "geomean_device_ratio_vs_xla": geomean([d for d, _ in device]),
            "min_device_ratio_vs_xla": min_device, "min_device_ratio_case": min_device_case,
            "geomean_host_ratio_vs_xla": geomean(host),
            "min_pct_of_ceiling_256mb": min_pct, "min_pct_of_ceiling_256mb_case": min_pct_case,
        })
    return summary


def print_summary(summary: Sequence[dict[str, Any]]) -> None:
    head = (f"{'op':<13}{'backend':<9}{'tests':>7}{'err':>4}{'inv':>4}{'skip':>5}  {'fast/tie/ceil/slow':<19}"
            f"{'geo x':>6}{'min x':>6}  {'min x at':<22}{'dev x':>6}{'host x':>7}{'min%ceil≥256MB':>15}")
    print(head)
    print("-" * len(head))
    for s in summary:
        tests = f"{s['tests_passed']}/{s['tests']}" if s["tests"] else "-"
        counts = (f"{s['faster']}/{s['ties']}/{s['ties_at_ceiling']}/{s['slower']}"
                  if s["compared"] else "-")
        print(f"{s['op']:<13}{s['backend']:<9}{tests:>7}{s['errors']:>4}{s['invalid']:>4}{s['not_run']:>5}  "
              f"{counts:<19}{ratio(s['geomean_ratio_vs_xla']):>6}{ratio(s['min_ratio_vs_xla']):>6}"
              f"  {(s['min_ratio_case'] or '-'):<22}{ratio(s['geomean_device_ratio_vs_xla']):>6}"
              f"{ratio(s['geomean_host_ratio_vs_xla']):>7}{sig3(s['min_pct_of_ceiling_256mb']):>15}")


def _git(where: Path, *args: str) -> str | None:
    """git's output in ``where``, or None where git or the repository is missing."""
    try:
        done = subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def git_commit(where: Path) -> str:
    """The checkout's HEAD, or "unknown"."""
    return _git(where, "rev-parse", "HEAD") or "unknown"


def git_uncommitted(where: Path) -> bool | None:
    """Whether tracked files differ from HEAD (None where git cannot tell): a copy of a working
    tree made on top of an older checkout carries that checkout's HEAD, which then does not name
    the code that ran."""
    status = _git(where, "status", "--porcelain", "--untracked-files=no")
    return None if status is None else bool(status)


def describe_commit(meta: dict[str, Any]) -> str:
    """"commit <10 digits>", saying so where the tracked files differed from it."""
    changed = " with uncommitted changes" if meta.get("uncommitted_changes") else ""
    return f"commit {meta['commit'][:10]}{changed}"


def write_json(path: str, report: dict[str, Any], rows: Sequence[Row]) -> None:
    """The whole report; written after every op too, so that a run cut short keeps its rows."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    body = {**report, "rows": [dataclasses.asdict(r) for r in rows], "summary": summarize(rows)}
    tmp = Path(f"{path}.tmp")
    tmp.write_text(json.dumps(body, indent=1, default=float))
    tmp.replace(path)


def print_report(rows: Sequence[Row], meta: dict[str, Any], elapsed_s: float, json_path: str | None,
                 plot_path: str | None) -> None:
    """What ran where, the table, the host-bound rows, the cross-checks, the legend, the notes and
    the summary."""
    print(f"\nrun {meta['date']}, {meta['device']}, jax {meta['jax_version']}, {describe_commit(meta)}: "
          f"{meta['command']}")
    print_rows([r for r in rows if r.kind == CASE])
    host_rows = [r for r in rows if r.kind == HOST]
    if host_rows:
        print("\nhost-bound: the same standalone call at a tiny shape, where dispatch is the cost")
        print_rows(host_rows, HOST_COLUMNS)
    print()
    for name, check in meta["cross_checks"].items():
        print(describe(name, check))
    for line in LEGEND:
        print("  " + line)
    print(f"\n{len(rows)} rows in {elapsed_s:.1f} s"
          + (f"; json {json_path}" if json_path else "") + (f"; png {plot_path}" if plot_path else ""))
    for note in meta["notes"]:
        print("note:", note)
    print()
    print_summary(summarize(rows))
