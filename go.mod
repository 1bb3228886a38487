module switchyard.dev

go 1.26
