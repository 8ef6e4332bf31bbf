"""Checking a prepared version against its source: `round_trip` (`imagesets verify`).

Above the build and the read path: it opens the version as the read path does and runs the
round trip its builder declares (`ROUND_TRIP`, from `building.round_trips` or the
builder's own folder).
"""
