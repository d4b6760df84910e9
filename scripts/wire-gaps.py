#!/usr/bin/env python3
"""Where a connection's time goes, read off the wire: the server's time and the client's, by statement.

    scripts/wire-gaps.py CAPTURE.pcap [PORT]

Reads a capture of MySQL traffic on one machine (tcpdump -i lo -s 0 -w CAPTURE.pcap 'tcp port 3306',
as `scripts/drain-profile.sh --wire` makes it) and, for each of its busiest client connections (up to 8
with at least 100 requests), prints each kind of statement with how often it was sent, the server's time (from the request to the first packet of its
answer) and the client's time before it (from the last packet of the previous answer to this request),
as medians and means in microseconds. A connection that waits on nothing else spends its span in those
two; a client gap longer than another program's running the same statements is the client's own work
and its threads' wake-ups.

Prepared statements are named by their text, matched through the statement id the server gave at
PREPARE. Only the first 40 characters of a text are shown. Needs tcpdump to read the capture.
"""
import collections
import re
import statistics
import subprocess
import sys

COM_QUERY, COM_STMT_PREPARE, COM_STMT_EXECUTE = 0x03, 0x16, 0x17


def packets(path, port):
    """(time, client port, to_server, tcp payload) of every segment that carries data."""
    out = subprocess.run(
        ["tcpdump", "-nn", "-tt", "-x", "-r", path],
        capture_output=True, text=True, check=True,
    ).stdout
    head = re.compile(r"(\d+\.\d+) IP [\d.]+\.(\d+) > [\d.]+\.(\d+): .* length (\d+)")
    cur = None
    for line in out.split("\n"):
        if line.startswith("\t"):
            if cur is not None and ":" in line:
                cur[4].append(line.split(":", 1)[1].replace(" ", ""))
            continue
        if cur is not None and cur[3] > 0:
            yield finish(cur)
        m = head.match(line)
        cur = None
        if m:
            src, dst = int(m[2]), int(m[3])
            if port in (src, dst):
                cur = [float(m[1]), dst if src == port else src, dst == port, int(m[4]), []]
    if cur is not None and cur[3] > 0:
        yield finish(cur)


def finish(cur):
    raw = bytes.fromhex("".join(cur[4]))
    ip_len = (raw[0] & 15) * 4
    tcp_len = (raw[ip_len + 12] >> 4) * 4
    return cur[0], cur[1], cur[2], raw[ip_len + tcp_len:]


def exchanges(segments):
    """(request time, first answer time, last answer time, name) of each request on one connection."""
    prepared, pending_prepare, out = {}, None, []
    i = 0
    while i < len(segments):
        t, to_server, data = segments[i]
        if not to_server:
            i += 1
            continue
        j = i + 1
        while j < len(segments) and segments[j][1]:
            j += 1
        if j == len(segments):
            break
        k = j
        while k + 1 < len(segments) and not segments[k + 1][1]:
            k += 1
        command = data[4] if len(data) > 4 else None
        if not out and not prepared and data[3] == 1:
            name = "log-in"  # the client's handshake response, sequence 1, has no command byte
        elif command == COM_QUERY:
            name = data[5:45].decode("latin1")
        elif command == COM_STMT_PREPARE:
            name = "PREPARE " + data[5:37].decode("latin1")
            answer = segments[j][2]
            if len(answer) > 8 and answer[4] == 0:
                prepared[int.from_bytes(answer[5:9], "little")] = data[5:45].decode("latin1")
        elif command == COM_STMT_EXECUTE:
            stmt = int.from_bytes(data[5:9], "little")
            name = "EXECUTE " + prepared.get(stmt, f"statement {stmt}")
        else:
            name = f"command {command}"
        out.append((t, segments[j][0], segments[k][0], " ".join(name.split())))
        i = k + 1
    return out


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    port = int(sys.argv[2]) if len(sys.argv) > 2 else 3306
    by_conn = collections.defaultdict(list)
    for t, client, to_server, data in packets(sys.argv[1], port):
        by_conn[client].append((t, to_server, data))
    busiest = sorted(by_conn.items(), key=lambda kv: -len(kv[1]))
    for client, segments in busiest[:8]:
        ex = exchanges(segments)
        if len(ex) < 100:
            break
        server, client_gap = collections.defaultdict(list), collections.defaultdict(list)
        for e in ex:
            server[e[3]].append((e[1] - e[0]) * 1e6)
        for before, e in zip(ex, ex[1:]):
            client_gap[e[3]].append((e[0] - before[2]) * 1e6)
        span = ex[-1][2] - ex[0][0]
        in_server = sum(map(sum, server.values())) / 1e6
        print(f"connection from port {client}: {len(ex)} requests over {span:.3f} s: "
              f"{in_server:.3f} s waiting for the server, {span - in_server:.3f} s in the client")
        print(f"  {'statement':<50} {'sent':>6}  {'server µs med/mean':>18}  {'client µs before, med/mean':>26}")
        for name in sorted(server, key=lambda n: -len(server[n]))[:8]:
            s, g = server[name], client_gap.get(name, [0.0])
            print(f"  {name[:50]:<50} {len(s):>6}  {statistics.median(s):>8.0f} {statistics.mean(s):>9.0f}"
                  f"  {statistics.median(g):>12.0f} {statistics.mean(g):>13.0f}")


if __name__ == "__main__":
    main()
