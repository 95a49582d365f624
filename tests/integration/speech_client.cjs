// Drives /v1/audio/speech with the official OpenAI client (npm `openai@6`) and prints what it
// received as one JSON object; speech_pipeline_test.cc checks the values.
// Usage: node speech_client.cjs BASE_URL MODEL [EXTRA_JSON]   (NODE_PATH = third_party/npm/node_modules)
// EXTRA_JSON: vLLM-Omni fields added to every request (e.g. {"max_new_tokens": 8}).
'use strict';
const { OpenAI } = require('openai');

async function main() {
  const [baseURL, model, extraJson] = process.argv.slice(2);
  const extra = extraJson ? JSON.parse(extraJson) : {};
  const client = new OpenAI({ baseURL, apiKey: process.env.OPENAI_API_KEY || 'unused', maxRetries: 0, timeout: 60000 });
  const out = {};

  const wav = await client.audio.speech.create({ ...extra, model, input: 'Hello', voice: 'Vivian', response_format: 'wav' });
  out.content_type = wav.headers.get('content-type');
  out.wav_base64 = Buffer.from(await wav.arrayBuffer()).toString('base64');

  const mp3 = await client.audio.speech.create({ ...extra, model, input: 'Hi', voice: 'ryan', response_format: 'mp3',
                                                 speed: 1.0 });
  out.mp3_base64 = Buffer.from(await mp3.arrayBuffer()).toString('base64');

  try {
    await client.audio.speech.create({ ...extra, model, input: 'Hi', voice: 'nobody' });
  } catch (e) {
    out.error_status = e.status;
    out.error_message = e.error && e.error.message;
  }
  process.stdout.write(JSON.stringify(out));
}

main().catch((e) => {
  process.stderr.write(String(e && e.stack || e));
  process.exit(1);
});
