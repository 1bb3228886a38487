package engineevents

import (
	"encoding/binary"
	"errors"
	"math"
)

// A hand-written msgpack reader: the batch shapes are few and fixed, and a
// reader that returns views into the payload (no reflection, no interface
// boxing) is what makes decoding cheap. Every length is checked against the
// bytes left before it is used, so a hostile length prefix cannot make us
// allocate or read past the end.

var (
	errTruncated = errors.New("msgpack: truncated")
	errType      = errors.New("msgpack: unexpected type")
	errDepth     = errors.New("msgpack: nesting too deep")
)

type mtype uint8

const (
	mNil mtype = iota
	mBool
	mInt // signed or unsigned integer
	mFloat
	mStr
	mBin
	mArray
	mMap
	mExt
	mInvalid
)

type reader struct {
	b []byte
	p int
}

func (r *reader) left() int { return len(r.b) - r.p }

// peek reports the type of the next value without consuming it.
func (r *reader) peek() mtype {
	if r.p >= len(r.b) {
		return mInvalid
	}
	c := r.b[r.p]
	switch {
	case c <= 0x7f || c >= 0xe0:
		return mInt
	case c <= 0x8f:
		return mMap
	case c <= 0x9f:
		return mArray
	case c <= 0xbf:
		return mStr
	}
	switch c {
	case 0xc0:
		return mNil
	case 0xc2, 0xc3:
		return mBool
	case 0xc4, 0xc5, 0xc6:
		return mBin
	case 0xc7, 0xc8, 0xc9, 0xd4, 0xd5, 0xd6, 0xd7, 0xd8:
		return mExt
	case 0xca, 0xcb:
		return mFloat
	case 0xcc, 0xcd, 0xce, 0xcf, 0xd0, 0xd1, 0xd2, 0xd3:
		return mInt
	case 0xd9, 0xda, 0xdb:
		return mStr
	case 0xdc, 0xdd:
		return mArray
	case 0xde, 0xdf:
		return mMap
	}
	return mInvalid // 0xc1 is never used
}

func (r *reader) byte1() (byte, error) {
	if r.p >= len(r.b) {
		return 0, errTruncated
	}
	c := r.b[r.p]
	r.p++
	return c, nil
}

func (r *reader) n(k int) ([]byte, error) {
	if k < 0 || r.left() < k {
		return nil, errTruncated
	}
	v := r.b[r.p : r.p+k]
	r.p += k
	return v, nil
}

func (r *reader) uintN(k int) (uint64, error) {
	v, err := r.n(k)
	if err != nil {
		return 0, err
	}
	switch k {
	case 1:
		return uint64(v[0]), nil
	case 2:
		return uint64(binary.BigEndian.Uint16(v)), nil
	case 4:
		return uint64(binary.BigEndian.Uint32(v)), nil
	}
	return binary.BigEndian.Uint64(v), nil
}

// nilNext consumes a nil if one is next.
func (r *reader) nilNext() bool {
	if r.p < len(r.b) && r.b[r.p] == 0xc0 {
		r.p++
		return true
	}
	return false
}

// containerLen reads an array or map header; each map entry counts once.
// The count is bounded by the bytes left (every element takes at least one
// byte), so callers may size slices by it.
func (r *reader) containerLen(want mtype) (int, error) {
	c, err := r.byte1()
	if err != nil {
		return 0, err
	}
	var n uint64
	switch {
	case want == mArray && c >= 0x90 && c <= 0x9f:
		n = uint64(c & 0x0f)
	case want == mMap && c >= 0x80 && c <= 0x8f:
		n = uint64(c & 0x0f)
	case want == mArray && c == 0xdc, want == mMap && c == 0xde:
		n, err = r.uintN(2)
	case want == mArray && c == 0xdd, want == mMap && c == 0xdf:
		n, err = r.uintN(4)
	default:
		r.p--
		return 0, errType
	}
	if err != nil {
		return 0, err
	}
	per := uint64(1)
	if want == mMap {
		per = 2
	}
	if n*per > uint64(r.left()) {
		return 0, errTruncated
	}
	return int(n), nil
}

func (r *reader) arrayLen() (int, error) { return r.containerLen(mArray) }
func (r *reader) mapLen() (int, error)   { return r.containerLen(mMap) }

