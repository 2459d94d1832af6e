"""Request handlers, one module per API family; each handler builds its response with codec.build."""
