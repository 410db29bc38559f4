from django.db import models


class Product(models.Model):
    name = models.CharField(max_length=100)
    supplier = models.CharField(max_length=100)
    #: Page views, written by the pooled task record_view (many views, one UPDATE per product).
    views = models.PositiveIntegerField(default=0)


class Order(models.Model):
    product = models.ForeignKey(Product, on_delete=models.CASCADE)
    quantity = models.PositiveIntegerField(default=1)
    created = models.DateTimeField(auto_now_add=True)


class SupplierNotice(models.Model):
    """What notify_supplier "sent": at most a few per second per supplier."""

    supplier = models.CharField(max_length=100)
    order = models.ForeignKey(Order, on_delete=models.CASCADE)
    sent = models.DateTimeField(auto_now_add=True)
