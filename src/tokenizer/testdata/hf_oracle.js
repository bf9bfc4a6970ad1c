// Test oracle: encodes text with the real Hugging Face `tokenizers` (Node binding), as
// hf_differential_test.cc compares against it.
//   node hf_oracle.js <tokenizers package dir> <tokenizer.json> < in.jsonl > out.jsonl
// Input: one {"text": "..."} per line. Output: one {"ids": [...]} per input line, same order
// (ids of encode(text, null, {addSpecialTokens: false})).
'use strict';
const fs = require('fs');

async function main() {
  const [packageDir, tokenizerPath] = process.argv.slice(2);
  if (!packageDir || !tokenizerPath) {
    process.stderr.write('usage: node hf_oracle.js <tokenizers package dir> <tokenizer.json>\n');
    process.exit(2);
  }
  const { Tokenizer } = require(packageDir);
  const tokenizer = await Tokenizer.fromFile(tokenizerPath);
  const lines = fs.readFileSync(0, 'utf8').split('\n').filter((line) => line.length > 0);
  const out = [];
  for (const line of lines) {
    const { text } = JSON.parse(line);
    const encoding = await tokenizer.encode(text, null, { addSpecialTokens: false });
    out.push(JSON.stringify({ ids: Array.from(encoding.getIds()) }));
  }
  fs.writeFileSync(1, out.join('\n') + (out.length ? '\n' : ''));
}

main().catch((err) => {
  process.stderr.write(`hf_oracle.js: ${err && err.stack ? err.stack : err}\n`);
  process.exit(1);
});
