// Drives an omnistage server with the official OpenAI client (npm `openai@6`) and prints what it
// observed as one JSON object; openai_client_test.cc checks the values.
// Usage: node openai_client.cjs BASE_URL API_KEY MODEL   (NODE_PATH = third_party/npm/node_modules)
'use strict';
const { OpenAI } = require('openai');

async function main() {
  const [baseURL, apiKey, model] = process.argv.slice(2);
  const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 30000 });
  const out = {};

  out.models = (await client.models.list()).data.map((m) => m.id);

  const completion = await client.completions.create({ model, prompt: [1, 2, 3], max_tokens: 4 });
  out.completion = { id: completion.id, object: completion.object, text: completion.choices[0].text,
                     finish_reason: completion.choices[0].finish_reason, usage: completion.usage };

  let streamedText = '';
  let streamedUsage = null;
  let completionChunks = 0;
  const completionStream = await client.completions.create({
    model, prompt: 'hello', max_tokens: 5, stream: true, stream_options: { include_usage: true } });
  for await (const chunk of completionStream) {
    completionChunks += 1;
    if (chunk.choices.length) streamedText += chunk.choices[0].text;
    if (chunk.usage) streamedUsage = chunk.usage;
  }
  out.completion_stream = { text: streamedText, usage: streamedUsage, chunks: completionChunks };

  const messages = [{ role: 'user', content: 'hi there' }];
  const chat = await client.chat.completions.create({ model, messages, max_completion_tokens: 3, ignore_eos: true });
  out.chat = { id: chat.id, object: chat.object, message: chat.choices[0].message,
               finish_reason: chat.choices[0].finish_reason, usage: chat.usage };

  let role = null;
  let content = '';
  let finish = null;
  let chatUsage = null;
  const chatStream = await client.chat.completions.create({
    model, messages, max_tokens: 6, stream: true, stream_options: { include_usage: true } });
  for await (const chunk of chatStream) {
    if (chunk.usage) chatUsage = chunk.usage;
    if (!chunk.choices.length) continue;
    const delta = chunk.choices[0].delta;
    if (delta.role) role = delta.role;
    if (delta.content) content += delta.content;
    if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
  }
  out.chat_stream = { role, content, finish_reason: finish, usage: chatUsage };

  // 64 streams at once; each must come back whole.
  const streams = Array.from({ length: 64 }, async (_, i) => {
    const stream = await client.chat.completions.create({
      model, messages: [{ role: 'user', content: `request ${i}` }], max_tokens: 10, stream: true });
    let text = '';
    for await (const chunk of stream) {
      if (chunk.choices.length && chunk.choices[0].delta.content) text += chunk.choices[0].delta.content;
    }
    return text;
  });
  out.concurrent = await Promise.all(streams);

  try {
    await client.completions.create({ model: 'no-such-model', prompt: [1] });
    out.unknown_model = 'no error';
  } catch (e) {
    out.unknown_model = { status: e.status, message: e.error && e.error.message };
  }
  try {
    await client.chat.completions.create({ model, messages, temperature: -1 });
    out.bad_temperature = 'no error';
  } catch (e) {
    out.bad_temperature = { status: e.status, param: e.param, type: e.type };
  }
  const wrongKey = new OpenAI({ baseURL, apiKey: 'wrong', maxRetries: 0 });
  try {
    await wrongKey.models.list();
    out.wrong_key = 'no error';
  } catch (e) {
    out.wrong_key = { status: e.status, name: e.constructor.name };
  }

  process.stdout.write(JSON.stringify(out));
}

main().catch((e) => {
  process.stderr.write(`openai_client.cjs: ${e.stack || e}\n`);
  process.exit(1);
});
