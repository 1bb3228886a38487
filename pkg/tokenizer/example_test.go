package tokenizer_test

import (
	"fmt"

	"switchyard.dev/pkg/tokenizer"
)

func Example() {
	tok := tokenizer.Default()
	ids := tok.Encode("<|im_start|>user\nHello, world!<|im_end|>")
	fmt.Println(ids)
	fmt.Println(tok.EncodeOrdinary("<|im_end|>")) // user text cannot inject control tokens
	start, _ := tok.SpecialID("<|im_start|>")
	fmt.Println(start, tok.Decode(ids[1:4]))
	// Output:
	// [151644 872 198 9707 11 1879 0 151645]
	// [27 91 318 6213 91 29]
	// 151644 user
	// Hello
}

func ExampleStreamDecoder() {
	tok := tokenizer.Default()
	d := tokenizer.NewStreamDecoder(tok)
	for _, id := range tok.Encode("ok 🎉!") {
		if s := d.Next(id); s != "" {
			fmt.Printf("%q\n", s)
		}
	}
	fmt.Printf("%q\n", d.Flush())
	// The emoji's bytes span several tokens: the space before it comes out
	// at once, the emoji only when complete.

	// Output:
	// "ok"
	// " "
	// "🎉"
	// "!"
	// ""
}
