"""The runtime: decode speed, threads, speculation, parallel sequences, tuning."""
