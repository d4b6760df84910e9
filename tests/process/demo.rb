# Demo kinds for the process handler tests, served by the Ruby reference worker.
require_relative "../../clients/ruby/jobq_worker"

worker = JobqWorker::Worker.new
worker.handle("echo") do |job|
  puts "echo says hello on stdout"
  File.open(job.payload["file"], "a") do |f|
    f.write("#{Process.pid} #{job.payload['text']} #{job.attempt} #{job.claim}\n")
  end
end
worker.handle("fail") { raise "failed on purpose" }
worker.handle("later") { raise JobqWorker::Retry.new("rate limited", retry_in: "1h") }
worker.handle("fatal") { raise JobqWorker::Fatal, "bad input, never retry" }
worker.handle("snooze") { raise JobqWorker::Snooze.new("10m") }
worker.handle("finished") { JobqWorker::FINISHED }
worker.handle("reported") do |job|
  job.progress(50, "half way")
  job.output = { "n" => job.payload["n"], "words" => ["ünï", "<b>"] }
end
worker.run
