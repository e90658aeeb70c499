"""Saved reports of one build as one report: a matrix too long for one run, run in parts.

Each part is a JSON report of `run_ops.py --json`, typically one `--op` subset a run. The parts
must come from one build on one device (same device, jax, jax_camp version and commit, committed or
not); a case measured in two parts is an error, except that a part's "not run" row (cut by
`--time-limit`) gives way to another part's measured one. Every figure keeps the part it was
measured in: a row's ratio against XLA is against the XLA timed beside it, and its share of the
copy ceiling against its own part's ceiling.
"""

from __future__ import annotations

from typing import Any, Sequence

from .report import Row

SAME_BUILD = ("device", "platform", "jax_version", "jax_camp_version", "commit", "uncommitted_changes")


class MergeError(ValueError):
    """Reports that cannot be read as one run."""


def _key(row: Row) -> tuple[str, str, str, str, str]:
    return row.op, row.shape, row.dtype, row.backend, row.kind


def merge_reports(parts: Sequence[tuple[str, dict[str, Any]]]) -> tuple[dict[str, Any], list[Row]]:
    """The report of (name, saved report) parts, in order: its header and its rows."""
    if not parts:
        raise MergeError("no report to merge")
    first_name, first = parts[0]
    for name, part in parts[1:]:
        for field in SAME_BUILD:
            if part.get(field) != first.get(field):
                raise MergeError(f"{name} and {first_name} are not one build: {field} "
                                 f"{part.get(field)!r} against {first.get(field)!r}")
    rows: dict[tuple[str, ...], Row] = {}
    source: dict[tuple[str, ...], str] = {}
    for name, part in parts:
        for data in part["rows"]:
            row = Row(**data)
            key = _key(row)
            held = rows.get(key)
            if held is not None and not held.skipped and not row.skipped:
                raise MergeError(f"{row.op} {row.label} {row.backend} ({row.kind}) was measured in "
                                 f"both {source[key]} and {name}")
            if held is None or held.skipped:
                rows[key], source[key] = row, name
    if len(parts) == 1:
        return first, list(rows.values())

    dates = [part["date"] for _, part in parts]
    notes = [f"{name}: {note}" for name, part in parts for note in part.get("notes", [])]
    ceilings = [(name, part["ceiling"]["tbps"]) for name, part in parts if part.get("ceiling")]
    if len({tbps for _, tbps in ceilings}) > 1:
        notes.append("each part measured its own copy ceiling ("
                     + ", ".join(f"{name} {tbps:.3f} TB/s" for name, tbps in ceilings)
                     + "); a row's share of the ceiling is against its own part's")
    meta = {
        **first,
        "date": dates[0] if min(dates) == max(dates) else f"{min(dates)} to {max(dates)}",
        "command": " ; ".join(dict.fromkeys(part["command"] for _, part in parts)),
        "notes": notes,
        "cross_checks": {f"{check} ({name})": value for name, part in parts
                         for check, value in part.get("cross_checks", {}).items()},
        "elapsed_s": sum(part.get("elapsed_s", 0.0) for _, part in parts),
        "parts": [name for name, _ in parts],
    }
    return meta, list(rows.values())
