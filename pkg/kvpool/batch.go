package kvpool

// MaxEventsPerBatch is the most events one batch of the kv-pool service's
// event stream carries. The service sends a full batch only while more
// events are pending (the next one at once), and a shorter one when it has
// reached its last event: a follower that receives a shorter batch has
// caught up with the pool as of when the batch was sent (the flash
// indexer's shared-pool staleness counts on it).
const MaxEventsPerBatch = 4096
