package kvhash

import (
	"fmt"
	"testing"

	"github.com/zeebo/xxh3"
)

// xxh3Vectors come from the reference xxHash C implementation (XXH3_64bits_withSeed,
// through the hash-wasm npm package): input byte i is (i*131+7)&0xff. They pin the
// library to the hash engines and Dynamo compute, so block hashes agree across
// languages.
var xxh3Vectors = []struct {
	n    int
	seed uint64
	want uint64
}{
	{0, 0, 0x2d06800538d394c2},
	{0, 1337, 0xd1f3e77444430ab9},
	{0, 11400714819323198485, 0x602b0e2cd6662c8b},
	{1, 0, 0x4c5cca45d0f4811f},
	{1, 1337, 0xcb2872d8fd455c72},
	{1, 11400714819323198485, 0x2f3acd3805f81de3},
	{3, 0, 0x6e3e2670e61106ac},
	{3, 1337, 0xfc581e06d78e53fc},
	{3, 11400714819323198485, 0xbc74611d87f659e0},
	{4, 0, 0x5c4c63133443d03f},
	{4, 1337, 0xf9199e9099b4a049},
	{4, 11400714819323198485, 0x6c3753177c607de4},
	{8, 0, 0xf9fd4dd0b04d78f5},
	{8, 1337, 0x37e88e9e5e8399d6},
	{8, 11400714819323198485, 0xbc72d0531396303f},
	{16, 0, 0x86abf6baccea0858},
	{16, 1337, 0x70d8d5774c98da80},
	{16, 11400714819323198485, 0x69d001b16ecf450a},
	{17, 0, 0xb58bf5dc5022d071},
	{17, 1337, 0x43e7a7d81c882f45},
	{17, 11400714819323198485, 0xb7c99d19be27eb69},
	{64, 0, 0x1291d2d4042330dd},
	{64, 1337, 0xc7ed4d6e301e5b9b},
	{64, 11400714819323198485, 0x543fa55d8db03991},
	{128, 0, 0x10d17f72c0ccba41},
	{128, 1337, 0xe6a7a5db20c28f6e},
	{128, 11400714819323198485, 0x49b81c6e0abb9305},
	{129, 0, 0x1648bdc3db49d1a2},
	{129, 1337, 0x4aac64bf15af9ef3},
	{129, 11400714819323198485, 0x5e3831b221810b00},
	{240, 0, 0xb6cfaf343fab81e6},
	{240, 1337, 0x234b2836bedf36ee},
	{240, 11400714819323198485, 0x76a73ec26433f82c},
	{241, 0, 0x956cae592c67279e},
	{241, 1337, 0xc30a108a2d9cd415},
	{241, 11400714819323198485, 0x2be236ba3bacf75c},
	{256, 0, 0xb15e550733c5dfac},
	{256, 1337, 0x393121a7f11f2e41},
	{256, 11400714819323198485, 0x92999d62f0815eef},
	{1024, 0, 0x70bd377d9574f4bb},
	{1024, 1337, 0xb5e8c03da8ae7421},
	{1024, 11400714819323198485, 0xd8cf6b464541f232},
}

func TestXXH3MatchesReference(t *testing.T) {
	for _, v := range xxh3Vectors {
		b := make([]byte, v.n)
		for i := range b {
			b[i] = byte(i*131 + 7)
		}
		if got := xxh3.HashSeed(b, v.seed); got != v.want {
			t.Errorf("xxh3(len %d, seed %d) = %#x, want %#x", v.n, v.seed, got, v.want)
		}
	}
}

func tokens(n int, start uint32) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = start + uint32(i)*7
	}
	return out
}

func TestBlocksOnlyFullBlocks(t *testing.T) {
	h := New(16, "", "")
	for _, n := range []int{0, 1, 15, 16, 17, 31, 32, 100} {
		if got, want := len(h.Blocks(tokens(n, 1))), n/16; got != want {
			t.Errorf("%d tokens: %d blocks, want %d", n, got, want)
		}
	}
}

func TestSharedPrefixSharesHashes(t *testing.T) {
	h := New(4, "", "")
	a := h.Blocks([]uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
	b := h.Blocks([]uint32{1, 2, 3, 4, 5, 6, 7, 8, 99, 10, 11, 12})
	if a[0] != b[0] || a[1] != b[1] {
		t.Fatalf("equal prefixes hash differently: %v vs %v", a, b)
	}
	if a[2] == b[2] {
		t.Fatalf("different third blocks share a hash")
	}
	// The same block at another position is another block.
	c := h.Blocks([]uint32{5, 6, 7, 8})
	if c[0] == a[1] {
		t.Fatalf("position-independent hash: block 1 of a equals block 0 of c")
	}
	if a[0] != Root(LocalHash([]uint32{1, 2, 3, 4}, BaseSeed)) {
		t.Fatalf("root sequence hash is not the local hash")
	}
}

func TestSaltAndLoRASeparateHashSpaces(t *testing.T) {
	toks := tokens(64, 3)
	plain := New(16, "", "").Blocks(toks)
	salted := New(16, "", "tenant-a").Blocks(toks)
	other := New(16, "", "tenant-b").Blocks(toks)
	lora := New(16, "adapter", "").Blocks(toks)
	for i := range plain {
		if plain[i] == salted[i] || salted[i] == other[i] || plain[i] == lora[i] {
			t.Fatalf("block %d shared across hash spaces", i)
		}
	}
	if Seed("", "") != BaseSeed {
		t.Fatalf("empty LoRA and salt must mean the base seed")
	}
}

func TestExtendEqualsCold(t *testing.T) {
	h := New(16, "", "salt")
	for _, split := range []int{0, 15, 16, 33, 160, 170} {
		toks := tokens(170, 11)
		prev := h.Blocks(toks[:split])
		got := h.Extend(prev, toks)
		want := h.Blocks(toks)
		if len(got) != len(want) {
			t.Fatalf("split %d: %d blocks, want %d", split, len(got), len(want))
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("split %d: block %d differs", split, i)
			}
		}
	}
}

func FuzzExtend(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8}, uint8(3), uint8(2))
	f.Fuzz(func(t *testing.T, raw []byte, bs, split uint8) {
		h := New(int(bs%8)+1, "", "")
		toks := make([]uint32, len(raw))
		for i, b := range raw {
			toks[i] = uint32(b)
		}
		cut := 0
		if len(toks) > 0 {
			cut = int(split) % (len(toks) + 1)
		}
		got := h.Extend(h.Blocks(toks[:cut]), toks)
		want := h.Blocks(toks)
		if len(got) != len(want) {
			t.Fatalf("%d blocks, want %d", len(got), len(want))
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("block %d differs", i)
			}
		}
	})
}

func BenchmarkBlocks(b *testing.B) {
	for _, n := range []int{16 << 10, 128 << 10} {
		toks := tokens(n, 5)
		h := New(16, "", "")
		b.Run(fmt.Sprintf("tokens=%d", n), func(b *testing.B) {
			b.SetBytes(int64(4 * n))
			for b.Loop() {
				h.Blocks(toks)
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}
