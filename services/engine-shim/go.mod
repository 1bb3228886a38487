module switchyard.dev/services/engine-shim

go 1.26
