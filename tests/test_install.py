"""What importing jax_camp says when the compiled module is not where Python looks.

Python started in the repository root (``python``, ``python -m pytest``) finds the source
tree's ``jax_camp/`` before the installed package, and the source tree has no compiled
``_kernels`` module. That import must fail with an ImportError saying so and what to do,
not with Python's "partially initialized module ... circular import". Each test imports a
copy of the package's Python files in a fresh interpreter; an editable install's import
redirect is taken off first, since it would serve the real source tree instead of the copy.

The editable install itself is checked by .ci/run, in a virtual environment of its own.
"""

from __future__ import annotations

import importlib.machinery
import shutil
import subprocess
import sys
from pathlib import Path

from helpers import ROOT

# Imports jax_camp from the directory it runs in, as `python -c "import jax_camp"` started
# in the repository root does, with scikit-build-core's editable redirect (if any) removed.
IMPORT = """
import sys
sys.meta_path[:] = [f for f in sys.meta_path if "ScikitBuild" not in type(f).__name__]
sys.path.insert(0, "")
import jax_camp
print("imported", jax_camp.__file__)
"""


def _copy_package(destination: Path, *, source_tree: bool) -> Path:
    """jax_camp's Python files (no compiled module) under destination; with the project's
    pyproject.toml beside them when they stand for a source tree."""
    shutil.copytree(ROOT / "jax_camp", destination / "jax_camp",
                    ignore=shutil.ignore_patterns("__pycache__", "_kernels*"))
    if source_tree:
        shutil.copy(ROOT / "pyproject.toml", destination / "pyproject.toml")
    return destination / "jax_camp"


def _import_in(directory: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", IMPORT], cwd=directory,
                          capture_output=True, text=True, timeout=300)


def test_source_tree_without_its_module_says_what_to_do(tmp_path):
    package = _copy_package(tmp_path, source_tree=True)
    run = _import_in(tmp_path)
    assert run.returncode != 0, run.stdout
    message = run.stderr[run.stderr.index("ImportError: "):]
    assert f"ImportError: {package} is jax_camp's source tree, which has no compiled _kernels module" in message
    assert f"because {tmp_path} comes before any installed jax_camp on sys.path" in message
    assert "\n    pip install .\n" in message
    assert "python -P" in message
    assert message.rstrip().endswith("\n    pip install --no-build-isolation -e ."), message
    assert "circular import" not in run.stderr


def test_installed_package_without_its_module_says_reinstall(tmp_path):
    package = _copy_package(tmp_path, source_tree=False)
    run = _import_in(tmp_path)
    assert run.returncode != 0, run.stdout
    assert (f"ImportError: jax_camp at {package} has no compiled _kernels module: the "
            "installation is incomplete. Reinstall it") in run.stderr
    assert "circular import" not in run.stderr


def test_module_built_for_another_python_is_named(tmp_path):
    package = _copy_package(tmp_path, source_tree=True)
    other = "_kernels.cpython-39-x86_64-linux-gnu.so"
    if importlib.machinery.EXTENSION_SUFFIXES[0] in other:
        other = "_kernels.cpython-310-x86_64-linux-gnu.so"
    (package / other).write_bytes(b"")
    run = _import_in(tmp_path)
    assert run.returncode != 0, run.stdout
    assert (f"which has no compiled _kernels module (it holds {other}, built for another "
            f"Python than this one, whose extensions end in "
            f"{importlib.machinery.EXTENSION_SUFFIXES[0]})") in run.stderr


def test_module_that_fails_to_load_keeps_its_own_error(tmp_path):
    """A _kernels file that is there but does not load (here, not a shared library at all)
    is reported as itself, not as a missing module."""
    package = _copy_package(tmp_path, source_tree=True)
    (package / f"_kernels{importlib.machinery.EXTENSION_SUFFIXES[0]}").write_bytes(b"not an ELF file")
    run = _import_in(tmp_path)
    assert run.returncode != 0, run.stdout
    assert "ImportError: " in run.stderr
    assert "no compiled _kernels module" not in run.stderr
    assert "circular import" not in run.stderr


def test_tests_import_the_installed_package():
    """`pytest tests` from the repository root (README.md) imports a jax_camp that has its
    compiled module: an installed one, or an editable install's redirect to this tree."""
    import jax_camp
    from jax_camp import _kernels

    assert Path(_kernels.__file__).is_file()
    assert isinstance(jax_camp.registration.BUILT_WITH_CUDA, bool)
    # The PEP 561 marker, without which type checkers ignore the public API's hints.
    assert (Path(jax_camp.__file__).parent / "py.typed").is_file()


def test_import_first_in_a_fresh_interpreter(tmp_path):
    """A user's script that imports jax_camp before anything else, then runs an op: the
    interpreter exits cleanly (loading the compiled module before jax once crashed it on a
    machine with a GPU)."""
    script = ("import jax_camp, jax.numpy as jnp\n"
              "print(float(jax_camp.reduce_sum(jnp.ones((4, 8)), axis=None)))\n")
    run = subprocess.run([sys.executable, "-P", "-c", script], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().splitlines()[-1] == "32.0"


def test_every_target_has_a_gpu_handler():
    """A build without CUDA names every target on the GPU too, so that a GPU program meets a
    handler that says what is missing rather than XLA's "no FFI handler registered"."""
    from jax_camp import _kernels

    handlers = _kernels.registrations()
    assert set(handlers) == {"cpu", "CUDA"}
    assert set(handlers["CUDA"]) == set(handlers["cpu"])


def test_a_build_without_cuda_says_why_its_gpu_targets_cannot_run():
    """The GPU handler of a build without CUDA, run here on the CPU (it touches no device):
    an error naming the missing kernels and what to do. Skipped where they were built."""
    import jax
    import jax.numpy as jnp
    import pytest
    from jax_camp import _kernels

    if _kernels.built_with_cuda:
        pytest.skip("this jax_camp has its CUDA kernels")
    not_built = _kernels.registrations()["CUDA"]["softmax"]
    jax.ffi.register_ffi_target("jax_camp_test_cuda_not_built", not_built, platform="cpu")
    x = jax.device_put(jnp.ones((2, 8)), jax.devices("cpu")[0])
    call = jax.ffi.ffi_call("jax_camp_test_cuda_not_built", jax.ShapeDtypeStruct(x.shape, x.dtype))
    with pytest.raises(Exception, match="built without its CUDA kernels .*nvcc.*backend='tilelang'"):
        jax.block_until_ready(jax.jit(call)(x))
