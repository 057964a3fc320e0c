import Foundation
import RealtimeCore
import RealtimeTesting
import SocketIOEngine

// Side by side in one run: our client and python-socketio's AsyncClient, each doing ack round trips
// over WebSocket against the same python-socketio 5.18.1 server (and ours against our in-process
// server too). Run: cd Benchmarks && swift run -c release SocketIOCompare [sequential] [inflight] [rounds]

let arguments = CommandLine.arguments.dropFirst().compactMap { Int($0) }
let sequential = arguments.count > 0 ? arguments[0] : 3000
let inflight = arguments.count > 1 ? arguments[1] : 1000
let rounds = arguments.count > 2 ? arguments[2] : 5
let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
let serverScript = root.deletingLastPathComponent().appendingPathComponent("Tests/SocketIOEngineTests/Peers/sio_server.py").path
let clientScript = root.appendingPathComponent("Scripts/sio_bench_client.py").path

func ours(url: String) async throws -> (Double, Double) {
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
    manager.disconnect()
    await manager.waitUntilStopped()
    return (sequentialRate, inflightRate)
}

extension Duration {
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}

/// Runs python-socketio's AsyncClient benchmark against `url`; returns (sequential, in flight) acks/s.
func python(url: String) async throws -> (Double, Double) {
    let client = try PythonPeer(scriptPath: clientScript, arguments: [url, "\(sequential)", "\(inflight)", "\(rounds)"], waitForPort: false)
    let (output, status) = await client.waitForExit(limit: .seconds(600))
    guard status == 0, let line = output.split(separator: "\n").last,
        let json = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Double],
        let sequentialRate = json["sequential_per_s"], let inflightRate = json["inflight_per_s"]
    else {
        print("python client against \(url) failed: \(output)")
        exit(1)
    }
    return (sequentialRate, inflightRate)
}

let peer = try PythonPeer(scriptPath: serverScript)
let pythonURL = "http://127.0.0.1:\(peer.port)"
let (pySequential, pyInflight) = try await python(url: pythonURL)
let (ourSequential, ourInflight) = try await ours(url: pythonURL)
peer.stop()
let testServer = try await SocketIOTestServer.start()
let (pySwiftSequential, pySwiftInflight) = try await python(url: testServer.url)
let (inProcSequential, inProcInflight) = try await ours(url: testServer.url)
await testServer.stop()

func row(_ name: String, _ value: Double, _ reference: Double) -> String {
    name.padding(toLength: 66, withPad: " ", startingAt: 0) + String(format: "%10.0f /s  %5.2fx", value, value / reference)
}
print("ack round trips over WebSocket, \(sequential) sequential, \(inflight) in flight x \(rounds)")
print(row("python-socketio AsyncClient -> python server, sequential", pySequential, pySequential))
print(row("swift-realtime SocketIOEngine -> python server, sequential", ourSequential, pySequential))
print(row("python-socketio AsyncClient -> python server, \(inflight) in flight", pyInflight, pyInflight))
print(row("swift-realtime SocketIOEngine -> python server, \(inflight) in flight", ourInflight, pyInflight))
print("against our SocketIOTestServer (Swift, in the same process as our client):")
print(row("python-socketio AsyncClient -> Swift server, sequential", pySwiftSequential, pySwiftSequential))
print(row("swift-realtime SocketIOEngine -> Swift server, sequential", inProcSequential, pySwiftSequential))
print(row("python-socketio AsyncClient -> Swift server, \(inflight) in flight", pySwiftInflight, pySwiftInflight))
print(row("swift-realtime SocketIOEngine -> Swift server, \(inflight) in flight", inProcInflight, pySwiftInflight))
