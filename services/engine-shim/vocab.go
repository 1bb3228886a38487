package engineshim

import (
	"strings"
	"sync"

	"switchyard.dev/pkg/tokenizer"
)

// commonWords are what simulated answers are made of: frequent English words
// that the frontend's default tokenizer encodes as one token each (with a
// leading space), so streamed output detokenizes to readable, if aimless,
// text.
const commonWords = `the of and to in is that it for was on are as with be at by this have from
or one had not but what all were when we there can an your which their said if do will each about
how up out them then she many some so these would other into has more her two like him see time
could no make than first been its who now people my made over did down only way find use may water
long little very after words called just where most know get through back much go good new write our
me man too any day same right look think also around another came come work three word must because
does part even place well such here take why things help put years different away again off went old
number great tell men say small every found still between name should home big give air line set own
under read last never us left end along while might next sound below saw something thought both few
those always looked show large often together asked house world going want school important until form
food keep children feet land side without boy once animals life enough took sometimes four head above
kind began almost live page got earth need far hand high year mother light parts country father let night`

var defaultVocab = sync.OnceValue(func() []uint32 {
	tok := tokenizer.Default()
	seen := map[uint32]bool{}
	var ids []uint32
	for _, w := range strings.Fields(commonWords) {
		if t := tok.EncodeOrdinary(" " + w); len(t) == 1 && !seen[t[0]] {
			seen[t[0]] = true
			ids = append(ids, t[0])
		}
	}
	for _, p := range []string{".", ","} {
		if t := tok.EncodeOrdinary(p); len(t) == 1 && !seen[t[0]] {
			seen[t[0]] = true
			ids = append(ids, t[0])
		}
	}
	return ids
})
