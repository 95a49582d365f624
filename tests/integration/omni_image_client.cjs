// Sends image chats to `omnistage serve` of the Qwen3-Omni demo with the official OpenAI client (npm
// `openai@6`): an `image_url` data: URL part streamed and not, and an undecodable image; prints what
// it observed as one JSON object for qwen3_omni_serve_test.cc to check.
// Usage: node omni_image_client.cjs BASE_URL API_KEY MODEL PNG_FILE   (NODE_PATH = third_party/npm/node_modules)
'use strict';
const fs = require('fs');
const { OpenAI } = require('openai');

async function main() {
  const [baseURL, apiKey, model, pngFile] = process.argv.slice(2);
  const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60000 });
  const png = fs.readFileSync(pngFile).toString('base64');
  const ask = (imagePart) => [{ role: 'user', content: [imagePart, { type: 'text', text: 'What is this?' }] }];
  const image = { type: 'image_url', image_url: { url: `data:image/png;base64,${png}` } };
  const out = {};

  const chat = await client.chat.completions.create({
    model, messages: ask(image), max_tokens: 4, temperature: 0, ignore_eos: true, modalities: ['text'] });
  out.chat = { content: chat.choices[0].message.content, usage: chat.usage };

  let content = '';
  let usage = null;
  const stream = await client.chat.completions.create({
    model, messages: ask(image), max_tokens: 4, temperature: 0, ignore_eos: true, modalities: ['text'], stream: true,
    stream_options: { include_usage: true } });
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    if (chunk.choices.length && chunk.choices[0].delta.content) content += chunk.choices[0].delta.content;
  }
  out.chat_stream = { content, usage };

  try {
    await client.chat.completions.create({
      model, messages: ask({ type: 'image_url', image_url: { url: 'data:image/png;base64,bm90IGFuIGltYWdl' } }),
      max_tokens: 4, modalities: ['text'] });
    out.bad_image = { status: 200 };
  } catch (e) {
    out.bad_image = { status: e.status, param: e.error && e.error.param, message: e.error && e.error.message };
  }
  process.stdout.write(JSON.stringify(out));
}

main().catch((e) => {
  process.stderr.write(String(e && e.stack ? e.stack : e));
  process.exit(1);
});
