"""Operator tools: the ``celery redqueue`` command."""
