"""Measurement probes over a session: the importance matrix and teacher-forced log-probabilities."""
