"""Several sessions on one context: the batched engine and the sequences that decode in it."""
