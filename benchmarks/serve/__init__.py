"""`edge-sql serve` under load: the soak and the latency figures."""
