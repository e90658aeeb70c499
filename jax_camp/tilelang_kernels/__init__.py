"""TileLang kernels for jax_camp: the ``backend="tilelang"`` half of the camp.

One module per op, each a tile program readable on its own:

* ``copy``: global -> register tile -> global, with ``T.copy``.
* ``vector_add``: element-wise add in a ``T.Parallel`` loop.
* ``reduce_sum``: ``T.Serial`` over column tiles, ``T.reduce_sum`` at the end.
* ``softmax``: a row held in registers (max, sum, write) or streamed (online
  softmax, a rolling log-sum-exp), one exponential a value, with where='s mask
  or without, and its backward, each written once as a builder of element
  formulas.
* ``log_softmax``: softmax's programs with its own formulas: the forward
  (masked or not), its backward and its forward-mode tangent.

``_row_derivative`` is the derivatives' tile program (a row sum, then each
element's output), which softmax's and log_softmax's derivatives fill with
their formulas. ``_rows`` says how a row kernel's blocks cover its rows, by the
row length (the tiles: one configuration, one compile, each), and ``bridge``
compiles them and runs them on JAX's buffers inside ``jax.jit``. Importing this
package or ``_rows`` needs nothing; importing ``bridge`` or a kernel module
needs ``pip install .[tilelang]``.
"""
