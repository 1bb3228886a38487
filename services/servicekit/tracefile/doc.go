// Package tracefile is the file and goroutine half of package trace, which
// owns neither (pkg/doc.go): it lists and opens trace files for the
// importers (Files, ReadFile, Load: what `switchyard replay` and `switchyard
// trace` read), opens the files the request-trace sinks write (Open, a
// trace.Opener; Writable checks at a writer's start that Open will work),
// and puts the bounded, lossy queue between the requests and the writer
// (Async, whose Run the owning service runs in its own goroutine, and which
// counts and logs what a failing sink loses). What goes in a file, when a file rolls and how records are
// encoded stays in package trace.
//
// It lives in servicekit rather than the CLI's internal/ because both the
// frontend (its own module, which cannot import switchyard.dev/internal)
// and cmd/switchyard use it.
package tracefile
