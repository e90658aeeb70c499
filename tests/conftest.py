"""Test options: ``--backend`` picks the kernels every op test runs.

    pytest tests                      # the platform's own kernels (backend=None)
    pytest tests --backend cuda       # the CUDA kernels (skipped without a GPU)
    pytest tests --backend tilelang   # the TileLang kernels (skipped without a GPU)
    pytest tests --backend cpu        # the C++ host kernels
    pytest tests --backend xla        # plain JAX, the reference itself
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


def has_gpu() -> bool:
    try:
        return bool(jax.devices("gpu"))
    except RuntimeError:
        return False


@pytest.fixture(scope="session")
def backend(request: pytest.FixtureRequest) -> str | None:
    """The value the op tests pass as ``backend=``."""
    name = request.config.getoption("--backend")
    if name in ("cuda", "tilelang") and not has_gpu():
        pytest.skip(f"--backend {name} needs a GPU")
    if name == "tilelang" and importlib.util.find_spec("tilelang") is None:
        pytest.skip("--backend tilelang needs `pip install .[tilelang]`")
    if name == "cpu" and jax.default_backend() != "cpu":
        pytest.skip("--backend cpu runs on a CPU-only jax (the default device here is a GPU)")
    return None if name == "default" else name
