// Re-derives what HF tokenizers believes about every code point, for the tables in unicode.cc:
//   node hf_unicode_scan.js <tokenizers package dir> <tokenizer.json> > hf_scan.txt
// One line per scalar value: "<hex> <class> <nfc probes...>", where class is how the Qwen2 split
// regex sees it (L letter, N number, W white space, O other; \r and \n come out as O) and the
// probes are hex UTF-8 of NFC(c), NFC("x" U+0345 c), NFC(c U+0301) and NFC("a" c). Compare with
// utf8proc (category, White_Space, utf8proc_map with UTF8PROC_COMPOSE) and list the differences:
// class differences go to kUnicode16Additions, NFC differences to kNfcOpaqueForHf. Also check the
// composition of every canonical decomposition (e.g. U+11935 U+11930 -> U+11938).
'use strict';

async function main() {
  const [packageDir, tokenizerPath] = process.argv.slice(2);
  const { Tokenizer } = require(packageDir);
  const tokenizer = await Tokenizer.fromFile(tokenizerPath);
  const split = tokenizer.getPreTokenizer();
  const nfc = tokenizer.getNormalizer();
  const hex = (s) => Buffer.from(s).toString('hex');
  const lines = [];
  for (let cp = 0; cp <= 0x10ffff; cp++) {
    if (cp >= 0xd800 && cp <= 0xdfff) continue;
    const c = String.fromCodePoint(cp);
    // "cc1": letters and others form one piece "cc"; numbers and spaces split. "ac": a letter
    // joins, an "other" does not. "cc": white space stays one piece at the end, numbers split.
    let cls;
    if (split.preTokenizeString(c + c + '1').length === 2) {
      cls = split.preTokenizeString('a' + c).length === 1 ? 'L' : 'O';
    } else {
      cls = split.preTokenizeString(c + c).length === 1 ? 'W' : 'N';
    }
    const probes = [c, 'x\u0345' + c, c + '\u0301', 'a' + c].map((s) => hex(nfc.normalizeString(s)));
    lines.push(`${cp.toString(16)} ${cls} ${probes.join(' ')}`);
  }
  process.stdout.write(lines.join('\n') + '\n');
}

main().catch((err) => {
  process.stderr.write(`${err && err.stack ? err.stack : err}\n`);
  process.exit(1);
});
