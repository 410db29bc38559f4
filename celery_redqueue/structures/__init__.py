"""Redis structures: they know Redis, never Celery.

- :mod:`.base`: what every queue structure shares (keys, scripts, registration, dead letters)
- :mod:`.pool`: :class:`CappedPool`, a bounded pool that sheds load and counts it (what it hands
  back: :mod:`.pool_types`)
- :mod:`.bucket`: :class:`LeakyBucket`, per-key rate-limited queues (:mod:`.bucket_types`)
- :mod:`.sharded`: :class:`ShardedPool`, :class:`ShardedBucket`, one logical pool or bucket
  over N hash tags (so over the nodes of a cluster); machinery in :mod:`.sharding`
- :mod:`.streams`: :class:`EventStream`, a capped log each consumer group reads at its own
  position, with replay (:mod:`.stream_types`)
- :mod:`.leases`: :class:`ResourcePool`, leased named resources (:mod:`.lease_types`,
  :mod:`.lease_keeper`)
- :mod:`.sets`: sorted, time-sorted and scheduled sets
- :mod:`.figures`: backpressure figures read in one bounded script
- :mod:`.catalog`: the registry of structures under a prefix
- :mod:`.deadletters`, :mod:`.receipts`: dead-letter records and producer receipts
"""

from . import bucket, pool, sharded, streams

__all__ = ["bucket", "pool", "sharded", "streams"]
