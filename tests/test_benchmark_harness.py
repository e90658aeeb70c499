"""The benchmark harness (benchmarks/run_ops.py and benchmarks/harness/) on tiny CPU sizes: its
report, its timing method, the guards that keep an impossible figure from being printed, the tie
rule, and its test mode catching a wrong result."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))

from harness import crosscheck, report, runner, sampling, timing, trace, verdict  # noqa: E402
from harness import cases as C  # noqa: E402

pytestmark = pytest.mark.skipif(jax.default_backend() != "cpu", reason="the harness's CI run is the CPU one")
# The session runs these first, before any compiler starts beside them (conftest.py).
TIMES_THE_MACHINE = True

TINY = ["--shapes", "8x33,100", "--dtype", "float32", "--repeats", "5", "--sample-ms", "2",
        "--ceiling-mb", "4", "--no-progress", "--seed", "3"]


@pytest.fixture(scope="module")
def run_ops():
    spec = importlib.util.spec_from_file_location("run_ops_under_test", BENCH / "run_ops.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _run(run_ops, tmp_path: Path, *args: str) -> tuple[int, dict]:
    path = tmp_path / "r.json"
    rc = run_ops.main([*args, "--json", str(path)])
    return rc, json.loads(path.read_text())


def test_report_has_expected_fields(run_ops, tmp_path: Path) -> None:
    rc, rep = _run(run_ops, tmp_path, "--op", "softmax", "--backend", "all", "--mode", "all", *TINY)
    assert rc == 0
    for field in ("date", "device", "jax_version", "commit", "uncommitted_changes", "command", "ceiling",
                  "cheapest_call_us", "cross_checks", "rows", "summary", "seed", "settings"):
        assert field in rep, field
    assert rep["commit"] == "unknown" or re.fullmatch(r"[0-9a-f]{40}", rep["commit"])
    assert rep["command"].startswith("python benchmarks/run_ops.py --op softmax")
    rows = {(r["op"], r["backend"], r["kind"]): r for r in rep["rows"]}
    # The flat shape is not a row op's; the host-bound shape comes once per dtype.
    assert set(rows) == {("softmax", b, k) for b in ("cpu", "xla") for k in ("case", "host")}
    camp = rows[("softmax", "cpu", "case")]
    assert camp["shape"] == "8x33" and camp["bytes_moved"] == 2 * 8 * 33 * 4
    assert camp["test"]["passed"] and camp["test"]["rel_error"] < 1e-5
    bench = camp["bench"]
    assert bench["valid"] and bench["median_us"] > 0 and len(bench["samples_us"]) == 5
    assert bench["vs_xla"]["verdict"] in (verdict.FASTER, verdict.SLOWER, verdict.TIE, verdict.TIE_AT_CEILING)
    assert bench["vs_xla"]["ratio_low"] <= bench["vs_xla"]["ratio"] <= bench["vs_xla"]["ratio_high"]
    host = rows[("softmax", "cpu", "host")]
    assert host["shape"] == C.HOST_SHAPE and "tbps" not in host["bench"]  # no bandwidth where dispatch rules
    summary = {s["backend"]: s for s in rep["summary"]}
    assert summary["cpu"]["compared"] == 1 and summary["xla"]["compared"] == 0


def test_a_run_on_changed_files_says_its_commit_is_not_the_code(tmp_path: Path) -> None:
    """A copy of a working tree carries its checkout's HEAD: the report says where the tracked
    files differ from it, so that the commit it names is not read as the code that ran."""
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "kernel.py").write_text("a\n")
    subprocess.run([*git, "add", "kernel.py"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "a"], check=True)
    (tmp_path / "untracked.txt").write_text("not code that ran\n")
    meta = {"commit": report.git_commit(tmp_path), "uncommitted_changes": report.git_uncommitted(tmp_path)}
    assert re.fullmatch(r"[0-9a-f]{40}", meta["commit"]) and meta["uncommitted_changes"] is False
    assert report.describe_commit(meta) == f"commit {meta['commit'][:10]}"
    (tmp_path / "kernel.py").write_text("b\n")
    meta["uncommitted_changes"] = report.git_uncommitted(tmp_path)
    assert report.describe_commit(meta) == f"commit {meta['commit'][:10]} with uncommitted changes"
    assert report.git_uncommitted(tmp_path / "not_a_repository") is None


def test_markdown_report_from_a_saved_run(run_ops, tmp_path: Path, capsys) -> None:
    rc, rep = _run(run_ops, tmp_path, "--op", "reduce_sum", "--backend", "all", "--mode", "bench", *TINY)
    assert rc == 0
    md = tmp_path / "r.md"
    assert run_ops.main(["--from-json", str(tmp_path / "r.json"), "--markdown", str(md)]) == 0
    text = md.read_text()
    assert rep["commit"][:10] in text and rep["command"] in text and rep["date"] in text
    (summary_row,) = [line for line in text.splitlines() if line.startswith("| reduce_sum | float32 | cpu |")]
    case = next(r for r in rep["rows"] if r["backend"] == "cpu" and r["kind"] == "case")
    vs = case["bench"]["vs_xla"]
    assert f"{vs['ratio']:.2f} ({case['shape']}, {vs['verdict']})" in summary_row
    assert f"| {case['shape']} (in cache) | float32 | cpu |" in text  # the op's case table
    assert "run " + rep["date"] in capsys.readouterr().out  # the printed report names its run


def test_a_matrix_run_in_parts_reads_as_one(run_ops, tmp_path: Path, capsys) -> None:
    """Reports of two --op subsets of one build merge into one report, in which a case that one
    part left "not run" (--time-limit) is the other part's measurement; a case measured twice,
    and parts of two builds, are refused."""
    parts = {}
    for name, args in (("a", ["--op", "copy,reduce_sum"]), ("cut", ["--op", "softmax", "--time-limit", "0"]),
                       ("b", ["--op", "softmax"])):
        parts[name] = tmp_path / f"{name}.json"
        assert run_ops.main([*args, "--mode", "bench", *TINY, "--json", str(parts[name])]) == 0
    a, cut, b = (json.loads(parts[name].read_text()) for name in ("a", "cut", "b"))
    assert cut["rows"] and all(r["skipped"] for r in cut["rows"])

    merged, md = tmp_path / "merged.json", tmp_path / "merged.md"
    rc = run_ops.main(["--from-json", f"{parts['a']},{parts['cut']},{parts['b']}",
                       "--json", str(merged), "--markdown", str(md)])
    assert rc == 0
    rep = json.loads(merged.read_text())

    def key(r):
        return r["op"], r["shape"], r["dtype"], r["backend"], r["kind"]

    assert [key(r) for r in rep["rows"]] == [key(r) for r in a["rows"] + b["rows"]]
    # The whole timing record, which a loaded machine may have marked invalid, has no median.
    assert [r["bench"] for r in rep["rows"]] == [r["bench"] for r in a["rows"] + b["rows"]]
    assert {(s["op"], s["not_run"]) for s in rep["summary"]} == {
        ("copy", 0), ("reduce_sum", 0), ("softmax", 0)}
    assert a["command"] in rep["command"] and b["command"] in rep["command"]
    assert rep["commit"] == a["commit"] and rep["parts"] == [str(parts[n]) for n in ("a", "cut", "b")]
    assert "| copy | float32 | cpu |" in md.read_text() and "| softmax | float32 | cpu |" in md.read_text()

    assert run_ops.main(["--from-json", f"{parts['b']},{parts['b']}"]) == 2
    assert "was measured in both" in capsys.readouterr().err
    other_build = tmp_path / "other.json"
    other_build.write_text(json.dumps({**b, "commit": "0" * 40}))
    assert run_ops.main(["--from-json", f"{parts['a']},{other_build}"]) == 2
    assert "not one build: commit" in capsys.readouterr().err


def test_plot_without_matplotlib_is_an_error_naming_the_extra(run_ops, monkeypatch, capsys, tmp_path) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    with pytest.raises(SystemExit) as exit_info:
        run_ops.main(["--op", "copy", "--plot", str(tmp_path / "r.png"), *TINY])
    assert exit_info.value.code == 2
    assert 'pip install ".[bench]"' in capsys.readouterr().err
    assert not (tmp_path / "r.png").exists()


def test_plot_is_drawn_with_a_marker_for_a_case_not_run(run_ops, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    rows = [report.Row("copy", "8x33", [8, 33], "float32", "cpu", 2112, bench={"valid": True, "tbps": 0.01}),
            report.Row("copy", "100", [100], "float32", "cpu", 800, skipped="not run (--time-limit 1 s)")]
    path = tmp_path / "r.png"
    run_ops.draw_plot(str(path), rows, 0.02, "title")
    assert path.stat().st_size > 0


def test_test_mode_catches_a_wrong_result(run_ops, tmp_path: Path, monkeypatch) -> None:
    real_softmax = C.jax_camp.softmax

    def off_by_one_percent(x, axis=-1, *, backend=None):
        return (real_softmax(x, axis=axis, backend=backend) * 1.01).astype(jnp.result_type(x))

    monkeypatch.setattr(C.jax_camp, "softmax", off_by_one_percent)
    # A shape no other test compiled: the jit cache must not hold the real op.
    rc, rep = _run(run_ops, tmp_path, "--op", "softmax", "--backend", "cpu", "--mode", "test", *TINY,
                   "--shapes", "5x41")
    assert rc != 0
    (row,) = rep["rows"]
    assert row["test"]["passed"] is False and row["test"]["rel_error"] > 1e-3


def test_copy_and_add_take_flat_shapes(run_ops, tmp_path: Path) -> None:
    rc, rep = _run(run_ops, tmp_path, "--op", "vector_add,copy", "--backend", "cpu", "--mode", "test", *TINY)
    assert rc == 0
    assert [(r["op"], r["shape"]) for r in rep["rows"]] == [
        ("vector_add", "8x33"), ("vector_add", "100"), ("copy", "8x33"), ("copy", "100")]
    assert all(r["test"]["passed"] for r in rep["rows"])


def test_every_op_is_one_entry_with_its_reference() -> None:
    assert list(C.OPS) == ["copy", "vector_add", "reduce_sum", "softmax", "softmax_grad",
                          "softmax_where", "log_softmax", "log_softmax_grad"]
    for op in C.OPS.values():
        inputs = C.draw_inputs(C.KeyStream(0), op.name, C.parse_shape("2x8"), "float32")
        got = jax.tree_util.tree_leaves(C.jitted(op.name, "xla")(*inputs))
        assert len(got) == len(op.reference(jnp, inputs)) == len(op.error_scales(jnp, inputs, got))


def test_impossible_measurements_are_reported_invalid(capsys) -> None:
    """0.0 s, a call under the cheapest jitted call, or a bandwidth past the ceiling: none is
    printed as a figure, and none enters a ratio."""
    limits = verdict.Limits(floor_s=5e-6, ceiling_bps=20e9)
    moved = 2 * 64 * 1000 * 2
    good = verdict.side_figures([30e-6] * 5, moved, True, limits)
    for samples, words in (([0.0] * 5, "time per call"), ([0.5e-6] * 5, "cheapest jitted call"),
                           ([30e-6, 30e-6, 0.0, 30e-6, 30e-6], "time per call")):
        bad = verdict.side_figures(samples, moved, True, limits)
        assert not bad["valid"] and words in bad["invalid"] and "median_us" not in bad
        assert verdict.compare(good, bad) is None and verdict.compare(bad, good) is None
    past_ceiling = verdict.side_figures([6e-6] * 5, 10 * moved, False, limits)
    assert not past_ceiling["valid"] and "copy ceiling" in past_ceiling["invalid"]
    row = report.Row("copy", "64x1000", [64, 1000], "bfloat16", "cpu", moved, bench={
        **verdict.side_figures([0.0] * 5, moved, True, limits)})
    report.print_rows([row])
    cells = _cells(capsys.readouterr().out.splitlines()[-1], report.CASE_COLUMNS)
    assert cells["us/call"] == "invalid" and cells["note"].startswith("invalid:")
    assert all(cells[name] in ("", "-") for name in ("±%", "TB/s", "%ceil", "vs xla [range]", "dev us"))


def test_the_floor_is_the_fastest_sample(monkeypatch) -> None:
    """A busy host slows some samples of the cheapest call; a floor read from them would flag
    honest figures below it as impossible, so it is the fastest one."""
    samples = iter([40e-6, 8e-6, 45e-6, 41e-6, 9e-6])

    class Prepared:
        def sample(self) -> float:
            return next(samples)

    monkeypatch.setattr(timing, "prepare", lambda *args: Prepared())
    assert timing.dispatch_floor(dataclasses.replace(timing.CPU_SETTINGS, repeats=5)) == 8e-6


def test_the_tie_rule() -> None:
    limits = verdict.Limits(1e-6, 1e12)

    def side(samples_us, moved=None):
        return verdict.side_figures([s * 1e-6 for s in samples_us], moved, False, limits)

    xla = side([10.0, 10.2, 9.9, 10.1, 10.0])
    assert verdict.compare(side([9.8, 10.3, 9.7, 10.2, 10.0]), xla)["verdict"] == verdict.TIE
    assert verdict.compare(side([8.0, 8.1, 8.0, 8.2, 7.9]), xla)["verdict"] == verdict.FASTER
    assert verdict.compare(side([12.0, 12.1, 12.0, 12.2, 11.9]), xla)["verdict"] == verdict.SLOWER
    moved = int(0.95e12 * 10e-6)  # 95% of the ceiling at 10 us
    at_ceiling = verdict.compare(side([9.5] * 5, moved), side([10.0] * 5, moved))
    assert at_ceiling["verdict"] == verdict.TIE_AT_CEILING and at_ceiling["ratio"] > 1.0


def _cells(line: str, columns) -> dict[str, str]:
    """A printed row, cut at the table's column widths."""
    cells, at = {}, 0
    for name, width, _ in columns:
        cells[name] = (line[at:at + width] if width else line[at:]).strip()
        at += width + 1
    return cells


