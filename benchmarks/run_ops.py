#!/usr/bin/env python3
"""Checks and times jax_camp's ops against XLA and the device's copy ceiling.

    python benchmarks/run_ops.py --op all --backend all --mode all \
        --json results.json --plot results.png

See benchmarks/README.md for what is measured and how to read the output.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import gzip
import json
import math
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

import jax
import jax.numpy as jnp
from jax import lax

try:
    import jax_camp
except ImportError as _error:  # the xla backend still runs without the package
    jax_camp = None
    JAX_CAMP_IMPORT_ERROR: str | None = f"{type(_error).__name__}: {_error}"
else:
    JAX_CAMP_IMPORT_ERROR = None

OPS = ("copy", "vector_add", "reduce_sum", "softmax", "softmax_grad")
ELEMENTWISE_OPS = ("copy", "vector_add")
KERNEL_BACKENDS = ("cuda", "tilelang", "cpu")
BACKEND_CHOICES = ("cuda", "tilelang", "xla", "cpu", "all")
MODES = ("test", "bench", "all")
DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}
TOLERANCE = {"float32": 1e-5, "bfloat16": 1e-2, "float16": 1e-2}

GPU_ROW_SHAPES = (
    "8192x8192", "65536x1024", "4096x32768", "262144x128", "1024x262144",
    "144x1280", "1008x1280", "1008x2304", "2032x2304", "784x3840", "4080x1536",
)
GPU_FLAT_SHAPES = ("1001*1024", "4093*1024", "65521*1024")
QUICK_GPU_SHAPES = ("8192x8192", "4096x32768", "1008x1280", "4093*1024")
# Small enough that --op all --backend all --mode all stays well under a
# minute on a 2-core CI runner; odd sizes reach the kernels' tail paths.
CPU_SHAPES = ("64x1000", "3x4099", "1001*16")

GIB = 1 << 30
MIB = 1 << 20


@dataclasses.dataclass(frozen=True)
class Settings:
    """How hard to time: host-side knobs that trade run time for precision."""

    repeats: int
    exec_target_s: float  # device work in one executable call
    sample_target_s: float  # pipelined calls per timed sample
    cache_bytes: int  # last-level cache the rotation must defeat
    max_sets: int  # most rotating input sets in one executable
    ceiling_bytes: int  # array size of the copy-ceiling measurement
    device_time: str = "off"  # profiler kernel time for "l2" (resident) cases, "all", or "off"
    queued_ahead: int = 0  # calls a sample queues before its timing starts (see LoopRun)


# 10 ms of work an executable. A sample's timing leaves out the host's
# launch of its first executable and its wait for the last (LoopRun), which
# at 2 ms an executable (16 calls of a 130 us op) had come to 6-9 us a call.
# GPU launches return before the work is done, so a sample queues two calls.
# Samples of 64 ms, not 8: what the host clock adds at a sample's two ends
# then weighs an eighth as much. On the H200, reduce_sum float32 at
# 8192x8192, 65536x1024 and 4096x32768, 9 samples each, twice: spreads
# 1.4-6.2% at 8 ms, 0.5-2.6% at 64 ms
# (benchmarks/results/2026-11-30-h200-v23-probes.txt, call 8).
GPU_SETTINGS = Settings(5, 10e-3, 64e-3, 60 * MIB, 16, 2 * GIB, "l2", queued_ahead=2)
CPU_SETTINGS = Settings(3, 2e-3, 5e-3, 32 * MIB, 2, 32 * MIB)


# --------------------------------------------------------------------------
# Shapes


@dataclasses.dataclass(frozen=True)
class Shape:
    label: str
    dims: tuple[int, ...]

    @property
    def elements(self) -> int:
        return math.prod(self.dims)

    @property
    def rows(self) -> int:
        return math.prod(self.dims[:-1]) if len(self.dims) > 1 else 1


def _product(text: str) -> int:
    value = math.prod(int(part) for part in text.split("*"))
    if value <= 0:
        raise ValueError(f"size {text!r} must be positive")
    return value


def parse_shape(text: str) -> Shape:
    """'8192x8192' is rows x cols; '1001*1024' is a flat array of that many elements."""
    text = text.strip().lower()
    try:
        dims = tuple(_product(part) for part in text.split("x"))
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"bad shape {text!r}: {error}") from None
    if len(dims) > 2:
        raise argparse.ArgumentTypeError(f"bad shape {text!r}: use RxC or N")
    return Shape(text, dims)


def shapes_for(op: str, shapes: Sequence[Shape]) -> list[Shape]:
    # Flat shapes are the issue's copy/add sizes; row ops need rows x cols.
    if op in ELEMENTWISE_OPS:
        return list(shapes)
    return [s for s in shapes if len(s.dims) == 2]


# --------------------------------------------------------------------------
# The ops: what each backend runs, its reference, and the bytes it must move


def _softmax_ref(xp: Any, x: Any) -> Any:
    shifted = x - x.max(axis=-1, keepdims=True)
    e = xp.exp(shifted)
    return e / e.sum(axis=-1, keepdims=True)


def _softmax_grad_ref(xp: Any, x: Any, w: Any) -> tuple[Any, Any, Any]:
    """Value and gradient of sum(softmax(x) * w), and the value's scale.

    The value is a sum of M*N terms of both signs, so its rounding error is
    proportional to sum|y*w|, not to the value: that is its error's scale.
    """
    y = _softmax_ref(xp, x)
    yw = y * w
    dx = y * (w - yw.sum(axis=-1, keepdims=True))
    return yw.sum(), dx, xp.abs(yw).sum()


def _loss_and_grad(softmax_fn: Callable[[jax.Array], jax.Array], x: jax.Array, w: jax.Array):
    # Only softmax_fn differs between the compared sides: the loss around it,
    # its reduction and the cotangent it feeds back are the same code.
    return jax.value_and_grad(lambda v: jnp.sum(softmax_fn(v) * w))(x)


def _camp_softmax(backend: str) -> Callable[[jax.Array], jax.Array]:
    return lambda v: jax_camp.softmax(v, axis=-1, backend=backend)


def run_op(op: str, backend: str, inputs: Sequence[jax.Array]) -> Any:
    """The op as a user calls it: jax_camp's kernels, or plain JAX for "xla"."""
    xla = backend == "xla"
    if op == "copy":
        return jnp.copy(inputs[0]) if xla else jax_camp.copy(inputs[0], backend=backend)
    if op == "vector_add":
        x, y = inputs
        return x + y if xla else jax_camp.vector_add(x, y, backend=backend)
    if op == "reduce_sum":
        x = inputs[0]
        return jnp.sum(x, axis=-1) if xla else jax_camp.reduce_sum(x, axis=-1, backend=backend)
    if op == "softmax":
        x = inputs[0]
        return jax.nn.softmax(x, axis=-1) if xla else jax_camp.softmax(x, axis=-1, backend=backend)
    if op == "softmax_grad":
        x, w = inputs
        softmax_fn = (lambda v: jax.nn.softmax(v, axis=-1)) if xla else _camp_softmax(backend)
        return _loss_and_grad(softmax_fn, x, w)
    raise ValueError(op)


# One executable per case, as a user's jitted step would run it.
_run_op_jit = jax.jit(run_op, static_argnums=(0, 1))


def n_inputs(op: str) -> int:
    return 2 if op in ("vector_add", "softmax_grad") else 1


def kernels_per_call(op: str) -> int:
    """Custom calls one call of a kernel backend makes (forward + backward for grad)."""
    return 2 if op == "softmax_grad" else 1


def bytes_moved(op: str, shape: Shape, itemsize: int) -> int:
    """Each input read once, each output written once (see README)."""
    n = shape.elements
    if op == "copy":
        return 2 * n * itemsize
    if op == "vector_add":
        return 3 * n * itemsize
    if op == "reduce_sum":
        return (n + shape.rows) * itemsize
    if op == "softmax":
        return 2 * n * itemsize
    if op == "softmax_grad":
        # forward: read x, write y; backward: read y and the cotangent, write dx.
        # The loss's own pass (read y and w) is on both sides and not counted.
        return 5 * n * itemsize
    raise ValueError(op)


