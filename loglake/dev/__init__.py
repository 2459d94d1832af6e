"""loglake.dev."""
