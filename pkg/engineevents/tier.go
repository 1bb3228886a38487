package engineevents

import "switchyard.dev/pkg/kv"

// TierOf maps an engine's medium string to a tier, ignoring case, with the
// names vLLM, SGLang and Dynamo use: GPU/DEVICE → device; CPU, CPU_PINNED,
// CPU_TIER1 → host; CPU_TIER2, DISK, NVME, STORAGE → disk; EXTERNAL,
// NETWORK, REMOTE, SHARED → shared. An empty medium is the device. ok is
// false for names it does not know.
func TierOf(medium []byte) (t kv.Tier, ok bool) {
	var buf [16]byte
	if len(medium) > len(buf) {
		return 0, false
	}
	up := buf[:len(medium)]
	for i, c := range medium {
		if c >= 'a' && c <= 'z' {
			c -= 'a' - 'A'
		}
		up[i] = c
	}
	switch string(up) {
	case "", "GPU", "DEVICE", "CUDA", "HBM":
		return kv.TierDevice, true
	case "CPU", "CPU_PINNED", "CPU_TIER1", "HOST":
		return kv.TierHost, true
	case "CPU_TIER2", "DISK", "NVME", "STORAGE", "SSD":
		return kv.TierDisk, true
	case "EXTERNAL", "NETWORK", "REMOTE", "SHARED":
		return kv.TierShared, true
	}
	return 0, false
}
