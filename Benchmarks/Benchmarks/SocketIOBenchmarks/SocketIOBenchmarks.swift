import Benchmark
import Foundation
import RealtimeCore
import RealtimeTesting
import SocketIOEngine

/// One connected client per benchmark process, against the in-process Swift server or against
/// python-socketio's server in its own process (so malloc counts are the client's alone).
actor Connection {
    static let inProcess = Connection(python: false)
    static let python = Connection(python: true)
    private let usePython: Bool
    private var socket: SocketIOClient?
    private var server: SocketIOTestServer?
    private var peer: PythonPeer?
    private var manager: SocketManager?

    init(python: Bool) { usePython = python }

    func socket() async throws -> SocketIOClient {
        if let socket { return socket }
        let url: String
        if usePython {
            // Needs REALTIME_PYTHON with the pinned peers (Scripts/test.sh makes ../.venv).
            let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
                .deletingLastPathComponent().deletingLastPathComponent()
                .appendingPathComponent("Tests/SocketIOEngineTests/Peers/sio_server.py").path
            let peer = try await PythonPeer.start(scriptPath: script)
            self.peer = peer
            url = "http://127.0.0.1:\(peer.port)"
        } else {
            let server = try await SocketIOTestServer.start()
            self.server = server
            url = server.url
        }
        var configuration = SocketIOConfiguration()
        configuration.engine.transports = [.websocket]
        configuration.reachability = AlwaysReachable()
        let manager = SocketManager(url: url, configuration: configuration)
        let socket = manager.defaultSocket
        try await socket.connect(timeout: .seconds(10))
        self.manager = manager
        self.socket = socket
        return socket
    }
}

let eventPacket = SocketIOPacket(type: .event, namespace: "/", id: 12, data: ["chat", ["user": "ada", "text": "hello there", "n": 42, "tags": ["a", "b"]]])
let eventText = SocketIOCodec.encode(eventPacket).text
let binaryPacket = SocketIOPacket(type: .event, data: ["upload", .binary(Data(count: 64 * 1024)), ["name": "blob"]])
let binaryPlaceholder = SocketIOCodec.encode(binaryPacket).text
let pollingPayload = EngineIOCodec.encodePayload(Array(repeating: EngineIOPacket(.message, .text(eventText)), count: 100))

let benchmarks: @Sendable () -> Void = {
    Benchmark.defaultConfiguration = .init(
        metrics: [.wallClock, .throughput, .mallocCountTotal], warmupIterations: 10,
        maxDuration: .seconds(5), maxIterations: 1_000_000)

    // MARK: Codec

    Benchmark("Socket.IO encode: event with ack id and an object (\(eventText.utf8.count) B)", configuration: .init(scalingFactor: .kilo)) { benchmark in
        for _ in benchmark.scaledIterations { blackHole(SocketIOCodec.encode(eventPacket)) }
    }

    Benchmark("Socket.IO decode: event with ack id and an object (\(eventText.utf8.count) B)", configuration: .init(scalingFactor: .kilo)) { benchmark in
        for _ in benchmark.scaledIterations {
            var decoder = SocketIOPacketDecoder()
            blackHole(try decoder.receive(text: eventText))
        }
    }

    Benchmark("Engine.IO + Socket.IO: encode a 64 KiB binary event", configuration: .init(scalingFactor: .kilo)) { benchmark in
        for _ in benchmark.scaledIterations { blackHole(SocketIOCodec.encode(binaryPacket).engineIOPackets) }
    }

    Benchmark("Socket.IO decode: a 64 KiB binary event (placeholder + attachment)", configuration: .init(scalingFactor: .kilo)) { benchmark in
        let attachment = Data(count: 64 * 1024)
        for _ in benchmark.scaledIterations {
            var decoder = SocketIOPacketDecoder()
            _ = try decoder.receive(text: binaryPlaceholder)
            blackHole(try decoder.receive(binary: attachment))
        }
    }

    Benchmark("Engine.IO decode: polling payload of 100 events (\(pollingPayload.utf8.count) B)", configuration: .init(scalingFactor: .one)) { benchmark in
        for _ in benchmark.scaledIterations {
            blackHole(try EngineIOCodec.decodePayload(pollingPayload))
        }
    }

    // MARK: Client over WebSocket on loopback, against the in-process server

    Benchmark("Socket.IO ack round trip, sequential (in-process server)",
              configuration: .init(warmupIterations: 100, scalingFactor: .kilo, maxIterations: 10)) { benchmark in
        let socket = try await Connection.inProcess.socket()
        benchmark.startMeasurement()
        for index in benchmark.scaledIterations { _ = try await socket.emitWithAck("echo", index, timeout: .seconds(10)) }
        benchmark.stopMeasurement()
    }

    Benchmark("Socket.IO ack round trips, 1,000 in flight (in-process server)",
              configuration: .init(warmupIterations: 1, maxIterations: 20)) { benchmark in
        let socket = try await Connection.inProcess.socket()
        benchmark.startMeasurement()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<1000 {
                group.addTask { _ = try await socket.emitWithAck("echo", index, timeout: .seconds(30)) }
            }
            try await group.waitForAll()
        }
        benchmark.stopMeasurement()
    }

    Benchmark("Socket.IO emit without ack, 1,000 then one ack (in-process server)",
              configuration: .init(warmupIterations: 1, maxIterations: 50)) { benchmark in
        let socket = try await Connection.inProcess.socket()
        benchmark.startMeasurement()
        for index in 0..<1000 { try socket.emit("noop", arguments: [.number(Double(index)), "payload"]) }
        _ = try await socket.emitWithAck("echo", "flush", timeout: .seconds(30))
        benchmark.stopMeasurement()
    }

    Benchmark("Socket.IO emit without ack, 1,000 then one ack (python-socketio server, its own process)",
              configuration: .init(warmupIterations: 1, maxIterations: 50)) { benchmark in
        let socket = try await Connection.python.socket()
        benchmark.startMeasurement()
        for index in 0..<1000 { try socket.emit("echo", arguments: [.number(Double(index)), "payload"]) }
        _ = try await socket.emitWithAck("echo", "flush", timeout: .seconds(30))
        benchmark.stopMeasurement()
    }

    Benchmark("Socket.IO ack round trip, sequential (python-socketio server, its own process)",
              configuration: .init(warmupIterations: 100, maxIterations: 2000)) { benchmark in
        let socket = try await Connection.python.socket()
        benchmark.startMeasurement()
        _ = try await socket.emitWithAck("echo", 1, timeout: .seconds(10))
        benchmark.stopMeasurement()
    }

    Benchmark("Socket.IO 64 KiB binary echo with ack (in-process server)",
              configuration: .init(warmupIterations: 5, maxIterations: 2000)) { benchmark in
        let socket = try await Connection.inProcess.socket()
        let blob = JSONValue.binary(Data(count: 64 * 1024))
        benchmark.startMeasurement()
        _ = try await socket.emitWithAck("echo", arguments: [blob], timeout: .seconds(10))
        benchmark.stopMeasurement()
    }
}
