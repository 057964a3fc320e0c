import Foundation
import RealtimeCore
import RealtimeTesting
import SocketIOEngine

// Side by side in one run: our client and python-socketio's AsyncClient run the same workloads over
// WebSocket against the same server: python-socketio 5.18.1's server (its own process), then our
// SocketIOTestServer (in this process). For context it also measures the raw WebSocket echo round
// trip of the stack underneath (WSClient against a Hummingbird echo server, no Socket.IO).
//
// Run: cd Benchmarks && swift run -c release SocketIOCompare [sequential] [inflight] [rounds] [emits] [binaryCount] [binaryBytes]
// REALTIME_PYTHON must point at a Python with the pinned peers (Scripts/test.sh makes ../.venv).

let arguments = CommandLine.arguments.dropFirst().compactMap { Int($0) }
func argument(_ index: Int, _ fallback: Int) -> Int { arguments.count > index ? arguments[index] : fallback }
let sequential = argument(0, 5000)
let inflight = argument(1, 1000)
let rounds = argument(2, 5)
let emits = argument(3, 20000)
let binaryCount = argument(4, 300)
let binaryBytes = argument(5, 64 * 1024)

let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
let serverScript = root.deletingLastPathComponent().appendingPathComponent("Tests/SocketIOEngineTests/Peers/sio_server.py").path
let clientScript = root.appendingPathComponent("Scripts/sio_bench_client.py").path

struct Results {
    var sequential: Double
    var inflight: Double
    var emits: Double
    var binaryMBps: Double
}

extension Duration {
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}

/// Our client: the same four workloads as sio_bench_client.py, from an ordinary task (the global
/// executor), as an application would call it.
func ours(url: String) async throws -> Results {
    var configuration = SocketIOConfiguration()
    configuration.engine.transports = [.websocket]
    configuration.reachability = AlwaysReachable()
    let manager = SocketManager(url: url, configuration: configuration)
    let socket = manager.defaultSocket
    try await socket.connect(timeout: .seconds(10))
    for _ in 0..<100 { _ = try await socket.emitWithAck("echo", "warm", timeout: .seconds(10)) }
    let clock = ContinuousClock()

    var start = clock.now
    for index in 0..<sequential { _ = try await socket.emitWithAck("echo", index, timeout: .seconds(10)) }
    let sequentialRate = Double(sequential) / (clock.now - start).seconds

    start = clock.now
    for _ in 0..<rounds {
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<inflight {
                group.addTask { _ = try await socket.emitWithAck("echo", index, timeout: .seconds(30)) }
            }
            try await group.waitForAll()
        }
    }
    let inflightRate = Double(inflight * rounds) / (clock.now - start).seconds

    start = clock.now
    for index in 0..<emits { try socket.emit("echo", arguments: [.number(Double(index))]) }
    _ = try await socket.emitWithAck("echo", "done", timeout: .seconds(60))
    let emitRate = Double(emits) / (clock.now - start).seconds

    let blob = Data((0..<binaryBytes).map { UInt8($0 % 251) })
    start = clock.now
    for _ in 0..<binaryCount {
        let reply = try await socket.emitWithAck("echo", arguments: [.binary(blob)], timeout: .seconds(30))
        guard reply == [.binary(blob)] else { fatalError("the server's binary ack differs") }
    }
    let binaryRate = Double(2 * binaryCount * binaryBytes) / (clock.now - start).seconds / 1e6

    manager.disconnect()
    await manager.waitUntilStopped()
    return Results(sequential: sequentialRate, inflight: inflightRate, emits: emitRate, binaryMBps: binaryRate)
}

