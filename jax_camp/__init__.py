"""jax_camp: hand-written CUDA and TileLang kernels for JAX.

``copy``, ``vector_add``, ``reduce_sum``, ``softmax`` and ``log_softmax`` follow the
signatures and semantics of their ``jax.numpy`` / ``jax.nn`` counterparts and
work under ``jax.jit``, ``jax.vmap``, both modes of differentiation, sharding and
``jax.export`` (with ``export_checks()``). Each takes a ``backend`` keyword; see
``jax_camp.backends``.
"""

# The compiled module, loaded before the ops: each op module registers its kernels there.
from jax_camp import registration as _registration
from jax_camp.backends import BACKENDS
from jax_camp.ops.copy import copy
from jax_camp.ops.log_softmax import log_softmax
from jax_camp.ops.reduce_sum import reduce_sum
from jax_camp.ops.softmax import softmax
from jax_camp.ops.vector_add import vector_add
from jax_camp.registration import export_checks

__all__ = ["BACKENDS", "copy", "export_checks", "log_softmax", "reduce_sum", "softmax",
           "vector_add"]
__version__ = "0.1.0"
