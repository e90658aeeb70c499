"""Loads jax_camp's compiled module and registers its XLA FFI handlers with JAX.

Each op module registers its kernels' descriptions (``jax_camp.ops._spec.OpSpec``)
here as it is imported. A kernel has one target name (``jax_camp_v2_softmax``, ...)
registered for every platform the extension was built for: the host kernel for
"cpu", the CUDA kernel for "CUDA". XLA picks the one for the platform it
compiles for, so a single jitted function runs on either.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING, Callable

# Before the compiled module: with the module loaded first, importing jax
# crashed the interpreter on the GPU machine (in ml_dtypes' float printing).
import jax
from jax import export as jax_export

if TYPE_CHECKING:
    from jax_camp.ops._spec import OpSpec


def _missing_kernels_message(package: Path) -> str:
    """What is wrong, and what to do, when ``package`` has no ``_kernels`` module to import."""
    others = sorted(p.name for p in package.glob("_kernels*") if p.suffix in (".so", ".pyd"))
    built_for = (f" (it holds {', '.join(others)}, built for another Python than this one, "
                 f"whose extensions end in {importlib.machinery.EXTENSION_SUFFIXES[0]})"
                 if others else "")
    if not (package.parent / "pyproject.toml").is_file():
        return (f"jax_camp at {package} has no compiled _kernels module{built_for}: the "
                "installation is incomplete. Reinstall it (pip install --force-reinstall . "
                "in jax_camp's source tree).")
    return (
        f"{package} is jax_camp's source tree, which has no compiled _kernels module"
        f"{built_for}; pip builds that module (the C++ and CUDA kernels) when it installs "
        f"the package. Python imported the source tree because {package.parent} comes "
        "before any installed jax_camp on sys.path, as it does for `python` and `python -m ...` "
        "started there.\n"
        "Either install the package and run from outside the source tree:\n"
        "    pip install .\n"
        "    then start python in another directory, or with `python -P` (Python 3.11+), "
        "which leaves the working directory off sys.path (the `pytest` command does too);\n"
        "or make an editable install, which builds the module and serves this tree's "
        "Python files wherever python starts (README.md, \"Install and test\"):\n"
        "    pip install --no-build-isolation -e ."
    )


try:
    from jax_camp import _kernels
except ImportError:
    if importlib.util.find_spec("jax_camp._kernels") is not None:
        raise  # the module is there but does not load: its own error says why
    raise ImportError(_missing_kernels_message(Path(__file__).resolve().parent),
                      name="jax_camp._kernels") from None

BUILT_WITH_CUDA: bool = _kernels.built_with_cuda

# Whether softmax's unmasked forward over rows x cols takes a row counter (csrc/module.cc).
needs_row_counter: Callable[[int, int], bool] = _kernels.needs_row_counter

# Per platform ("cpu", "CUDA"), the compiled module's handlers by kernel name (csrc/ops.inc).
_HANDLERS: dict[str, dict[str, object]] = _kernels.registrations()

# Every kernel's description by name, in the order the op modules register them.
SPECS: dict[str, OpSpec] = {}


def register(spec: OpSpec) -> OpSpec:
    """Registers ``spec``'s FFI target with JAX on every platform the module was built for, and
    returns it."""
    for platform, handlers in _HANDLERS.items():
        if spec.name not in handlers:
            raise RuntimeError(
                f"jax_camp's compiled module has no {platform} handler for kernel "
                f"{spec.name!r}; rebuild it (pip install .)"
            )
        jax.ffi.register_ffi_target(spec.ffi_target, handlers[spec.name], platform=platform)
    SPECS[spec.name] = spec
    return spec


def export_checks() -> list[jax_export.DisabledSafetyCheck]:
    """What ``jax.export.export`` needs to export a function that calls jax_camp's kernels:

        exported = jax.export.export(jax.jit(f), disabled_checks=jax_camp.export_checks())(x)

    jax.export admits only custom calls it knows to be stable; these name jax_camp's FFI
    targets, whose stability is jax_camp's to keep: each target carries the version of its
    calling convention (``OpSpec.ffi_target``), so a program exported against another fails to
    find its targets instead of calling them wrongly. Calling an exported program needs
    ``import jax_camp`` first, which registers the targets. The CUDA and host kernels export;
    the TileLang backend's targets are compiled per process and do not.
    """
    return [jax_export.DisabledSafetyCheck.custom_call(spec.ffi_target) for spec in SPECS.values()]

