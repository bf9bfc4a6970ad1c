// Parallel tool calls through the official `openai` npm client (tests/e2e/test_serve.py,
// test_parallel_tool_calls_with_the_openai_client, starts the server with --max-tool-calls 2 and
// checks what this prints, the calls against their tools' schemas). Environment: OPENAI_MODULE,
// BASE_URL, MODEL, API_KEY as openai_client.mjs; END_TOKENS (the ids that end a turn, comma
// separated) and TOOL_CALL_TOKEN. A bias of -100 on the end tokens keeps the random-weight model
// from ending its turn while the grammar lets it call again, so every turn that may hold several
// calls holds as many as --max-tool-calls allows: two.
const { default: OpenAI } = await import(process.env.OPENAI_MODULE);

const client = new OpenAI({ baseURL: process.env.BASE_URL, apiKey: process.env.API_KEY, maxRetries: 0 });
const model = process.env.MODEL;
const noEnd = Object.fromEntries(process.env.END_TOKENS.split(',').map((id) => [id, -100]));
const tools = [
  { type: 'function', function: { name: 'get_weather', description: 'The weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 16 },
                                                days: { type: 'integer', minimum: 1, maximum: 7 } },
                  required: ['city', 'days'], additionalProperties: false } } },
  { type: 'function', function: { name: 'add', description: 'Adds two integers',
    parameters: { type: 'object', properties: { a: { type: 'integer' }, b: { type: 'integer' } },
                  required: ['a', 'b'], additionalProperties: false } } },
];
const ask = [{ role: 'user', content: 'What is the weather in Paris and in Rome?' }];
const base = { model, messages: ask, tools, max_tokens: 300, logit_bias: noEnd, parallel_tool_calls: true };
const out = { tools };
const choiceOf = (r) => ({ message: r.choices[0].message, finish: r.choices[0].finish_reason });

// Required, parallel: two calls in one message.
out.required = choiceOf(await client.chat.completions.create({ ...base, tool_choice: 'required', seed: 11 }));
// Streamed: the same calls for the same seed, each with its index.
const stream = await client.chat.completions.create({ ...base, tool_choice: 'required', seed: 11,
                                                      stream: true });
out.chunks = [];
for await (const chunk of stream) out.chunks.push(chunk);
// A named function: two calls of it.
out.named = choiceOf(await client.chat.completions.create({
  ...base, tool_choice: { type: 'function', function: { name: 'get_weather' } }, seed: 13 }));
// Auto: the model opens a call (a bias on the call token) and writes two.
out.auto = choiceOf(await client.chat.completions.create({
  ...base, seed: 14, logit_bias: { ...noEnd, [process.env.TOOL_CALL_TOKEN]: 100 } }));
// parallel_tool_calls false, or not given (pocket's default, as llama.cpp's): one call however the
// model would go on.
out.single = choiceOf(await client.chat.completions.create({ ...base, tool_choice: 'required',
                                                             parallel_tool_calls: false, seed: 11 }));
const { parallel_tool_calls: _, ...unsaid } = base;
out.single_default = choiceOf(await client.chat.completions.create({ ...unsaid, tool_choice: 'required',
                                                                     seed: 12 }));
// The conversation goes on with both calls and a response to each.
const calls = out.required.message.tool_calls;
out.after = choiceOf(await client.chat.completions.create({
  model, tools, max_tokens: 8, seed: 15,
  messages: [...ask, { role: 'assistant', content: null, tool_calls: calls },
             ...calls.map((c, i) => ({ role: 'tool', tool_call_id: c.id, content: `{"result": ${i}}` }))] }));
process.stdout.write(JSON.stringify(out));
