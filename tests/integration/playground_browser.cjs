// Drives the playground page (GET /) in headless Chromium (Debian's /usr/bin/chromium, through
// npm `playwright-core`) against a running `omnistage serve`, and prints what it observed as one
// JSON object; playground_test.cc checks the values. Screenshots go to ARTIFACT_DIR.
// Usage: node playground_browser.cjs SCENARIO BASE_URL API_KEY ARTIFACT_DIR
//   (NODE_PATH = third_party/npm/node_modules)
// SCENARIO:
//   chat     the qwen3 demo: the key prompt (401 shown as returned), the chat panel, a streamed
//            reply and the same request without streaming, a bad request's error
//   speech   the qwen3_tts demo: the speech panel, a streamed WAV played through Web Audio, an mp3
//            played by the audio element, a bad request's error
//   panels   the conditional panels, with the server's /v1/models answer extended in the browser
//            (image output, voice upload, text + audio output, which no served pipeline has yet)
//            and the image and chat requests answered there: what the page shows, the requests
//            it sends, a spoken chat reply played from its audio chunks
'use strict';
const { chromium } = require('playwright-core');

const [scenario, baseUrl, apiKey, artifactDir] = process.argv.slice(2);
const timeout = 20000;
// A 1x1 PNG.
const kPng = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==';

async function openPage(browser, observed) {
  const context = await browser.newContext({ viewport: { width: 1180, height: 760 } });
  const page = await context.newPage();
  page.setDefaultTimeout(timeout);
  observed.requests = [];
  observed.chat_bodies = [];
  observed.console_errors = [];
  page.on('request', (request) => {
    observed.requests.push({ method: request.method(), url: request.url(),
                             authorization: request.headers().authorization || null });
    if (request.url().endsWith('/v1/chat/completions')) observed.chat_bodies.push(request.postDataJSON());
  });
  // Chromium logs every non-2xx answer as "Failed to load resource"; the tests cause some on purpose.
  page.on('console', (message) => {
    if (message.type() === 'error' && !message.text().startsWith('Failed to load resource')) {
      observed.console_errors.push(message.text());
    }
  });
  page.on('pageerror', (error) => observed.console_errors.push(String(error)));
  return page;
}

async function enterKey(page) {
  await page.fill('#api-key', apiKey);
  await page.dispatchEvent('#api-key', 'change');
  await page.waitForSelector('body[data-ready=true]');
}

async function tabs(page) {
  return page.$$eval('#tabs button', (buttons) => buttons.map((b) => b.dataset.tab));
}

// Whether `selector` is rendered (not hidden by the page nor by its CSS).
async function visible(page, selector) {
  return page.isVisible(selector);
}

// Sends `text` from the chat box and waits for the reply to finish; its text, state and how many
// times its text changed while it streamed.
async function chatTurn(page, text) {
  const before = await page.$$eval('.message.assistant', (m) => m.length);
  await page.fill('#chat-input', text);
  await page.press('#chat-input', 'Enter');
  await page.waitForFunction((index) => {
    const message = document.querySelectorAll('.message.assistant')[index];
    return message && (message.dataset.state === 'done' || message.dataset.state === 'error');
  }, before);
  return page.evaluate((index) => {
    const message = document.querySelectorAll('.message.assistant')[index];
    const error = message.querySelector('.error');
    return {
      state: message.dataset.state,
      content: message.querySelector('.content').textContent,
      updates: Number(message.dataset.updates),
      mutations: window.contentMutations || 0,
      meta: message.querySelector('.meta') ? message.querySelector('.meta').textContent : '',
      error_head: error ? error.querySelector('.error-head').textContent : null,
      error_message: error ? error.querySelector('.error-message').textContent : null,
    };
  }, before);
}

