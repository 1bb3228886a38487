module switchyard.dev/gen

go 1.26
