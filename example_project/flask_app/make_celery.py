"""``celery -A example_project.flask_app.make_celery worker``: the Flask docs' entry point."""

from . import create_app

flask_app = create_app()
celery_app = flask_app.extensions["celery"]
