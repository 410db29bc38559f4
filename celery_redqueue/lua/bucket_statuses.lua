-- What happened to one item a producer offered (bucket_enqueue's and bucket_debounce's replies;
-- bucket_types.py reads them): refused (its key is full), queued, queued and its key's oldest
-- item dropped, refused as a duplicate of a dedupe id, held until due, merged into the held
-- call of its dedupe id (bucket_debounce: the latest payload replaced it). 3 is unused (it was
-- FULL, bucket_enqueue_plain's before one script took both paths); the numbers stay.
local REFUSED, QUEUED, DROPPED, DUPLICATE, DELAYED, MERGED = 0, 1, 2, 4, 5, 6
