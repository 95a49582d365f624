// Asks an omnistage server for text and audio with the official OpenAI client (npm `openai@6`),
// not streamed and streamed, and prints what it received as one JSON object;
// openai_client_test.cc checks the values (and decodes the audio).
// Usage: node openai_chat_audio.cjs BASE_URL API_KEY MODEL [REQUEST_JSON]
//   (NODE_PATH = third_party/npm/node_modules; REQUEST_JSON: fields over the request's own)
'use strict';
const { OpenAI } = require('openai');

async function main() {
  const [baseURL, apiKey, model, extra] = process.argv.slice(2);
  const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 30000 });
  const request = { model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 4,
                    modalities: ['text', 'audio'], audio: { voice: 'Ethan', format: 'wav' },
                    ...(extra ? JSON.parse(extra) : {}) };
  const out = {};

  const whole = await client.chat.completions.create(request);
  out.whole = { choices: whole.choices, usage: whole.usage };

  const stream = await client.chat.completions.create({ ...request, stream: true,
                                                        stream_options: { include_usage: true } });
  const streamed = { text: '', audio: [], finishes: [], usage: null, modalities: [] };
  for await (const chunk of stream) {
    if (chunk.usage) streamed.usage = chunk.usage;
    if (!chunk.choices.length) continue;
    streamed.modalities.push(chunk.modality);
    const choice = chunk.choices[0];
    if (chunk.modality === 'audio') {
      streamed.audio.push(choice.delta.content);
    } else if (choice.delta.content) {
      streamed.text += choice.delta.content;
    }
    if (choice.finish_reason) streamed.finishes.push([chunk.modality, choice.finish_reason]);
  }
  out.streamed = streamed;

  try {
    await client.chat.completions.create({ ...request, audio: { voice: 'Ethan', format: 'aiff' } });
    out.bad_format = 'no error';
  } catch (e) {
    out.bad_format = { status: e.status, param: e.param };
  }
  process.stdout.write(JSON.stringify(out));
}

main().catch((e) => {
  process.stderr.write(`openai_chat_audio.cjs: ${e.stack || e}\n`);
  process.exit(1);
});
