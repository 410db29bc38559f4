"""Operator tools, all reading through `reading.Operations` (found via the registry):

- `cli`: the ``celery -A proj redqueue ...`` command (list, stats, top, dead letters, keys,
  leases, metrics, dashboard); `cli_actions`: its commands that act (requeue, purge,
  drain, set-rate, reap, seek, beat-prune); `cli_base`: the group and what both share;
- `dashboard`: the dashboard as a WSGI application (``dashboard_app``, ``mount``);
- `metrics`: Prometheus metrics; `top`: the live terminal view.

The server's warnings (eviction policy, persistence) come from
`celery_redqueue.redis.server.server_warnings()`, as everywhere else.
"""
