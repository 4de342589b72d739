"""Whole agent episodes: batching, votes, the answer checks, Ray."""
