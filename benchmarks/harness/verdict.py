"""What a measurement may claim: plausibility guards, and the tie rule for ratios."""

from __future__ import annotations

import dataclasses
import math
import statistics
from typing import Any, Sequence

from .sampling import ratio_range, spread_pct

# A standalone call pays its dispatch: one below this share of the cheapest jitted call
# measured in the same run did not run as timed.
FLOOR_SHARE = 0.25
# Past the cache, nothing moves bytes much faster than the copy ceiling (reads alone run a
# little above it); inside the cache it may, by as much as the cache's bandwidth allows.
BEYOND_CACHE_FACTOR = 1.5
IN_CACHE_FACTOR = 10.0
AT_CEILING_PCT = 90.0

FASTER, SLOWER, TIE, TIE_AT_CEILING = "faster", "slower", "tie", "tie at the ceiling"


@dataclasses.dataclass(frozen=True)
class Limits:
    floor_s: float  # the cheapest jitted call's seconds, this run
    ceiling_bps: float | None  # the copy ceiling, bytes per second


def impossible(seconds: float, moved: int | None, in_cache: bool, limits: Limits) -> str | None:
    """Why a time per call cannot be right, or None where it can."""
    if not math.isfinite(seconds):
        return "a time per call that is not finite"
    if seconds <= 0:
        return "a time per call of zero or less"
    if seconds < FLOOR_SHARE * limits.floor_s:
        return (f"{seconds * 1e6:.3g} us is under {FLOOR_SHARE:.0%} of the cheapest jitted call "
                f"({limits.floor_s * 1e6:.3g} us)")
    if moved and limits.ceiling_bps:
        factor = IN_CACHE_FACTOR if in_cache else BEYOND_CACHE_FACTOR
        if moved / seconds > factor * limits.ceiling_bps:
            return (f"{moved / seconds / 1e12:.3g} TB/s is over {factor:g}x the copy ceiling "
                    f"({limits.ceiling_bps / 1e12:.3g} TB/s)")
    return None


def side_figures(samples_s: Sequence[float], moved: int | None, in_cache: bool,
                 limits: Limits) -> dict[str, Any]:
    """One implementation's figures, or the reason they are invalid (then no figure at all)."""
    median = statistics.median(samples_s)
    why = next(filter(None, (impossible(s, moved, in_cache, limits) for s in samples_s)), None)
    if why:
        return {"valid": False, "invalid": why, "samples_us": [s * 1e6 for s in samples_s]}
    figures: dict[str, Any] = {
        "valid": True, "median_us": median * 1e6, "spread_pct": spread_pct(samples_s),
        "samples_us": [s * 1e6 for s in samples_s]}
    if moved and limits.ceiling_bps:
        figures["tbps"] = moved / median / 1e12
        figures["pct_of_ceiling"] = moved / median / limits.ceiling_bps * 100
    return figures


def compare(ours: dict[str, Any], xla: dict[str, Any]) -> dict[str, Any] | None:
    """XLA's time over ours, with the range of the side-by-side sample ratios (min-max), and
    the verdict: a range that holds 1.0 is a tie; both sides at 90% of the ceiling or more is a
    tie at the ceiling; otherwise faster or slower. None where either side is invalid."""
    if not (ours.get("valid") and xla.get("valid")):
        return None
    ratio, low, high = ratio_range(xla["samples_us"], ours["samples_us"])
    if min(ours.get("pct_of_ceiling", 0), xla.get("pct_of_ceiling", 0)) >= AT_CEILING_PCT:
        verdict = TIE_AT_CEILING
    elif low <= 1.0 <= high or math.isnan(low):
        verdict = TIE
    else:
        verdict = FASTER if low > 1.0 else SLOWER
    return {"ratio": ratio, "ratio_low": low, "ratio_high": high, "verdict": verdict}


def device_figures(span_s: float, busy_s: float, kernels: list, moved: int | None, in_cache: bool,
                   limits: Limits) -> dict[str, Any]:
    """A device time, or why it is invalid: the dispatch floor does not bind inside a step,
    the bytes' floor does."""
    why = impossible(span_s, moved, in_cache, dataclasses.replace(limits, floor_s=0.0))
    if why:
        return {"valid": False, "invalid": why}
    return {"valid": True, "span_us": span_s * 1e6, "busy_us": busy_s * 1e6, "kernels": kernels}


def device_ratio(ours: Any, xla: Any) -> float | None:
    """XLA's device time a call over ours, where both were read from the trace."""
    if isinstance(ours, dict) and isinstance(xla, dict) and ours.get("valid") and xla.get("valid"):
        return xla["span_us"] / ours["span_us"]
    return None
