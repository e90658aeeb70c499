"""One module per op: its signature, checks, the descriptions (OpSpec, ``_spec.py``) of its
kernels and their primitives' derivative rules (batching is every primitive's, in
``jax_camp.backends``)."""
