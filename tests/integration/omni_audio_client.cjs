// Sends audio chats to `omnistage serve` of the Qwen3-Omni demo with the official OpenAI client (npm
// `openai@6`): an `input_audio` part streamed and not, the same audio as an `audio_url` data: URL,
// and an undecodable part; prints what it observed as one JSON object for
// qwen3_omni_serve_test.cc to check.
// Usage: node omni_audio_client.cjs BASE_URL API_KEY MODEL WAV_FILE   (NODE_PATH = third_party/npm/node_modules)
'use strict';
const fs = require('fs');
const { OpenAI } = require('openai');

async function main() {
  const [baseURL, apiKey, model, wavFile] = process.argv.slice(2);
  const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60000 });
  const wav = fs.readFileSync(wavFile).toString('base64');
  const ask = (audioPart) => [{ role: 'user', content: [audioPart, { type: 'text', text: 'What is this?' }] }];
  const inputAudio = { type: 'input_audio', input_audio: { data: wav, format: 'wav' } };
  const out = {};

  const chat = await client.chat.completions.create({
    model, messages: ask(inputAudio), max_tokens: 4, temperature: 0, ignore_eos: true, modalities: ['text'] });
  out.chat = { content: chat.choices[0].message.content, usage: chat.usage };

  let content = '';
  let usage = null;
  const stream = await client.chat.completions.create({
    model, messages: ask(inputAudio), max_tokens: 4, temperature: 0, ignore_eos: true, modalities: ['text'], stream: true,
    stream_options: { include_usage: true } });
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    if (chunk.choices.length && chunk.choices[0].delta.content) content += chunk.choices[0].delta.content;
  }
  out.chat_stream = { content, usage };

  const byUrl = await client.chat.completions.create({
    model, messages: ask({ type: 'audio_url', audio_url: { url: `data:audio/wav;base64,${wav}` } }),
    max_tokens: 4, temperature: 0, ignore_eos: true, modalities: ['text'] });
  out.audio_url = { content: byUrl.choices[0].message.content, usage: byUrl.usage };

  try {
    await client.chat.completions.create({
      model, messages: ask({ type: 'input_audio', input_audio: { data: 'bm90IGF1ZGlv', format: 'wav' } }),
      max_tokens: 4, modalities: ['text'] });
    out.bad_audio = { status: 200 };
  } catch (e) {
    out.bad_audio = { status: e.status, param: e.error && e.error.param, message: e.error && e.error.message };
  }
  process.stdout.write(JSON.stringify(out));
}

main().catch((e) => {
  process.stderr.write(String(e && e.stack ? e.stack : e));
  process.exit(1);
});
