// Computes the expected ids of the differential test with Hugging Face
// tokenizers (npm tokenizers@0.23.2, the Rust implementation engines use).
//
//   node reference.js tokenizer.json inputs.json out.json.gz
//
// "ids" is encode(text, add_special_tokens=false). "ordinary" is the same
// with special added tokens not matched (split_special_tokens): it is
// computed on a copy of tokenizer.json without the special added tokens
// (whose remaining added tokens get renumbered on load, so they are mapped
// back by their text) and stored only where it differs from "ids".
const fs = require('fs');
const zlib = require('zlib');
const { Tokenizer } = require('tokenizers');

(async () => {
  const [tokPath, inPath, outPath] = process.argv.slice(2);
  const raw = fs.readFileSync(tokPath, 'utf8');
  const full = Tokenizer.fromString(raw);
  const j = JSON.parse(raw);
  j.added_tokens = j.added_tokens.filter((a) => !a.special);
  const ordinary = Tokenizer.fromString(JSON.stringify(j));
  const inputs = JSON.parse(fs.readFileSync(inPath, 'utf8'));
  const cases = [];
  for (const { name, text } of inputs) {
    const opts = { addSpecialTokens: false };
    const ids = (await full.encode(text, null, opts)).getIds();
    const ord = (await ordinary.encode(text, null, opts)).getIds().map((id) => {
      const orig = full.tokenToId(ordinary.idToToken(id));
      if (orig === null || orig === undefined) throw new Error(`no id for ${id}`);
      return orig;
    });
    const c = { name, text, ids };
    if (JSON.stringify(ord) !== JSON.stringify(ids)) c.ordinary = ord;
    cases.push(c);
  }
  fs.writeFileSync(outPath, zlib.gzipSync(JSON.stringify({ reference: 'tokenizers@0.23.2', cases }), { level: 9 }));
})();
