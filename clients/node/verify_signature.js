#!/usr/bin/env node
// Checking the Jobq-Signature of a request from a jobq HTTP handler, with Node's standard library only.
//
//     node verify_signature.js SECRET_FILE "$JOBQ_SIGNATURE" < body
//
// exits 0 when the header signs the body with the secret (the file's content less trailing white
// space, as jobq reads it) at a time within five minutes of now, 1 otherwise. docs/http-handlers.md
// explains the scheme; tests/it/http_handlers.rs runs this file on requests a jobq worker signed.
'use strict';

const crypto = require('crypto');
const fs = require('fs');

const TOLERANCE = 300; // seconds between the signature's time and ours: refuses replays

// True when `header` signs the raw request `body` (a Buffer) with `secret`, recently.
function verify(secret, header, body, now = Date.now() / 1000) {
  let t = null;
  const sigs = [];
  for (const part of header.split(',')) {
    const i = part.indexOf('=');
    const key = part.slice(0, i).trim();
    if (key === 't') t = part.slice(i + 1);
    else if (key === 'v1') sigs.push(part.slice(i + 1));
  }
  if (t === null || !/^\d+$/.test(t)) return false;
  if (Math.abs(now - Number(t)) > TOLERANCE) return false;
  const expected = crypto.createHmac('sha256', secret).update(t + '.').update(body).digest();
  return sigs.some((s) => {
    const got = Buffer.from(s, 'hex');
    return got.length === expected.length && crypto.timingSafeEqual(got, expected);
  });
}

if (require.main === module) {
  const secret = fs.readFileSync(process.argv[2]).toString('latin1').trimEnd();
  const body = fs.readFileSync(0);
  if (!verify(Buffer.from(secret, 'latin1'), process.argv[3], body)) {
    console.error('invalid or expired signature');
    process.exit(1);
  }
}

module.exports = { verify };
