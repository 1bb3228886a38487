// Command kv-pool runs the simulated shared KV pool service.
package main

import (
	kvpoolservice "switchyard.dev/services/kv-pool"
	"switchyard.dev/services/servicekit"
)

func main() { servicekit.Main("kv-pool", kvpoolservice.Main) }
