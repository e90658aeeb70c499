"""Compiler runs that a test module needs, started while the other tests run.

nvcc takes most of a CPU-only `pytest tests` in two modules (test_cuda_codegen compiling the
kernels, test_launch_policy its plan driver). Each declares its runs at import with
``BackgroundCompiles``. conftest.py moves the tests of a module with a test to run to the end,
and starts its runs once the tests that time the machine are done, so that the compilers work
beside the rest of the suite. A module's fixture then calls ``wait()``.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable

# A line at least this often (seconds) while a test waits on a compiler, so the run is never
# silent for long.
HEARTBEAT_S = 20


class BackgroundCompiles:
    """Named commands, each given its own empty folder (for its outputs) by ``command(folder)``."""

    declared: list[BackgroundCompiles] = []

    def __init__(self, module: str, commands: dict[str, Callable[[Path], list[str]]]) -> None:
        self.module = module  # the test module's name, as pytest's items name it
        self.commands = commands
        self.wanted = False  # whether the session runs a test of the module
        self.folder: Path | None = None
        self.runs: dict[str, tuple[subprocess.Popen, float]] = {}
        BackgroundCompiles.declared.append(self)

    def start(self) -> None:
        if self.runs:
            return
        self.folder = Path(tempfile.mkdtemp(prefix=f"jax_camp_{self.module}_"))
        for name, command in self.commands.items():
            folder = self.folder / name
            folder.mkdir()
            # stderr to a file: ptxas -v writes more than a pipe holds.
            with open(folder / "stderr.txt", "w") as stderr:
                run = subprocess.Popen(command(folder), stdout=subprocess.DEVNULL, stderr=stderr)
            self.runs[name] = (run, time.monotonic())

    def wait(self, say: Callable[[str], None]) -> dict[str, tuple[Path, str, float]]:
        """Each run's (folder, stderr, seconds since it started); fails the test on a run that
        failed. Starts the runs first if the session did not."""
        self.start()
        done: dict[str, tuple[Path, str, float]] = {}
        waited = time.monotonic()
        while len(done) < len(self.runs):
            for name, (run, started) in self.runs.items():
                if name not in done and run.poll() is not None:
                    folder = self.folder / name
                    stderr = (folder / "stderr.txt").read_text()
                    assert run.returncode == 0, f"{self.module}: {name} failed:\n{stderr[-6000:]}"
                    done[name] = (folder, stderr, time.monotonic() - started)
            if len(done) < len(self.runs):
                time.sleep(0.2)
                if time.monotonic() - waited >= HEARTBEAT_S:
                    waited = time.monotonic()
                    pending = ", ".join(sorted(set(self.runs) - set(done)))
                    say(f"{self.module}: still compiling {pending}")
        return done

    def cleanup(self) -> None:
        for run, _ in self.runs.values():
            if run.poll() is None:
                run.kill()
                run.wait()
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