def reference(op: str, xp: Any, inputs: Sequence[Any]) -> list[Any]:
    """Outputs in the reference's precision, in run_op's leaf order."""
    if op == "copy":
        return [inputs[0]]
    if op == "vector_add":
        return [inputs[0] + inputs[1]]
    if op == "reduce_sum":
        return [inputs[0].sum(axis=-1)]
    if op == "softmax":
        return [_softmax_ref(xp, inputs[0])]
    if op == "softmax_grad":
        value, dx, _ = _softmax_grad_ref(xp, *inputs)
        return [value, dx]
    raise ValueError(op)


def error_scales(op: str, xp: Any, inputs: Sequence[Any], refs: Sequence[Any]) -> list[Any]:
    """What each output's error is measured against: its norm, except for the loss value."""
    scales = [xp.sqrt((r * r).sum()) for r in refs]
    if op == "softmax_grad":
        scales[0] = _softmax_grad_ref(xp, *inputs)[2]
    return scales


# --------------------------------------------------------------------------
# Inputs


def _random_normal(key: jax.Array, dims: tuple[int, ...], dtype: Any) -> jax.Array:
    return jax.random.normal(key, dims, jnp.float32).astype(dtype)


_random_normal_jit = jax.jit(_random_normal, static_argnums=(1, 2))


# Below this many elements the host draws faster than compiling a device RNG per shape.
HOST_DRAW_LIMIT = 1 << 22


class KeyStream:
    """Fresh random data for every draw, reproducible from one seed."""

    def __init__(self, seed: int) -> None:
        self._seed = seed
        self._draws = 0

    def normal(self, dims: tuple[int, ...], dtype: Any) -> jax.Array:
        self._draws += 1
        if math.prod(dims) <= HOST_DRAW_LIMIT:
            rng = np.random.default_rng((self._seed, self._draws))
            return jnp.asarray(rng.standard_normal(dims, dtype=np.float32).astype(dtype))
        key = jax.random.fold_in(jax.random.key(self._seed), self._draws)
        return _random_normal_jit(key, dims, dtype)


def draw_inputs(keys: KeyStream, op: str, shape: Shape, dtype: Any) -> tuple[jax.Array, ...]:
    return tuple(keys.normal(shape.dims, dtype) for _ in range(n_inputs(op)))


# --------------------------------------------------------------------------
# Test mode


@dataclasses.dataclass
class TestResult:
    passed: bool
    rel_error: float
    tolerance: float
    reference: str
    detail: str = ""


def _host_f64(x: jax.Array) -> np.ndarray:
    return np.asarray(jnp.asarray(x).astype(jnp.float32), dtype=np.float64)


@jax.jit
def _device_errors_jit(outputs, refs, scales):
    return jnp.stack([
        jnp.sqrt(jnp.sum(jnp.square(o.astype(jnp.float32) - r))) / s
        for o, r, s in zip(outputs, refs, scales)
    ])


_device_reference_jit = jax.jit(
    lambda op, inputs: (
        reference(op, jnp, inputs),
        error_scales(op, jnp, inputs, reference(op, jnp, inputs)),
    ),
    static_argnums=(0,),
)


def check_case(
    op: str, backend: str, shape: Shape, dtype_name: str, keys: KeyStream, where: str
) -> TestResult:
    """One check on fresh random inputs: relative error against the reference."""
    dtype = DTYPES[dtype_name]
    tolerance = TOLERANCE[dtype_name]
    inputs = draw_inputs(keys, op, shape, dtype)
    outputs = jax.tree_util.tree_leaves(_run_op_jit(op, backend, inputs))
    expected = [(shape.dims, dtype)] if op != "reduce_sum" else [(shape.dims[:-1], dtype)]
    if op == "softmax_grad":
        expected = [((), dtype), (shape.dims, dtype)]
    for out, (dims, want_dtype) in zip(outputs, expected):
        if tuple(out.shape) != tuple(dims) or out.dtype != jnp.dtype(want_dtype):
            return TestResult(False, math.nan, tolerance, where,
                              f"got {out.dtype}{list(out.shape)}, want {jnp.dtype(want_dtype)}{list(dims)}")
    if where == "numpy-float64":
        host_inputs = [_host_f64(x) for x in inputs]
        refs = reference(op, np, host_inputs)
        scales = error_scales(op, np, host_inputs, refs)
        errors = [
            float(np.sqrt(np.sum(np.square(_host_f64(o) - r))) / s)
            for o, r, s in zip(outputs, refs, scales)
        ]
    else:
        upcast = tuple(x.astype(jnp.float32) for x in inputs)
        refs, scales = _device_reference_jit(op, upcast)
        errors = [float(e) for e in np.asarray(_device_errors_jit(outputs, refs, scales))]
    worst = max(errors, key=lambda e: math.inf if math.isnan(e) else e)
    passed = all(e <= tolerance for e in errors)  # NaN never passes
    return TestResult(passed, worst, tolerance, where)


# --------------------------------------------------------------------------
# Timing: many calls inside one executable, the data linked from call to call


@dataclasses.dataclass
class LoopPlan:
    """How one executable repeats an op.

    "link": each trip runs the op on n_sets input sets in turn, in whole
    rounds (calls_per_trip is a multiple of n_sets), each call into its own
    output carry; each call's first input takes in one element of the
    previous call's output. That data dependency is what stops XLA from
    hoisting the call out of the loop or merging independent calls (a token
    through optimization_barrier does not survive XLA's passes), and rotating
    sets keeps small inputs out of L2.
    The element goes in by an in-place one-element update of the input set, a
    tiny kernel of its own; for XLA's own elementwise ops (fused_link) it is
    added in as input + 0 * element instead, which XLA folds into the op, with
    only the 0 * element in a small kernel of its own (about 1 us on the H200).
    The in-place update does not do for those: XLA fused it into x + y, and
    then copied x whole to also update it in place. Either link, with the
    loop's own cost, is timed alone (the scaffold, _scaffold_trip) and
    subtracted. An earlier "chain" scheme fed copy's and vector_add's output
    back as their input: XLA's fused op then ran in place on two buffers
    where a custom call needs three, so shapes near the 50 MB L2 stayed in
    cache for XLA alone (vector_add 2032x2304 float32 at 5.3 TB/s, past HBM).
    """

    scheme: str
    n_sets: int
    calls_per_trip: int
    trips: int
    fused_link: bool = False

    @property
    def calls(self) -> int:
        return self.calls_per_trip * self.trips


def _link_value(target: jax.Array, source: Any) -> jax.Array:
    """The first element of the previous call's last output, shaped to broadcast over target."""
    leaf = jax.tree_util.tree_leaves(source)[-1]
    return leaf.reshape(-1)[:1].astype(target.dtype).reshape((1,) * target.ndim)


def _link(target: jax.Array, source: Any) -> jax.Array:
    return lax.dynamic_update_slice(target, _link_value(target, source), (0,) * target.ndim)


def _fused_link(target: jax.Array, source: Any) -> jax.Array:
    # target + 0 * value: exact for the finite outputs the harness draws, and
    # elementwise, so that XLA folds it into its own elementwise op (computing
    # 0 * value apart, in a small kernel: see benchmarks/README.md, Device time).
    return target + 0 * _link_value(target, source)


def _scaffold_trip(sets: list, plan: LoopPlan) -> list:
    """One trip of the link alone: the updates a trip of the op makes, without the op.

    An in-place link is one update a call; a fused link costs nothing a call,
    so its scaffold makes one update a trip and keeps the loop's own cost. Each
    update copies the second element of the set updated before it into the
    first of the next: a one-element copy like the op's link, and never one
    that writes back a value the set already holds, which XLA would drop. Needs
    two sets or more.
    """
    previous = sets[-1][0]
    source = min(1, previous.size - 1)
    for call in range(1 if plan.fused_link else plan.calls_per_trip):
        i = call % len(sets)
        element = previous.reshape(-1)[source:source + 1].reshape((1,) * previous.ndim)
        sets[i] = (lax.dynamic_update_slice(sets[i][0], element, (0,) * previous.ndim), *sets[i][1:])
        previous = sets[i][0]
    return sets


