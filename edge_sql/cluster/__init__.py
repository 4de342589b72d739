"""Running bench episodes and eval scoring on a Ray cluster (the optional `cluster` extra).

Nothing here imports Ray at module level: the local runner never needs it, and `--ray`
without Ray installed says how to install it (`ray_support.require_ray`).
"""
