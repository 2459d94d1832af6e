"""Security of a broker: who a connection is (principal, session), what it may do (the
authorizer and Kafka's ACL model), and the listeners, TLS, SASL and quota parts built on them.

Event loop only, unless a module says otherwise.
"""
