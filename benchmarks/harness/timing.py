"""The headline figure: a standalone jitted call, called back to back on rotating inputs, each
case's implementations sampled in turn. Also the copy ceiling and the cheapest call's cost."""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from typing import Any, Callable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from .cases import GIB, MIB, KeyStream
from .sampling import calls_for_target, interleaved_samples, sample_calls


@dataclasses.dataclass(frozen=True)
class Settings:
    """How hard to time: knobs that trade run time for precision."""

    repeats: int  # samples per implementation
    sample_s: float  # a sample lasts at least this long
    min_calls: int
    max_calls: int
    cache_bytes: int  # the last-level cache that the rotating inputs must overflow
    max_sets: int  # most rotating input sets
    ceiling_bytes: int  # array size of the copy-ceiling measurement
    keep_outputs: bool  # wait on every output (calls may end out of order) or on the last
    device_time: bool  # trace each case's device time (GPU)
    trace_calls: int = 8  # calls a backend runs under the profiler, apart


# The H200's L2 is 50 MB; 60 MiB leaves a margin. A sample long against a single call makes its
# two host-clock ends (the first launch, the last wait) a small share of it.
GPU_SETTINGS = Settings(repeats=5, sample_s=30e-3, min_calls=4, max_calls=20000, cache_bytes=60 * MIB,
                        max_sets=256, ceiling_bytes=GIB, keep_outputs=False, device_time=True)
# XLA:CPU runs calls on a thread pool, so a sample waits on all of them.
CPU_SETTINGS = Settings(repeats=5, sample_s=20e-3, min_calls=4, max_calls=4000, cache_bytes=32 * MIB,
                        max_sets=4, ceiling_bytes=32 * MIB, keep_outputs=True, device_time=False)


def rotating_sets(moved: int, settings: Settings) -> tuple[int, bool]:
    """Input sets to rotate among so that, inputs and outputs together, they overflow twice the
    cache; and whether they still fit in it (the cap on sets reached: may be served from cache)."""
    wanted = math.ceil(2 * settings.cache_bytes / max(moved, 1))
    count = max(1, min(settings.max_sets, wanted))
    return count, count * moved < 2 * settings.cache_bytes


@dataclasses.dataclass
class Timing:
    samples_s: list[float]  # seconds per call, one entry a sample
    calls_per_sample: int
    first_call_s: float  # compile and first run

    @property
    def median_s(self) -> float:
        return statistics.median(self.samples_s)


@dataclasses.dataclass
class Prepared:
    sample: Callable[[], float]
    calls: int
    first_call_s: float


def prepare(fn: Callable, sets: Sequence[tuple], settings: Settings) -> Prepared:
    """Compiles and warms fn up, then sizes its samples; a sample cycles through every set."""
    started = time.perf_counter()
    jax.block_until_ready(fn(*sets[0]))
    first = time.perf_counter() - started

    def call(i: int) -> Any:
        return fn(*sets[i % len(sets)])

    calls = calls_for_target(call, jax.block_until_ready, settings.keep_outputs, settings.sample_s,
                             max(settings.min_calls, len(sets)), settings.max_calls)
    return Prepared(lambda: sample_calls(call, calls, jax.block_until_ready, settings.keep_outputs),
                    calls, first)


def time_case(fns: Mapping[str, Callable], sets: Sequence[tuple],
              settings: Settings) -> dict[str, Timing | Exception]:
    """Each backend's figure for one case, samples taken in turn; a backend that fails gets its
    exception and leaves the others timed."""
    prepared: dict[str, Prepared] = {}
    results: dict[str, Timing | Exception] = {}
    for backend, fn in fns.items():
        try:
            prepared[backend] = prepare(fn, sets, settings)
        except Exception as error:  # noqa: BLE001 - one broken backend must not hide the others
            results[backend] = error
    samples = interleaved_samples({b: p.sample for b, p in prepared.items()}, settings.repeats)
    for backend, taken in samples.items():
        p = prepared[backend]
        results[backend] = taken if isinstance(taken, Exception) else Timing(taken, p.calls,
                                                                           p.first_call_s)
    return {backend: results[backend] for backend in fns}


def dispatch_floor(settings: Settings) -> float:
    """Seconds per call of about the cheapest jitted call there is (an add on 8 floats),
    pipelined: no standalone call can take much less, whatever it computes. The fastest
    sample, since a busy host only ever slows one, and a floor read high would flag honest
    figures below it."""
    x = jnp.ones((8,), jnp.float32)
    prepared = prepare(jax.jit(lambda v: v + 1), [(x,)], settings)
    return min(prepared.sample() for _ in range(settings.repeats))


def measure_ceiling(settings: Settings, seed: int, is_gpu: bool,
                    torch_info: Mapping[str, Any] | None) -> dict[str, Any]:
    """The device's copy bandwidth, bytes read plus written, by every method at hand; the
    highest is the ceiling."""
    elements = settings.ceiling_bytes // 4
    moved = 2 * elements * 4
    source = KeyStream(seed).normal((elements,), jnp.float32)
    prepared = prepare(jax.jit(jnp.copy), [(source,)], settings)
    xla_s = statistics.median(prepared.sample() for _ in range(settings.repeats))
    methods: dict[str, Any] = {"xla_copy": {
        "tbps": moved / xla_s / 1e12,
        "how": f"jax.jit(jnp.copy) of {settings.ceiling_bytes / GIB:.2f} GiB float32, "
               f"{prepared.calls} calls back to back, median of {settings.repeats}"}}
    del source
    if not is_gpu:
        host, target = np.ones(elements, np.float32), np.empty(elements, np.float32)
        took = []
        for _ in range(settings.repeats):
            started = time.perf_counter()
            np.copyto(target, host)
            took.append(time.perf_counter() - started)
        methods["numpy_copyto"] = {"tbps": moved / min(took) / 1e12, "how": "np.copyto, best of repeats"}
    if torch_info and torch_info.get("available"):
        methods["torch_copy_events"] = {"tbps": torch_info["events_tbps"],
                                        "how": "torch dst.copy_(src) timed by CUDA events (child process)"}
    best = max(methods, key=lambda k: methods[k]["tbps"])
    return {"tbps": methods[best]["tbps"], "best_method": best, "methods": methods,
            "bytes_per_pass": moved}
