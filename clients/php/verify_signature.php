<?php
// Checking the Jobq-Signature of a request from a jobq HTTP handler, with PHP's standard library only.
//
//     php verify_signature.php SECRET_FILE "$JOBQ_SIGNATURE" < body
//
// exits 0 when the header signs the body with the secret (the file's content less trailing white
// space, as jobq reads it) at a time within five minutes of now, 1 otherwise. In an application:
// verify($secret, $_SERVER['HTTP_JOBQ_SIGNATURE'], file_get_contents('php://input')).
// docs/http-handlers.md explains the scheme; tests/it/http_handlers.rs runs this file on requests a
// jobq worker signed.

const TOLERANCE = 300; // seconds between the signature's time and ours: refuses replays

// True when $header signs the raw request $body with $secret, recently.
function verify(string $secret, string $header, string $body, ?int $now = null): bool
{
    $t = null;
    $sigs = [];
    foreach (explode(',', $header) as $part) {
        $kv = explode('=', trim($part), 2);
        if (count($kv) !== 2) {
            continue;
        }
        if ($kv[0] === 't') {
            $t = $kv[1];
        } elseif ($kv[0] === 'v1') {
            $sigs[] = $kv[1];
        }
    }
    if ($t === null || !preg_match('/^\d+$/', $t)) {
        return false;
    }
    if (abs(($now ?? time()) - (int) $t) > TOLERANCE) {
        return false;
    }
    $expected = hash_hmac('sha256', $t . '.' . $body, $secret);
    foreach ($sigs as $s) {
        if (hash_equals($expected, $s)) {
            return true;
        }
    }
    return false;
}

if (realpath($argv[0] ?? '') === __FILE__) {
    $secret = rtrim(file_get_contents($argv[1]));
    if (!verify($secret, $argv[2], file_get_contents('php://stdin'))) {
        fwrite(STDERR, "invalid or expired signature\n");
        exit(1);
    }
}
