package tokenizer

import "strings"

// commonWords are frequent English words, mostly ones a coding agent's
// answer would use. Simulated engines emit them so that their output reads
// as (nonsense) English rather than random bytes.
const commonWords = `the of and to a in is that for it as was with be by on not he this are or his from at which
but have an they you were her she there been one all we their has would when if so no will more can who
what some time into only other new could also two may then do first any my now such like our over man even
most made after did many before must through back years where much your way well down should because each
just those people how too little state good very make world still own see men work long get here between
both life being under never day same another know while last might us great old year off come since against
go came right used take three states himself few house use during without again place around however home
small found thought went say part once general high upon school every does got united left number course
war until always away something fact though water less public put think almost hand enough far took head
yet government system better set told nothing night end why called did find going look asked later knew
point next program city business give group toward young days let room president side social given present
several order national possible rather second face per among form important often things looking early
white case john become large big need four within felt along children saw best church ever least power
development light thing seemed family interest want members mind country area others done turned although
open problem free sure code function file test value data return type error string list line change
check build run start read write call update add remove fix using model request response server client
user input output result default config path name key index state cache token block session agent tool
message stream event query load save create delete version support handle process method class object
field option buffer limit size count time memory network local remote source target format parse print
simple clear short full real true false null next last first previous current final new old`

// OutputVocab returns the ids of common English words that each encode to a
// single token with a leading space (" the", " code", ...), in the order of
// the list above, without duplicates. Simulated engines sample from it so
// that their output is readable.
func OutputVocab(t Tokenizer) []uint32 {
	var out []uint32
	seen := make(map[uint32]bool)
	for _, w := range strings.Fields(commonWords) {
		ids := t.EncodeOrdinary(" " + w)
		if len(ids) == 1 && !seen[ids[0]] {
			seen[ids[0]] = true
			out = append(out, ids[0])
		}
	}
	return out
}
