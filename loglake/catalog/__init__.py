"""loglake.catalog."""
