"""One module per op: its signature, checks, custom_vjp, batching and the descriptions
(OpSpec, ``_spec.py``) of its kernels."""
