module switchyard.dev/services/session-prefix-indexer

go 1.26
