"""OpSpec, the one description of a jax_camp kernel, and the dtypes every kernel supports.

Each op module describes its kernels beside its public function (``COPY`` in
``jax_camp/ops/copy.py``, ``SOFTMAX`` and ``SOFTMAX_BACKWARD`` in
``jax_camp/ops/softmax.py``, ...). Registration, the FFI call, batching,
sharding, the TileLang bridge and the benchmark harness all read these
descriptions, so everything about a kernel is found under its name.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

# Every kernel, on every backend, has a version for each of these.
SUPPORTED_DTYPES: tuple[np.dtype, ...] = (
    jnp.dtype(jnp.float32), jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16)
)
# The version of the kernels' calling convention, in every FFI target's name
# (OpSpec.ffi_target): a program exported with jax.export names the targets it
# calls, so one exported against another convention fails to find them rather
# than calling a handler with the wrong operands. Raise it whenever any
# handler's operands, results or attributes change.
FFI_VERSION = 2

# A where= mask as the kernels take it: bool, which XLA stores as one byte an element, 1 where
# the element takes part; a user's bool mask reaches the kernels as it is.
MASK_DTYPE = jnp.dtype(bool)

# "float32, bfloat16 or float16", for error messages.
SUPPORTED_DTYPE_NAMES = (
    ", ".join(d.name for d in SUPPORTED_DTYPES[:-1]) + " or " + SUPPORTED_DTYPES[-1].name
)

# The per-device computation for a sharded last dim:
# ``combine(local, mesh_axes, *operand_blocks)``, where ``local`` runs the
# kernel on this device's blocks and ``mesh_axes`` are the mesh axes that
# split each row.
CombineAcrossDevices = Callable[..., jax.Array]


@dataclasses.dataclass(frozen=True)
class OpSpec:
    """One kernel: ``arity`` operands of one shape and dtype in (but for a mask, below), one
    array of that dtype out.

    Attributes:
      name: the kernel's name, e.g. "softmax_backward", as csrc/ops.inc lists
        it; its FFI target is ``jax_camp_v<FFI_VERSION>_<name>`` (``ffi_target``).
      arity: how many operands the kernel takes.
      tilelang_module: the module of ``jax_camp.tilelang_kernels`` whose
        ``<name>_program`` builds the TileLang version.
      along_rows: the kernel treats the last dim as a row and the others as
        independent rows; otherwise it is elementwise over a flat buffer.
      drops_last_dim: the result has the operands' shape without the last dim;
        otherwise it has the operands' shape.
      combine_across_devices: how the blocks of rows split over devices make
        the whole rows' result; None for a kernel whose rows are never split.
      scratch_results: the extra outputs of the FFI call for operands of a
        shape, for the kernel's own use and dropped after it (none by default).
        Each is an allocation a call, so a kernel asks only for what that
        shape needs.
      mask_operand: the last operand is a ``where=`` mask: ``MASK_DTYPE`` of the
        others' shape, true where an element takes part.
    """

    name: str
    arity: int
    tilelang_module: str
    along_rows: bool = False
    drops_last_dim: bool = False
    combine_across_devices: CombineAcrossDevices | None = None
    scratch_results: Callable[[tuple[int, ...]], tuple[jax.ShapeDtypeStruct, ...]] = (
        lambda shape: ()
    )
    mask_operand: bool = False

    @property
    def ffi_target(self) -> str:
        """The XLA FFI target that runs the kernel, the same on every platform, under which
        registration puts the C++ module's handler for each platform (csrc/ops.inc)."""
        return f"jax_camp_v{FFI_VERSION}_{self.name}"

    @property
    def sharding_rule(self) -> str:
        """The call's Shardy rule: "i" names the last dim of a kernel that works along rows,
        which a kernel that drops it sums over (``reduction_factors``)."""
        operand = "... i" if self.along_rows else "..."
        result = "..." if self.drops_last_dim else operand
        return f"{', '.join([operand] * self.arity)} -> {result}"

    @property
    def reduction_factors(self) -> tuple[str, ...]:
        """The rule's factors that the kernel sums over, so that Shardy may shard them and
        combine the partial results."""
        return ("i",) if self.drops_last_dim else ()

    def result_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """The result's shape for operands of ``shape``."""
        return tuple(shape[:-1]) if self.drops_last_dim else tuple(shape)

    def result(self, operand: jax.Array | jax.ShapeDtypeStruct) -> jax.ShapeDtypeStruct:
        """The result's shape and dtype for operands like ``operand``."""
        return jax.ShapeDtypeStruct(self.result_shape(operand.shape), operand.dtype)
