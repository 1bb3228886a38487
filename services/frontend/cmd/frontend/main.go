// Command frontend runs the Switchyard frontend: the OpenAI and Anthropic
// HTTP APIs in front of the mesh. `frontend healthcheck` checks a running one.
package main

import (
	"switchyard.dev/services/frontend"
	"switchyard.dev/services/servicekit"
)

func main() { servicekit.Main("frontend", frontend.Main) }
