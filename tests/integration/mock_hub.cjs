'use strict';
// A stand-in for the Hugging Face Hub on loopback, for hub_download_test.cc. It serves one model
// repository (a local folder) through the routes omnistage uses, answering as the Hub does:
//   GET  /api/models/{org}/{name}/revision/{rev}[?blobs=true]  {id, sha, siblings: [{rfilename, size,
//                                                              blobId, lfs: {sha256, size}}]}
//   HEAD|GET /{org}/{name}/resolve/{rev}/{file}   LFS files (*.safetensors, *.bin): a 302 to /cdn/{sha256}
//                                                 with X-Linked-Etag / X-Linked-Size; other files: the
//                                                 bytes with ETag = their git blob id
//   GET  /cdn/{sha256}                            the bytes, with Range support (206 / 416)
// Errors carry X-Error-Code (RepoNotFound, RevisionNotFound, EntryNotFound) like the Hub's.
//
// Usage: node mock_hub.cjs CONFIG.json, where CONFIG has
//   dir, repo ("org/name"), revision ("main"), portFile, logFile (one JSON line per request:
//   method, path, range, auth), and optionally token (requests without `Bearer token` get a 401),
//   noBlobMetadata (siblings without sizes and etags, so the client must HEAD each file),
//   drop {file, bytes} (the first GET of that file's bytes closes the connection after `bytes`),
//   stall {file, bytes} (every GET of that file sends `bytes` and then nothing more).
const crypto = require('crypto');
const fs = require('fs');
const http = require('http');
const path = require('path');

const config = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));

function walk(dir, prefix = '') {
  const out = [];
  for (const entry of fs.readdirSync(dir, {withFileTypes: true})) {
    const rel = prefix ? `${prefix}/${entry.name}` : entry.name;
    if (entry.isDirectory()) out.push(...walk(path.join(dir, entry.name), rel));
    else out.push(rel);
  }
  return out.sort();
}

const files = walk(config.dir).map((rel) => {
  const data = fs.readFileSync(path.join(config.dir, rel));
  const gitOid = crypto.createHash('sha1').update(`blob ${data.length}\0`).update(data).digest('hex');
  return {
    rel,
    data,
    size: data.length,
    sha256: crypto.createHash('sha256').update(data).digest('hex'),
    gitOid,
    lfs: rel.endsWith('.safetensors') || rel.endsWith('.bin'),
  };
});
const commit = crypto.createHash('sha1').update(files.map((f) => `${f.rel} ${f.sha256}`).join('\n')).digest('hex');
const revision = config.revision || 'main';
let dropped = false;

function log(req, pathname) {
  const entry = {method: req.method, path: pathname, range: req.headers.range || null, auth: req.headers.authorization || null};
  fs.appendFileSync(config.logFile, JSON.stringify(entry) + '\n');
}

function fail(res, status, code, message) {
  const headers = {'Content-Type': 'application/json', 'X-Error-Message': message};
  if (code) headers['X-Error-Code'] = code;
  res.writeHead(status, headers);
  res.end(JSON.stringify({error: message}));
}

// The checks every repository route makes, in the Hub's order; true when an error was sent.
function refused(req, res, repo, rev) {
  if (config.token && req.headers.authorization !== `Bearer ${config.token}`) {
    fail(res, 401, 'GatedRepo', `Access to model ${repo} is restricted; you must be authenticated to access it`);
    return true;
  }
  if (repo !== config.repo) {
    fail(res, 404, 'RepoNotFound', 'Repository not found');
    return true;
  }
  if (rev !== revision && rev !== commit) {
    fail(res, 404, 'RevisionNotFound', `Invalid rev id: ${rev}`);
    return true;
  }
  return false;
}

