"""Consumer-group coordination (classic protocol): group state, coordinator, placement."""
