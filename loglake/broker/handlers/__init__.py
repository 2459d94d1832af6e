"""Request handlers, one module per API family; each builds its response with codec.build."""