def build_program(op: str, backend: str, plan: LoopPlan) -> Callable:
    """A jitted function (sets, outs, scale) -> (sets, outs) that runs plan.calls calls."""
    def program(sets, outs, scale):
        def trip(_, carry):
            sets, outs = list(carry[0]), list(carry[1])
            if op == "scaffold":
                return tuple(_scaffold_trip(sets, plan)), tuple(outs)
            previous = outs[-1]
            for call in range(plan.calls_per_trip):
                i = call % plan.n_sets
                if plan.fused_link:
                    inputs = (_fused_link(sets[i][0], previous), *sets[i][1:])
                else:
                    inputs = sets[i] = (_link(sets[i][0], previous), *sets[i][1:])
                previous = outs[call] = call_op(inputs, scale)
            return tuple(sets), tuple(outs)
        return lax.fori_loop(0, plan.trips, trip, (sets, outs))

    def call_op(inputs, scale):
        if op == "copy" and backend == "xla":
            # XLA removes a copy inside a program; multiplying by a runtime
            # 1.0 is XLA's one-pass read-and-write of the same bytes.
            return inputs[0] * scale
        return run_op(op, backend, inputs)
    return jax.jit(program, donate_argnums=(0, 1))


def compile_program(op: str, backend: str, plan: LoopPlan, sets, outs, scale) -> Callable:
    """build_program's executable for these arguments. XLA warns, while compiling (never when
    the executable runs), of donated loop state it cannot reuse; that is expected here."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*donated buffers.*")
        return build_program(op, backend, plan).lower(sets, outs, scale).compile()


def initial_outputs(op: str, backend: str, plan: LoopPlan, sets) -> tuple:
    """Carry buffers for the outputs: the loop overwrites them."""
    if op == "scaffold":
        return ()
    shape = jax.eval_shape(lambda ins: run_op(op, backend, ins), sets[0])
    # One carry per call of a trip: every output leaves the loop whole. Had
    # later calls overwritten it, only its linked element would be live, and
    # XLA would slice its own ops down to that one row (XLA's softmax then
    # "ran" at 7x the copy ceiling).
    return tuple(
        jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), shape)
        for _ in range(plan.calls_per_trip)
    )


@dataclasses.dataclass
class LoopReport:
    ok: bool
    detail: str
    custom_calls: int
    fusions: int
    copies: int


def inspect_loop(hlo: str, op: str, backend: str, plan: LoopPlan) -> LoopReport:
    """Checks the optimized HLO: the calls are inside the loop, once each, and no copies."""
    match = re.search(r"while\(.*?body=%?([\w.\-]+)", hlo)
    if match:
        head = re.search(r"^%?" + re.escape(match.group(1)) + r" .*\{$", hlo, re.M)
        body = hlo[head.end(): hlo.index("\n}", head.end())] if head else hlo
        repeats = 1
    else:  # XLA unrolled the loop: count the whole module instead
        body, repeats = hlo, plan.trips
    custom_calls = body.count("custom-call(")
    fusions = body.count(" fusion(")
    copies = len(re.findall(r"= \S+ copy\(", body))
    per_trip = plan.calls_per_trip * (kernels_per_call(op) if op in OPS else 1)
    problems = []
    if backend in KERNEL_BACKENDS and op in OPS:
        if custom_calls != per_trip * repeats:
            problems.append(f"{custom_calls} custom calls, expected {per_trip * repeats}")
    elif fusions + custom_calls < plan.calls_per_trip * repeats:
        problems.append(f"only {fusions} kernels for {plan.calls_per_trip * repeats} calls")
    if copies:
        problems.append(f"{copies} copies in the loop")
    return LoopReport(not problems, "; ".join(problems) or "ok", custom_calls, fusions, copies)


@dataclasses.dataclass
class Timing:
    per_call_s: list[float]  # one entry per repeat
    raw_per_call_s: list[float]
    scaffold_s: float
    plan: LoopPlan
    calls_per_sample: int
    loop: LoopReport
    compile_s: float
    device_s: float | None = None  # the op's kernel time a call, from a profiler trace
    device_note: str | None = None  # why there is none, where one was asked for
    device_kernels: list[dict[str, Any]] | None = None  # the trace's events a call, link included

    @property
    def median_s(self) -> float:
        return statistics.median(self.per_call_s)


def fits_in_l2(moved: int, plan: LoopPlan, settings: Settings) -> bool:
    """Whether a case's rotating sets fit in twice the cache: its loop may be served from L2."""
    return moved * plan.n_sets < 2 * settings.cache_bytes


class LoopRun:
    """A loop executable, warmed up, and its samples: seconds per executable call in steady
    state. A sample runs one executable untimed, then `calls` more, and times from the first
    one's end to the last one's end. On a GPU the first `settings.queued_ahead` of them are
    queued before the first one ends, so that the device goes from call to call with no wait
    for the host, and neither the host's launch of the first call nor its wait for the last
    is counted. Timed from the first launch instead, they added 0.6-0.7 ms a sample on the
    H200 (a profiler trace, 2026-11-30): 3% at 1024x262144, whose samples were one 22 ms
    executable, where the link-only loop that the harness subtracts spread them over many
    short ones. Executables shorter than the host's launches (a scaffold of a few updates)
    drain the queue before timing begins; those are timed unqueued. Holds the loop's state
    between samples (its inputs are donated)."""

    def __init__(self, compiled: Callable, state: tuple, scale: jax.Array, settings: Settings) -> None:
        self.compiled, self.scale = compiled, scale
        self.queued_ahead = settings.queued_ahead  # 0 once a sample finds the queue drained
        self.state = compiled(*state, scale)  # warm-up
        jax.block_until_ready(self.state)
        started = time.perf_counter()
        self.state = compiled(*self.state, scale)
        jax.block_until_ready(self.state)
        one_call = max(time.perf_counter() - started, 1e-7)
        self.calls = max(1, self.queued_ahead,
                         min(1000, math.ceil(settings.sample_target_s / one_call)))
        self.samples: list[float] = []

    def _call(self) -> None:
        self.state = self.compiled(*self.state, self.scale)

    def sample(self) -> None:
        while True:
            self._call()
            # A read of the untimed call's output, queued behind it, whose end the host can
            # wait for: the output itself goes on to the next call, which donates it.
            untimed_done = _first_element(self.state)
            for _ in range(self.queued_ahead):
                self._call()
            jax.block_until_ready(untimed_done)
            started = time.perf_counter()
            if self.queued_ahead and jax.tree_util.tree_leaves(self.state)[0].is_ready():
                # The queued calls ended before timing began: calls this short are bound by
                # the host's launches. Such a loop is timed without queuing, each sample
                # paying one launch, as a loop that the host keeps waiting does.
                self.queued_ahead = 0
                jax.block_until_ready(self.state)
                continue
            for _ in range(self.calls - self.queued_ahead):
                self._call()
            jax.block_until_ready(self.state)
            self.samples.append((time.perf_counter() - started) / self.calls)
            return


@jax.jit
def _first_element(tree: Any) -> jax.Array:
    return jax.tree_util.tree_leaves(tree)[0].reshape(-1)[:1]


def _run_samples(compiled: Callable, state: tuple, scale: jax.Array, settings: Settings) -> list[float]:
    run = LoopRun(compiled, state, scale, settings)
    for _ in range(settings.repeats):
        run.sample()
    return run.samples


# Calls a loop trip, at least: each trip of an XLA:GPU loop pays a host round
# trip for its predicate (~20 us on the H200), 2.5 us a call at 8 calls a
# trip. Small shapes take 64 (0.3 us a call); large ones 8, since every call
# of a trip has its own output carry (64 of 1 GB would not fit).
LINK_CALLS_PER_TRIP = 64
LINK_CALLS_PER_TRIP_LARGE = 8
LARGE_CALL_BYTES = 64 * MIB


def plan_for(op: str, backend: str, shape: Shape, itemsize: int, ceiling_bps: float,
             settings: Settings, floor_s: float) -> LoopPlan:
    moved = bytes_moved(op if op in OPS else "copy", shape, itemsize)
    estimate_s = max(moved / ceiling_bps, floor_s)
    calls = max(2, min(4096, round(settings.exec_target_s / estimate_s)))
    n_sets = rotating_sets(shape, itemsize, settings)
    # Whole rounds over the sets.
    at_least = LINK_CALLS_PER_TRIP if moved <= LARGE_CALL_BYTES else LINK_CALLS_PER_TRIP_LARGE
    per_trip = n_sets * math.ceil(at_least / n_sets)
    fused_link = backend == "xla" and op in ELEMENTWISE_OPS
    return LoopPlan("link", n_sets, per_trip, max(1, math.ceil(calls / per_trip)), fused_link)