def _number(text: str) -> float:
    value = float(text)
    assert value > 0, text  # a figure never prints as zero
    return value


def test_every_printed_figure_is_plausible(run_ops, tmp_path: Path, capsys) -> None:
    """End to end on the CPU: every time, bandwidth and ratio that the tables print is a
    positive figure at or above the floor the run measured, and no bandwidth is past what the
    cache allows; none is invalid."""
    rc, rep = _run(run_ops, tmp_path, "--op", "all", "--backend", "all", "--mode", "bench", *TINY)
    assert rc == 0
    out = capsys.readouterr().out.splitlines()
    floor_us, ceiling = rep["cheapest_call_us"], rep["ceiling"]["tbps"]
    host_at = out.index(next(ln for ln in out if ln.startswith("host-bound")))
    table = [(ln, report.CASE_COLUMNS) for ln in out[:host_at] if ln.split()[:1] and ln.split()[0] in C.OPS
             and " TB/s" not in ln]
    table += [(ln, report.HOST_COLUMNS) for ln in out[host_at:] if ln.split()[:1] and ln.split()[0] in C.OPS
              and len(ln.split()) > 3 and ln.split()[3] in ("cpu", "xla") and "/" not in ln.split()[4]]
    assert len(table) == len(rep["rows"])
    for line, columns in table:
        cells = _cells(line, columns)
        assert _number(cells["us/call"]) >= verdict.FLOOR_SHARE * floor_us, line
        assert float(cells["±%"]) >= 0, line
        if "TB/s" in cells:
            assert _number(cells["TB/s"]) <= verdict.IN_CACHE_FACTOR * ceiling, line
            assert _number(cells["%ceil"]) <= verdict.IN_CACHE_FACTOR * 100, line
        if cells["backend"] != "xla":
            assert all(_number(v) for v in re.findall(r"[\d.]+(?:e-?\d+)?", cells["vs xla [range]"])), line
            assert cells["verdict"] in (verdict.FASTER, verdict.SLOWER, verdict.TIE, verdict.TIE_AT_CEILING)
    assert not any(r["bench"] and not r["bench"]["valid"] for r in rep["rows"])


