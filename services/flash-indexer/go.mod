module switchyard.dev/services/flash-indexer

go 1.26
