"""Device time from a profiler trace: a call's kernels and the gaps between them, which is what
the op costs inside a larger jitted step, where the host's dispatch no longer shows."""

from __future__ import annotations

import dataclasses
import gzip
import json
import re
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import jax

# Calls under the trace run this far apart, and backends farther still, so that each call's
# events stand as one group and each backend's as one segment; a gap between the kernels of one
# call is launch latency, microseconds.
CALL_GAP_S = 2e-3
GROUP_GAP_US = 1000.0
BACKEND_GAP_S = 30e-3
SEGMENT_GAP_US = 15000.0


@dataclasses.dataclass
class DeviceTime:
    span_s: float  # median over calls: first kernel's start to last kernel's end
    busy_s: float  # median over calls: the kernels' durations summed
    kernels: list[dict[str, Any]]  # what one call ran, by name, longest first


def gpu_stream_events(events: Sequence[dict]) -> list[dict]:
    """The complete events on a GPU's streams (kernels and copies), not the derived lines."""
    gpu_pids = {
        e.get("pid") for e in events
        if e.get("ph") == "M" and e.get("name") == "process_name"
        and re.search(r"/device:GPU|GPU:\d", str(e.get("args", {}).get("name", "")))
    }
    streams = {
        (e.get("pid"), e.get("tid")) for e in events
        if e.get("ph") == "M" and e.get("name") == "thread_name" and e.get("pid") in gpu_pids
        and "stream" in str(e.get("args", {}).get("name", "")).lower()
    }
    return [e for e in events if e.get("ph") == "X" and (e.get("pid"), e.get("tid")) in streams]


def read_trace(log_dir: str) -> list[dict]:
    paths = sorted(Path(log_dir).rglob("*.trace.json.gz")) + sorted(Path(log_dir).rglob("perfetto_trace.json.gz"))
    if not paths:
        raise RuntimeError("the profiler wrote no trace.json.gz")
    with gzip.open(paths[0], "rt") as handle:
        trace = json.load(handle)
    return trace["traceEvents"] if isinstance(trace, dict) else trace


def traced_gpu_events(run: Callable[[], None]) -> list[dict]:
    """run() under jax.profiler: the events on the GPU's streams, in time order."""
    with tempfile.TemporaryDirectory() as log_dir:
        with jax.profiler.trace(log_dir, create_perfetto_trace=True):
            run()
        events = gpu_stream_events(read_trace(log_dir))
    if not events:
        raise RuntimeError("no GPU stream events in the trace")
    return sorted(events, key=lambda e: float(e["ts"]))


def group_calls(events: Sequence[dict], gap_us: float = GROUP_GAP_US) -> list[list[dict]]:
    """Events in time order, split where the stream idles longer than gap_us: one group a call."""
    groups: list[list[dict]] = []
    end = -float("inf")
    for e in events:
        start = float(e["ts"])
        if start - end > gap_us:
            groups.append([])
        groups[-1].append(e)
        end = max(end, start + float(e.get("dur", 0)))
    return groups


def _span_us(group: Sequence[dict]) -> float:
    return max(float(e["ts"]) + float(e.get("dur", 0)) for e in group) - min(float(e["ts"]) for e in group)


def is_jax_camp_kernel(name: str) -> bool:
    """Whether a kernel of the trace is one of jax_camp's: a CUDA kernel of namespace jax_camp,
    or a TileLang kernel, which TileLang names ``<op>_kernel``. Anything else in a jax_camp
    call's group is XLA's work or a copy or memset around the kernels."""
    return "jax_camp" in name or name.endswith("_kernel")


def kernel_breakdown(groups: Sequence[Sequence[dict]], top: int = 4) -> list[dict[str, Any]]:
    by_name: dict[str, list[float]] = {}
    for group in groups:
        for e in group:
            by_name.setdefault(str(e.get("name", "?")), []).append(float(e.get("dur", 0)))
    ranked = sorted(by_name.items(), key=lambda kv: -sum(kv[1]))[:top]
    calls = max(1, len(groups))
    return [{"name": name[:120], "per_call": len(durs) / calls, "us_per_call": sum(durs) / calls}
            for name, durs in ranked]


def device_time(groups: Sequence[Sequence[dict]]) -> DeviceTime:
    return DeviceTime(statistics.median(_span_us(g) for g in groups) / 1e6,
                      statistics.median(sum(float(e.get("dur", 0)) for e in g) for g in groups) / 1e6,
                      kernel_breakdown(groups))


def _segments(groups: Sequence[list[dict]]) -> list[list[list[dict]]]:
    """Groups split where the stream idles longer than SEGMENT_GAP_US: one segment a backend."""
    segments: list[list[list[dict]]] = []
    end = -float("inf")
    for group in groups:
        if float(group[0]["ts"]) - end > SEGMENT_GAP_US:
            segments.append([])
        segments[-1].append(group)
        end = max(float(e["ts"]) + float(e.get("dur", 0)) for e in group)
    return segments


def attribute(events: Sequence[dict], backends: Sequence[str],
              calls: int) -> dict[str, DeviceTime | str]:
    """The backends ran `calls` calls each, in order, apart: segment i (or, where the segments
    merged, group g // calls) is backend i's. A segment that holds another count of groups cannot
    be told apart call by call, and says so."""
    groups = group_calls(events)
    segments = _segments(groups)
    if len(segments) != len(backends):
        if len(groups) != calls * len(backends):
            why = f"n/a: the trace held {len(groups)} groups of GPU events for {calls * len(backends)} calls"
            return {b: why for b in backends}
        segments = [groups[i * calls:(i + 1) * calls] for i in range(len(backends))]
    return {b: device_time(seg) if len(seg) == calls else
            f"n/a: the trace held {len(seg)} groups of GPU events for {calls} calls"
            for b, seg in zip(backends, segments)}


def device_times(fns: Mapping[str, Callable], sets: Sequence[tuple],
                 calls: int) -> dict[str, DeviceTime | str]:
    """Each backend's device time a call, all in one trace: calls apart, on the rotating sets.
    The functions are compiled already; a trace that cannot be read gives its reason."""
    def run() -> None:
        for fn in fns.values():
            for i in range(calls):
                jax.block_until_ready(fn(*sets[i % len(sets)]))
                time.sleep(CALL_GAP_S)
            time.sleep(BACKEND_GAP_S)

    try:
        events = traced_gpu_events(run)
    except Exception as error:  # noqa: BLE001 - the trace format is the profiler's: never fatal
        return {b: f"n/a: {type(error).__name__}: {error}"[:200] for b in fns}
    return attribute(events, list(fns), calls)


def pipelined_span_s(fn: Callable, sets: Sequence[tuple], calls: int) -> tuple[float, int]:
    """Device seconds per call of `calls` calls back to back (first event's start to last
    event's end, over calls), as a sample issues them; and the events seen."""
    def run() -> None:
        out = None
        for i in range(calls):
            out = fn(*sets[i % len(sets)])
        jax.block_until_ready(out)

    events = traced_gpu_events(run)
    return _span_us(events) / 1e6 / calls, len(events)
