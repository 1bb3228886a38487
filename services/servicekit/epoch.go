package servicekit

import (
	"crypto/rand"
	"encoding/binary"
)

// NewEpoch is a random, non-zero epoch for one process start. A service whose
// event sequences begin again at 1 when it restarts (an engine shim, the
// kv-pool) stamps its events with it, so that followers can tell the
// restarted process from the one they followed.
func NewEpoch() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return binary.LittleEndian.Uint64(b[:]) | 1
}
