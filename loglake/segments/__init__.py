"""loglake.segments."""