/// python-socketio's AsyncClient running the same workloads against `url`.
func python(url: String) async throws -> Results {
    let client = try await PythonPeer.start(
        scriptPath: clientScript,
        arguments: [url] + [sequential, inflight, rounds, emits, binaryCount, binaryBytes].map(String.init),
        waitForPort: false)
    let (output, status) = await client.waitForExit(limit: .seconds(900))
    guard status == 0, let line = output.split(separator: "\n").last,
        let json = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Double],
        let sequentialRate = json["sequential_per_s"], let inflightRate = json["inflight_per_s"],
        let emitRate = json["emits_per_s"], let binaryRate = json["binary_mb_per_s"]
    else {
        print("python client against \(url) failed: \(output)")
        exit(1)
    }
    return Results(sequential: sequentialRate, inflight: inflightRate, emits: emitRate, binaryMBps: binaryRate)
}

/// Raw WebSocket echo round trips of the transport underneath (no Socket.IO), same message size.
func rawWebSocketEcho() async throws -> Double {
    let server = try await WebSocketEchoServer.start()
    let rate = ResultBox()
    try await WebSocketTransport.connect(to: "ws://127.0.0.1:\(server.port)/") { connection in
        var inbound = connection.inbound.makeAsyncIterator()
        let message = "42[\"echo\",12345]"
        for _ in 0..<100 {
            try await connection.send(text: message)
            _ = try await inbound.next()
        }
        let clock = ContinuousClock()
        let start = clock.now
        for _ in 0..<sequential {
            try await connection.send(text: message)
            _ = try await inbound.next()
        }
        rate.set(Double(sequential) / (clock.now - start).seconds)
        try await connection.close()
    }
    await server.stop()
    return rate.get()
}

final class ResultBox: @unchecked Sendable {  // written once inside the connection body, read after it returned
    private var value = 0.0
    func set(_ value: Double) { self.value = value }
    func get() -> Double { value }
}

func row(_ name: String, _ value: Double, _ reference: Double, unit: String = "/s") -> String {
    name.padding(toLength: 60, withPad: " ", startingAt: 0)
        + String(format: "%10.0f %-5@ %5.2fx", value, unit as NSString, value / reference)
}

func report(_ server: String, python py: Results, ours: Results) {
    print("against \(server):")
    print(row("  ack round trips, sequential       python AsyncClient", py.sequential, py.sequential))
    print(row("                                    swift-realtime", ours.sequential, py.sequential))
    print(row("  ack round trips, \(inflight) in flight   python AsyncClient", py.inflight, py.inflight))
    print(row("                                    swift-realtime", ours.inflight, py.inflight))
    print(row("  emits without ack                 python AsyncClient", py.emits, py.emits))
    print(row("                                    swift-realtime", ours.emits, py.emits))
    print(row("  \(binaryBytes / 1024) KiB binary echo (both ways) python AsyncClient", py.binaryMBps, py.binaryMBps, unit: "MB/s"))
    print(row("                                    swift-realtime", ours.binaryMBps, py.binaryMBps, unit: "MB/s"))
}

let peer = try await PythonPeer.start(scriptPath: serverScript)
let pythonURL = "http://127.0.0.1:\(peer.port)"
let pythonOnPython = try await python(url: pythonURL)
let oursOnPython = try await ours(url: pythonURL)
await peer.stop()

let testServer = try await SocketIOTestServer.start()
let pythonOnSwift = try await python(url: testServer.url)
let oursOnSwift = try await ours(url: testServer.url)
await testServer.stop()
let raw = try await rawWebSocketEcho()

print("Socket.IO over WebSocket on loopback: \(sequential) sequential acks, \(inflight) in flight x \(rounds), \(emits) emits, \(binaryCount) x \(binaryBytes) B binary")
report("python-socketio 5.18.1 server (aiohttp, its own process)", python: pythonOnPython, ours: oursOnPython)
report("SocketIOTestServer (Swift, in this process)", python: pythonOnSwift, ours: oursOnSwift)
print(String(format: "floor: raw WebSocket echo of the same stack, sequential: %.0f /s (%.0f us per round trip)", raw, 1e6 / raw))
