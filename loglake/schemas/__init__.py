"""Schemas of keys and values: the registry's data model, Confluent's wire framing, and
typed (Arrow) columns decoded from framed records. Pure: no I/O beyond what callers pass in."""
