package servicekit

import (
	"flag"
	"fmt"
	"math"
	"time"
)

// Bound makes flag name of fs refuse, when parsed, a number or a duration
// that ok rejects (want says which it takes): a service whose defaults
// replace a zero or negative value (withDefaults, which cannot fail) would
// otherwise take an operator's mistake for a wish for the default without
// a word. Go callers that build a Config leave fields zero for the
// defaults; only the command line and the environment are held to it. The
// help names the flag's type, which the wrapper would hide, and want.
func Bound(fs *flag.FlagSet, name, want string, ok func(float64) bool) {
	f := fs.Lookup(name)
	typ, _ := flag.UnquoteUsage(f)
	f.Usage += fmt.Sprintf(" (`%s` %s)", typ, want)
	g := f.Value.(flag.Getter)
	if _, isDuration := g.Get().(time.Duration); isDuration {
		f.Value = &boundedValue[zeroDuration]{g, want, ok}
	} else {
		f.Value = &boundedValue[zeroNumber]{g, want, ok}
	}
}

// boundedValue is a number or duration flag's value that refuses what ok
// rejects. Z spells the zero of its kind, which the flag package asks of
// a boundedValue it makes empty to tell whether a default is worth
// printing: a zero default then goes unprinted, as for a plain flag.
type boundedValue[Z zeroSpelling] struct {
	flag.Getter
	want string
	ok   func(float64) bool
}

type zeroSpelling interface{ zero() string }

type (
	zeroNumber   struct{}
	zeroDuration struct{}
)

func (zeroNumber) zero() string   { return "0" }
func (zeroDuration) zero() string { return "0s" }

func (b *boundedValue[Z]) Set(s string) error {
	if err := b.Getter.Set(s); err != nil {
		return err
	}
	v := math.NaN() // refused by any ok
	switch x := b.Get().(type) {
	case int:
		v = float64(x)
	case int64:
		v = float64(x)
	case uint:
		v = float64(x)
	case uint64:
		v = float64(x)
	case float64:
		v = x
	case time.Duration:
		v = float64(x)
	}
	if !b.ok(v) {
		return fmt.Errorf("want %s", b.want)
	}
	return nil
}

// String is the value's; the zero of its kind for the empty boundedValue
// the flag package makes to tell whether a default is worth printing.
func (b *boundedValue[Z]) String() string {
	if b.Getter == nil {
		var z Z
		return z.zero()
	}
	return b.Getter.String()
}
