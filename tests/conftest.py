"""Test options: ``--backend`` picks the kernels every op test runs.

    pytest tests                      # the platform's own kernels (backend=None)
    pytest tests --backend cuda       # the CUDA kernels (skipped without a GPU)
    pytest tests --backend tilelang   # the TileLang kernels (skipped without a GPU)
    pytest tests --backend cpu        # the C++ host kernels
    pytest tests --backend xla        # plain JAX, the reference itself

``--require-backend`` turns those skips into failures (scripts/gpu_check.sh passes it).
"""

from __future__ import annotations

import importlib.util

import jax
import pytest

_CHOICES = ("default", "cuda", "cpu", "tilelang", "xla")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--backend",
        default="default",
        choices=_CHOICES,
        help="jax_camp backend under test; 'default' passes backend=None",
    )
    parser.addoption(
        "--require-backend",
        action="store_true",
        help="fail, rather than skip, the tests whose --backend cannot run here",
    )


def has_gpu() -> bool:
    try:
        return bool(jax.devices("gpu"))
    except RuntimeError:
        return False


@pytest.fixture(scope="session")
def backend(request: pytest.FixtureRequest) -> str | None:
    """The value the op tests pass as ``backend=``."""
    name = request.config.getoption("--backend")
    missing = None
    if name in ("cuda", "tilelang") and not has_gpu():
        missing = f"--backend {name} needs a GPU"
    elif name == "tilelang" and importlib.util.find_spec("tilelang") is None:
        missing = "--backend tilelang needs `pip install .[tilelang]`"
    elif name == "cpu" and jax.default_backend() != "cpu":
        missing = "--backend cpu runs on a CPU-only jax (the default device here is a GPU)"
    if missing and request.config.getoption("--require-backend"):
        pytest.fail(missing + " (--require-backend)")
    if missing:
        pytest.skip(missing)
    return None if name == "default" else name


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list) -> None:
    """Orders the tests: those that time the machine (a module with ``TIMES_THE_MACHINE``) first,
    on a quiet machine; those that wait on background runs (tests/background_runs.py) last, so
    that those runs, started once the timing is done, work beside everything between."""
    from background_runs import BackgroundRuns

    if config.option.collectonly:
        return
    timing = [item for item in items if getattr(item.module, "TIMES_THE_MACHINE", False)]
    waiting = []
    for runs in BackgroundRuns.declared:
        mine = [item for item in items if item.module.__name__ == runs.module]
        if mine:
            runs.wanted = True
            waiting += mine
    placed = {id(item) for item in timing + waiting}
    items[:] = timing + [item for item in items if id(item) not in placed] + waiting


def pytest_runtest_setup(item: pytest.Item) -> None:
    from background_runs import BackgroundRuns

    if not getattr(item.module, "TIMES_THE_MACHINE", False):
        for runs in BackgroundRuns.declared:
            if runs.wanted:
                runs.start(item.config)


def pytest_sessionfinish(session: pytest.Session) -> None:
    from background_runs import BackgroundRuns

    for runs in BackgroundRuns.declared:
        runs.cleanup()
