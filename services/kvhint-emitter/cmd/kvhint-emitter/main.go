// Command kvhint-emitter runs the KV hint emitter service.
package main

import (
	kvhintemitter "switchyard.dev/services/kvhint-emitter"
	"switchyard.dev/services/servicekit"
)

func main() { servicekit.Main("kvhint-emitter", kvhintemitter.Main) }
