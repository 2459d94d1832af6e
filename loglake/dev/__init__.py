"""Local development and test clusters: a ZooKeeper process and broker processes on loopback
(:mod:`.cluster`, :mod:`.zookeeper`, :mod:`.process`) and the test harness (:mod:`.harness`).
"""
