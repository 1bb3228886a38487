package kvpool

// MaxEventsPerBatch is the most events one batch of the kv-pool service's
// event stream carries. The service sends a full batch only while more
// events are pending (the next one at once); the batch that reaches its last
// event says so (PoolEventBatch.caught_up), whatever its length.
const MaxEventsPerBatch = 4096
