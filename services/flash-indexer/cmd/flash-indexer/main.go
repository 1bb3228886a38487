// Command flash-indexer runs the flash indexer service.
package main

import (
	flashindexer "switchyard.dev/services/flash-indexer"
	"switchyard.dev/services/servicekit"
)

func main() { servicekit.Main("flash-indexer", flashindexer.Main) }
