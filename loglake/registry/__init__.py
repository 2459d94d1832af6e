"""The Schema Registry service (``loglake registry``): Confluent's REST API over the schemas
ZooKeeper holds (:mod:`loglake.catalog.schemas`), so any number of instances agree."""
