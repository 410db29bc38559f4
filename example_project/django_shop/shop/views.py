from django.db import transaction
from django.http import JsonResponse
from django.shortcuts import get_object_or_404
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from .models import Order, Product, SupplierNotice
from .tasks import notify_supplier, record_view


def product(request, pk):
    item = get_object_or_404(Product, pk=pk)
    receipt = record_view.delay(item.pk)  # stored in Redis; returns at once
    return JsonResponse({"product": item.name, "views": item.views, "kept": receipt.kept})


@csrf_exempt
@require_POST
def place_order(request):
    item = get_object_or_404(Product, pk=request.POST["product"])
    with transaction.atomic():
        order = Order.objects.create(product=item, quantity=int(request.POST.get("quantity", 1)))
        # DjangoTask's delay_on_commit: the call is stored only if the order is committed.
        notify_supplier.delay_on_commit(item.supplier, order.pk)
    return JsonResponse({"order": order.pk})


def stats(request):
    pool, bucket = record_view.pool.stats(), notify_supplier.bucket.stats()
    return JsonResponse(
        {
            "views": {p.name: p.views for p in Product.objects.all()},
            "notices": SupplierNotice.objects.count(),
            "record_view": {
                "offered": pool.offered,
                "processed": pool.processed,
                "failed": pool.failed,
            },
            "notify_supplier": {"enqueued": bucket.enqueued, "processed": bucket.processed},
        }
    )
