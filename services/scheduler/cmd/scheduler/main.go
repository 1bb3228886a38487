// Command scheduler runs the scheduler service.
package main

import (
	"switchyard.dev/services/scheduler"
	"switchyard.dev/services/servicekit"
)

func main() { servicekit.Main("scheduler", scheduler.Main) }
