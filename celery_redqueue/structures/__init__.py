"""Redis structures: they know Redis, never Celery.

- `base`: what every queue structure shares (keys, scripts, registration, dead letters);
  `sharded`: its subclass with shards and a wake signal, the base of pools and buckets
- `pool`: [`CappedPool`][celery_redqueue.CappedPool], a bounded pool that sheds load and counts it
  (with what it hands back, its replies, gathering and its sharding)
- `bucket`: [`LeakyBucket`][celery_redqueue.LeakyBucket], per-key rate-limited queues
  (its values: results, reservations, rates and limits in `bucket_types`)
- `sharding`: a pool or bucket with ``shards=N``, one logical structure over N hash tags (so over
  the nodes of a cluster), and the routing verbs its methods carry
- `streams`: [`EventStream`][celery_redqueue.EventStream], a capped log each consumer group reads at
  its own position, with replay (with what it hands back and the checks of what it is given)
- `leases`: [`LeasedResources`][celery_redqueue.LeasedResources], named resources leased to one
  holder at a time (`lease_types`, `lease_keeper`)
- `sets`: sorted, time-sorted and scheduled sets
- `figures`: backpressure figures read in one bounded script
- `catalog`: the registry of structures under a prefix
- `deadletters`, `receipts`: dead-letter records and producer receipts
"""

from . import bucket, pool, sharding, streams

__all__ = ["bucket", "pool", "sharding", "streams"]
