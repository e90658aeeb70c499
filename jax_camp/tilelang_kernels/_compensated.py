"""Element-wise running sums of a streamed row, as accurate for rows of millions of values as
for short ones.

A streamed tile adds, at each element of its float32 fragment, one term a column tile: tens of
thousands of terms over a row of millions. A plain running float32 sum of that many drifts:
once it is large, each small term is rounded to the sum's coarse steps, and the rounding adds up
with the count. ``add_compensated`` keeps what each addition rounded away in a second fragment
and gives it back with the next term (Kahan's summation), so that the sum's error stays that of
a few additions however many terms it takes; ``fold_compensation`` adds it in once the row is
done, before the fragment is reduced.
"""

import tilelang.language as T


@T.macro
def add_compensated(total, lost, i, j, term):
    """``total[i, j] += term``, what the addition rounds away kept (negated) in ``lost[i, j]``."""
    corrected = term - lost[i, j]
    new_total = total[i, j] + corrected
    # An inf or NaN sum has nothing to compensate, and its inf - inf would turn an inf sum NaN.
    lost[i, j] = T.if_then_else(T.isfinite(new_total), (new_total - total[i, j]) - corrected, 0.0)
    total[i, j] = new_total


@T.macro
def fold_compensation(total, lost, rows: int, cols: int):
    """Each ``total[i, j]`` with what its additions rounded away given back."""
    for i, j in T.Parallel(rows, cols):
        total[i, j] = total[i, j] - lost[i, j]
