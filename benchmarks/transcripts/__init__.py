"""The docs' recorded terminal sessions: a pseudo-terminal driver (`terminal`, which the REPL tests use too) and the recorder."""
