#!/usr/bin/env python3
"""Checks and times jax_camp's ops against XLA and the device's copy ceiling.

    python benchmarks/run_ops.py --op all --backend all --mode all --json r.json --plot r.png

See benchmarks/README.md for what each figure means; the code is in benchmarks/harness/.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import shlex
import sys
import time
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))

import jax  # noqa: E402

from harness import cases as C  # noqa: E402
from harness import report, runner  # noqa: E402
from harness.checks import DEVICE_REFERENCE, NUMPY_REFERENCE  # noqa: E402
from harness.markdown import markdown_report  # noqa: E402
from harness.merge import MergeError, merge_reports  # noqa: E402
from harness.plot import EXTRA_HINT, draw_plot, plotting_available  # noqa: E402
from harness.timing import CPU_SETTINGS, GPU_SETTINGS, Settings  # noqa: E402

BACKENDS = ("cuda", "tilelang", "xla", "cpu", "all")


def _ops(text: str) -> list[str]:
    names = list(C.OPS) if text == "all" else [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in C.OPS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown op {unknown}; choose from {', '.join(C.OPS)} or all")
    return names


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--op", type=_ops, default=list(C.OPS), help="all, or a comma-separated subset of "
                   + ",".join(C.OPS) + " (to split a run)")
    p.add_argument("--backend", choices=BACKENDS, default="all")
    p.add_argument("--mode", choices=("test", "bench", "all"), default="all")
    p.add_argument("--dtype", default=",".join(C.DEFAULT_DTYPES), help="comma-separated: " + ",".join(C.DTYPES))
    p.add_argument("--shapes", default=None, help="comma-separated RxC, or N / A*B (flat: copy, vector_add)")
    p.add_argument("--quick", action="store_true", help="four shapes only (a GPU sanity run)")
    p.add_argument("--host-shape", default=C.HOST_SHAPE, help="the host-bound shape, or 'off'")
    p.add_argument("--json", dest="json_path", default=None, help="write the report here")
    p.add_argument("--plot", dest="plot_path", default=None, help="draw bandwidth per shape here (PNG)")
    p.add_argument("--markdown", dest="markdown_path", default=None, help="write the summary and case tables here")
    p.add_argument("--from-json", default=None,
                   help="run nothing: print (and --plot, --markdown, --json) a saved report, or several "
                        "of one build, comma-separated, as one")
    p.add_argument("--repeats", type=int, default=None, help="samples per implementation (at least 5 by default)")
    p.add_argument("--sample-ms", type=float, default=None, help="a sample lasts at least this long")
    p.add_argument("--seed", type=int, default=None, help="input seed (default: from the clock; printed)")
    p.add_argument("--reference", choices=("auto", "numpy", "device"), default="auto",
                   help="numpy: float64 on the host; device: XLA in float32 on upcast inputs "
                        "(auto: numpy on a CPU, device on a GPU)")
    p.add_argument("--ceiling-mb", type=int, default=None, help="array size of the copy ceiling")
    p.add_argument("--l2-mb", type=int, default=None, help="the cache the rotating inputs must overflow")
    p.add_argument("--device-time", choices=("all", "off"), default=None,
                   help="trace each case's device time (default: all on a GPU, off on a CPU)")
    p.add_argument("--no-xla-baseline", action="store_true", help="in bench mode, do not time xla too")
    p.add_argument("--no-torch", action="store_true", help="skip torch's CUDA-event cross-check")
    p.add_argument("--no-profile-check", action="store_true", help="skip the profiler cross-check")
    p.add_argument("--time-limit", type=float, default=None,
                   help="seconds: start no case that would end past it (the rest are marked not run)")
    p.add_argument("--no-progress", action="store_true", help="no [i/N] lines on stderr")
    return p


def settings_from(args: argparse.Namespace, is_gpu: bool) -> Settings:
    s = GPU_SETTINGS if is_gpu else CPU_SETTINGS
    changes: dict[str, Any] = {}
    if args.repeats:
        changes["repeats"] = max(1, args.repeats)
    if args.sample_ms:
        changes["sample_s"] = args.sample_ms / 1e3
    if args.ceiling_mb:
        changes["ceiling_bytes"] = args.ceiling_mb * C.MIB
    if args.l2_mb:
        changes["cache_bytes"] = args.l2_mb * C.MIB
    if args.device_time:
        changes["device_time"] = args.device_time == "all"  # on a CPU: tried, and n/a with the reason
    return dataclasses.replace(s, **changes)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.plot_path and not plotting_available():
        parser.error(EXTRA_HINT)
    if args.from_json:
        paths = [path for path in args.from_json.split(",") if path.strip()]
        try:
            return replay(paths, args.plot_path, args.markdown_path, args.json_path)
        except MergeError as error:
            print(f"error: --from-json: {error}", file=sys.stderr)
            return 2
    dtypes = [d for d in args.dtype.split(",") if d]
    if not dtypes or any(d not in C.DTYPES for d in dtypes):
        parser.error(f"--dtype {args.dtype!r}: choose from {', '.join(C.DTYPES)}")
    started = time.perf_counter()
    is_gpu, device = runner.detect_platform()
    notes: list[str] = []
    backends = runner.usable_backends(args.backend, is_gpu, notes)
    if args.backend != "all" and not backends:
        print(f"error: {notes[-1]}", file=sys.stderr)
        return 2
    do_test, do_bench = args.mode in ("test", "all"), args.mode in ("bench", "all")
    timed = ["xla"] if do_bench and not args.no_xla_baseline else []
    timed += [b for b in backends if b not in timed] if do_bench else []
    seed = args.seed if args.seed is not None else int(time.time() * 1000) % (2**31)
    where = {"auto": DEVICE_REFERENCE if is_gpu else NUMPY_REFERENCE, "numpy": NUMPY_REFERENCE,
             "device": DEVICE_REFERENCE}[args.reference]
    ctx = runner.Context(settings_from(args, is_gpu), backends, timed, do_test, do_bench, where, seed,
                         keys=C.KeyStream(seed + 1))
    defaults = (C.QUICK_GPU_SHAPES if args.quick else C.GPU_ROW_SHAPES + C.GPU_FLAT_SHAPES) if is_gpu else C.CPU_SHAPES
    shapes = [C.parse_shape(s) for s in (args.shapes.split(",") if args.shapes else defaults) if s.strip()]
    host = None if args.host_shape == "off" or not do_bench else C.parse_shape(args.host_shape)
    planned = runner.plan_cases(args.op, dtypes, shapes, host)
    print(f"device: {device} | jax {jax.__version__} | seed {seed} | reference {where} | "
          f"{len(planned)} cases x {len(set(backends) | set(timed))} backends", flush=True)
    here = Path(__file__).resolve().parent
    meta: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": device, "platform": "gpu" if is_gpu else "cpu", "jax_version": jax.__version__,
        "jax_camp_version": getattr(C.jax_camp, "__version__", None), "python": platform.python_version(),
        "commit": report.git_commit(here), "uncommitted_changes": report.git_uncommitted(here),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "command": "python benchmarks/run_ops.py " + shlex.join(sys.argv[1:] if argv is None else argv),
        "seed": seed, "reference": where, "settings": dataclasses.asdict(ctx.settings), "backends": backends,
        "notes": notes, "cross_checks": ctx.cross_checks}
    if do_bench:
        meta["ceiling"] = runner.start_bench(ctx, is_gpu, use_torch=not args.no_torch)
        meta["cheapest_call_us"] = ctx.limits.floor_s * 1e6
        if is_gpu and not args.no_profile_check:
            ctx.cross_case = runner.pick_cross_case(planned)
        ctx.cross_checks.setdefault("profiler", {"available": False, "reason": "--no-profile-check"
                                                 if is_gpu else "a CPU run"})
        if not ctx.settings.device_time:
            notes.append("dev us: n/a, " + ("--device-time off" if is_gpu else "a CPU run has no GPU trace"))

    def save(rows: list[report.Row]) -> None:
        if args.json_path:
            report.write_json(args.json_path, {**meta, "elapsed_s": time.perf_counter() - started}, rows)

    progress = runner.Progress(len(planned), enabled=not args.no_progress)
    rows = runner.run_cases(planned, ctx, progress, args.time_limit, started, save)
    return finish(rows, meta, args, started, save)


def finish(rows: list[report.Row], meta: dict[str, Any], args: argparse.Namespace, started: float,
           save) -> int:
    notes = meta["notes"]
    failures = [r for r in rows if (r.test and not r.test["passed"]) or r.error]
    invalid = [r for r in rows if r.bench and not r.bench.get("valid")]
    if failures:
        notes.append(f"{len(failures)} rows FAILED (a check or an error)")
    if invalid:
        notes.append(f"{len(invalid)} figures invalid (see the note on each row): a harness problem")
    for name, check in meta["cross_checks"].items():
        if check.get("available") and not check["agrees"]:
            notes.append(f"cross-check {name} disagrees by {check['agreement']:+.1%}: the host clock's "
                         "figures may not be the device's")
    if args.plot_path and meta.get("ceiling"):
        try:
            draw_plot(args.plot_path, rows, meta["ceiling"]["tbps"], plot_title(meta))
        except Exception as error:  # noqa: BLE001 - the tables and the JSON still come out
            notes.append(f"the PNG failed: {type(error).__name__}: {error}"[:300])
            failures.append(error)
    save(rows)
    if args.markdown_path:
        Path(args.markdown_path).write_text(markdown_report(rows, meta))
    report.print_report(rows, meta, time.perf_counter() - started, args.json_path, args.plot_path)
    return 1 if failures else 0


def replay(paths: Sequence[str], plot_path: str | None, markdown_path: str | None,
           json_path: str | None = None) -> int:
    """The tables, the PNG, the Markdown and the JSON of saved reports, e.g. of a run written on
    a machine without matplotlib, or of a matrix run in parts (harness/merge.py), as one."""
    saved, rows = merge_reports([(path, json.loads(Path(path).read_text())) for path in paths])
    if json_path:
        report.write_json(json_path, saved, rows)
    if plot_path and saved.get("ceiling"):
        draw_plot(plot_path, rows, saved["ceiling"]["tbps"], plot_title(saved))
    if markdown_path:
        Path(markdown_path).write_text(markdown_report(rows, saved))
    report.print_report(rows, saved, saved.get("elapsed_s", 0.0), json_path, plot_path)
    return 0


def plot_title(meta: dict[str, Any]) -> str:
    return (f"{meta['device']}, jax {meta['jax_version']}, {meta['date']}, {report.describe_commit(meta)}\n"
            f"{meta['command']}")


if __name__ == "__main__":
    sys.exit(main())
