"""Command-line entry points: `imagesets` (`main`) and the demo (`python -m imagesets.cli.demo`)."""