def rotating_sets(shape: Shape, itemsize: int, settings: Settings) -> int:
    """Input sets to cycle through so that each is out of cache when it comes round again.

    Sized by one input plus one output, the same for every op of a shape, so
    that the ops share one scaffold measurement.
    """
    per_set = 2 * shape.elements * itemsize
    return max(1, min(settings.max_sets, math.ceil(3 * settings.cache_bytes / per_set)))


def make_sets(op: str, shape: Shape, dtype: Any, plan: LoopPlan, seed: int) -> tuple:
    keys = KeyStream(seed)  # the same data for every backend of a case
    count = max(1, plan.n_sets)
    base_op = op if op in OPS else "copy"
    return tuple(draw_inputs(keys, base_op, shape, dtype) for _ in range(count))


def _scaffold_key(shape: Shape, dtype_name: str, plan: LoopPlan) -> tuple:
    """What a scaffold depends on: ops whose loops agree on it share one (see rotating_sets)."""
    return (shape.dims, dtype_name, plan.n_sets, plan.calls_per_trip, plan.fused_link)


class Timer:
    def __init__(self, settings: Settings, ceiling_bps: float, floor_s: float, seed: int) -> None:
        self.settings = settings
        self.ceiling_bps = ceiling_bps
        self.floor_s = floor_s
        self.seed = seed
        self._scaffold_cache: dict[tuple, float] = {}
        self._scaffold_device_cache: dict[tuple, float] = {}
        self._scaffold_executables: dict[tuple, Any] = {}

    def compile_loop(self, op: str, backend: str, shape: Shape, dtype_name: str) -> tuple:
        """One case's loop executable: (compiled, plan, sets, outs, scale, compile seconds)."""
        dtype = DTYPES[dtype_name]
        itemsize = jnp.dtype(dtype).itemsize
        plan = plan_for(op, backend, shape, itemsize, self.ceiling_bps, self.settings, self.floor_s)
        sets = make_sets(op, shape, dtype, plan, self.seed)
        outs = initial_outputs(op, backend, plan, sets)
        scale = jnp.ones((), dtype)
        started = time.perf_counter()
        compiled = compile_program(op, backend, plan, sets, outs, scale)
        return compiled, plan, sets, outs, scale, time.perf_counter() - started

    def time_case(self, op: str, backend: str, shape: Shape, dtype_name: str) -> Timing:
        timing = self.time_cases(op, [backend], shape, dtype_name)[backend]
        if isinstance(timing, Exception):
            raise timing
        return timing

    def time_cases(self, op: str, backends: Sequence[str], shape: Shape,
                   dtype_name: str) -> dict[str, Timing | Exception]:
        """Each backend's loop for one case, their samples taken in turn (a, b, a, b, ...), so
        that whatever drifts during the case (clocks, temperature, other work on the host)
        weighs on every backend alike; a backend that fails gets its exception."""
        runs: dict[str, tuple] = {}
        results: dict[str, Timing | Exception] = {}
        for backend in backends:
            try:
                compiled, plan, sets, outs, scale, compile_s = self.compile_loop(op, backend, shape, dtype_name)
                loop = inspect_loop(compiled.as_text(), op, backend, plan)
                runs[backend] = (LoopRun(compiled, (sets, outs), scale, self.settings), plan, loop, compile_s)
            except Exception as error:  # noqa: BLE001 - one broken backend must not hide the others
                results[backend] = error
        for _ in range(self.settings.repeats):
            for backend in list(runs):
                try:
                    runs[backend][0].sample()
                except Exception as error:  # noqa: BLE001
                    results[backend] = error
                    del runs[backend]
        for backend, (run, plan, loop, compile_s) in runs.items():
            try:
                results[backend] = self._finish(op, shape, dtype_name, run, plan, loop, compile_s)
            except Exception as error:  # noqa: BLE001
                results[backend] = error
        return {backend: results[backend] for backend in backends}

    def _finish(self, op: str, shape: Shape, dtype_name: str, run: LoopRun, plan: LoopPlan,
                loop: LoopReport, compile_s: float) -> Timing:
        """A loop's Timing from its samples: less the scaffold, and its device time where asked."""
        raw = [s / plan.calls for s in run.samples]
        scaffold = self._scaffold(shape, dtype_name, plan)
        net = [max(r - scaffold, 0.0) for r in raw]
        timing = Timing(net, raw, scaffold, plan, run.calls, loop, compile_s)
        moved = bytes_moved(op, shape, jnp.dtype(DTYPES[dtype_name]).itemsize)
        if self.settings.device_time == "all" or (
                self.settings.device_time == "l2" and fits_in_l2(moved, plan, self.settings)):
            try:
                busy, timing.device_kernels = _device_busy_per_call(run.compiled, run.state, run.scale, plan)
                timing.device_s = max(busy - self._scaffold_device(shape, dtype_name, plan), 0.0)
            except Exception as error:  # noqa: BLE001 - a missing trace must not end the run
                timing.device_note = f"{type(error).__name__}: {error}"[:200]
        return timing

    def _scaffold(self, shape: Shape, dtype_name: str, like: LoopPlan) -> float:
        """Seconds per call of the link alone, in the same loop shape.

        For the in-place link: a one-element update a call and the loop's own
        cost; for the fused link: the loop's own cost (see _scaffold_trip). What
        is left after subtracting it is the op's kernels and the gaps they add.
        """
        key = _scaffold_key(shape, dtype_name, like)
        if key not in self._scaffold_cache:
            compiled, state, scale = self._scaffold_program(shape, dtype_name, like)
            samples = _run_samples(compiled, state, scale, self.settings)
            self._scaffold_cache[key] = statistics.median(samples) / like.calls
        return self._scaffold_cache[key]

    def _scaffold_device(self, shape: Shape, dtype_name: str, like: LoopPlan) -> float:
        """Device seconds per call of the link alone (kernels and the loop's
        copies of its predicate), from a profiler trace, in the same loop shape."""
        key = _scaffold_key(shape, dtype_name, like)
        if key not in self._scaffold_device_cache:
            compiled, state, scale = self._scaffold_program(shape, dtype_name, like)
            self._scaffold_device_cache[key] = _device_busy_per_call(compiled, state, scale, like)[0]
        return self._scaffold_device_cache[key]

    def _scaffold_program(self, shape: Shape, dtype_name: str, plan: LoopPlan) -> tuple:
        """The link alone in `plan`'s loop shape (the first op's; results are per call), on fresh
        inputs; compiled once a key, since both the loop time and the device time run it."""
        dtype = DTYPES[dtype_name]
        sets = make_sets("scaffold", shape, dtype, dataclasses.replace(plan, n_sets=max(2, plan.n_sets)),
                         self.seed)
        outs = initial_outputs("scaffold", "xla", plan, sets)
        scale = jnp.ones((), dtype)
        key = _scaffold_key(shape, dtype_name, plan)
        if key not in self._scaffold_executables:
            self._scaffold_executables[key] = compile_program("scaffold", "xla", plan, sets, outs, scale)
        return self._scaffold_executables[key], (sets, outs), scale

    def time_pipelined(self, op: str, backend: str, shape: Shape, dtype_name: str) -> Timing:
        """The baseline's method: K top-level calls back to back, one wait, divided by K."""
        dtype = DTYPES[dtype_name]
        itemsize = jnp.dtype(dtype).itemsize
        n_sets = rotating_sets(shape, itemsize, self.settings)
        sets = make_sets(op, shape, dtype, LoopPlan("link", n_sets, n_sets, 1), self.seed)
        fn = jax.jit(lambda ins: run_op(op, backend, ins))
        started = time.perf_counter()
        jax.block_until_ready(fn(sets[0]))
        compile_s = time.perf_counter() - started
        calls = max(n_sets, 40)
        samples = []
        for _ in range(self.settings.repeats):
            started = time.perf_counter()
            out = [fn(sets[i % n_sets]) for i in range(calls)]
            jax.block_until_ready(out)
            samples.append((time.perf_counter() - started) / calls)
            del out
        plan = LoopPlan("pipelined", n_sets, 1, calls)
        return Timing(samples, samples, 0.0, plan, 1, LoopReport(True, "top-level calls", 0, 0, 0), compile_s)


