"""The on-disk log and the tier formats: segments of Kafka RecordBatch v2 bytes with offset
and time indexes, recovery and retention (:mod:`.log`, :mod:`.segment`, :mod:`.index`), file
names (:mod:`.filenames`), and the Parquet/Delta side of tiering (``tier_*``, ``tiered_table``).
"""
