"""Slow subprocesses that a test module needs, started while the other tests run.

nvcc takes most of a CPU-only `pytest tests` in two modules (test_cuda_codegen compiling the
kernels, test_launch_policy its plan driver), and test_sharding runs its mesh tests in a
process of its own. Each declares its runs at import with ``BackgroundRuns``. conftest.py moves
the tests of a module with a run to the end, and starts its runs once the tests that time the
machine are done, so that they work beside the rest of the suite. A module's test or fixture
then calls ``wait()``.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable

import pytest

# A line at least this often (seconds) while a test waits on a compiler, so the run is never
# silent for long.
HEARTBEAT_S = 20


# A run's command line, from the empty folder it may write into and the session's options.
Command = Callable[[Path, pytest.Config], list[str]]


class BackgroundRuns:
    """Named commands, each given an empty folder of its own (``command(folder, config)`` makes
    its command line) and run from ``cwd`` with ``env`` if given; a run's stdout and stderr go
    to one text. A run still going after ``timeout_s`` is stopped and fails its test."""

    declared: list[BackgroundRuns] = []

    def __init__(
        self, module: str, commands: dict[str, Command], *, cwd: Path | None = None,
        env: dict[str, str] | None = None, timeout_s: float = 900,
    ) -> None:
        self.module = module  # the test module's name, as pytest's items name it
        self.commands = commands
        self.cwd = cwd
        self.env = env
        self.timeout_s = timeout_s
        self.wanted = False  # whether the session runs a test of the module
        self.folder: Path | None = None
        self.runs: dict[str, tuple[subprocess.Popen, float]] = {}
        BackgroundRuns.declared.append(self)

    def start(self, config: pytest.Config) -> None:
        if self.runs:
            return
        self.folder = Path(tempfile.mkdtemp(prefix=f"jax_camp_{self.module}_"))
        for name, command in self.commands.items():
            folder = self.folder / name
            folder.mkdir()
            # To a file: ptxas -v writes more than a pipe holds.
            with open(folder / "output.txt", "w") as output:
                run = subprocess.Popen(
                    command(folder, config), stdout=output, stderr=subprocess.STDOUT,
                    cwd=self.cwd, env=self.env,
                )
            self.runs[name] = (run, time.monotonic())

    def wait(
        self, config: pytest.Config, say: Callable[[str], None]
    ) -> dict[str, tuple[Path, str, float]]:
        """Each run's (folder, output, seconds since it started); fails the test on a run that
        failed. Starts the runs first if the session did not."""
        self.start(config)
        done: dict[str, tuple[Path, str, float]] = {}
        waited = time.monotonic()
        while len(done) < len(self.runs):
            for name, (run, started) in self.runs.items():
                late = time.monotonic() - started > self.timeout_s
                if name not in done and run.poll() is None and late:
                    run.kill()
                    run.wait()
                    output = (self.folder / name / "output.txt").read_text()
                    raise AssertionError(f"{self.module}: {name} still ran after "
                                         f"{self.timeout_s:.0f} s:\n{output[-6000:]}")
                if name not in done and run.poll() is not None:
                    folder = self.folder / name
                    output = (folder / "output.txt").read_text()
                    assert run.returncode == 0, f"{self.module}: {name} failed:\n{output[-6000:]}"
                    done[name] = (folder, output, time.monotonic() - started)
            if len(done) < len(self.runs):
                time.sleep(0.2)
                if time.monotonic() - waited >= HEARTBEAT_S:
                    waited = time.monotonic()
                    pending = ", ".join(sorted(set(self.runs) - set(done)))
                    say(f"{self.module}: still running {pending}")
        return done

    def cleanup(self) -> None:
        for run, _ in self.runs.values():
            if run.poll() is None:
                run.kill()
                run.wait()
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
