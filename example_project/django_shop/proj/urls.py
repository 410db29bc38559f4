from django.contrib import admin
from django.urls import path
from shop import views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("products/<int:pk>/", views.product, name="product"),
    path("orders/", views.place_order, name="place-order"),
    path("stats/", views.stats, name="stats"),
]
