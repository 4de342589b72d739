"""The command line's start-up times."""
