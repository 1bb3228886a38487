module switchyard.dev/services/frontend

go 1.26
