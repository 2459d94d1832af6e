"""loglake.client."""
