"""loglake.broker."""
