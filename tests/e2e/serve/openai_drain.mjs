// 8 streams through the official `openai` npm client while `pocket serve` is stopped with SIGTERM
// (tests/e2e/test_serve_hostile.py sends it when this prints STARTED). Environment: OPENAI_MODULE,
// BASE_URL, MODEL, MAX_TOKENS. Prints one JSON line per stream at the end: the finish reason of
// its last choice chunk, the chunks read, and the error the client raised (null: none).
const { default: OpenAI } = await import(process.env.OPENAI_MODULE);

const client = new OpenAI({ baseURL: process.env.BASE_URL, apiKey: 'none', maxRetries: 0 });
let started = 0;
async function one() {
  const out = { finish_reason: null, chunks: 0, error: null };
  try {
    const stream = await client.completions.create({
      model: process.env.MODEL, prompt: 'Once upon a time',
      max_tokens: Number(process.env.MAX_TOKENS), temperature: 0, stream: true, ignore_eos: true });
    for await (const chunk of stream) {
      if (++out.chunks === 1 && ++started === 8) console.log('STARTED');
      for (const c of chunk.choices) if (c.finish_reason) out.finish_reason = c.finish_reason;
    }
  } catch (e) {
    out.error = `${e.constructor.name}: ${e.message}`;
  }
  return out;
}
const results = await Promise.all(Array.from({ length: 8 }, one));
console.log(JSON.stringify(results));
