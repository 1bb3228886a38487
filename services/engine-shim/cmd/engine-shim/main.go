// Command engine-shim runs one Switchyard engine shim with a simulated
// engine. `engine-shim healthcheck` checks a running one.
package main

import (
	engineshim "switchyard.dev/services/engine-shim"
	"switchyard.dev/services/servicekit"
)

func main() { servicekit.Main("engine-shim", engineshim.Main) }
