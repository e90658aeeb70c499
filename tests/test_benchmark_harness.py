"""The benchmark harness (benchmarks/run_ops.py) on tiny CPU sizes: it writes
its report, and its test mode catches a wrong result."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import re
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

HARNESS = Path(__file__).resolve().parents[1] / "benchmarks" / "run_ops.py"

pytestmark = pytest.mark.skipif(
    jax.default_backend() != "cpu", reason="the harness's CI run is the CPU one"
)


@pytest.fixture(scope="module")
def harness():
    spec = importlib.util.spec_from_file_location("run_ops_under_test", HARNESS)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    if module.jax_camp is None:
        pytest.skip(f"jax_camp does not import: {module.JAX_CAMP_IMPORT_ERROR}")
    return module


TINY = ["--shapes", "8x33,100", "--dtype", "float32", "--repeats", "1", "--ceiling-mb", "4",
        "--no-progress", "--seed", "3"]


def test_report_has_expected_fields(harness, tmp_path: Path) -> None:
    report_path, plot_path = tmp_path / "r.json", tmp_path / "r.png"
    rc = harness.main(["--op", "softmax", "--backend", "all", "--mode", "all", *TINY,
                       "--json", str(report_path), "--plot", str(plot_path)])
    assert rc == 0
    report = json.loads(report_path.read_text())
    for field in ("date", "device", "jax_version", "command", "ceiling", "rows", "summary", "seed",
                  "xla_flags"):
        assert field in report, field
    assert report["ceiling"]["tbps"] > 0
    rows = {(r["op"], r["backend"]): r for r in report["rows"]}
    assert set(rows) == {("softmax", "cpu"), ("softmax", "xla")}  # the flat shape is not a row op's
    camp = rows[("softmax", "cpu")]
    assert camp["shape"] == "8x33" and camp["bytes_moved"] == 2 * 8 * 33 * 4
    assert camp["test"]["passed"] and camp["test"]["rel_error"] < 1e-5
    for field in ("median_us", "spread_pct", "tbps", "pct_of_ceiling", "speedup_vs_xla", "loop_ok",
                  "samples_vs_xla"):
        assert field in camp["bench"], field
    assert camp["bench"]["median_us"] > 0 and camp["bench"]["speedup_vs_xla"] > 0
    assert camp["bench"]["samples_vs_xla"] in ("slower", "faster", "overlap")
    summary = {s["backend"]: s for s in report["summary"]}
    assert summary["cpu"]["below_xla"] in (0, 1) and summary["xla"]["below_xla"] is None
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert not plot_path.exists()
    else:
        assert plot_path.stat().st_size > 0


def test_summary_counts_the_cases_below_xla_and_those_apart_from_it(harness) -> None:
    """A ratio below 1.0x counts as below; it counts as apart only where every sample of ours took
    longer than every one of XLA's, which a tie within the spread does not."""
    assert harness.samples_apart([5.0, 5.1, 5.2], [4.0, 4.9, 4.95]) == "slower"
    assert harness.samples_apart([5.0, 5.1, 5.2], [5.05, 5.3, 5.4]) == "overlap"
    assert harness.samples_apart([3.0, 3.1], [3.2, 3.3]) == "faster"

    def row(shape: str, speedup: float | None, samples: str | None):
        return harness.Row("copy", shape, [1], "float32", "cuda", 1,
                           bench={"speedup_vs_xla": speedup, "samples_vs_xla": samples, "tbps": 1.0,
                                  "pct_of_ceiling": 90.0})

    rows = [row("1", 0.98, "slower"), row("2", 0.995, "overlap"), row("3", 1.02, "overlap"),
            row("4", 1.1, "faster"), row("5", None, None)]
    (summary,) = harness.summarize(rows)
    assert summary["below_xla"] == 2 and summary["below_xla_in_every_sample"] == 1
    assert summary["min_speedup_case"] == "1 float32"


def test_every_loop_runs_as_a_graph(harness, monkeypatch) -> None:
    """The scaffold must run as the op loops do (run_ops.LOOP_XLA_FLAG); a caller's own value stays."""
    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/tmp/x")
    harness.use_graphs_for_every_loop()
    assert harness.os.environ["XLA_FLAGS"] == "--xla_dump_to=/tmp/x --xla_gpu_graph_min_graph_size=1"
    monkeypatch.setenv("XLA_FLAGS", "--xla_gpu_graph_min_graph_size=3")
    harness.use_graphs_for_every_loop()
    assert harness.os.environ["XLA_FLAGS"] == "--xla_gpu_graph_min_graph_size=3"
    monkeypatch.delenv("XLA_FLAGS")
    harness.use_graphs_for_every_loop()
    assert harness.os.environ["XLA_FLAGS"] == "--xla_gpu_graph_min_graph_size=1"


