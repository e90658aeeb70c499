"""Once a run, on a GPU: the harness's host-clock figure against device clocks.

* torch: torch's copy of a large array, timed by CUDA events and by this harness's own sampler
  (sampling.py), in a child process so that the two libraries' allocators stay apart.
* profiler: one large case's headline figure against the device's time for the same calls
  back to back, from a profiler trace (CUPTI).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

from .trace import pipelined_span_s

AGREEMENT = 0.03  # the host clock and the device's must agree this closely

_HARNESS_DIR = str(Path(__file__).resolve().parents[1])

_TORCH_CHILD = r"""
import json, statistics, sys
sys.path.insert(0, sys.argv[1])
from harness.sampling import calls_for_target, interleaved_samples, sample_calls
out = {"available": False}
try:
    import torch
except ImportError as error:
    out["reason"] = f"torch does not import: {error}"
else:
    if not torch.cuda.is_available():
        out["reason"] = "torch sees no CUDA device"
    else:
        props = torch.cuda.get_device_properties(0)
        n = int(sys.argv[2]) // 4
        target_s, repeats = float(sys.argv[3]), int(sys.argv[4])
        src = torch.randn(n, device="cuda"); dst = torch.empty_like(src)
        call = lambda i: dst.copy_(src)
        wait = lambda _: torch.cuda.synchronize()
        calls = calls_for_target(call, wait, False, target_s, 4, 100000)
        def events_sample():
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            for i in range(calls):
                call(i)
            end.record(); end.synchronize()
            return start.elapsed_time(end) / 1e3 / calls
        samples = interleaved_samples({"events": events_sample,
                                       "harness": lambda: sample_calls(call, calls, wait, False)}, repeats)
        moved = 2 * n * 4
        out.update(available=True, device=props.name, torch=torch.__version__,
                   l2_bytes=int(getattr(props, "L2_cache_size", 0) or 0), bytes=moved, calls=calls,
                   events_us=[s * 1e6 for s in samples["events"]],
                   harness_us=[s * 1e6 for s in samples["harness"]],
                   events_tbps=moved / statistics.median(samples["events"]) / 1e12,
                   harness_tbps=moved / statistics.median(samples["harness"]) / 1e12)
print("TORCH_CHILD " + json.dumps(out))
"""


def torch_check(array_bytes: int, sample_s: float, repeats: int, timeout_s: float = 180) -> dict[str, Any]:
    """torch's copy timed by CUDA events and by the harness's sampler; they should agree."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", _TORCH_CHILD, _HARNESS_DIR, str(array_bytes), str(sample_s), str(repeats)],
            capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as error:
        return {"available": False, "reason": f"{type(error).__name__}: {error}"[:300]}
    for line in done.stdout.splitlines():
        if line.startswith("TORCH_CHILD "):
            result = json.loads(line[len("TORCH_CHILD "):])
            if result.get("available"):
                result["agreement"] = result["harness_tbps"] / result["events_tbps"] - 1
                result["agrees"] = abs(result["agreement"]) <= AGREEMENT
                result["meaning"] = ("torch's copy, timed by CUDA events and by this harness's "
                                     "sampler: the host clock measures the device where they agree")
            return result
    tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
    return {"available": False, "reason": tail[0][:300]}


def profiler_check(label: str, fn: Callable, sets: Sequence[tuple], calls: int,
                   headline_samples_s: Sequence[float]) -> dict[str, Any]:
    """The headline figure of one case against its calls' device time back to back."""
    try:
        device_s, events = pipelined_span_s(fn, sets, calls)
    except Exception as error:  # noqa: BLE001 - best effort: the trace format is the profiler's
        return {"available": False, "case": label, "reason": f"{type(error).__name__}: {error}"[:300]}
    headline_s = statistics.median(headline_samples_s)
    agreement = headline_s / device_s - 1
    return {"available": True, "case": label, "calls": calls, "gpu_events": events,
            "headline_us": headline_s * 1e6, "device_us": device_s * 1e6, "agreement": agreement,
            "agrees": abs(agreement) <= AGREEMENT,
            "meaning": "the harness's figure of a large case against the device's span of the "
                       "same calls back to back, from a profiler trace"}


def describe(name: str, check: dict[str, Any]) -> str:
    """One line for the report."""
    if not check.get("available"):
        return f"cross-check {name}: n/a ({check.get('reason', 'not run')})"
    verdict = "agrees" if check["agrees"] else "DISAGREES"
    if name == "torch":
        return (f"cross-check torch: copy of {check['bytes'] / 1e9:.3g} GB, CUDA events "
                f"{check['events_tbps']:.3f} TB/s, harness sampler {check['harness_tbps']:.3f} TB/s: "
                f"{check['agreement'] * 100:+.1f}%, {verdict} within {AGREEMENT:.0%}")
    return (f"cross-check profiler: {check['case']}: harness {check['headline_us']:.1f} us/call, "
            f"device span {check['device_us']:.1f} us/call: {check['agreement'] * 100:+.1f}%, "
            f"{verdict} within {AGREEMENT:.0%}")
