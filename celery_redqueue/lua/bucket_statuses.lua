-- What happened to one item a producer offered (bucket_enqueue's and bucket_enqueue_plain's
-- replies; bucket_types.py reads them): refused (its key is full), queued, queued and its key's
-- oldest item dropped, not stored by bucket_enqueue_plain because its key is full (the caller
-- sends it through bucket_enqueue), refused as a duplicate of a dedupe id, held until due,
-- merged into the held call of its dedupe id (bucket_debounce: the latest payload replaced it).
local REFUSED, QUEUED, DROPPED, FULL, DUPLICATE, DELAYED, MERGED = 0, 1, 2, 3, 4, 5, 6
