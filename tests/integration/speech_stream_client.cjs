// Drives WebSocket /v1/audio/speech/stream with the `ws` npm client and prints what it saw as one
// JSON object; voice_clone_serve_test.cc checks the values.
// Usage: node speech_stream_client.cjs WS_URL API_KEY SCENARIO [CONFIG_JSON]
//   (NODE_PATH = third_party/npm/node_modules)
// SCENARIO: "speak"       session.config, text in three pieces, input.done: every event in order,
//                         with the byte count of the binary frames between audio.start and audio.done;
//           "disconnect"  config, a long text, input.done, and a close right after the first audio.start;
//           "bad_first"   input.text before any session.config;
//           "bad_json"    config, then malformed JSON and an unknown type, then one sentence.
'use strict';
const WebSocket = require('ws');

function run(url, key, scenario, config) {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { headers: { Authorization: `Bearer ${key}` } });
    const out = { events: [], binary_frames: 0, binary_bytes: 0, close_code: null };
    let frameBytes = 0;
    const send = (m) => ws.send(typeof m === 'string' ? m : JSON.stringify(m));
    ws.on('open', () => {
      if (scenario === 'bad_first') return send({ type: 'input.text', text: 'Hi.' });
      send({ type: 'session.config', session: config });
      if (scenario === 'speak') {
        send({ type: 'input.text', text: 'Hello there. How are' });
        send({ type: 'input.text', text: ' you today? Fine' });
        send({ type: 'input.done' });
      } else if (scenario === 'disconnect') {
        send({ type: 'input.text', text: 'One. Two. Three. Four. Five. Six.' });
        send({ type: 'input.done' });
      } else if (scenario === 'bad_json') {
        send('{not json');
        send({ type: 'input.shout', text: 'x' });
        send({ type: 'input.text', text: 'Only one.' });
        send({ type: 'input.done' });
      }
    });
    ws.on('message', (data, isBinary) => {
      if (isBinary) {
        out.binary_frames += 1;
        out.binary_bytes += data.length;
        frameBytes += data.length;
        return;
      }
      const event = JSON.parse(data.toString());
      if (event.type === 'audio.done') event.received_bytes = frameBytes;
      if (event.type === 'audio.start') frameBytes = 0;
      out.events.push(event);
      if (scenario === 'disconnect' && event.type === 'audio.start') {
        out.closed_early = true;
        ws.terminate();
      }
    });
    ws.on('close', (code) => {
      out.close_code = code;
      resolve(out);
    });
    ws.on('error', (e) => (out.closed_early ? resolve(out) : reject(e)));
  });
}

run(process.argv[2], process.argv[3], process.argv[4], process.argv[5] ? JSON.parse(process.argv[5]) : {})
  .then((out) => console.log(JSON.stringify(out)))
  .catch((e) => {
    console.error(e.stack || String(e));
    process.exit(1);
  });
