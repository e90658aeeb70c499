"""Test mode: each backend's output on fresh random inputs against a higher-precision reference."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from .cases import OPS, TOLERANCE, KeyStream, Shape, draw_inputs, jitted

NUMPY_REFERENCE = "numpy-float64"
DEVICE_REFERENCE = "device-float32"


@dataclasses.dataclass
class TestResult:
    passed: bool
    rel_error: float
    tolerance: float
    reference: str
    detail: str = ""


def _host_f64(x: jax.Array) -> np.ndarray:
    return np.asarray(jnp.asarray(x).astype(jnp.float32), dtype=np.float64)


@jax.jit
def _device_errors(outputs: Sequence[jax.Array], refs: Sequence[jax.Array],
                   scales: Sequence[jax.Array]) -> jax.Array:
    return jnp.stack([jnp.sqrt(jnp.sum(jnp.square(o.astype(jnp.float32) - r))) / s
                      for o, r, s in zip(outputs, refs, scales)])


def _device_reference(op: str, inputs: Sequence[jax.Array]) -> tuple[list, list]:
    refs = OPS[op].reference(jnp, inputs)
    return refs, OPS[op].error_scales(jnp, inputs, refs)


# On a GPU the largest inputs are 1 GiB: the reference runs there, in float32.
_device_reference_jit = jax.jit(_device_reference, static_argnums=(0,))


def _layout_problem(outputs: Sequence[jax.Array], expected: Sequence[Any]) -> str | None:
    """Outputs must have XLA's shapes and dtypes, leaf by leaf."""
    if len(outputs) != len(expected):
        return f"{len(outputs)} outputs, want {len(expected)}"
    for out, want in zip(outputs, expected):
        if tuple(out.shape) != tuple(want.shape) or out.dtype != want.dtype:
            return f"got {out.dtype}{list(out.shape)}, want {want.dtype}{list(want.shape)}"
    return None


def relative_errors(op: str, inputs: Sequence[jax.Array], outputs: Sequence[jax.Array],
                    reference: str) -> list[float]:
    """‖out - ref‖ / scale for each output, the reference in float64 numpy or float32 on the device."""
    if reference == NUMPY_REFERENCE:
        host = [_host_f64(x) for x in inputs]
        refs = OPS[op].reference(np, host)
        scales = OPS[op].error_scales(np, host, refs)
        return [float(np.sqrt(np.sum(np.square(_host_f64(o) - r))) / s)
                for o, r, s in zip(outputs, refs, scales)]
    upcast = tuple(x.astype(jnp.float32) for x in inputs)
    refs, scales = _device_reference_jit(op, upcast)
    return [float(e) for e in np.asarray(_device_errors(list(outputs), refs, scales))]


def check_case(op: str, backend: str, shape: Shape, dtype_name: str, keys: KeyStream,
               reference: str) -> TestResult:
    """One check on inputs drawn fresh for it."""
    tolerance = TOLERANCE[dtype_name]
    inputs = draw_inputs(keys, op, shape, dtype_name)
    outputs = jax.tree_util.tree_leaves(jitted(op, backend)(*inputs))
    expected = jax.tree_util.tree_leaves(jax.eval_shape(OPS[op].xla, *inputs))
    problem = _layout_problem(outputs, expected)
    if problem:
        return TestResult(False, math.nan, tolerance, reference, problem)
    errors = relative_errors(op, inputs, outputs, reference)
    worst = max(errors, key=lambda e: math.inf if math.isnan(e) else e)
    passed = all(e <= tolerance for e in errors)  # NaN never passes
    return TestResult(passed, worst, tolerance, reference)
