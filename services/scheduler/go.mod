module switchyard.dev/services/scheduler

go 1.26