# --------------------------------------------------------------------------
# Copy ceiling and cross-checks


_TORCH_PROBE = r"""
import json, statistics, sys, time
import torch
out = {"available": False}
if torch.cuda.is_available():
    props = torch.cuda.get_device_properties(0)
    out.update(available=True, device=props.name, torch=torch.__version__,
               l2_bytes=int(getattr(props, "L2_cache_size", 0) or 0))
    n = int(sys.argv[1]) // 4
    src = torch.randn(n, device="cuda"); dst = torch.empty_like(src)
    for _ in range(3): dst.copy_(src)
    torch.cuda.synchronize()
    calls = 10
    event_s, wall_s = [], []
    for _ in range(7):
        start = torch.cuda.Event(enable_timing=True); end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls): dst.copy_(src)
        end.record(); end.synchronize()
        event_s.append(start.elapsed_time(end) / 1e3 / calls)
        t0 = time.perf_counter()
        for _ in range(calls): dst.copy_(src)
        torch.cuda.synchronize()
        wall_s.append((time.perf_counter() - t0) / calls)
    moved = 2 * n * 4
    out.update(bytes=moved, events_tbps=moved / statistics.median(event_s) / 1e12,
               wall_tbps=moved / statistics.median(wall_s) / 1e12)
print("TORCH_PROBE " + json.dumps(out))
"""


def torch_probe(ceiling_bytes: int) -> dict[str, Any]:
    """Torch's device-to-device copy in a child process, timed with CUDA events
    and with the host clock, so that neither library's allocator or CUDA
    libraries get in the other's way."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", _TORCH_PROBE, str(ceiling_bytes)],
            capture_output=True, text=True, timeout=240,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return {"available": False, "reason": str(error)}
    for line in done.stdout.splitlines():
        if line.startswith("TORCH_PROBE "):
            return json.loads(line[len("TORCH_PROBE "):])
    tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
    return {"available": False, "reason": tail[0][:300]}


def measure_ceiling(timer: Timer, is_gpu: bool, use_torch: bool) -> dict[str, Any]:
    """The device's copy bandwidth, bytes read plus written, by every method at hand."""
    settings = timer.settings
    elements = settings.ceiling_bytes // 4
    shape = Shape(f"{elements}", (elements,))
    timing = timer.time_case("copy", "xla", shape, "float32")
    moved = 2 * elements * 4
    methods: dict[str, Any] = {
        "xla_loop": {
            "tbps": moved / timing.median_s / 1e12,
            "how": f"XLA one-pass read+write of a {settings.ceiling_bytes / GIB:.2f} GiB float32 array "
                   f"({timing.plan.calls} passes in one executable, pipelined)",
        }
    }
    source = KeyStream(timer.seed).normal((elements,), jnp.float32)
    copy_fn = jax.jit(jnp.copy)
    jax.block_until_ready(copy_fn(source))
    samples = []
    for _ in range(settings.repeats):
        started = time.perf_counter()
        outs = [copy_fn(source) for _ in range(8)]
        jax.block_until_ready(outs)
        samples.append((time.perf_counter() - started) / 8)
        del outs
    methods["xla_copy_pipelined"] = {
        "tbps": moved / statistics.median(samples) / 1e12,
        "how": "jax.jit(jnp.copy) called 8 times back to back, then one wait",
    }
    del source
    if not is_gpu:
        host = np.ones(elements, np.float32)
        target = np.empty_like(host)
        samples = []
        for _ in range(settings.repeats):
            started = time.perf_counter()
            np.copyto(target, host)
            samples.append(time.perf_counter() - started)
        methods["numpy_copyto"] = {"tbps": moved / min(samples) / 1e12, "how": "np.copyto, best of repeats"}
    torch_info: dict[str, Any] = {"available": False, "reason": "not a GPU run" if not is_gpu else "--no-torch"}
    if is_gpu and use_torch:
        torch_info = torch_probe(settings.ceiling_bytes)
        if torch_info.get("available"):
            methods["torch_copy_events"] = {
                "tbps": torch_info["events_tbps"],
                "how": "torch dst.copy_(src), CUDA events around 10 calls, median of 7 (child process)",
            }
    best = max(methods, key=lambda k: methods[k]["tbps"])
    return {"tbps": methods[best]["tbps"], "best_method": best, "methods": methods,
            "bytes_per_pass": moved, "torch": torch_info}


def gpu_stream_events(events: list[dict]) -> list[dict]:
    """The complete events on a GPU's streams in a profiler trace: its kernels and copies."""
    gpu_pids = {
        e["pid"] for e in events
        if e.get("ph") == "M" and e.get("name") == "process_name"
        and re.search(r"/device:GPU|GPU:0", str(e.get("args", {}).get("name", "")))
    }
    stream_tids = {
        (e["pid"], e["tid"]) for e in events
        if e.get("ph") == "M" and e.get("name") == "thread_name" and e.get("pid") in gpu_pids
        and "stream" in str(e.get("args", {}).get("name", "")).lower()
    }
    return [e for e in events if e.get("ph") == "X" and (e.get("pid"), e.get("tid")) in stream_tids]


def trace_gpu_events(run: Callable[[], Any]) -> tuple[list[dict], float]:
    """run() (which waits for its work) under jax.profiler: its GPU stream events and wall seconds."""
    with tempfile.TemporaryDirectory() as log_dir:
        with jax.profiler.trace(log_dir, create_perfetto_trace=True):
            started = time.perf_counter()
            run()
            wall = time.perf_counter() - started
        traces = list(Path(log_dir).rglob("*.trace.json.gz")) + list(Path(log_dir).rglob("perfetto_trace.json.gz"))
        if not traces:
            raise RuntimeError("the profiler wrote no trace.json.gz")
        with gzip.open(traces[0], "rt") as handle:
            trace = json.load(handle)
    events = gpu_stream_events(trace["traceEvents"] if isinstance(trace, dict) else trace)
    if not events:
        raise RuntimeError("no GPU stream events in the trace")
    return events, wall


def busy_seconds(events: list[dict]) -> float:
    return sum(float(e.get("dur", 0)) for e in events) / 1e6


def _traced_loop_run(compiled: Callable, state: tuple, scale: jax.Array) -> tuple[list[dict], float]:
    """One warm-up run of a loop executable, then one traced (its inputs are donated)."""
    sets, outs = compiled(*state, scale)
    jax.block_until_ready(outs)

    def run() -> None:
        jax.block_until_ready(compiled(sets, outs, scale))

    return trace_gpu_events(run)


def stream_breakdown(events: list[dict], calls: int, top: int = 4) -> list[dict[str, Any]]:
    """What the GPU streams ran a call, by event name, longest first: where device time goes."""
    by_name: dict[str, list[float]] = {}
    for e in events:
        by_name.setdefault(e["name"], []).append(float(e.get("dur", 0)))
    ranked = sorted(by_name.items(), key=lambda kv: -sum(kv[1]))[:top]
    return [{"name": name[:120], "per_call": len(durs) / calls, "us_per_call": sum(durs) / calls}
            for name, durs in ranked]


def _device_busy_per_call(compiled: Callable, state: tuple, scale: jax.Array,
                          plan: LoopPlan) -> tuple[float, list[dict[str, Any]]]:
    """Seconds of GPU stream activity a call in one run of a loop executable, and its breakdown."""
    events, _ = _traced_loop_run(compiled, state, scale)
    return busy_seconds(events) / plan.calls, stream_breakdown(events, plan.calls)


