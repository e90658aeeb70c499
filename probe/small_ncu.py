"""Kernel durations (ncu) of jax_camp's and XLA's reduce_sum and softmax on small shapes."""
import sys
import jax, jax.numpy as jnp
import jax_camp
shapes = [(144, 1280), (1008, 2304), (4080, 1536)]
for dtype in (jnp.float32, jnp.bfloat16):
    for shape in shapes:
        x = jax.random.normal(jax.random.key(0), shape, dtype)
        for name, fn in (("camp_sum", lambda v: jax_camp.reduce_sum(v, axis=-1)), ("xla_sum", lambda v: jnp.sum(v, axis=-1)),
                         ("camp_softmax", lambda v: jax_camp.softmax(v, axis=-1)), ("xla_softmax", lambda v: jax.nn.softmax(v, axis=-1))):
            f = jax.jit(fn)
            for _ in range(3):
                jax.block_until_ready(f(x))
