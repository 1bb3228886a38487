package frontend

import (
	"bufio"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
)

// OperatorTenant in place of a tenant marks an operator's key: it reads
// every tenant's sessions through the admin API and serves no inference.
const OperatorTenant = "*"

// keyring authenticates API keys. It keeps only their SHA-256 digests (the
// keys file holds nothing else), and checks a presented key against every
// entry in constant time, so neither a key's bytes nor its place in the file
// shows in how long a check takes.
type keyring struct {
	entries []keyEntry
	tenants bool // some key is a tenant's (not only operators'): inference needs keys
	// byDigest is each digest's tenant, for add to refuse a key given for
	// two; lookup never reads it (a map probe's time would depend on the key).
	byDigest map[[sha256.Size]byte]string
}

type keyEntry struct {
	digest [sha256.Size]byte
	tenant string
}

// add registers a key by its digest. A key already registered for another
// tenant is refused: which of the two it authenticated as would depend on
// the entries' order, and one of them may be an operator's.
func (k *keyring) add(digest [sha256.Size]byte, tenant string) error {
	if prev, ok := k.byDigest[digest]; ok {
		if prev != tenant {
			return fmt.Errorf("a key is given for tenant %q and for %q; one key names one tenant", prev, tenant)
		}
		return nil
	}
	if k.byDigest == nil {
		k.byDigest = map[[sha256.Size]byte]string{}
	}
	k.byDigest[digest] = tenant
	k.entries = append(k.entries, keyEntry{digest: digest, tenant: tenant})
	if tenant != OperatorTenant {
		k.tenants = true
	}
	return nil
}

// lookup returns the tenant of key ("" and false for none).
func (k *keyring) lookup(key string) (string, bool) {
	if key == "" {
		return "", false
	}
	d := sha256.Sum256([]byte(key))
	found := -1
	for i := range k.entries {
		if subtle.ConstantTimeCompare(d[:], k.entries[i].digest[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return "", false
	}
	return k.entries[found].tenant, true
}

func (k *keyring) empty() bool { return len(k.entries) == 0 }

// newKeyring holds the plaintext keys of Config.APIKeys (flags, tests) and
// the digests of the keys file.
func newKeyring(plain map[string]string, file string) (*keyring, error) {
	k := &keyring{}
	for key, t := range plain {
		if err := k.add(sha256.Sum256([]byte(key)), t); err != nil {
			return nil, err
		}
	}
	if file == "" {
		return k, nil
	}
	if err := loadKeysFile(file, k); err != nil {
		return nil, err
	}
	return k, nil
}

// loadKeysFile reads "<sha256 hex of the key> <tenant>" lines ('#' starts a
// comment; tenant OperatorTenant for an operator key). A line with anything
// but a digest is refused: the file must never hold a usable key.
func loadKeysFile(path string, k *keyring) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		if line == "" {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 {
			return fmt.Errorf("%s:%d: want \"<sha256 of the key> <tenant>\"", path, n)
		}
		raw, err := hex.DecodeString(strings.TrimPrefix(fields[0], "sha256:"))
		if err != nil || len(raw) != sha256.Size {
			return fmt.Errorf("%s:%d: the key must be stored as its SHA-256 (64 hex digits: printf %%s KEY | sha256sum), not as itself", path, n)
		}
		if fields[1] != OperatorTenant {
			if err := validTenant(fields[1]); err != nil {
				return fmt.Errorf("%s:%d: %w", path, n, err)
			}
		}
		if err := k.add([sha256.Size]byte(raw), fields[1]); err != nil {
			return fmt.Errorf("%s:%d: %w", path, n, err)
		}
	}
	return sc.Err()
}
