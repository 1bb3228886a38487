module switchyard.dev/pkg

go 1.26.0

require (
	github.com/ardanlabs/jinja v1.8.0
	github.com/google/go-cmp v0.7.0
	github.com/hashicorp/go-memdb v1.3.5
	github.com/vmihailenco/msgpack/v5 v5.4.1
	github.com/zeebo/xxh3 v1.1.0
	go.uber.org/goleak v1.3.0
	golang.org/x/text v0.43.0
)

require (
	github.com/hashicorp/go-immutable-radix v1.3.1 // indirect
	github.com/hashicorp/golang-lru v0.5.4 // indirect
	github.com/klauspost/cpuid/v2 v2.2.10 // indirect
	github.com/vmihailenco/tagparser/v2 v2.0.0 // indirect
	golang.org/x/sys v0.43.0 // indirect
)
