"""What the broker's messages carry between producers and workers: the header of a drain job
and the reaper's task name. A leaf module (it imports nothing), so every part of the glue and
the operators' tools can name them without importing each other."""

#: Message header that marks an argument-less drain job.
DRAIN_HEADER = "redqueue_drain"
#: The one beat-run task that reaps every structure of the app.
REAPER_TASK = "celery_redqueue.reap"
