"""Prometheus metrics of a broker process (issue 16): the registry and hot-path recorders
(registry.py), the ``/metrics`` endpoint on the broker's event loop (http.py)."""
