"""Checks of example_project/django_shop, run by test_django_shop.py in a process of their own
(Django's settings are global to a process): Django's test client against the project, with a
real `celery worker` and `celery beat` (django-celery-beat's DatabaseScheduler) beside it."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import django
import pytest

from celery_redqueue.embedded import die_with_parent

django.setup()

from celery.contrib.django.task import DjangoTask  # noqa: E402
from django.contrib.auth.models import User  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import transaction  # noqa: E402
from django.test import Client  # noqa: E402
from django_celery_beat.models import IntervalSchedule, PeriodicTask  # noqa: E402
from shop.models import Order, Product, SupplierNotice  # noqa: E402
from shop.tasks import notify_supplier, record_view  # noqa: E402

PROJECT = Path(__file__).resolve().parents[2] / "example_project" / "django_shop"


def celery(*args):
    log = open(Path(os.environ["SHOP_LOG_DIR"]) / f"{args[0]}.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "proj", *args],
        cwd=PROJECT,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=die_with_parent(signal.SIGTERM),  # a killed run stops it
    )
    proc.log = log
    return proc


def stop(proc):
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    proc.log.close()


@pytest.fixture(scope="module")
def running():
    call_command("migrate", verbosity=0)
    procs = [
        celery("worker", "-P", "solo", "--without-mingle", "--without-gossip", "-l", "info"),
        celery("beat", "-l", "info", "--max-interval", "1"),
    ]
    yield
    for proc in procs:
        stop(proc)


@pytest.fixture
def client(running):
    return Client()


@pytest.fixture
def product(running):
    return Product.objects.create(name="teapot", supplier="kettles-ltd")


def test_tasks_are_built_on_djangos_task_class():
    assert isinstance(record_view, DjangoTask) and isinstance(notify_supplier, DjangoTask)


def test_product_views_are_pooled_and_written_by_the_worker(client, product, wait_for):
    for _ in range(40):
        assert client.get(f"/products/{product.pk}/").json()["kept"]

    def counted():
        product.refresh_from_db()
        return product.views == 40

    wait_for(counted, timeout=60, message="40 views written by the worker")
    stats = client.get("/stats/").json()["record_view"]
    assert stats["failed"] == 0 and stats["offered"] >= 40


def test_an_order_notifies_its_supplier_after_commit(client, product, wait_for):
    reply = client.post("/orders/", {"product": product.pk, "quantity": 2})
    order = Order.objects.get(pk=reply.json()["order"])
    wait_for(
        lambda: SupplierNotice.objects.filter(order=order).exists(),
        timeout=60,
        message="the supplier notified",
    )


def test_a_rolled_back_order_stores_no_call(running, product):
    before = notify_supplier.bucket.stats().enqueued
    with pytest.raises(RuntimeError), transaction.atomic():
        order = Order.objects.create(product=product)
        notify_supplier.delay_on_commit(product.supplier, order.pk)
        record_view.apply_async_on_commit((product.pk,))
        raise RuntimeError("payment declined")
    assert notify_supplier.bucket.stats().enqueued == before


def test_beat_rows_appear_and_run_selected_tasks_works(client, product, wait_for):
    drain_row = f"redqueue: drain {record_view.name}"
    wait_for(
        lambda: PeriodicTask.objects.filter(name=drain_row).exists(),
        timeout=60,
        message="beat wrote the drain row",
    )
    assert PeriodicTask.objects.filter(name="redqueue: reap").exists()
    admin = User.objects.create_superuser("admin", "admin@example.com", "pw")
    client.force_login(admin)
    rows = PeriodicTask.objects.filter(name__startswith="redqueue: drain")
    reply = client.post(
        "/admin/django_celery_beat/periodictask/",
        {"action": "run_tasks", "_selected_action": [row.pk for row in rows]},
    )
    assert reply.status_code == 302  # back to the list, not a server error


def test_beat_prune_removes_rows_of_removed_tasks(running):
    every = IntervalSchedule.objects.create(every=10, period=IntervalSchedule.SECONDS)
    PeriodicTask.objects.create(
        name="redqueue: drain shop.tasks.retired", task="shop.tasks.retired", interval=every
    )
    PeriodicTask.objects.create(name="nightly report", task="shop.tasks.gone", interval=every)
    out = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "proj", "redqueue", "beat-prune"],
        cwd=PROJECT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "removed 'redqueue: drain shop.tasks.retired'" in out.stdout
    names = set(PeriodicTask.objects.values_list("name", flat=True))
    assert "redqueue: drain shop.tasks.retired" not in names
    assert "nightly report" in names  # not ours: left alone
    assert f"redqueue: drain {record_view.name}" in names


def test_wsgi_py_mounts_the_dashboard_beside_django(running, product):
    """proj/wsgi.py (quoted in docs/operations.md): /redqueue/ is the dashboard, else Django."""
    import json
    from wsgiref.util import setup_testing_defaults

    from proj.wsgi import application

    def get(path):
        environ = {"PATH_INFO": path, "HTTP_HOST": "127.0.0.1"}
        setup_testing_defaults(environ)
        replies = []
        body = b"".join(application(environ, lambda status, headers: replies.append(status)))
        return replies[0], body

    status, body = get("/redqueue/api/overview")
    assert status.startswith("200"), body[:500]
    names = [row["name"] for row in json.loads(body)["structures"]]
    assert record_view.pool.name in names, names
    status, body = get("/stats/")
    assert status.startswith("200") and b'"notices"' in body, body[:500]
