module switchyard.dev/services/kvhint-emitter

go 1.26
