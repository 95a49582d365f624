// Drives /v1/images/generations with the official OpenAI client (npm `openai@6`) and prints what
// it received as one JSON object; image_serve_test.cc checks the values.
// Usage: node image_client.cjs BASE_URL MODEL   (NODE_PATH = third_party/npm/node_modules)
'use strict';
const { OpenAI } = require('openai');

async function main() {
  const [baseURL, model] = process.argv.slice(2);
  const client = new OpenAI({ baseURL, apiKey: process.env.OPENAI_API_KEY || 'unused', maxRetries: 0, timeout: 60000 });
  const out = {};
  const result = await client.images.generate({
    model, prompt: 'a lighthouse at dusk', n: 2, size: '64x48', response_format: 'b64_json',
    // vLLM-Omni's extras travel in the body as they are.
    num_inference_steps: 2, guidance_scale: 0, seed: 21,
  });
  out.created = result.created;
  out.images = result.data.map((d) => d.b64_json);
  out.size = result.size;
  try {
    await client.images.generate({ model, prompt: 'x', size: '63x48' });
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
