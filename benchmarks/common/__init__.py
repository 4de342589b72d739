"""Helpers the benchmark scripts share: the machine's description and results files, Chinook's eight questions."""
