#!/usr/bin/ruby
# Checking the Jobq-Signature of a request from a jobq HTTP handler, with Ruby's standard library only.
#
#     ruby verify_signature.rb SECRET_FILE "$JOBQ_SIGNATURE" < body
#
# exits 0 when the header signs the body with the secret (the file's content less trailing white
# space, as jobq reads it) at a time within five minutes of now, 1 otherwise. docs/http-handlers.md
# explains the scheme; tests/it/http_handlers.rs runs this file on requests a jobq worker signed.

require 'openssl'

TOLERANCE = 300 # seconds between the signature's time and ours: refuses replays

# True when header signs the raw request body with secret, recently.
def verify(secret, header, body, now = Time.now.to_i)
  t = nil
  sigs = []
  header.split(',').each do |part|
    key, value = part.strip.split('=', 2)
    t = value if key == 't'
    sigs << value if key == 'v1' && value
  end
  return false unless t&.match?(/\A\d+\z/)
  return false if (now - t.to_i).abs > TOLERANCE

  expected = OpenSSL::HMAC.hexdigest('SHA256', secret, "#{t}.".b + body.b)
  sigs.any? { |s| s.bytesize == expected.bytesize && OpenSSL.fixed_length_secure_compare(expected, s) }
end

if $PROGRAM_NAME == __FILE__
  secret = File.binread(ARGV[0]).rstrip
  unless verify(secret, ARGV[1], $stdin.binmode.read)
    warn 'invalid or expired signature'
    exit 1
  end
end