function sendBytes(req, res, file, headers) {
  let start = 0;
  const range = req.headers.range;
  if (range) {
    const m = /^bytes=(\d+)-$/.exec(range);
    if (!m) return fail(res, 400, null, `unsupported Range ${range}`);
    start = Number(m[1]);
    if (start >= file.size) {
      res.writeHead(416, {'Content-Range': `bytes */${file.size}`});
      return res.end();
    }
  }
  const body = file.data.subarray(start);
  const out = {...headers, 'Content-Length': body.length, 'Accept-Ranges': 'bytes', 'Content-Type': 'application/octet-stream'};
  if (range) out['Content-Range'] = `bytes ${start}-${file.size - 1}/${file.size}`;
  res.writeHead(range ? 206 : 200, out);
  if (req.method === 'HEAD') return res.end();
  if (config.drop && config.drop.file === file.rel && !dropped && config.drop.bytes > start) {
    dropped = true;
    return res.write(body.subarray(0, config.drop.bytes - start), () => res.socket.destroy());
  }
  if (config.stall && config.stall.file === file.rel) return res.write(body.subarray(0, config.stall.bytes - start));
  res.end(body);
}

const server = http.createServer((req, res) => {
  const url = new URL(req.url, 'http://hub');
  const pathname = decodeURIComponent(url.pathname);
  log(req, pathname);

  let m = /^\/api\/models\/([^/]+)\/([^/]+)\/revision\/(.+)$/.exec(url.pathname);
  if (m && req.method === 'GET') {
    const [repo, rev] = [`${decodeURIComponent(m[1])}/${decodeURIComponent(m[2])}`, decodeURIComponent(m[3])];
    if (refused(req, res, repo, rev)) return;
    const withBlobs = url.searchParams.get('blobs') === 'true' && !config.noBlobMetadata;
    const siblings = files.map((f) => {
      const sibling = {rfilename: f.rel};
      if (withBlobs) {
        Object.assign(sibling, {size: f.size, blobId: f.gitOid});
        if (f.lfs) sibling.lfs = {sha256: f.sha256, size: f.size, pointerSize: 134};
      }
      return sibling;
    });
    res.writeHead(200, {'Content-Type': 'application/json'});
    return res.end(JSON.stringify({id: config.repo, modelId: config.repo, sha: commit, siblings}));
  }

  m = /^\/([^/]+)\/([^/]+)\/resolve\/([^/]+)\/(.+)$/.exec(url.pathname);
  if (m && (req.method === 'GET' || req.method === 'HEAD')) {
    const [repo, rev] = [`${decodeURIComponent(m[1])}/${decodeURIComponent(m[2])}`, decodeURIComponent(m[3])];
    if (refused(req, res, repo, rev)) return;
    const name = m[4].split('/').map(decodeURIComponent).join('/');
    const file = files.find((f) => f.rel === name);
    if (!file) return fail(res, 404, 'EntryNotFound', `${name} does not exist on "${rev}"`);
    if (file.lfs) {
      res.writeHead(302, {
        Location: `/cdn/${file.sha256}`,
        'X-Linked-Etag': `"${file.sha256}"`,
        'X-Linked-Size': String(file.size),
        ETag: `"${file.gitOid}"`,
        'X-Repo-Commit': commit,
        'Content-Length': 0,
      });
      return res.end();
    }
    return sendBytes(req, res, file, {ETag: `"${file.gitOid}"`, 'X-Repo-Commit': commit});
  }

  m = /^\/cdn\/([0-9a-f]{64})$/.exec(url.pathname);
  const stored = m && files.find((f) => f.lfs && f.sha256 === m[1]);
  if (stored && (req.method === 'GET' || req.method === 'HEAD')) {
    // The storage's own etag, unrelated to the Hub's (as a CDN's is).
    return sendBytes(req, res, stored, {ETag: `"storage-${stored.size}"`});
  }
  fail(res, 404, null, `no route ${req.method} ${url.pathname}`);
});

server.listen(0, '127.0.0.1', () => {
  fs.writeFileSync(config.portFile + '.tmp', String(server.address().port));
  fs.renameSync(config.portFile + '.tmp', config.portFile);
});
process.on('SIGTERM', () => process.exit(0));
