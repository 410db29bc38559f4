"""The shop's tasks, found by app.autodiscover_tasks().

- record_view: a pooled task. A busy product page calls it on every view; equal calls merge
  (pool_coalesce), so a burst becomes one UPDATE per product with the count, and a flood beyond
  10,000 distinct products is shed and counted instead of piling up in the broker.
- notify_supplier: a bucket task. Each supplier is notified at most twice a second, however many
  orders come in, and one busy supplier never delays another.
"""

from django.db.models import F

from celery_redqueue import bucket_task, pool_task

from .models import Product, SupplierNotice


@pool_task(pool_size=10_000, pool_coalesce=True, pool_drain_interval=5)
def record_view(product_id, count=1):
    Product.objects.filter(pk=product_id).update(views=F("views") + count)


@bucket_task(bucket_key="supplier", bucket_rate="2/s", bucket_drain_interval=5)
def notify_supplier(supplier, order_id):
    SupplierNotice.objects.create(supplier=supplier, order_id=order_id)
