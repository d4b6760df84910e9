# A jobq process handler in Ruby: protocol v1 (docs/process-protocol.md), standard library only.
#
# Copy this file next to your code, register a block per job kind and call run:
#
#   require_relative "jobq_worker"
#   worker = JobqWorker::Worker.new
#   worker.handle("resize") do |job|
#     make_thumbnail(job.payload["path"])   # returning normally: the job is done
#   end
#   worker.run
#
# and in jobq.toml:
#
#   [handlers.resize]
#   process = ["/usr/bin/ruby", "/srv/app/resize_worker.rb"]
#
# A block that raises fails the attempt with the exception's message (jobq retries it with backoff);
# raise JobqWorker::Retry.new(msg, retry_in: 30) to name the delay (seconds, or a string such as "30s"),
# JobqWorker::Fatal to make the job dead at once, JobqWorker::Snooze.new("5m") to run it again later
# without using an attempt. Return JobqWorker::FINISHED when the block finished the job itself with
# CALL jobq_finish(id, claim, attempt) in its own committed transaction. While it runs, a block may call
# job.progress(37.5, "rows 375 of 1000") (a percent from 0 to 100, and a message or nil) to show how far
# it has got, and set job.output to any JSON-able value the job leaves on its row when it is done.
#
# stdout belongs to the protocol: while run runs, puts and print go to stderr, which jobq logs under the
# job's id.

require "json"

module JobqWorker
  PROTOCOL = 1
  # Return this from a handler that finished its job itself with jobq_finish.
  FINISHED = Object.new.freeze

  class Retry < StandardError
    attr_reader :retry_in

    def initialize(message, retry_in: nil)
      super(message)
      @retry_in = retry_in
    end
  end

  class Fatal < StandardError; end

  class Snooze < StandardError
    attr_reader :delay

    def initialize(delay)
      super("snooze #{delay}")
      @delay = delay
    end
  end

  # One job as jobq sent it. `claim`, with `id` and `attempt`, fences the application's own writes; it
  # is also what jobq_finish takes. `output`: what the job leaves on its row when it is done.
  # `traceparent`: the W3C trace context to continue (nil without one).
  Job = Struct.new(:id, :kind, :queue, :attempt, :max_attempts, :claim, :payload, :run_at, :deadline,
                   :output, :reporter, :traceparent) do
    # Reports how far the job has got: a percent from 0 to 100, and a short message or nil.
    def progress(percent, message = nil)
      line = { "id" => id, "progress" => percent }
      line["message"] = message unless message.nil?
      reporter&.call(line)
    end
  end

  class Worker
    def initialize
      @handlers = {}
    end

    def handle(kind, &block)
      @handlers[kind] = block
      self
    end

    # Serves jobs until jobq closes stdin.
    def run
      @out = $stdout.dup
      @out.sync = true
      # File descriptor 1 (puts, print, subprocesses) now goes to stderr.
      $stdout.reopen($stderr)
      send_line("jobq" => PROTOCOL, "ready" => true)
      $stdin.each_line do |line|
        next if line.strip.empty?

        send_line(answer(JSON.parse(line)))
      end
    end

    private

    def send_line(message)
      @out.write(JSON.generate(message) + "\n")
      @out.flush
    end

    def answer(r)
      job = Job.new(r["id"], r["kind"], r["queue"], r["attempt"], r["max_attempts"], r["claim"],
                    r["payload"], r["run_at"], r["deadline"], nil, method(:send_line), r["traceparent"])
      block = @handlers[job.kind]
      return { "id" => job.id, "ok" => false, "error" => "no handler for kind #{job.kind.inspect}" } unless block

      begin
        result = block.call(job)
      rescue Snooze => e
        return { "id" => job.id, "snooze" => e.delay }
      rescue Fatal => e
        return { "id" => job.id, "ok" => false, "error" => message(e), "fatal" => true }
      rescue StandardError => e
        answer = { "id" => job.id, "ok" => false, "error" => message(e) }
        answer["retry_in"] = e.retry_in if e.is_a?(Retry) && !e.retry_in.nil?
        return answer
      end
      answer = { "id" => job.id, "ok" => true }
      answer["finished"] = true if result.equal?(FINISHED)
      answer["output"] = job.output unless job.output.nil?
      answer
    end

    def message(e)
      text = e.message.to_s.strip
      text.empty? ? e.class.name : text
    end
  end
end
