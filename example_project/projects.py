"""``./run-demo django`` and ``./run-demo flask``: the example projects on an embedded Redis,
with a real worker and beat, driven through each framework's test client.

Ctrl-C or SIGTERM at any moment stops everything and removes the temporary files.
"""

import os
import sys
import tempfile
import time
from pathlib import Path

from celery_redqueue.embedded import EmbeddedRedis
from example_project.demo import celery, stop, stoppable, watch_command

ROOT = Path(__file__).resolve().parent.parent
DJANGO_DIR = ROOT / "example_project" / "django_shop"


def wait(predicate, what, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    print(f"  (gave up waiting for {what})")
    return False


def django(url, tmp, log):
    os.environ.update(
        DJANGO_SETTINGS_MODULE="proj.settings",
        SHOP_REDIS_URL=url,
        SHOP_DB=str(Path(tmp) / "shop.sqlite3"),
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(DJANGO_DIR), str(ROOT)]))
    sys.path[:0] = [str(DJANGO_DIR)]
    import django as django_module

    django_module.setup()
    from django.core.management import call_command
    from django.test import Client
    from django_celery_beat.models import PeriodicTask
    from shop.models import Product, SupplierNotice

    call_command("migrate", verbosity=0)
    watch_command(
        {"SHOP_REDIS_URL": url, "DJANGO_SETTINGS_MODULE": "proj.settings"},
        app="proj",
        cd="example_project/django_shop",
    )
    print("migrated the shop's SQLite database; starting `celery -A proj worker` and `beat`")
    procs = [
        celery("worker", "-P", "solo", "-l", "info", env=env, cwd=DJANGO_DIR, log=log, app="proj"),
        celery(
            "beat",
            "-l",
            "info",
            "--max-interval",
            "1",
            env=env,
            cwd=DJANGO_DIR,
            log=log,
            app="proj",
        ),
    ]
    try:
        client = Client()
        teapot = Product.objects.create(name="teapot", supplier="kettles-ltd")
        mug = Product.objects.create(name="mug", supplier="kettles-ltd")
        for i in range(300):
            client.get(f"/products/{(teapot, mug)[i % 3 == 0].pk}/")
        print("GET /products/<id>/ 300 times: each view stored one record_view call in Redis")
        for _ in range(6):
            client.post("/orders/", {"product": teapot.pk})
        print(
            "POST /orders/ 6 times: each order stores notify_supplier on commit (2/s per supplier)"
        )
        wait(lambda: SupplierNotice.objects.count() == 6, "6 supplier notices")
        stats = client.get("/stats/").json()
        print(f"views written by the worker: {stats['views']}")
        print(
            f"record_view pool: offered {stats['record_view']['offered']}, processed "
            f"{stats['record_view']['processed']} calls in a few UPDATEs (equal calls merge)"
        )
        print(f"supplier notices sent: {stats['notices']} (at most 2 a second for kettles-ltd)")
        wait(lambda: PeriodicTask.objects.filter(name__startswith="redqueue").count() >= 3, "rows")
        rows = PeriodicTask.objects.filter(name__startswith="redqueue").order_by("name")
        print("django-celery-beat rows (the admin shows them; `celery -A proj redqueue beat-prune`")
        print("removes rows of tasks that no longer exist):")
        for row in rows:
            print(f"  {row.name}: {row.interval}")
        return 0 if stats["views"] == {"teapot": 200, "mug": 100} else 1
    finally:
        for proc in procs:
            stop(proc)


def flask(url, tmp, log):
    from example_project.flask_app import create_app

    # Flask's from_prefixed_env: FLASK_CELERY__broker_url sets app.config["CELERY"]["broker_url"].
    os.environ["FLASK_CELERY__broker_url"] = url  # noqa: SIM112
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    app = create_app()
    celery_app = "example_project.flask_app.make_celery"
    watch_command({"FLASK_CELERY__broker_url": url}, app=celery_app)
    print("starting `celery -A example_project.flask_app.make_celery worker` and `beat`")
    procs = [
        celery("worker", "-P", "solo", "-l", "info", env=env, cwd=tmp, log=log, app=celery_app),
        celery(
            "beat", "-l", "info", "-s", f"{tmp}/beat", env=env, cwd=tmp, log=log, app=celery_app
        ),
    ]
    try:
        client = app.test_client()
        for i in range(100):
            client.get(f"/page/{('home', 'about', 'pricing')[i % 3]}")
        print("GET /page/<name> 100 times: each request stored one record_hit call in Redis")
        for domain in ("a.example", "b.example", "a.example", "a.example"):
            client.post(f"/feeds/{domain}")
        print("POST /feeds/<domain> 4 times: fetch_feed runs at most 5 times a second per domain")

        def settled():
            stats = client.get("/stats").json
            return sum(stats["hits"].values()) == 100 and len(stats["fetched"]) == 4

        wait(settled, "100 hits and 4 fetches")
        stats = client.get("/stats").json
        print(f"hits counted by the worker, inside Flask's app context: {stats['hits']}")
        print(f"feeds fetched: {stats['fetched']}")
        print(f"record_hit pool: {stats['pool']}")
        return 0 if sum(stats["hits"].values()) == 100 else 1
    finally:
        for proc in procs:
            stop(proc)


def main(argv):
    project = argv[0] if argv else ""
    if project not in ("django", "flask"):
        print("usage: python -m example_project.projects django|flask", file=sys.stderr)
        return 2
    return stoppable(project, lambda log: run(project, log))


def run(project, log):
    with (
        EmbeddedRedis() as server,
        tempfile.TemporaryDirectory(prefix=f"redqueue-{project}-") as tmp,
    ):
        print(f"embedded Redis at {server.url}; {project} example in {tmp}")
        log.announce()
        return (django if project == "django" else flask)(server.url, tmp, log)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