def test_test_mode_catches_a_wrong_result(harness, tmp_path: Path, monkeypatch) -> None:
    real_softmax = harness.jax_camp.softmax

    def off_by_one_percent(x, axis=-1, *, backend=None):
        return (real_softmax(x, axis=axis, backend=backend) * 1.01).astype(jnp.result_type(x))

    monkeypatch.setattr(harness.jax_camp, "softmax", off_by_one_percent)
    report_path = tmp_path / "r.json"
    # A shape no other test compiled: the harness's jit cache must not hold the real op.
    rc = harness.main(["--op", "softmax", "--backend", "cpu", "--mode", "test", *TINY,
                       "--shapes", "5x41", "--json", str(report_path)])
    assert rc != 0
    (row,) = json.loads(report_path.read_text())["rows"]
    assert row["test"]["passed"] is False and row["test"]["rel_error"] > 1e-3


def test_copy_and_add_take_flat_shapes(harness, tmp_path: Path) -> None:
    report_path = tmp_path / "r.json"
    rc = harness.main(["--op", "vector_add", "--backend", "cpu", "--mode", "test", *TINY,
                       "--json", str(report_path)])
    assert rc == 0
    rows = json.loads(report_path.read_text())["rows"]
    assert [r["shape"] for r in rows] == ["8x33", "100"]
    assert all(r["test"]["passed"] for r in rows)


def test_no_speedup_from_a_loop_that_went_wrong(harness, tmp_path: Path, monkeypatch) -> None:
    """A ratio against an XLA loop that merged calls or copied would compare different work."""
    real_inspect = harness.inspect_loop

    def xla_merged(hlo, op, backend, plan):
        report = real_inspect(hlo, op, backend, plan)
        if backend == "xla":
            return harness.LoopReport(False, "only 1 kernels for 8 calls", report.custom_calls, 1, 0)
        return report

    monkeypatch.setattr(harness, "inspect_loop", xla_merged)
    report_path = tmp_path / "r.json"
    rc = harness.main(["--op", "softmax", "--backend", "all", "--mode", "bench", *TINY,
                       "--json", str(report_path)])
    assert rc == 0
    rows = {r["backend"]: r for r in json.loads(report_path.read_text())["rows"]}
    assert rows["xla"]["bench"]["loop_ok"] is False
    assert rows["cpu"]["bench"]["loop_ok"] is True
    assert rows["cpu"]["bench"]["median_us"] > 0 and rows["cpu"]["bench"]["speedup_vs_xla"] is None


def test_backends_take_their_samples_in_turn(harness, monkeypatch) -> None:
    """A case's backends alternate sample by sample, so that a drift during the case weighs on
    both; a backend that fails to build leaves the others timed."""
    order = []
    real_sample = harness.LoopRun.sample

    def recorded(run):
        order.append(run)
        real_sample(run)

    real_compile = harness.Timer.compile_loop

    def compile_loop_without_cpu(self, op, backend, shape, dtype_name):
        if backend == "cpu":
            raise RuntimeError("no kernel")
        return real_compile(self, op, backend, shape, dtype_name)

    monkeypatch.setattr(harness.LoopRun, "sample", recorded)
    timer = harness.Timer(harness.CPU_SETTINGS, 2e10, 5e-6, 0)
    shape = harness.parse_shape("64x256")
    timings = timer.time_cases("reduce_sum", ["xla", "cpu"], shape, "float32")
    repeats = harness.CPU_SETTINGS.repeats
    loops = order[:2 * repeats]  # then the scaffold's own samples
    assert len(set(loops)) == 2 and loops == [loops[0], loops[1]] * repeats
    assert all(len(t.per_call_s) == repeats for t in timings.values())
    monkeypatch.setattr(harness.Timer, "compile_loop", compile_loop_without_cpu)
    timings = timer.time_cases("reduce_sum", ["xla", "cpu"], shape, "float32")
    assert isinstance(timings["cpu"], RuntimeError) and timings["xla"].median_s > 0


def test_queued_samples_time_every_call_they_count(harness) -> None:
    """A sample queues calls before its clock starts (LoopRun); on a platform that runs each
    call as it is launched, those have ended by then, and the loop is timed unqueued. Counting
    them though they ended before the clock started read about 0 s a call."""
    call_s = 2e-3

    def runs_as_launched(sets, outs, scale):
        time.sleep(call_s)
        return sets, outs

    state = ((jnp.zeros(4),), (jnp.zeros(4),))
    settings = dataclasses.replace(harness.CPU_SETTINGS, queued_ahead=2, sample_target_s=1e-9)
    run = harness.LoopRun(runs_as_launched, state, jnp.ones(()), settings)
    run.sample()
    assert run.queued_ahead == 0 and run.samples[0] > 0.8 * call_s, run.samples


def test_xla_elementwise_loop_has_no_copies(harness) -> None:
    """XLA's own add takes the link fused: with the in-place update it copied x whole every call."""
    timer = harness.Timer(harness.CPU_SETTINGS, 2e10, 5e-6, 0)
    timing = timer.time_case("vector_add", "xla", harness.parse_shape("1001*16"), "float32")
    assert timing.plan.fused_link
    assert timing.loop.copies == 0 and timing.loop.ok, timing.loop.detail


