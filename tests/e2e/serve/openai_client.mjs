// Drives `pocket serve` with the official `openai` npm client (tests/e2e/test_serve.py starts the
// server and checks what this prints). Environment: OPENAI_MODULE (the package's directory),
// BASE_URL, MODEL, API_KEY, CHAT (1: the model has a chat template). Prints one JSON object: the
// responses and the errors the client raised, for the Python side to check (it validates JSON
// outputs against their schemas with python3-jsonschema).
const { default: OpenAI } = await import(process.env.OPENAI_MODULE);

const client = new OpenAI({ baseURL: process.env.BASE_URL, apiKey: process.env.API_KEY, maxRetries: 0 });
const model = process.env.MODEL;
const chat = process.env.CHAT === '1';
const out = { errors: {} };

async function errorOf(fn) {
  try {
    await fn();
    return null;
  } catch (e) {
    return { name: e.constructor.name, status: e.status ?? null, message: e.message,
             param: e.param ?? null, code: e.code ?? null, type: e.type ?? null };
  }
}

out.models = (await client.models.list()).data.map((m) => m.id);

// Completions: the same seed gives the same text streamed and not.
const cparams = { model, prompt: 'Once upon a time', max_tokens: 24, temperature: 0.9, seed: 7 };
const whole = await client.completions.create(cparams);
out.completion = whole;
const cstream = await client.completions.create({ ...cparams, stream: true,
                                                  stream_options: { include_usage: true } });
const cchunks = [];
for await (const chunk of cstream) cchunks.push(chunk);
out.completion_chunks = cchunks;

if (chat) {
  const params = { model, messages: [{ role: 'system', content: 'You are terse.' },
                                     { role: 'user', content: 'Say something.' }],
                   max_tokens: 20, temperature: 0.8, seed: 42 };
  out.chat = await client.chat.completions.create(params);
  const stream = await client.chat.completions.create({ ...params, stream: true,
                                                        stream_options: { include_usage: true } });
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  out.chat_chunks = chunks;
  // Structured output: a strict JSON schema.
  const schema = { type: 'object', properties: { name: { type: 'string', maxLength: 12 },
                                                 age: { type: 'integer', minimum: 0, maximum: 120 } },
                   required: ['name', 'age'], additionalProperties: false };
  out.schema = schema;
  out.schema_answers = [];
  for (const seed of [1, 2, 3]) {
    const r = await client.chat.completions.create({
      model, messages: [{ role: 'user', content: 'Describe a person as JSON.' }], max_tokens: 200,
      temperature: 1.0, seed,
      response_format: { type: 'json_schema', json_schema: { name: 'person', schema, strict: true } } });
    out.schema_answers.push([r.choices[0].message.content, r.choices[0].finish_reason]);
  }
  const obj = await client.chat.completions.create({
    model, messages: [{ role: 'user', content: 'JSON please.' }], max_tokens: 200, seed: 5,
    response_format: { type: 'json_object' } });
  out.json_object_answer = [obj.choices[0].message.content, obj.choices[0].finish_reason];
}

// Errors the client raises as its own types.
out.errors.unknown_model = await errorOf(() => client.completions.create({ ...cparams, model: 'nope' }));
out.errors.bad_temperature = await errorOf(() => client.completions.create({ ...cparams, temperature: 'hot' }));
out.errors.out_of_range = await errorOf(() => client.completions.create({ ...cparams, top_p: 3 }));
out.errors.huge_max_tokens = await errorOf(() => client.completions.create({ ...cparams, max_tokens: 100000000 }));
const badKey = new OpenAI({ baseURL: process.env.BASE_URL, apiKey: 'wrong-key', maxRetries: 0 });
out.errors.bad_key = await errorOf(() => badKey.models.list());
if (!chat) {
  out.errors.no_template = await errorOf(() => client.chat.completions.create({
    model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }));
}
process.stdout.write(JSON.stringify(out));
