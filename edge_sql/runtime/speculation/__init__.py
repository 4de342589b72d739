"""Speculative decoding: drafters (prompt lookup, the model's MTP head) and the verifier that keeps the tokens greedy decoding would give."""
