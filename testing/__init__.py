"""Test-data makers for tests, benchmarks, docs figures and dummy data (not runtime code).

Imported as `imagesets_testing`; nothing in the `imagesets` package imports it.
"""
