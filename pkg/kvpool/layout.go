package kvpool

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"switchyard.dev/pkg/kv"
)

// Part says which half of a rank's KV an object holds.
type Part uint8

const (
	PartK Part = iota // keys
	PartV             // values
)

func (p Part) String() string {
	if p == PartK {
		return "k"
	}
	return "v"
}

// Object names one stored object: the keys or values of one tensor-parallel
// rank for one page.
type Object struct {
	Page kv.BlockHash
	Rank uint16
	Part Part
}

// MaxTPSize bounds Layout.TPSize.
const MaxTPSize = 256

// Layout says how a page is split into objects and how their keys are
// spelled (SGLang's derived MHA layout with pipeline size 1: for each TP
// rank, `<hash>_<rank>_k` and `<hash>_<rank>_v`, with an optional prefix).
// The zero value is one rank and no prefix.
type Layout struct {
	// TPSize is the number of tensor-parallel ranks that each store their
	// own share of a page (0 = 1).
	TPSize int
	// KeyPrefix, when set, is prepended to every key with an underscore
	// (SGLang's extra_backend_tag).
	KeyPrefix string
}

func (l Layout) withDefaults() Layout {
	if l.TPSize == 0 {
		l.TPSize = 1
	}
	return l
}

// Validate reports whether the layout is usable.
func (l Layout) Validate() error {
	l = l.withDefaults()
	if l.TPSize < 1 || l.TPSize > MaxTPSize {
		return fmt.Errorf("kvpool: TP size %d out of range (1..%d)", l.TPSize, MaxTPSize)
	}
	if strings.ContainsAny(l.KeyPrefix, "_ \t\n") {
		return fmt.Errorf("kvpool: key prefix %q must not contain '_' or spaces", l.KeyPrefix)
	}
	return nil
}

// ObjectsPerPage is how many objects make one complete page.
func (l Layout) ObjectsPerPage() int { return 2 * l.withDefaults().TPSize }

// Objects appends the objects of page h to dst, rank by rank, keys before
// values.
func (l Layout) Objects(dst []Object, h kv.BlockHash) []Object {
	for r := range l.withDefaults().TPSize {
		dst = append(dst, Object{Page: h, Rank: uint16(r), Part: PartK}, Object{Page: h, Rank: uint16(r), Part: PartV})
	}
	return dst
}

// Contains reports whether o belongs to this layout (its rank exists).
func (l Layout) Contains(o Object) bool {
	return int(o.Rank) < l.withDefaults().TPSize && o.Part <= PartV
}

// Key spells o's object key: `[prefix_]<16 hex digits>_<rank>_<k|v>`.
func (l Layout) Key(o Object) string {
	var b strings.Builder
	b.Grow(len(l.KeyPrefix) + 24)
	if l.KeyPrefix != "" {
		b.WriteString(l.KeyPrefix)
		b.WriteByte('_')
	}
	var hex [16]byte
	v := uint64(o.Page)
	for i := 15; i >= 0; i-- {
		hex[i] = "0123456789abcdef"[v&15]
		v >>= 4
	}
	b.Write(hex[:])
	b.WriteByte('_')
	b.WriteString(strconv.Itoa(int(o.Rank)))
	b.WriteByte('_')
	b.WriteString(o.Part.String())
	return b.String()
}

// ErrBadKey is returned by ParseKey for a key that is not one of this
// layout's object keys.
var ErrBadKey = errors.New("kvpool: not an object key of this layout")

// ParseKey reads an object key written by Key (with the same layout). It is
// the decoder for keys arriving from outside (a pool's event stream), so it
// rejects anything else rather than guessing.
func (l Layout) ParseKey(key string) (Object, error) {
	bad := func(why string) (Object, error) {
		return Object{}, fmt.Errorf("%w: %q: %s", ErrBadKey, key, why)
	}
	s := key
	if l.KeyPrefix != "" {
		rest, ok := strings.CutPrefix(s, l.KeyPrefix+"_")
		if !ok {
			return bad("missing prefix")
		}
		s = rest
	}
	hash, rest, ok := strings.Cut(s, "_")
	if !ok || len(hash) != 16 {
		return bad("want 16 hex digits of page hash")
	}
	h, err := strconv.ParseUint(hash, 16, 64)
	if err != nil || strings.ToLower(hash) != hash {
		return bad("page hash is not lower-case hex")
	}
	rank, part, ok := strings.Cut(rest, "_")
	if !ok || rank == "" || len(rank) > 3 || (len(rank) > 1 && rank[0] == '0') {
		return bad("want _<rank>_<k|v>")
	}
	if strings.Trim(rank, "0123456789") != "" {
		return bad("rank is not a number")
	}
	r, _ := strconv.Atoi(rank) // at most three digits
	o := Object{Page: kv.BlockHash(h), Rank: uint16(r)}
	switch part {
	case "k":
		o.Part = PartK
	case "v":
		o.Part = PartV
	default:
		return bad("part must be k or v")
	}
	if !l.Contains(o) {
		return bad(fmt.Sprintf("rank %d outside TP size %d", r, l.withDefaults().TPSize))
	}
	return o, nil
}