def test_pipelined_samples_wait_for_what_they_count() -> None:
    waited = []
    per_call = sampling.sample_calls(lambda i: i, 5, waited.append, keep_outputs=True)
    assert waited == [[0, 1, 2, 3, 4]] and per_call > 0
    sampling.sample_calls(lambda i: i, 5, waited.append, keep_outputs=False)
    assert waited[-1] == 4

    def slow(i: int) -> int:
        time.sleep(1e-3)
        return i

    assert sampling.sample_calls(slow, 4, lambda _: None, False) >= 1e-3
    calls = sampling.calls_for_target(slow, lambda _: None, False, 20e-3, 2, 1000)
    assert 10 <= calls <= 40


def test_backends_take_their_samples_in_turn() -> None:
    """Samples alternate a, b, a, b, ... so that a drift during a case weighs on both sides; a
    side that fails keeps its error and the other goes on."""
    order = []

    def taker(name: str, fail_at: int | None = None):
        def take() -> float:
            order.append(name)
            if fail_at is not None and order.count(name) == fail_at:
                raise RuntimeError("broken")
            return 1.0
        return take

    got = sampling.interleaved_samples({"xla": taker("xla"), "cpu": taker("cpu", fail_at=2)}, 4)
    assert order == ["xla", "cpu", "xla", "cpu", "xla", "xla"]
    assert got["xla"] == [1.0] * 4 and isinstance(got["cpu"], RuntimeError)


