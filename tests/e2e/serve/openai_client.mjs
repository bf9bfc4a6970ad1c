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

  // Tools: each call's arguments must parse and match its tool's schema (checked in Python).
  const tools = [
    { type: 'function', function: { name: 'get_weather', description: 'The weather in a city',
      parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 16 },
                                                  days: { type: 'integer', minimum: 1, maximum: 7 } },
                    required: ['city', 'days'], additionalProperties: false } } },
    { type: 'function', function: { name: 'add', description: 'Adds two integers',
      parameters: { type: 'object', properties: { a: { type: 'integer' }, b: { type: 'integer' } },
                    required: ['a', 'b'], additionalProperties: false } } },
  ];
  out.tools = tools;
  const ask = [{ role: 'user', content: 'What is the weather in Paris?' }];
  out.tool_calls = [];
  for (const [seed, choice] of [[1, 'required'], [2, 'required'],
                                [3, { type: 'function', function: { name: 'add' } }]]) {
    const r = await client.chat.completions.create({ model, messages: ask, tools, tool_choice: choice,
                                                     max_tokens: 120, seed });
    out.tool_calls.push({ choice, message: r.choices[0].message, finish: r.choices[0].finish_reason });
  }
  // Streamed, the same call for the same seed (the client's stream helper accumulates it).
  const tstream = await client.chat.completions.create({ model, messages: ask, tools,
                                                         tool_choice: 'required', max_tokens: 120,
                                                         seed: 1, stream: true });
  const tchunks = [];
  for await (const chunk of tstream) tchunks.push(chunk);
  out.tool_chunks = tchunks;
  // "auto": the model decides; a logit bias on the call token (its id from /tokenize) makes it
  // open one, and what follows is constrained to the tools.
  const callToken = process.env.TOOL_CALL_TOKEN;
  const auto = await client.chat.completions.create({ model, messages: ask, tools, max_tokens: 120,
                                                      seed: 4, logit_bias: { [callToken]: 100 } });
  out.auto_call = { message: auto.choices[0].message, finish: auto.choices[0].finish_reason };
  const plain = await client.chat.completions.create({ model, messages: ask, tools, max_tokens: 20,
                                                       seed: 4, logit_bias: { [callToken]: -100 } });
  out.auto_plain = { message: plain.choices[0].message, finish: plain.choices[0].finish_reason };
  // The conversation goes on with the call and its result (role "tool").
  const call = out.tool_calls[0].message.tool_calls[0];
  const next = await client.chat.completions.create({ model, max_tokens: 8, seed: 5, tools,
    messages: [...ask, { role: 'assistant', content: null, tool_calls: [call] },
               { role: 'tool', tool_call_id: call.id, content: '{"temperature": 21}' }] });
  out.after_tool = { message: next.choices[0].message, finish: next.choices[0].finish_reason };
  // Log-probabilities and n choices.
  const lp = await client.chat.completions.create({ ...params, logprobs: true, top_logprobs: 3 });
  out.chat_logprobs = lp;
  const many = await client.chat.completions.create({ ...params, n: 3 });
  out.chat_n = many;
  const nstream = await client.chat.completions.create({ ...params, n: 3, stream: true });
  const nchunks = [];
  for await (const chunk of nstream) nchunks.push(chunk);
  out.chat_n_chunks = nchunks;
}

// Completions' log-probabilities (the alternatives' count in `logprobs`).
out.completion_logprobs = await client.completions.create({ ...cparams, logprobs: 2 });

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
