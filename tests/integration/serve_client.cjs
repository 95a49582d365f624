// Drives `omnistage serve` with the official OpenAI client (npm `openai@6`) and prints what it
// observed as one JSON object; serve_test.cc checks the values.
// Usage: node serve_client.cjs BASE_URL API_KEY MODEL   (NODE_PATH = third_party/npm/node_modules)
'use strict';
const { OpenAI } = require('openai');

async function main() {
  const [baseURL, apiKey, model] = process.argv.slice(2);
  const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 30000 });
  const out = {};

  out.models = (await client.models.list()).data.map((m) => m.id);

  const completion = await client.completions.create({
    model, prompt: 'Hello', max_tokens: 3, temperature: 0, ignore_eos: true });
  out.completion = { text: completion.choices[0].text, finish_reason: completion.choices[0].finish_reason,
                     usage: completion.usage };

  const messages = [{ role: 'user', content: 'hi there' }];
  const chat = await client.chat.completions.create({
    model, messages, max_completion_tokens: 4, temperature: 0, ignore_eos: true });
  out.chat = { content: chat.choices[0].message.content, finish_reason: chat.choices[0].finish_reason,
               usage: chat.usage };

  let role = null;
  let content = '';
  let finish = null;
  let usage = null;
  const stream = await client.chat.completions.create({
    model, messages, max_tokens: 4, temperature: 0, ignore_eos: true, stream: true,
    stream_options: { include_usage: true } });
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    if (!chunk.choices.length) continue;
    const delta = chunk.choices[0].delta;
    if (delta.role) role = delta.role;
    if (delta.content) content += delta.content;
    if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
  }
  out.chat_stream = { role, content, finish_reason: finish, usage };

  try {
    await client.completions.create({ model: 'no-such-model', prompt: 'x', max_tokens: 1 });
    out.unknown_model = 'no error';
  } catch (e) {
    out.unknown_model = { status: e.status };
  }
  try {
    await client.chat.completions.create({ model, messages, temperature: -1 });
    out.bad_temperature = 'no error';
  } catch (e) {
    out.bad_temperature = { status: e.status, param: e.param };
  }
  try {
    await new OpenAI({ baseURL, apiKey: 'wrong', maxRetries: 0 }).models.list();
    out.wrong_key = 'no error';
  } catch (e) {
    out.wrong_key = { status: e.status };
  }
  process.stdout.write(JSON.stringify(out));
}

main().catch((e) => {
  process.stderr.write(String(e && e.stack ? e.stack : e));
  process.exit(1);
});