// str reads a string as a view into the payload.
func (r *reader) str() ([]byte, error) {
	c, err := r.byte1()
	if err != nil {
		return nil, err
	}
	switch {
	case c >= 0xa0 && c <= 0xbf:
		return r.view(uint64(c & 0x1f))
	case c >= 0xd9 && c <= 0xdb: // str8, str16, str32
		return r.sized(1 << (c - 0xd9))
	}
	r.p--
	return nil, errType
}

// bin reads a byte string as a view into the payload.
func (r *reader) bin() ([]byte, error) {
	c, err := r.byte1()
	if err != nil {
		return nil, err
	}
	if c >= 0xc4 && c <= 0xc6 { // bin8, bin16, bin32
		return r.sized(1 << (c - 0xc4))
	}
	r.p--
	return nil, errType
}

// sized reads the k-byte length (1, 2 or 4) of a string or byte string and
// then the bytes it counts.
func (r *reader) sized(k int) ([]byte, error) {
	n, err := r.uintN(k)
	if err != nil {
		return nil, err
	}
	return r.view(n)
}

// view consumes the next n bytes, as a view into the payload.
func (r *reader) view(n uint64) ([]byte, error) {
	if n > uint64(r.left()) {
		return nil, errTruncated
	}
	return r.n(int(n))
}

// integer reads any msgpack integer. neg is set for negative values, whose
// two's-complement bits are returned.
func (r *reader) integer() (v uint64, neg bool, err error) {
	c, err := r.byte1()
	if err != nil {
		return 0, false, err
	}
	switch {
	case c <= 0x7f:
		return uint64(c), false, nil
	case c >= 0xe0:
		return uint64(int64(int8(c))), true, nil
	}
	switch c {
	case 0xcc:
		v, err = r.uintN(1)
	case 0xcd:
		v, err = r.uintN(2)
	case 0xce:
		v, err = r.uintN(4)
	case 0xcf:
		v, err = r.uintN(8)
	case 0xd0:
		v, err = r.uintN(1)
		v = uint64(int64(int8(v)))
	case 0xd1:
		v, err = r.uintN(2)
		v = uint64(int64(int16(v)))
	case 0xd2:
		v, err = r.uintN(4)
		v = uint64(int64(int32(v)))
	case 0xd3:
		v, err = r.uintN(8)
	default:
		r.p--
		return 0, false, errType
	}
	return v, c >= 0xd0 && int64(v) < 0, err
}

// number reads an integer or a float as float64 (batch timestamps).
func (r *reader) number() (float64, error) {
	switch r.peek() {
	case mFloat:
		c, _ := r.byte1()
		if c == 0xca {
			v, err := r.uintN(4)
			return float64(math.Float32frombits(uint32(v))), err
		}
		v, err := r.uintN(8)
		return math.Float64frombits(v), err
	case mInt:
		v, neg, err := r.integer()
		if neg {
			return float64(int64(v)), err
		}
		return float64(v), err
	}
	return 0, errType
}

// maxDepth bounds recursion in skip; real batches nest four levels deep.
const maxDepth = 32

// skip consumes one value of any type.
func (r *reader) skip() error { return r.skipDepth(0) }

func (r *reader) skipDepth(depth int) error {
	if depth > maxDepth {
		return errDepth
	}
	switch r.peek() {
	case mNil, mBool:
		r.p++
		return nil
	case mInt:
		_, _, err := r.integer()
		return err
	case mFloat:
		_, err := r.number()
		return err
	case mStr:
		_, err := r.str()
		return err
	case mBin:
		_, err := r.bin()
		return err
	case mArray, mMap:
		t := r.peek()
		n, err := r.containerLen(t)
		if err != nil {
			return err
		}
		if t == mMap {
			n *= 2
		}
		for range n {
			if err := r.skipDepth(depth + 1); err != nil {
				return err
			}
		}
		return nil
	case mExt:
		c, _ := r.byte1()
		var n uint64
		if c >= 0xd4 { // fixext 1, 2, 4, 8, 16
			n = 1 << (c - 0xd4)
		} else { // ext8, ext16, ext32
			var err error
			if n, err = r.uintN(1 << (c - 0xc7)); err != nil {
				return err
			}
		}
		if n+1 > uint64(r.left()) {
			return errTruncated
		}
		r.p += int(n) + 1 // type byte + data
		return nil
	case mInvalid:
		if r.p >= len(r.b) {
			return errTruncated
		}
		return errType
	}
	return errType
}
