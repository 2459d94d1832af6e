"""Client quotas (Kafka's ``ClientQuotaManager`` family): per user and/or client id byte rates
for Produce and Fetch and a request-time percentage for every API, enforced with
``throttle_time_ms`` and channel muting (KIP-219).

* ``rate.py`` — the sampled rate with a bound and Kafka's throttle-time formula (pure);
* ``entities.py`` — entities, the 8-level precedence and which connections share a rate (pure);
* ``manager.py`` — the produce, fetch and request managers (``ClientQuotas``);
* ``enforcement.py`` — what broker/server.py runs around a handler when quotas exist;
* ``config_sync.py`` — the quotas loaded from ``/config/users``/``/config/clients`` and kept
  current from ``/config/changes``;
* ``alteration.py`` — DescribeClientQuotas filters and AlterClientQuotas validation (pure; the
  handlers are broker/handlers/client_quotas.py).
"""
