"""Operator tools, all reading through :class:`.reading.Operations` (found via the registry):

- :mod:`.cli`: the ``celery -A proj redqueue ...`` command (list, stats, top, dead letters, keys,
  leases, metrics, dashboard); :mod:`.cli_actions`: its commands that act (requeue, purge,
  drain, set-rate, reap, seek, beat-prune);
- :mod:`.web`: the dashboard as a WSGI application (public entry: :mod:`celery_redqueue.web`);
- :mod:`.metrics`: Prometheus metrics; :mod:`.top`: the live terminal view;
- :mod:`.health`: warnings about the Redis server (eviction policy, persistence).
"""