def profile_cross_check(timer: Timer, backend: str, op: str, shape: Shape, dtype_name: str) -> dict[str, Any]:
    """Device kernel time of one executable from a profiler trace, against the host-clock figure.

    Best effort: the trace format is the profiler's, so any failure is reported, not raised.
    """
    try:
        compiled, plan, sets, outs, scale, _ = timer.compile_loop(op, backend, shape, dtype_name)
        kernels, wall = _traced_loop_run(compiled, (sets, outs), scale)
        return {
            "available": True, "op": op, "backend": backend, "shape": shape.label, "dtype": dtype_name,
            "calls_in_executable": plan.calls, "expected_launches_per_call": kernels_per_call(op),
            "kernel_busy_us_per_call": busy_seconds(kernels) / plan.calls * 1e6,
            "wall_us_per_call_traced": wall / plan.calls * 1e6,
            "kernels_per_call": stream_breakdown(kernels, plan.calls, top=6),
        }
    except Exception as error:  # noqa: BLE001 - a cross-check must not end the run
        return {"available": False, "reason": f"{type(error).__name__}: {error}"[:400]}


def measure_floor(settings: Settings) -> float:
    """Per-call cost of the loop's one-element link kernel alone: what a tiny
    kernel costs in the timing loop. (A near-empty XLA op is no measure: XLA
    merges tiny linked calls.)"""
    timer = Timer(settings, 1e12, 2e-6, 0)
    shape = Shape("256", (256,))
    plan = plan_for("scaffold", "xla", shape, 4, 1e12, settings, 2e-6)
    return timer._scaffold(shape, "float32", plan)


# --------------------------------------------------------------------------
# Progress