def test_a_backend_that_fails_leaves_the_others_timed() -> None:
    def broken(x):
        raise RuntimeError("no kernel")

    sets = C.input_sets("softmax", C.parse_shape("4x16"), "float32", 2, 0)
    got = timing.time_case({"xla": C.jitted("softmax", "xla"), "cpu": broken}, sets, timing.CPU_SETTINGS)
    assert isinstance(got["cpu"], RuntimeError)
    assert len(got["xla"].samples_s) == timing.CPU_SETTINGS.repeats and got["xla"].median_s > 0


def test_rotating_sets_overflow_twice_the_cache() -> None:
    settings = timing.GPU_SETTINGS
    assert timing.rotating_sets(2 * 8192 * 8192 * 4, settings) == (1, False)
    count, in_cache = timing.rotating_sets(2 * 1008 * 1280 * 4, settings)
    assert count * 2 * 1008 * 1280 * 4 >= 2 * settings.cache_bytes and not in_cache
    assert timing.rotating_sets(2 * 8 * 128 * 4, settings) == (settings.max_sets, True)


def _event(tid: int, ts: float, dur: float, name: str = "kernel") -> dict:
    return {"ph": "X", "pid": 2, "tid": tid, "ts": ts, "dur": dur, "name": name}


def test_device_time_is_each_calls_span_on_the_gpu_streams() -> None:
    meta = [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "/host:CPU"}},
        {"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "/device:GPU:0"}},
        {"ph": "M", "name": "thread_name", "pid": 2, "tid": 7, "args": {"name": "Stream #7(compute)"}},
        {"ph": "M", "name": "thread_name", "pid": 2, "tid": 8, "args": {"name": "XLA Ops"}},
    ]
    # Two backends, two calls each, 3 ms apart; a call is two kernels with a 1 us gap.
    calls = [_event(7, t, 2.0, "a") for t in (0, 3000, 6000, 9000)]
    calls += [_event(7, t + 3.0, 4.0, "b") for t in (0, 3000, 6000, 9000)]
    events = meta + calls + [{"ph": "X", "pid": 1, "tid": 7, "ts": 1, "dur": 99}, _event(8, 0, 50.0, "op span")]
    kept = trace.gpu_stream_events(events)
    assert len(kept) == 8 and {e["tid"] for e in kept} == {7}
    got = trace.attribute(sorted(kept, key=lambda e: e["ts"]), ["xla", "cpu"], calls=2)
    assert got["xla"].span_s == pytest.approx(7e-6) and got["cpu"].busy_s == pytest.approx(6e-6)
    assert got["xla"].kernels[0] == {"name": "b", "per_call": 1.0, "us_per_call": 4.0}
    wrong = trace.attribute(sorted(kept, key=lambda e: e["ts"]), ["xla", "cpu"], calls=3)
    assert all(isinstance(v, str) and v.startswith("n/a") for v in wrong.values())
    # Backends apart: a stray group in one backend's segment leaves the other's time standing.
    apart = [_event(7, t, 2.0) for t in (0, 3000, 50000, 53000, 56000)]
    got = trace.attribute(apart, ["xla", "cpu"], calls=2)
    assert got["xla"].span_s == pytest.approx(2e-6) and got["cpu"].startswith("n/a: the trace held 3")


