"""One module per op: its signature, checks, custom_vjp and batching."""
