"""One run: the cases in order, each checked and timed, then the report."""

from __future__ import annotations

import dataclasses
import sys
import time
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp

from . import cases as C
from .cases import Shape, input_sets, jitted
from .checks import check_case
from .crosscheck import profiler_check, torch_check
from .report import CASE, HOST, Row
from .timing import Settings, Timing, dispatch_floor, measure_ceiling, rotating_sets, time_case
from .trace import DeviceTime, device_times
from .verdict import Limits, compare, device_figures, device_ratio, side_figures

CROSS_CHECK_CASE = ("softmax", "8192x8192", "float32")


@dataclasses.dataclass(frozen=True)
class Case:
    op: str
    shape: Shape
    dtype: str
    kind: str = CASE

    @property
    def label(self) -> str:
        return f"{self.op} {self.shape.label} {self.dtype}" + (" (host-bound)" if self.kind == HOST else "")


@dataclasses.dataclass
class Context:
    """What every case of a run shares."""

    settings: Settings
    backends: list[str]  # checked, and timed
    timed: list[str]  # timed: the backends, and XLA as the baseline, first
    test: bool
    bench: bool
    reference: str
    seed: int
    limits: Limits | None = None
    cross_case: Case | None = None
    cross_checks: dict[str, Any] = dataclasses.field(default_factory=dict)
    keys: C.KeyStream = dataclasses.field(default_factory=lambda: C.KeyStream(0))


def detect_platform() -> tuple[bool, str]:
    device = jax.devices()[0]
    return device.platform != "cpu", getattr(device, "device_kind", device.platform)


def backend_unavailable(backend: str, is_gpu: bool) -> str | None:
    """Why a backend cannot run here, or None."""
    if backend == "xla":
        return None
    if backend in ("cuda", "tilelang") and not is_gpu:
        return f"backend {backend} needs a GPU"
    if backend == "cpu" and is_gpu:
        return "backend cpu runs on a CPU-only jax (the default device here is a GPU)"
    try:
        jax.block_until_ready(C.jax_camp.softmax(jnp.ones((2, 8), jnp.float32), backend=backend))
    except Exception as error:  # noqa: BLE001 - missing or broken, the run goes on without it
        return f"{type(error).__name__}: {error}"[:300]
    return None


def usable_backends(requested: str, is_gpu: bool, notes: list[str]) -> list[str]:
    wanted = (["cuda", "tilelang", "xla"] if is_gpu else ["cpu", "xla"]) if requested == "all" else [requested]
    usable = []
    for backend in wanted:
        why = backend_unavailable(backend, is_gpu)
        if why:
            notes.append(f"skipped backend {backend}: {why}")
        else:
            usable.append(backend)
    return usable


def start_bench(ctx: Context, is_gpu: bool, use_torch: bool) -> dict[str, Any]:
    """The cheapest call and the copy ceiling (with torch's cross-check, which measures it too)."""
    floor_s = dispatch_floor(ctx.settings)
    torch = ({"available": False, "reason": "--no-torch" if is_gpu else "a CPU run"}
             if not use_torch or not is_gpu else
             torch_check(ctx.settings.ceiling_bytes, ctx.settings.sample_s, ctx.settings.repeats))
    ctx.cross_checks["torch"] = torch
    ceiling = measure_ceiling(ctx.settings, ctx.seed, is_gpu, torch)
    ctx.limits = Limits(floor_s, ceiling["tbps"] * 1e12)
    print(f"copy ceiling {ceiling['tbps']:.3f} TB/s ({ceiling['best_method']}); cheapest jitted call "
          f"{floor_s * 1e6:.2f} us", flush=True)
    return ceiling


def plan_cases(ops: Sequence[str], dtypes: Sequence[str], shapes: Sequence[Shape],
               host_shape: Shape | None) -> list[Case]:
    """Op by op: its shape matrix in each dtype, then its host-bound shape in each dtype."""
    planned = []
    for op in ops:
        planned += [Case(op, s, d) for d in dtypes for s in C.shapes_for(op, shapes)]
        if host_shape is not None and C.shapes_for(op, [host_shape]):
            planned += [Case(op, host_shape, d, HOST) for d in dtypes]
    return planned


def pick_cross_case(planned: Sequence[Case]) -> Case | None:
    """softmax 8192x8192 float32 where the run has it, else its largest case."""
    matrix = [c for c in planned if c.kind == CASE]
    for c in matrix:
        if (c.op, c.shape.label, c.dtype) == CROSS_CHECK_CASE:
            return c
    return max(matrix, key=lambda c: C.bytes_moved(c.op, c.shape, c.dtype), default=None)


