"""loglake: a Spark-native log store speaking the Kafka protocol."""

__version__ = "0.1.0"