def test_the_note_names_what_else_a_jax_camp_call_ran(capsys) -> None:
    """A kernel of XLA's in a jax_camp call (here the conversion a where= mask once took before
    TileLang's kernel) is a pass of its own: the note names it and its time. jax_camp's own
    kernels, CUDA's and TileLang's, and XLA's row, are not named."""
    kernels = [{"name": "softmax_masked_kernel", "per_call": 1.0, "us_per_call": 140.2},
               {"name": "wrapped_convert", "per_call": 1.0, "us_per_call": 80.6},
               {"name": "void jax_camp::softmax::SoftmaxForwardKernel<float>", "per_call": 1.0,
                "us_per_call": 1.0}]
    rows = [report.Row("softmax_where", "65536x1024", [65536, 1024], "float32", backend, 1,
                       device={"valid": True, "span_us": 222.6, "busy_us": 221.8, "kernels": kernels})
            for backend in ("tilelang", "xla")]
    report.print_rows(rows)
    lines = capsys.readouterr().out.splitlines()
    ours, xla = (_cells(line, report.CASE_COLUMNS)["note"] for line in lines[-2:])
    assert ours == "also wrapped_convert 80.6 us" and xla == ""
    assert trace.is_jax_camp_kernel("softmax_masked_kernel") and not trace.is_jax_camp_kernel("fusion_3")


