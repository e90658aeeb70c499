"""log_softmax, masked or not, and its two derivatives: softmax's tile programs, other formulas.

Forward. For a row with maximum m and s = sum(exp(x - m)), log_softmax is
y = (x - m) - log(s). The kernel is softmax's (``row_softmax_program`` in
softmax.py), with the same tile for each row length: a resident row is read once
into registers, for m and then s (a long aligned row over a cluster's blocks, as
softmax.py describes); a streamed one is read tile by tile, keeping a
rolling (m, s) pair per element, merged once per row. Either way pass 1 ends
with m, log(s) and 1/s, and only pass 2 differs: softmax writes
exp(x - m) * (1/s); log_softmax takes no exponential there and writes
(x - m) - log(s).

So log_softmax's pass 2 needs x, where softmax's needs only the exponentials
pass 1 kept. A resident tile holds x for it while its threads hold up to 16
values of the row; 16-bit rows of 8192 and 16384, and rows of 32768 (which the
unmasked forwards and the float32 masked one hold, ``_rows.resident_limit``),
give a thread 32, and x beside the exponentials would take so many registers
that fewer blocks fit an SM, so there pass 2 reads the row again, from L2,
where pass 1 has just read it. The 16-bit tiles of 32768 that take row groups,
alone on their SM either way, hold x all the same (``reads_again_for_pass_2``;
docs/tilelang_design.md has the measurements).

Why a log-probability of -1000 stays finite: log(softmax(x)) would first form
exp(-1000), which float32 cannot hold (anything below about -104 rounds to 0),
and then take log(0) = -inf. Here no exponential of the answer is ever taken:
x - m is one rounded subtraction, and log(s) is small, since the maximum
itself adds exp(0) = 1 to s and so 1 <= s <= N. So y keeps float32's relative
precision however negative it is.

Special values come out as jax.nn.log_softmax's, for the reasons softmax.py
gives: a -inf entry of an otherwise finite row gives -inf - m - log(s) = -inf;
a row of -inf has m = -inf and s = 0, and -inf - -inf is NaN; a NaN or +inf
entry makes s NaN and so the whole row NaN. With a where= mask
(``log_softmax_masked``) the kernel is softmax_masked's: a masked-out element
takes no part in m and s, and gets -inf, jax's answer, as does every element of
a fully masked row.

Derivatives. Write p = softmax(x) = exp(y). Since y_i = x_i - log(sum_j
exp(x_j)), a change dx moves y_i by dx_i - sum_j p_j dx_j: the Jacobian of a
row is J = I - 1 p^T. Reverse mode multiplies a cotangent g by J^T, forward
mode multiplies a tangent t by J:

    reverse: dx  = J^T g = g - p * sum(g)
    forward: out = J t   = t - sum(p * t)

J is not symmetric, so these are two different maps: reverse mode sums g and
subtracts that multiple of p; forward mode sums p * t and subtracts the same
number from every element. softmax's Jacobian, diag(p) - p p^T, is symmetric,
so its one backward kernel serves both modes; log_softmax needs one for each.

Both come from ``reduce_then_write_program`` (_row_derivative.py), as softmax's
backward does: one float32 row sum of a per-element term, then one pass
writing each element from its two operands and the sum. The builder names its
operands (Yv, G) -> DX after the backward; the tangent kernel gets t as G.
Both take p from the forward's output, so nothing of the forward is
recomputed, and y <= 0 keeps exp(y) from overflowing. That exp is ``T.exp``
(CUDA's accurate expf), not the forward's fast exp2 of y * log2(e): y is about
-15 in a row of millions, where rounding that product would cost exp(y) about
8e-7 of relative error (docs/accuracy.md). Out-of-range columns of
a partial tile load y = 0 and g or t = 0: the reverse term g is 0 there and
the forward term exp(0) * 0 is too, so neither sum needs a mask (exp(y) alone
would be 1 there). A pass whose formula ignores an operand still copies it
into registers; nothing reads them there, and nvcc drops those loads.
"""

from __future__ import annotations

import math

import tilelang.language as T
from tvm import tirx

from jax_camp.tilelang_kernels._row_derivative import reduce_then_write_program
from jax_camp.tilelang_kernels._rows import RowTile
from jax_camp.tilelang_kernels.softmax import row_softmax_program


def log_normalized(shifted, e, log_sum, inv_sum):
    """log_softmax's output (x - m) - log(s): no exponential of the answer is taken."""
    return shifted - log_sum


def log_softmax_program(dtype: str, tile: RowTile) -> tirx.PrimFunc:
    """The forward log_softmax kernel for ``dtype`` over (M, N) rows of any M, N."""
    return row_softmax_program(
        "log_softmax", dtype, tile, write=log_normalized, write_needs_x=True
    )


def log_softmax_masked_program(dtype: str, tile: RowTile) -> tirx.PrimFunc:
    """log_softmax(X, where=Mask): Mask is bool, true where an element takes part.

    The elements it masks out give -inf, jax.nn.log_softmax's answer.
    """
    return row_softmax_program(
        "log_softmax_masked", dtype, tile, write=log_normalized, masked_out=-math.inf,
        write_needs_x=True,
    )


def log_softmax_backward_program(dtype: str, tile: RowTile) -> tirx.PrimFunc:
    """Reverse mode: dX = G - exp(Yv) * sum(G) per row, from the forward's output Yv."""
    return reduce_then_write_program(
        "log_softmax_backward", dtype, tile,
        term=lambda y, g: g,
        output=lambda y, g, total: g - T.exp(y) * total,
    )


def log_softmax_tangent_program(dtype: str, tile: RowTile) -> tirx.PrimFunc:
    """Forward mode: the tangent out = t - sum(exp(Yv) * t) per row, t coming in as G."""
    return reduce_then_write_program(
        "log_softmax_tangent", dtype, tile,
        term=lambda y, t: T.exp(y) * t,
        output=lambda y, t, total: t - total,
    )
