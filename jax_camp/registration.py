"""Registers jax_camp's XLA FFI handlers with JAX; runs once, at import.

Each op has one target name (``jax_camp_softmax``, ...) registered for every
platform the extension was built for: the host kernel for "cpu", the CUDA
kernel for "CUDA". XLA picks the one for the platform it compiles for, so a
single jitted function runs on either.
"""

from __future__ import annotations

import jax

from jax_camp import _kernels

BUILT_WITH_CUDA: bool = _kernels.built_with_cuda

_REGISTRATIONS: dict[str, dict[str, object]] = _kernels.registrations()

for _platform, _targets in _REGISTRATIONS.items():
    for _name, _capsule in _targets.items():
        jax.ffi.register_ffi_target(_name, _capsule, platform=_platform)


def target_name(op: str) -> str:
    """The FFI target that runs ``op`` (e.g. "softmax_backward")."""
    name = f"jax_camp_{op}"
    assert name in _REGISTRATIONS["cpu"], f"no FFI target for {op!r}"
    return name
