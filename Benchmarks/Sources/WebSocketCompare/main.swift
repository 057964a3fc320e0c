import Foundation
import Logging
import NIOCore
import RealtimeCore
import RealtimeTesting
import WSClient

// Side by side in one run: RealtimeCore's WebSocketTransport and swift-websocket's WSClient (what
// the transport was built on before it owned its handshake and writes), against the same in-process
// Hummingbird echo server on loopback.
//
// Run: cd Benchmarks && swift run -c release WebSocketCompare [workload] [client] [count]
//   workload: roundtrip | burst-text | burst-binary | all (default all)
//   client:   ours | wsclient | both (default both)
// A burst sends `count` messages one way (the server's `!sink` takes them without answering and
// says "sunk n" after the last): run one workload and one client under `strace -c -f` to count the
// write syscalls per message.

let arguments = Array(CommandLine.arguments.dropFirst())
let workload = arguments.first ?? "all"
let client = arguments.count > 1 ? arguments[1] : "both"
let countArgument = arguments.count > 2 ? Int(arguments[2]) : nil

extension Duration {
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}

enum Message {
    case text(String)
    case binary(ByteBuffer)
}

/// One client's connection as the workloads see it.
protocol BenchConnection {
    func send(_ message: Message) async throws
    func receiveText() async throws -> String?
}

struct Ours: BenchConnection {
    let connection: WebSocketConnection
    let iterator: IteratorBox<WebSocketMessages.AsyncIterator>
    func send(_ message: Message) async throws {
        switch message {
        case .text(let text): try await connection.send(text: text)
        case .binary(let buffer): try await connection.send(binary: buffer)
        }
    }
    func receiveText() async throws -> String? {
        if case .text(let text) = try await iterator.next() { return text }
        return nil
    }
}

struct Direct: BenchConnection {
    let outbound: WebSocketOutboundWriter
    let iterator: IteratorBox<WebSocketInboundMessageStream.AsyncIterator>
    func send(_ message: Message) async throws {
        switch message {
        case .text(let text): try await outbound.write(.text(text))
        case .binary(let buffer): try await outbound.write(.binary(buffer))
        }
    }
    func receiveText() async throws -> String? {
        if case .text(let text) = try await iterator.next() { return text }
        return nil
    }
}

/// Holds a mutable iterator. Unchecked: each box is made and read inside one connection body, by
/// one task, one call at a time.
final class IteratorBox<Base: AsyncIteratorProtocol>: @unchecked Sendable {
    var base: Base
    init(_ base: Base) { self.base = base }
    func next() async throws -> Base.Element? { try await base.next() }
}

func withClient(_ name: String, url: String, _ body: @escaping @Sendable (any BenchConnection) async throws -> Void) async throws {
    switch name {
    case "ours":
        try await WebSocketTransport.connect(to: url, configuration: .init(maxMessageSize: 1 << 21, autoPing: nil)) { connection in
            try await body(Ours(connection: connection, iterator: IteratorBox(connection.inbound.makeAsyncIterator())))
            try await connection.close()
        }
    default:
        let logger = Logger(label: "bench", factory: { _ in SwiftLogNoOpLogHandler() })
        try await WebSocketClient.connect(url: url, configuration: .init(maxFrameSize: 1 << 21, validateUTF8: true), logger: logger) {
            inbound, outbound, _ in
            try await body(Direct(outbound: outbound, iterator: IteratorBox(inbound.messages(maxSize: 1 << 21).makeAsyncIterator())))
            try await outbound.close(.normalClosure, reason: nil)
        }
    }
}

/// Sequential echo round trips per second.
func roundTrips(_ name: String, url: String, count: Int) async throws -> Double {
    let rate = LockedDouble()
    try await withClient(name, url: url) { connection in
        for _ in 0..<200 {
            try await connection.send(.text("warm"))
            _ = try await connection.receiveText()
        }
        let start = ContinuousClock.now
        for _ in 0..<count {
            try await connection.send(.text("ping"))
            _ = try await connection.receiveText()
        }
        rate.set(Double(count) / (ContinuousClock.now - start).seconds)
    }
    return rate.get()
}

/// One-way burst: messages per second until the server confirms the last.
func burst(_ name: String, url: String, count: Int, message: Message) async throws -> Double {
    let rate = LockedDouble()
    try await withClient(name, url: url) { connection in
        try await connection.send(.text("!sink \(count)"))
        let start = ContinuousClock.now
        for _ in 0..<count { try await connection.send(message) }
        guard try await connection.receiveText() == "sunk \(count)" else { throw CancellationError() }
        rate.set(Double(count) / (ContinuousClock.now - start).seconds)
    }
    return rate.get()
}

/// Unchecked: every access goes through the lock.
final class LockedDouble: @unchecked Sendable {
    private let lock = NSLock()
    private var value = 0.0
    func set(_ new: Double) { lock.withLock { value = new } }
    func get() -> Double { lock.withLock { value } }
}

let server = try await WebSocketEchoServer.start(maxMessageSize: 1 << 21)
let url = server.webSocketBaseURL + "/"
let clients = client == "both" ? ["ours", "wsclient"] : [client]
let binary = ByteBuffer(repeating: 0xA5, count: 64 * 1024)
var results: [(String, String, Double, String)] = []
for name in clients {
    if workload == "all" || workload == "roundtrip" {
        let count = countArgument ?? 10_000
        results.append(("echo round trips (sequential)", name, try await roundTrips(name, url: url, count: count), "msg/s"))
    }
    if workload == "all" || workload == "burst-text" {
        let count = countArgument ?? 10_000
        results.append(("burst of \(count) 32-byte text messages", name, try await burst(name, url: url, count: count, message: .text(String(repeating: "m", count: 32))), "msg/s"))
    }
    if workload == "all" || workload == "burst-binary" {
        let count = countArgument ?? 10_000
        let rate = try await burst(name, url: url, count: count, message: .binary(binary))
        results.append(("burst of \(count) 64 KiB binary messages", name, rate * 65536 / 1_048_576, "MiB/s"))
    }
}
for (workload, name, value, unit) in results {
    print("\(workload) | \(name) | \(String(format: "%.0f", value)) \(unit)")
}
await server.stop()
