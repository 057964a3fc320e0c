// The official Socket.IO JavaScript client (socket.io-client's browser bundle, run by Node.js with
// its built-in WebSocket) doing what EngineCompare's acks workloads do, for a figure measured in the
// same run as ours:
//   node --experimental-websocket sio_js_client.js BUNDLE socketio-emit URL N [inflight]
// N emitWithAck("echo", i), `inflight` at a time (1: sequential). Prints EngineCompare's line:
// "<what>: N messages, S s, R messages/s; window: W switches, C ms CPU, R reads", the window being
// from the first emit to the last ack (getrusage of the whole process, as EngineCompare's).
"use strict";
const fs = require("fs");
const [bundle, what, url, count, inflightArg] = process.argv.slice(2);
// socketio-emit-loop is EngineCompare's with its tasks on the connection's event loop: the same
// here, where everything runs on Node's one loop.
if (!bundle || !["socketio-emit", "socketio-emit-loop"].includes(what) || !url) {
  console.error("usage: sio_js_client.js BUNDLE socketio-emit|socketio-emit-loop URL N [inflight]");
  process.exit(2);
}
const total = Number(count || 100000);
const inflight = Number(inflightArg || 1000);
const io = require(require("path").resolve(bundle));

function counters() {
  const usage = process.resourceUsage();
  const io = fs.readFileSync("/proc/self/io", "utf8");
  const reads = Number(/syscr: (\d+)/.exec(io)[1]);
  return {
    switches: usage.voluntaryContextSwitches + usage.involuntaryContextSwitches,
    cpuMs: (usage.userCPUTime + usage.systemCPUTime) / 1000,
    reads,
  };
}

const socket = io(url, { transports: ["websocket"], reconnection: false, timeout: 10000 });
socket.on("connect_error", (error) => {
  console.error(`sio_js_client: ${error.message}`);
  process.exit(1);
});
socket.once("connect", () => {
  const start = counters();
  const began = process.hrtime.bigint();
  let sent = 0;
  let done = 0;
  const finish = () => {
    const seconds = Number(process.hrtime.bigint() - began) / 1e9;
    const end = counters();
    console.log(
      `socketio-emit-js: ${total} messages, ${seconds.toFixed(3)} s, ${Math.floor(total / seconds)} messages/s; ` +
        `window: ${end.switches - start.switches} switches, ${(end.cpuMs - start.cpuMs).toFixed(1)} ms CPU, ${end.reads - start.reads} reads`,
    );
    socket.disconnect();
    process.exit(0);
  };
  const pump = () => {
    while (sent < total && sent - done < inflight) {
      const index = sent++;
      socket.timeout(60000).emitWithAck("echo", index).then(
        () => {
          done += 1;
          if (done === total) finish();
          else pump();
        },
        (error) => {
          console.error(`sio_js_client: ack ${index}: ${error.message}`);
          process.exit(1);
        },
      );
    }
  };
  pump();
});