class Progress:
    """[i/N] a line a case, to stderr."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total, self.done, self.enabled = total, 0, enabled
        self.started = time.perf_counter()

    def step(self, label: str) -> None:
        self.done += 1
        if self.enabled:
            print(f"[{self.done}/{self.total}] {label} ({time.perf_counter() - self.started:.0f} s)",
                  file=sys.stderr, flush=True)


def _error_text(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"[:500]


def _check(case: Case, rows: dict[str, Row], ctx: Context) -> None:
    for backend in ctx.backends:
        try:
            result = check_case(case.op, backend, case.shape, case.dtype, ctx.keys, ctx.reference)
            rows[backend].test = dataclasses.asdict(result)
        except Exception as error:  # noqa: BLE001 - one broken case must not hide the others
            rows[backend].error = _error_text(error)


def _device_entry(measured: DeviceTime | str, moved: int, in_cache: bool, limits: Limits) -> dict:
    if isinstance(measured, str):
        return {"note": measured}
    return device_figures(measured.span_s, measured.busy_s, measured.kernels, moved, in_cache, limits)


def _bench(case: Case, rows: dict[str, Row], ctx: Context) -> None:
    """Times every backend of the case on the same rotating inputs, then traces its device time."""
    moved = C.bytes_moved(case.op, case.shape, case.dtype)
    n_sets, in_cache = rotating_sets(moved, ctx.settings)
    sets = input_sets(case.op, case.shape, case.dtype, n_sets, ctx.seed)
    fns: dict[str, Callable] = {b: jitted(case.op, b) for b in ctx.timed}
    timings = time_case(fns, sets, ctx.settings)
    figures_moved = moved if case.kind == CASE else None  # bandwidth means nothing where dispatch rules
    for backend, timing in timings.items():
        row = rows[backend]
        if isinstance(timing, Exception):
            row.error = row.error or _error_text(timing)
            continue
        row.bench = {**side_figures(timing.samples_s, figures_moved, in_cache, ctx.limits),
                     "calls_per_sample": timing.calls_per_sample, "rotating_sets": n_sets,
                     "in_cache": in_cache, "first_call_s": timing.first_call_s}
    baseline = rows["xla"].bench if "xla" in rows else None
    for backend in ctx.backends:
        if backend != "xla" and rows[backend].bench and baseline:
            rows[backend].bench["vs_xla"] = compare(rows[backend].bench, baseline)
    timed_ok = {b: fns[b] for b, t in timings.items() if isinstance(t, Timing)}
    if case.kind == CASE and ctx.settings.device_time and timed_ok:
        for backend, measured in device_times(timed_ok, sets, ctx.settings.trace_calls).items():
            rows[backend].device = _device_entry(measured, moved, in_cache, ctx.limits)
        for backend in timed_ok:
            if backend != "xla" and "xla" in timed_ok:
                rows[backend].device["ratio_vs_xla"] = device_ratio(rows[backend].device, rows["xla"].device)
    if case == ctx.cross_case and timed_ok:
        backend = next((b for b in timed_ok if b != "xla"), "xla")
        timing = timings[backend]
        ctx.cross_checks["profiler"] = profiler_check(f"{case.label} {backend}", fns[backend], sets,
                                                      timing.calls_per_sample, timing.samples_s)


def _empty_rows(case: Case, ctx: Context, skipped: str | None = None) -> dict[str, Row]:
    """A row per backend of the case, XLA's first."""
    names = sorted(set(ctx.backends) | set(ctx.timed if ctx.bench else []), key=lambda b: (b != "xla", b))
    moved = C.bytes_moved(case.op, case.shape, case.dtype)
    return {b: Row(case.op, case.shape.label, list(case.shape.dims), case.dtype, b, moved, case.kind,
                   skipped=skipped) for b in names}


def run_case(case: Case, ctx: Context) -> list[Row]:
    rows = _empty_rows(case, ctx)
    if ctx.test:
        _check(case, rows, ctx)
    if ctx.bench:
        try:
            _bench(case, rows, ctx)
        except Exception as error:  # noqa: BLE001 - e.g. out of memory for the inputs
            for row in rows.values():
                row.error = row.error or _error_text(error)
    return list(rows.values())


def run_cases(planned: Sequence[Case], ctx: Context, progress: Progress, time_limit_s: float | None,
              started: float, after_op: Callable[[list[Row]], None]) -> list[Row]:
    """Every case in order. Past the time limit (judged by the longest case so far) the rest are
    rows marked not run, so that the report still comes out whole."""
    rows: list[Row] = []
    longest = 0.0
    for i, case in enumerate(planned):
        case_started = time.perf_counter()
        if time_limit_s is not None and case_started - started + 1.5 * longest > time_limit_s:
            rows += _empty_rows(case, ctx, f"not run (--time-limit {time_limit_s:g} s)").values()
            progress.step(case.label + ": not run, time limit")
        else:
            rows += run_case(case, ctx)
            longest = max(longest, time.perf_counter() - case_started)
            progress.step(case.label)
        if i + 1 == len(planned) or planned[i + 1].op != case.op:
            after_op(rows)
    return rows
