"""loglake.streaming."""
