"""WSGI entry point: /redqueue/ goes to celery-redqueue's dashboard, everything else to Django."""

import os

from django.core.wsgi import get_wsgi_application

from celery_redqueue.ops.dashboard import dashboard_app, mount

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "proj.settings")

from proj.celery import app as celery_app  # after the line above: it reads those settings

application = mount(get_wsgi_application(), "/redqueue", dashboard_app(celery_app))