@pytest.mark.parametrize("op,backend", [("reduce_sum", "cpu"), ("vector_add", "xla")])
def test_scaffold_is_the_link_alone(harness, op: str, backend: str) -> None:
    """What is subtracted is the link: one one-element update a call (a fused link: a trip), and
    nothing else, so that each op keeps its whole kernel time (the v9 scaffold wrote an output too)."""
    timer = harness.Timer(harness.CPU_SETTINGS, 2e10, 5e-6, 0)
    shape = harness.parse_shape("64x256")
    plan = dataclasses.replace(harness.plan_for(op, backend, shape, 4, 2e10, harness.CPU_SETTINGS, 5e-6), trips=3)
    text = timer._scaffold_program(shape, "float32", plan)[0].as_text()
    body_name = re.search(r"while\(.*?body=%?([\w.\-]+)", text).group(1)
    head = re.search(r"^%?" + re.escape(body_name) + r" .*\{$", text, re.M)
    body = text[head.end(): text.index("\n}", head.end())]
    kernels = [line for line in body.splitlines() if " fusion(" in line and " s32[] " not in line]
    updates = [line for line in kernels if "dynamic-update-slice" in line]
    assert len(updates) == len(kernels) == (1 if plan.fused_link else plan.calls_per_trip)
    assert " copy(" not in body and "custom-call(" not in body


def test_scaffold_is_compiled_once_a_loop_shape(harness) -> None:
    """The loop time and the device time both run the scaffold: one executable serves both, each
    run on inputs of its own (the loop donates them)."""
    timer = harness.Timer(harness.CPU_SETTINGS, 2e10, 5e-6, 0)
    shape = harness.parse_shape("64x256")
    plan = harness.plan_for("reduce_sum", "cpu", shape, 4, 2e10, harness.CPU_SETTINGS, 5e-6)
    first, first_state, _ = timer._scaffold_program(shape, "float32", plan)
    second, second_state, _ = timer._scaffold_program(shape, "float32", plan)
    assert first is second and first_state[0][0] is not second_state[0][0]
    other = timer._scaffold_program(shape, "bfloat16", plan)[0]
    assert other is not first


def test_gpu_stream_events_keep_the_gpu_streams_only(harness) -> None:
    events = [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "/host:CPU"}},
        {"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "/device:GPU:0"}},
        {"ph": "M", "name": "thread_name", "pid": 2, "tid": 7, "args": {"name": "Stream #7(compute)"}},
        {"ph": "M", "name": "thread_name", "pid": 2, "tid": 8, "args": {"name": "XLA Ops"}},
        {"ph": "X", "pid": 1, "tid": 7, "name": "host work", "dur": 100.0},
        {"ph": "X", "pid": 2, "tid": 8, "name": "an op's span", "dur": 50.0},
        {"ph": "X", "pid": 2, "tid": 7, "name": "kernel", "dur": 1.5},
        {"ph": "X", "pid": 2, "tid": 7, "name": "memcpy", "dur": 0.5},
    ]
    kept = harness.gpu_stream_events(events)
    assert [e["name"] for e in kept] == ["kernel", "memcpy"]
    assert harness.busy_seconds(kept) == pytest.approx(2e-6)
    assert harness.stream_breakdown(kept + kept[:1], calls=2) == [
        {"name": "kernel", "per_call": 1.0, "us_per_call": 1.5},
        {"name": "memcpy", "per_call": 0.5, "us_per_call": 0.25},
    ]


def test_device_time_is_the_loop_less_its_scaffold(harness, tmp_path: Path, monkeypatch) -> None:
    """The device column: the traced busy time a call of the op's loop less the link's alone, and
    XLA's figure over the kernel backend's (the trace itself is the profiler's, GPU only)."""
    def busy(compiled, state, scale, plan):
        seconds = 5e-6 if "custom_call" in compiled.as_text() else 3e-6
        return seconds, [{"name": "kernel", "per_call": 1.0, "us_per_call": seconds * 1e6}]

    monkeypatch.setattr(harness, "_device_busy_per_call", busy)
    monkeypatch.setattr(harness.Timer, "_scaffold_device", lambda self, shape, dtype_name, like: 1e-6)
    report_path = tmp_path / "r.json"
    rc = harness.main(["--op", "softmax", "--backend", "all", "--mode", "bench", *TINY,
                       "--shapes", "8x33", "--device-time", "all", "--json", str(report_path)])
    assert rc == 0
    report = json.loads(report_path.read_text())
    rows = {r["backend"]: r["bench"] for r in report["rows"]}
    assert rows["xla"]["device_us"] == pytest.approx(2.0)
    assert rows["cpu"]["device_us"] == pytest.approx(4.0)
    assert rows["cpu"]["device_speedup_vs_xla"] == pytest.approx(0.5)
    assert rows["cpu"]["device_kernels"][0]["us_per_call"] == pytest.approx(5.0)
    (summary,) = [s for s in report["summary"] if s["backend"] == "cpu"]
    assert summary["min_device_speedup_vs_xla"] == pytest.approx(0.5)
