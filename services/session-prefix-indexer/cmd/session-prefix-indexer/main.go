// Command session-prefix-indexer runs the session-prefix indexer service.
package main

import (
	"switchyard.dev/services/servicekit"
	sessionindexer "switchyard.dev/services/session-prefix-indexer"
)

func main() { servicekit.Main("session-prefix-indexer", sessionindexer.Main) }
