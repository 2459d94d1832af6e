"""loglake.compaction."""