class Progress:
    def __init__(self, total: int, enabled: bool) -> None:
        self.total = total
        self.done = 0
        self.enabled = enabled
        self._bar = None
        self._last = 0.0
        if enabled:
            try:
                from tqdm import tqdm
            except ImportError:
                pass
            else:
                self._bar = tqdm(total=total, file=sys.stderr, unit="case", dynamic_ncols=True)

    def step(self, label: str) -> None:
        self.done += 1
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.set_postfix_str(label, refresh=False)
            self._bar.update(1)
            return
        now = time.monotonic()
        if now - self._last > 2.0 or self.done == self.total:
            self._last = now
            print(f"[{self.done}/{self.total}] {label}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


# --------------------------------------------------------------------------
# The run


def detect_platform() -> tuple[bool, str]:
    device = jax.devices()[0]
    is_gpu = device.platform not in ("cpu",)
    return is_gpu, getattr(device, "device_kind", device.platform)


def resolve_backends(requested: str, is_gpu: bool) -> list[str]:
    if requested == "all":
        return ["cuda", "tilelang", "xla"] if is_gpu else ["cpu", "xla"]
    return [requested]


def backend_unavailable(backend: str, is_gpu: bool) -> str | None:
    """Why a backend cannot run here, or None."""
    if backend == "xla":
        return None
    if jax_camp is None:
        return f"jax_camp does not import ({JAX_CAMP_IMPORT_ERROR})"
    if backend in ("cuda", "tilelang") and not is_gpu:
        return f"backend {backend} needs a GPU"
    if backend == "cpu" and is_gpu:
        return "backend cpu runs on a CPU-only jax (the default device here is a GPU)"
    try:
        probe = jnp.ones((2, 8), jnp.float32)
        jax.block_until_ready(jax_camp.softmax(probe, backend=backend))
    except ImportError as error:
        return f"{type(error).__name__}: {error}"
    return None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--op", choices=(*OPS, "all"), default="all")
    parser.add_argument("--backend", choices=BACKEND_CHOICES, default="all")
    parser.add_argument("--mode", choices=MODES, default="all")
    parser.add_argument("--dtype", default=None,
                        help="comma-separated: float32,bfloat16,float16 (default float32,bfloat16)")
    parser.add_argument("--shapes", default=None,
                        help="comma-separated RxC (rows x cols) or N / A*B (flat, copy and vector_add only)")
    parser.add_argument("--quick", action="store_true", help="a few shapes only (GPU sanity run)")
    parser.add_argument("--json", dest="json_path", default=None, help="write every row here")
    parser.add_argument("--plot", dest="plot_path", default=None, help="draw bandwidth per shape here (PNG)")
    parser.add_argument("--repeats", type=int, default=None, help="timed samples per case")
    parser.add_argument("--seed", type=int, default=None, help="input seed (default: from the clock; printed)")
    parser.add_argument("--reference", choices=("auto", "numpy", "device"), default="auto",
                        help="numpy: float64 on the host; device: XLA in float32 on upcast inputs "
                             "(auto: numpy on a CPU, device on a GPU)")
    parser.add_argument("--timing", choices=("loop", "pipelined"), default="loop",
                        help="loop: many calls in one executable (default); pipelined: top-level calls")
    parser.add_argument("--ceiling-mb", type=int, default=None, help="array size for the copy ceiling")
    parser.add_argument("--no-xla-baseline", action="store_true",
                        help="in bench mode, do not time xla alongside the other backends")
    parser.add_argument("--no-torch", action="store_true", help="skip torch's copy/event cross-check")
    parser.add_argument("--no-profile-check", action="store_true", help="skip the profiler cross-check")
    parser.add_argument("--device-time", choices=("l2", "all", "off"), default=None,
                        help="the op's kernel time from a profiler trace: for L2-resident cases "
                             "(the default on a GPU), all cases, or none (the default on a CPU)")
    parser.add_argument("--no-progress", action="store_true")
    return parser


@dataclasses.dataclass
class Row:
    op: str
    shape: str
    dims: list[int]
    dtype: str
    backend: str
    bytes_moved: int
    test: dict[str, Any] | None = None
    bench: dict[str, Any] | None = None
    error: str | None = None


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def print_table(rows: list[Row]) -> None:
    head = (f"{'op':<13}{'shape':<12}{'dtype':<9}{'backend':<9}{'test':<14}{'us':>10}{'±%':>6}{'MB':>9}"
            f"{'TB/s':>7}{'%ceil':>7}{'vs xla':>8}{'dev us':>8}{'dev x':>7}  note")
    print(head)
    print("-" * len(head))
    for r in rows:
        test = "-"
        if r.test:
            test = ("ok " if r.test["passed"] else "FAIL ") + _fmt(r.test["rel_error"], ".1e")
        b = r.bench or {}
        notes = []
        if r.error:
            notes.append("ERROR " + r.error.splitlines()[0][:60])
        if b.get("l2_resident"):
            notes.append("L2")
        if b and not b.get("loop_ok", True):
            notes.append("loop? " + b.get("loop_detail", ""))
        if b.get("device_note"):
            notes.append("dev? " + b["device_note"][:60])
        if b.get("samples_vs_xla") == "slower":
            notes.append("slower in every sample")
        print(f"{r.op:<13}{r.shape:<12}{r.dtype:<9}{r.backend:<9}{test:<14}"
              f"{_fmt(b.get('median_us'), '.1f'):>10}{_fmt(b.get('spread_pct'), '.0f'):>6}"
              f"{r.bytes_moved / 1e6:>9.1f}{_fmt(b.get('tbps'), '.2f'):>7}{_fmt(b.get('pct_of_ceiling'), '.0f'):>7}"
              f"{_fmt(b.get('speedup_vs_xla'), '.2f'):>8}{_fmt(b.get('device_us'), '.2f'):>8}"
              f"{_fmt(b.get('device_speedup_vs_xla'), '.2f'):>7}  {' '.join(notes)}")


def samples_apart(ours: Sequence[float], xla: Sequence[float]) -> str:
    """"slower" where every one of our samples took longer than every one of XLA's, "faster"
    where every one took less, else "overlap". A case's backends take their samples in turn, so
    of two equally fast ones, ours comes out "slower" by chance once in C(2n, n) cases of n
    samples each (1 in 252 at 5): a ratio below 1.0x with samples that overlap is a tie within
    the run's spread."""
    if min(ours) > max(xla):
        return "slower"
    if max(ours) < min(xla):
        return "faster"
    return "overlap"


def geomean(values: Sequence[float]) -> float:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else math.nan


def summarize(rows: list[Row]) -> list[dict[str, Any]]:
    groups: dict[tuple[str, str], list[Row]] = {}
    for r in rows:
        groups.setdefault((r.op, r.backend), []).append(r)
    summary = []
    for (op, backend), members in groups.items():
        tested = [r for r in members if r.test]
        timed = [r for r in members if r.bench]
        speedups = [r.bench["speedup_vs_xla"] for r in timed if r.bench.get("speedup_vs_xla")]
        below = [r for r in timed if (r.bench.get("speedup_vs_xla") or math.inf) < 1.0]
        device = [(r.bench["device_speedup_vs_xla"], r) for r in timed if r.bench.get("device_speedup_vs_xla")]
        device_slowest = min(device, key=lambda t: t[0], default=None)
        slowest = min(timed, key=lambda r: r.bench.get("speedup_vs_xla") or math.inf, default=None)
        big = [r for r in timed if r.bytes_moved >= 256 * MIB]
        worst_big = min(big, key=lambda r: r.bench["pct_of_ceiling"], default=None)
        summary.append({
            "op": op, "backend": backend, "cases": len(members),
            "tests_passed": sum(r.test["passed"] for r in tested), "tests": len(tested),
            "errors": sum(r.error is not None for r in members),
            "geomean_speedup_vs_xla": geomean(speedups) if speedups else None,
            "min_speedup_vs_xla": slowest.bench.get("speedup_vs_xla") if slowest and speedups else None,
            "min_speedup_case": f"{slowest.shape} {slowest.dtype}" if slowest and speedups else None,
            "below_xla": len(below) if speedups else None,
            "below_xla_in_every_sample": sum(r.bench.get("samples_vs_xla") == "slower" for r in below)
            if speedups else None,
            "device_speedups": len(device),
            "geomean_device_speedup_vs_xla": geomean([d for d, _ in device]) if device else None,
            "min_device_speedup_vs_xla": device_slowest[0] if device_slowest else None,
            "min_device_speedup_case": f"{device_slowest[1].shape} {device_slowest[1].dtype}"
            if device_slowest else None,
            "geomean_tbps": geomean([r.bench["tbps"] for r in timed]) if timed else None,
            "min_pct_ceiling_256mb": worst_big.bench["pct_of_ceiling"] if worst_big else None,
            "min_pct_ceiling_256mb_case": f"{worst_big.shape} {worst_big.dtype}" if worst_big else None,
        })
    return summary


def print_summary(summary: list[dict[str, Any]], ceiling: dict[str, Any] | None, notes: list[str]) -> None:
    for note in notes:
        print("note:", note)
    if ceiling:
        print(f"copy ceiling: {ceiling['tbps']:.3f} TB/s ({ceiling['best_method']})")
    print()
    head = (f"{'op':<13}{'backend':<9}{'tests':>8}{'err':>5}{'geo x':>7}{'min x':>7}  {'min x at':<20}"
            f"{'<1x':>4}{'apart':>6}{'geo TB/s':>9}{'min%c≥256MB':>12}{'min dev x':>10}  {'min dev x at':<20}")
    print(head)
    print("-" * len(head))
    for s in summary:
        tests = f"{s['tests_passed']}/{s['tests']}" if s["tests"] else "-"
        print(f"{s['op']:<13}{s['backend']:<9}{tests:>8}{s['errors']:>5}"
              f"{_fmt(s['geomean_speedup_vs_xla'], '.2f'):>7}{_fmt(s['min_speedup_vs_xla'], '.2f'):>7}  "
              f"{(s['min_speedup_case'] or '-'):<20}{_fmt(s['below_xla'], 'd'):>4}"
              f"{_fmt(s['below_xla_in_every_sample'], 'd'):>6}{_fmt(s['geomean_tbps'], '.2f'):>9}"
              f"{_fmt(s['min_pct_ceiling_256mb'], '.0f'):>12}{_fmt(s['min_device_speedup_vs_xla'], '.2f'):>10}"
              f"  {(s['min_device_speedup_case'] or '-'):<20}")


def draw_plot(path: str, rows: list[Row], ceiling_tbps: float | None, title: str) -> str | None:
    """Bandwidth per shape for each implementation; returns why not, if it could not."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no plot (pip install matplotlib)"
    timed = [r for r in rows if r.bench]
    if not timed:
        return "no timed rows: no plot"
    ops = [op for op in OPS if any(r.op == op for r in timed)]
    dtypes = [d for d in DTYPES if any(r.dtype == d for r in timed)]
    fig, axes = plt.subplots(len(ops), len(dtypes), figsize=(7 * len(dtypes), 3.4 * len(ops)), squeeze=False)
    for i, op in enumerate(ops):
        for j, dtype in enumerate(dtypes):
            ax = axes[i][j]
            cell = [r for r in timed if r.op == op and r.dtype == dtype]
            labels = list(dict.fromkeys(r.shape for r in cell))
            backends = list(dict.fromkeys(r.backend for r in cell))
            width = 0.8 / max(1, len(backends))
            for k, backend in enumerate(backends):
                by_shape = {r.shape: r.bench["tbps"] for r in cell if r.backend == backend}
                xs = [n + (k - (len(backends) - 1) / 2) * width for n in range(len(labels))]
                ax.bar(xs, [by_shape.get(l, 0.0) for l in labels], width, label=backend)
            if ceiling_tbps:
                ax.axhline(ceiling_tbps, color="black", linestyle="--", linewidth=1,
                           label=f"copy ceiling {ceiling_tbps:.2f}")
            ax.set_xticks(range(len(labels)))
            ax.set_xticklabels(labels, rotation=35, ha="right", fontsize=7)
            ax.set_ylabel("TB/s")
            ax.set_title(f"{op} {dtype}", fontsize=9)
            ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


# XLA runs a loop body as a CUDA graph (a command buffer) when it holds at
# least xla_gpu_graph_min_graph_size commands (5) or a custom call; a smaller
# body runs command by command, with a host round trip each trip. Every op
# loop here has a body of 8 calls or more, but the scaffold of XLA's fused
# link (one update a trip) ran command by command, and its 15-17 us a trip
# were subtracted from loops that never paid them: XLA's copy at 8192x8192
# float32 lost 1.4-2.2 us a call, 0.5 with the flag, and its loop's own time
# did not move (benchmarks/results/2026-11-30-h200-v12-probes.txt). So every
# loop takes the same path.
LOOP_XLA_FLAG = "--xla_gpu_graph_min_graph_size=1"


def use_graphs_for_every_loop() -> None:
    """Adds LOOP_XLA_FLAG to XLA_FLAGS (before XLA starts) unless the caller set that flag."""
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_gpu_graph_min_graph_size" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {LOOP_XLA_FLAG}".strip()


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    use_graphs_for_every_loop()
    argv_list = list(sys.argv[1:] if argv is None else argv)
    is_gpu, device_name = detect_platform()
    settings = GPU_SETTINGS if is_gpu else CPU_SETTINGS
    if args.repeats:
        settings = dataclasses.replace(settings, repeats=max(1, args.repeats))
    if args.ceiling_mb:
        settings = dataclasses.replace(settings, ceiling_bytes=args.ceiling_mb * MIB)
    if args.device_time:
        settings = dataclasses.replace(settings, device_time=args.device_time)
    seed = args.seed if args.seed is not None else int(time.time() * 1000) % (2**31)
    ops = list(OPS) if args.op == "all" else [args.op]
    dtype_names = (args.dtype or "float32,bfloat16").split(",")
    for name in dtype_names:
        if name not in DTYPES:
            print(f"unknown dtype {name!r}; choose from {', '.join(DTYPES)}", file=sys.stderr)
            return 2
    if args.shapes:
        shapes = [parse_shape(s) for s in args.shapes.split(",") if s.strip()]
    elif is_gpu:
        shapes = [parse_shape(s) for s in (QUICK_GPU_SHAPES if args.quick else GPU_ROW_SHAPES + GPU_FLAT_SHAPES)]
    else:
        shapes = [parse_shape(s) for s in CPU_SHAPES]
    where = {"auto": "device-float32" if is_gpu else "numpy-float64", "numpy": "numpy-float64",
             "device": "device-float32"}[args.reference]
    do_test = args.mode in ("test", "all")
    do_bench = args.mode in ("bench", "all")

    notes: list[str] = []
    requested = resolve_backends(args.backend, is_gpu)
    backends = []
    for backend in requested:
        why = backend_unavailable(backend, is_gpu)
        if why:
            notes.append(f"skipped backend {backend}: {why}")
        else:
            backends.append(backend)
    if args.backend != "all" and not backends:
        print(f"error: {notes[-1]}", file=sys.stderr)
        return 2
    timed_backends = list(backends)
    if do_bench and "xla" not in timed_backends and not args.no_xla_baseline:
        timed_backends.append("xla")  # the speedup is against XLA timed in this process

    print(f"device: {device_name} | jax {jax.__version__} | seed {seed} | reference {where} | "
          f"timing {args.timing}", flush=True)
    started = time.perf_counter()
    ceiling = None
    floor_s = 2e-6 if is_gpu else 5e-6
    cross_checks: dict[str, Any] = {}
    if do_bench:
        floor_s = max(measure_floor(settings), 1e-7)
        ceiling = measure_ceiling(Timer(settings, 3e12 if is_gpu else 2e10, floor_s, seed), is_gpu,
                                  use_torch=not args.no_torch)
        torch_info = ceiling["torch"]
        if torch_info.get("available"):
            cross_checks["torch_events_vs_wall"] = {
                "events_tbps": torch_info["events_tbps"], "wall_tbps": torch_info["wall_tbps"],
                "xla_loop_tbps": ceiling["methods"]["xla_loop"]["tbps"],
                "meaning": "torch's copy timed with CUDA events and with this harness's host-clock "
                           "method (pipelined calls, one wait); the XLA loop is the harness's own figure",
            }
        print(f"copy ceiling {ceiling['tbps']:.3f} TB/s ({ceiling['best_method']}); "
              f"loop floor {floor_s * 1e6:.2f} us/call", flush=True)
    timer = Timer(settings, ceiling["tbps"] * 1e12 if ceiling else 1e12, floor_s, seed)
    keys = KeyStream(seed + 1)

    cases = [(op, dtype, shape) for op in ops for dtype in dtype_names for shape in shapes_for(op, shapes)]
    case_backends = sorted(set(timed_backends) | set(backends), key=lambda b: (b != "xla", b))
    progress = Progress(len(cases) * len(case_backends), enabled=not args.no_progress)
    rows: list[Row] = []
    for op, dtype_name, shape in cases:
        itemsize = jnp.dtype(DTYPES[dtype_name]).itemsize
        rows_by_backend = {b: Row(op, shape.label, list(shape.dims), dtype_name, b, bytes_moved(op, shape, itemsize))
                           for b in case_backends}
        for backend, row in rows_by_backend.items():
            if do_test and backend in backends:
                try:
                    row.test = dataclasses.asdict(check_case(op, backend, shape, dtype_name, keys, where))
                except Exception as error:  # noqa: BLE001 - one broken case must not hide the others
                    row.error = f"{type(error).__name__}: {error}"[:500]
        timings: dict[str, Timing | Exception] = {}
        if do_bench:
            timed = [b for b in case_backends if b in timed_backends]
            if args.timing == "pipelined":
                for backend in timed:
                    try:
                        timings[backend] = timer.time_pipelined(op, backend, shape, dtype_name)
                    except Exception as error:  # noqa: BLE001
                        timings[backend] = error
            else:
                timings = timer.time_cases(op, timed, shape, dtype_name)
        xla = timings.get("xla")
        xla_ok = isinstance(xla, Timing)
        for backend, row in rows_by_backend.items():
            timing = timings.get(backend)
            if isinstance(timing, Exception):
                row.error = row.error or f"{type(timing).__name__}: {timing}"[:500]
            elif timing is not None:
                median = timing.median_s
                # A loop that did not compile as planned (XLA merging
                # calls, copies) times something else: no ratio from it.
                comparable = (xla_ok and backend != "xla" and median > 0 and xla.median_s > 0
                              and xla.loop.ok and timing.loop.ok)
                row.bench = {
                    "median_us": median * 1e6,
                    "min_us": min(timing.per_call_s) * 1e6,
                    "max_us": max(timing.per_call_s) * 1e6,
                    "spread_pct": (max(timing.per_call_s) - min(timing.per_call_s)) / median * 100
                    if median > 0 else math.nan,
                    "samples_us": [s * 1e6 for s in timing.per_call_s],
                    "raw_median_us": statistics.median(timing.raw_per_call_s) * 1e6,
                    "scaffold_us": timing.scaffold_s * 1e6,
                    "tbps": row.bytes_moved / median / 1e12 if median > 0 else math.nan,
                    "pct_of_ceiling": (row.bytes_moved / median / 1e12) / ceiling["tbps"] * 100
                    if median > 0 else math.nan,
                    "speedup_vs_xla": xla.median_s / median if comparable else None,
                    "samples_vs_xla": samples_apart(timing.per_call_s, xla.per_call_s)
                    if comparable else None,
                    "device_us": timing.device_s * 1e6 if timing.device_s is not None else None,
                    "device_speedup_vs_xla": xla.device_s / timing.device_s
                    if comparable and xla.device_s and timing.device_s else None,
                    "device_note": timing.device_note,
                    "device_kernels": timing.device_kernels,
                    "scheme": timing.plan.scheme, "rotating_sets": timing.plan.n_sets,
                    "calls_per_executable": timing.plan.calls, "executables_per_sample": timing.calls_per_sample,
                    "l2_resident": fits_in_l2(row.bytes_moved, timing.plan, settings),
                    "loop_ok": timing.loop.ok, "loop_detail": timing.loop.detail,
                    "compile_s": timing.compile_s,
                }
            rows.append(row)
            progress.step(f"{op} {shape.label} {dtype_name} {backend}")
    progress.close()

    if do_bench and is_gpu and not args.no_profile_check:
        kernel_backend = next((b for b in backends if b != "xla"), "xla")
        row_shapes = shapes_for("softmax", shapes)
        probe_shape = next((s for s in row_shapes if s.label == "8192x8192"), row_shapes[0] if row_shapes else None)
        if probe_shape is not None:
            cross_checks["profiler"] = profile_cross_check(timer, kernel_backend, "softmax", probe_shape, "float32")
            for r in rows:
                if (r.op, r.backend, r.shape, r.dtype) == ("softmax", kernel_backend, probe_shape.label, "float32") and r.bench:
                    cross_checks["profiler"]["harness_us_per_call"] = r.bench["median_us"]

    elapsed = time.perf_counter() - started
    summary = summarize(rows)
    failures = [r for r in rows if (r.test and not r.test["passed"]) or r.error]
    suspicious = [r for r in rows if r.bench and not r.bench["loop_ok"]]
    if suspicious:
        notes.append(f"{len(suspicious)} timed cases whose loop did not compile as expected "
                     "(see loop_detail); no speedup is computed from them")
    if failures:
        notes.append(f"{len(failures)} cases FAILED (test or error)")
    command = "python benchmarks/run_ops.py " + " ".join(shlex.quote(a) for a in argv_list)
    report = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": device_name,
        "platform": "gpu" if is_gpu else "cpu",
        "jax_version": jax.__version__,
        "jax_camp_version": getattr(jax_camp, "__version__", None),
        "python": platform.python_version(),
        "host": platform.node(),
        "command": command,
        "seed": seed,
        "reference": where,
        "timing": args.timing,
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "settings": dataclasses.asdict(settings),
        "loop_floor_us": floor_s * 1e6,
        "ceiling": ceiling,
        "cross_checks": cross_checks,
        "backends": backends,
        "notes": notes,
        "elapsed_s": elapsed,
        "rows": [dataclasses.asdict(r) for r in rows],
        "summary": summary,
    }
    if args.json_path:
        Path(args.json_path).parent.mkdir(parents=True, exist_ok=True)
        with open(args.json_path, "w") as handle:
            json.dump(report, handle, indent=1, default=float)
    if args.plot_path and do_bench:
        why = draw_plot(args.plot_path, rows, ceiling["tbps"] if ceiling else None,
                        f"{device_name}, jax {jax.__version__}, {report['date']}")
        if why:
            notes.append(why)

    print()
    print_table(rows)
    for name, check in cross_checks.items():
        print(f"cross-check {name}: " + json.dumps(check, default=float)[:400])
    print()
    print(f"{len(rows)} rows in {elapsed:.1f} s" + (f"; json {args.json_path}" if args.json_path else ""))
    print_summary(summary, ceiling, notes)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
