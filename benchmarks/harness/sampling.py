"""Pipelined sampling: the harness's one timing method, written without JAX so that the torch
cross-check's child process times torch's work with this very code."""

from __future__ import annotations

import math
import statistics
import time
from typing import Any, Callable, Mapping, Sequence

Call = Callable[[int], Any]  # launches the i-th call of a sample and returns its output
Wait = Callable[[Any], None]  # returns once the outputs it is given are computed


def sample_calls(call: Call, calls: int, wait: Wait, keep_outputs: bool) -> float:
    """Seconds per call of `calls` calls issued back to back, then one wait.

    The clock runs from the first launch to the end of the last result and nothing is
    subtracted. Where calls may finish out of order (keep_outputs, XLA:CPU's thread pool) the
    wait covers every output; on a GPU stream they finish in order, so waiting for the last
    suffices, and earlier outputs are dropped as a user's loop drops them.
    """
    kept: list[Any] = []
    last = None
    started = time.perf_counter()
    for i in range(calls):
        last = call(i)
        if keep_outputs:
            kept.append(last)
    wait(kept if keep_outputs else last)
    return (time.perf_counter() - started) / calls


def calls_for_target(call: Call, wait: Wait, keep_outputs: bool, target_s: float,
                     min_calls: int, max_calls: int) -> int:
    """Calls a sample needs to last target_s, from bursts grown until one lasts a tenth of it."""
    calls = max(1, min_calls)
    while True:
        per_call = sample_calls(call, calls, wait, keep_outputs)
        if per_call * calls >= target_s / 10 or calls >= max_calls:
            break
        calls = min(max_calls, calls * 8)
    wanted = math.ceil(target_s / max(per_call, 1e-9))
    return max(min_calls, min(max_calls, wanted))


def interleaved_samples(samplers: Mapping[str, Callable[[], float]],
                        repeats: int) -> dict[str, list[float] | Exception]:
    """Each sampler's samples, taken in turn (a, b, a, b, ...), so that a drift of clocks or of
    the host during a case weighs on every side alike; a sampler that raises keeps its error
    and the others go on."""
    results: dict[str, list[float] | Exception] = {name: [] for name in samplers}
    for _ in range(repeats):
        for name, take in samplers.items():
            taken = results[name]
            if isinstance(taken, Exception):
                continue
            try:
                taken.append(take())
            except Exception as error:  # noqa: BLE001 - one broken side must not stop the others
                results[name] = error
    return results


def spread_pct(samples: Sequence[float]) -> float:
    """(max - min) / median, in percent."""
    middle = statistics.median(samples)
    return (max(samples) - min(samples)) / middle * 100 if middle > 0 else math.nan


def ratio_range(baseline: Sequence[float], ours: Sequence[float]) -> tuple[float, float, float]:
    """The baseline's time over ours: the ratio of the medians, and the lowest and highest ratio
    of two samples taken side by side (samples are interleaved, so sample i of each side ran at
    the same moment of the case)."""
    paired = [b / o for b, o in zip(baseline, ours) if o > 0]
    median_ratio = statistics.median(baseline) / statistics.median(ours)
    if not paired:
        return median_ratio, math.nan, math.nan
    return median_ratio, min(paired), max(paired)
