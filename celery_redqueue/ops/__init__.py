"""Operator tools, all reading through :class:`.reading.Operations` (found via the registry):

- :mod:`.cli`: the ``celery -A proj redqueue ...`` command (list, stats, top, dead letters, keys,
  leases, metrics, dashboard); :mod:`.cli_actions`: its commands that act (requeue, purge,
  drain, set-rate, reap, seek, beat-prune); :mod:`.cli_base`: the group and what both share;
- :mod:`.dashboard`: the dashboard as a WSGI application (``dashboard_app``, ``mount``);
- :mod:`.metrics`: Prometheus metrics; :mod:`.top`: the live terminal view.

The server's warnings (eviction policy, persistence) come from
:func:`celery_redqueue.redis.server.server_warnings`, as everywhere else.
"""