async function postJson(path, body) {
  const response = await fetch(baseUrl + path, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${apiKey}` },
    body: JSON.stringify(body),
  });
  return { status: response.status, body: await response.json() };
}

async function chatScenario(browser, out) {
  const page = await openPage(browser, out);
  await page.goto(baseUrl + '/');
  // No key yet: /v1/models answers 401, shown as the API returned it.
  await page.waitForSelector('#banner .error');
  out.banner_head = await page.textContent('#banner .error-head');
  out.banner_message = await page.textContent('#banner .error-message');
  await enterKey(page);
  out.stored_key = await page.evaluate(() => localStorage.getItem('omnistage.playground.apiKey'));
  out.tabs = await tabs(page);
  out.chat_visible = await visible(page, '#chat-input');
  out.speech_visible = await visible(page, '#speech-input');
  out.spoken_visible = await visible(page, '#chat-spoken');
  out.server_info = await page.textContent('#server-info');
  out.model = await page.inputValue('#model');

  // Greedy, so that the streamed reply can be compared with a request without streaming.
  await page.fill('#chat-max-tokens', '24');
  await page.fill('#chat-temperature', '0');
  await page.fill('#chat-seed', '7');
  await page.evaluate(() => {
    window.contentMutations = 0;
    new MutationObserver((records) => {
      for (const record of records) {
        const target = record.target.nodeType === 1 ? record.target : record.target.parentElement;
        if (target && target.closest('.message.assistant .content')) window.contentMutations += 1;
      }
    }).observe(document.getElementById('chat-log'), { childList: true, characterData: true, subtree: true });
  });
  out.streamed = await chatTurn(page, 'Hello there');
  out.non_streamed = await postJson('/v1/chat/completions', {
    model: out.model, messages: [{ role: 'user', content: 'Hello there' }], max_tokens: 24, temperature: 0,
    top_p: 1, seed: 7,
  });
  await page.screenshot({ path: `${artifactDir}/playground-chat.png` });

  // A bad request: the page shows the API's own error.
  await page.fill('#chat-top-p', '1.5');
  out.bad = await chatTurn(page, 'And again');
  out.bad_direct = await postJson('/v1/chat/completions', {
    model: out.model, messages: [{ role: 'user', content: 'Hello there' }], max_tokens: 24, temperature: 0,
    top_p: 1.5, seed: 7,
  });
  await page.screenshot({ path: `${artifactDir}/playground-chat-error.png` });

  // An image and an audio file go out as OpenAI content parts; whatever the server answers is shown.
  await page.fill('#chat-top-p', '1');
  await page.setInputFiles('#chat-image', { name: 'dot.png', mimeType: 'image/png', buffer: Buffer.from(kPng, 'base64') });
  await page.setInputFiles('#chat-audio', { name: 'tone.wav', mimeType: 'audio/wav', buffer: toneWav() });
  await page.waitForFunction(() => document.querySelectorAll('#chat-attachments .chip').length === 2);
  out.attachment_chips = await page.$$eval('#chat-attachments .chip', (chips) => chips.map((c) => c.firstChild.textContent));
  out.with_media = await chatTurn(page, 'What is in these?');
  const sent = out.chat_bodies[out.chat_bodies.length - 1];
  out.media_content = sent.messages[sent.messages.length - 1].content;
  out.media_direct = await postJson('/v1/chat/completions', { ...sent, stream: false, stream_options: undefined });
  await page.screenshot({ path: `${artifactDir}/playground-chat-media.png` });
}

// 0.1 s of a 440 Hz tone as a 16-bit mono 16 kHz WAV file.
function toneWav() {
  const rate = 16000;
  const samples = rate / 10;
  const wav = Buffer.alloc(44 + samples * 2);
  wav.write('RIFF', 0); wav.writeUInt32LE(36 + samples * 2, 4); wav.write('WAVE', 8);
  wav.write('fmt ', 12); wav.writeUInt32LE(16, 16); wav.writeUInt16LE(1, 20); wav.writeUInt16LE(1, 22);
  wav.writeUInt32LE(rate, 24); wav.writeUInt32LE(rate * 2, 28); wav.writeUInt16LE(2, 32); wav.writeUInt16LE(16, 34);
  wav.write('data', 36); wav.writeUInt32LE(samples * 2, 40);
  for (let i = 0; i < samples; ++i) wav.writeInt16LE(Math.round(8000 * Math.sin((2 * Math.PI * 440 * i) / rate)), 44 + 2 * i);
  return wav;
}

async function speechScenario(browser, out) {
  const page = await openPage(browser, out);
  await page.goto(baseUrl + '/playground');
  await enterKey(page);
  out.tabs = await tabs(page);
  out.speech_visible = await visible(page, '#speech-input');
  out.chat_visible = await visible(page, '#chat-input');
  out.voice_upload_visible = await visible(page, '#voice-upload');
  out.voices = await page.$$eval('#speech-voice option', (options) => options.map((o) => o.value).filter(Boolean));
  out.task = await page.textContent('#speech-task-fixed');

  const speak = async () => {
    await page.click('#speech-go');
    await page.waitForFunction(() => ['done', 'error'].includes(document.getElementById('speech-audio').dataset.state));
    return page.evaluate(async () => {
      const audio = document.getElementById('speech-audio');
      if (audio.dataset.state === 'done' && audio.src) {
        if (audio.readyState < 1) await new Promise((resolve) => audio.addEventListener('loadedmetadata', resolve, { once: true }));
      }
      const error = document.querySelector('#speech-error .error');
      return {
        state: audio.dataset.state,
        bytes: Number(audio.dataset.bytes),
        streamed_seconds: Number(audio.dataset.streamedSeconds || 0),
        duration: Number.isFinite(audio.duration) ? audio.duration : -1,
        stats: document.getElementById('speech-stats').textContent,
        history: document.querySelectorAll('#speech-history li').length,
        error_head: error ? error.querySelector('.error-head').textContent : null,
        error_message: error ? error.querySelector('.error-message').textContent : null,
      };
    });
  };

  await page.fill('#speech-input', 'Hello from the playground.');
  await page.selectOption('#speech-voice', 'ryan');
  await page.fill('#speech-max-new-tokens', '10');
  await page.fill('#speech-seed', '4');
  out.streamed = await speak();  // wav, streamed: played through Web Audio as it arrives
  // Two frames, so that the audio controls show the clip's duration in the screenshot.
  await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));
  await page.screenshot({ path: `${artifactDir}/playground-speech.png` });

  await page.uncheck('#speech-stream');
  await page.selectOption('#speech-format', 'mp3');
  out.whole = await speak();  // mp3, not streamed: played by the audio element
  out.whole_playing = await page.evaluate(async () => {
    const audio = document.getElementById('speech-audio');
    for (let i = 0; i < 100 && audio.currentTime === 0 && !audio.ended; ++i) await new Promise((r) => setTimeout(r, 50));
    return audio.currentTime > 0 || audio.ended;
  });

  // speed 2 cannot be streamed: the API refuses it, and the page shows its message.
  await page.check('#speech-stream');
  await page.fill('#speech-speed', '2');
  out.bad = await speak();
  out.bad_direct = await postJson('/v1/audio/speech', {
    model: await page.inputValue('#model'), input: 'Hello from the playground.', voice: 'ryan', response_format: 'mp3',
    stream: true, speed: 2, max_new_tokens: 10, seed: 4,
  });
  await page.screenshot({ path: `${artifactDir}/playground-speech-error.png` });
}

async function panelsScenario(browser, out) {
  const page = await openPage(browser, out);
  // The real card, with image output and two more endpoints, as a diffusion server would answer.
  await page.route('**/v1/models', async (route) => {
    const response = await route.fetch();
    const body = await response.json();
    for (const card of body.data || []) {
      card.omnistage.output_modalities = ['image'];
      card.omnistage.endpoints.push('POST /v1/images/generations');
    }
    await route.fulfill({ response, json: body });
  });
  out.image_requests = [];
  await page.route('**/v1/images/generations', async (route) => {
    out.image_requests.push({ body: route.request().postDataJSON(), authorization: route.request().headers().authorization });
    await route.fulfill({ json: { created: 1, data: [{ b64_json: kPng }, { b64_json: kPng }] } });
  });
  await page.goto(baseUrl + '/');
  await enterKey(page);
  out.image_tabs = await tabs(page);
  await page.fill('#image-prompt', 'a red square');
  await page.selectOption('#image-size', '512x512');
  out.custom_size_visible = await visible(page, '#image-width');
  await page.fill('#image-n', '2');
  await page.fill('#image-steps', '8');
  await page.fill('#image-seed', '42');
  await page.click('#image-go');
  await page.waitForSelector('#gallery figure >> nth=1');
  out.gallery = await page.$$eval('#gallery img', async (images) => {
    await Promise.all(images.map((img) => img.decode()));
    return images.map((img) => ({ width: img.naturalWidth, alt: img.alt }));
  });
  await page.screenshot({ path: `${artifactDir}/playground-images.png` });

  // Audio output and POST /v1/audio/voices: the speech panel with its upload form.
  await page.unroute('**/v1/models');
  await page.route('**/v1/models', async (route) => {
    const response = await route.fetch();
    const body = await response.json();
    for (const card of body.data || []) {
      card.omnistage.output_modalities = ['audio'];
      card.omnistage.endpoints.push('POST /v1/audio/voices');
    }
    await route.fulfill({ response, json: body });
  });
  await page.click('#reload');
  await page.waitForSelector('body[data-ready=true]');
  await page.waitForFunction(() => document.querySelector('#tabs button[data-tab=speech]'));
  out.upload_tabs = await tabs(page);
  out.voice_upload_visible = await visible(page, '#voice-upload');

  // Text and audio output (Qwen3-Omni): chat with a spoken reply, streamed as vLLM-Omni streams it
  // (chunks named by their modality; an audio chunk's delta content is base64 audio).
  await page.unroute('**/v1/models');
  await page.route('**/v1/models', async (route) => {
    const response = await route.fetch();
    const body = await response.json();
    for (const card of body.data || []) card.omnistage.output_modalities = ['text', 'audio'];
    await route.fulfill({ response, json: body });
  });
  await page.route('**/v1/chat/completions', async (route) => {
    out.spoken_request = route.request().postDataJSON();
    const chunk = (modality, delta, finish = null) => `data: ${JSON.stringify({
      id: 'chatcmpl-1', object: 'chat.completion.chunk', created: 1, model: 'demo', modality,
      choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
    const body = chunk('text', { role: 'assistant', content: '' }) + chunk('text', { content: 'Hi' }) +
      chunk('text', { content: ' there' }) + chunk('text', {}, 'stop') +
      chunk('audio', { content: toneWav().toString('base64') }) + chunk('audio', {}, 'stop') + 'data: [DONE]\n\n';
    await route.fulfill({ status: 200, headers: { 'Content-Type': 'text/event-stream' }, body });
  });
  await page.click('#reload');
  await page.waitForSelector('body[data-ready=true]');
  await page.waitForFunction(() => document.querySelector('#tabs button[data-tab=chat]'));
  out.spoken_tabs = await tabs(page);
  out.spoken_visible = await visible(page, '#chat-spoken');
  await page.check('#chat-spoken');
  out.spoken = await chatTurn(page, 'Say hi');
  out.spoken_audio_seconds = await page.evaluate(async () => {
    const audio = document.querySelector('.message.assistant:last-of-type audio');
    if (!audio) return 0;
    if (audio.readyState < 1) await new Promise((resolve) => audio.addEventListener('loadedmetadata', resolve, { once: true }));
    return audio.duration;
  });
}

async function main() {
  const browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    // Root in a container has no user namespace for the sandbox; audio may start without a click.
    args: ['--no-sandbox', '--autoplay-policy=no-user-gesture-required'],
  });
  const out = { scenario };
  try {
    if (scenario === 'chat') await chatScenario(browser, out);
    else if (scenario === 'speech') await speechScenario(browser, out);
    else if (scenario === 'panels') await panelsScenario(browser, out);
    else throw new Error(`unknown scenario '${scenario}'`);
  } finally {
    await browser.close();
  }
  process.stdout.write(JSON.stringify(out));
}

main().catch((e) => {
  process.stderr.write(String((e && e.stack) || e));
  process.exit(1);
});
