"""The Redis layer: client, key names, the Lua loader and serializers. It knows no structure
and no Celery."""
