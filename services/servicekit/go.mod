module switchyard.dev/services/servicekit

go 1.26