def test_device_time_column(run_ops, tmp_path: Path, monkeypatch) -> None:
    """The device column holds the trace's span a call and XLA's over ours; where the trace has
    no GPU events (a CPU run) it says n/a and why, never a number."""
    rc, rep = _run(run_ops, tmp_path, "--op", "softmax", "--mode", "bench", *TINY, "--shapes", "8x33",
                   "--host-shape", "off", "--device-time", "all")
    assert rc == 0
    for row in rep["rows"]:
        assert row["device"]["note"].startswith("n/a") and "span_us" not in row["device"]

    def fake(fns, sets, calls):
        return {b: trace.DeviceTime(3e-6 if b == "xla" else 2e-6, 1e-6, []) for b in fns}

    monkeypatch.setattr(runner, "device_times", fake)
    rc, rep = _run(run_ops, tmp_path, "--op", "softmax", "--mode", "bench", *TINY, "--shapes", "8x33",
                   "--host-shape", "off", "--device-time", "all")
    rows = {r["backend"]: r["device"] for r in rep["rows"]}
    assert rows["xla"]["span_us"] == pytest.approx(3.0) and rows["cpu"]["ratio_vs_xla"] == pytest.approx(1.5)


def test_progress_counts_every_case(run_ops, tmp_path: Path, capsys) -> None:
    args = [a for a in TINY if a != "--no-progress"]
    rc, rep = _run(run_ops, tmp_path, "--op", "copy", "--backend", "cpu", "--mode", "test", *args)
    counters = re.findall(r"^\[(\d+)/(\d+)\]", capsys.readouterr().err, re.M)
    total = int(counters[0][1])
    assert [int(i) for i, _ in counters] == list(range(1, total + 1)) and total == 2


def test_a_time_limit_marks_the_rest_not_run(run_ops, tmp_path: Path, capsys) -> None:
    rc, rep = _run(run_ops, tmp_path, "--op", "copy", "--mode", "all", *TINY, "--time-limit", "0")
    assert rc == 0 and rep["rows"] and all(r["skipped"] for r in rep["rows"])
    assert "not run" in capsys.readouterr().out


def test_cross_checks_report_agreement(monkeypatch) -> None:
    monkeypatch.setattr(crosscheck, "pipelined_span_s", lambda fn, sets, calls: (100e-6, 8))
    agrees = crosscheck.profiler_check("softmax 8192x8192 float32 cuda", None, [], 8, [102e-6] * 5)
    assert agrees["agrees"] and "agrees within 3%" in crosscheck.describe("profiler", agrees)
    off = crosscheck.profiler_check("softmax 8192x8192 float32 cuda", None, [], 8, [110e-6] * 5)
    assert not off["agrees"] and "DISAGREES" in crosscheck.describe("profiler", off)
    # The child process imports the harness's sampler; here it finds no torch or no CUDA device.
    child = crosscheck.torch_check(1 << 20, 1e-3, 1, timeout_s=120)
    assert child["available"] is False and re.search(r"torch|CUDA", child["reason"]), child
