"""The ZooKeeper layer: Kafka's classic znode layout and typed accessors (:mod:`.zookeeper`),
consumer-group offsets and metadata (:mod:`.groups`). Every znode path the project writes is
here, kazoo's exceptions do not leave it, and it imports nothing from :mod:`loglake.streaming`.
"""
