import Foundation
import NIOConcurrencyHelpers
import NIOCore
import RealtimeCore
import RealtimeTesting
import SignalRHub
import Testing

/// SignalRGuide.md, performance: at the pace of a server slower than its client, where each read
/// carries one message, a message costs one hand-over to its reader, and a reader on the
/// connection's executor (`withTaskExecutorPreference(connection.taskExecutor)`), like every `on`
/// handler, runs on the thread that read it: no other thread is woken for it. The server here sends
/// a message only once the reader has had the one before and waits again, so every read holds
/// exactly one, and a reader that keeps up is handed each one. Counted
/// in the pipeline (hand-overs, and the thread each message reaches), not timed.
@Suite(.timeLimit(.minutes(2)))
struct HubPacedReadTests {
    static let total = 200

    enum Reader: String, CaseIterable, Sendable { case hubStream, streamResult }

    /// Where the reading loop runs.
    enum Place: String, CaseIterable, Sendable { case defaultExecutor, connectionExecutor }

    @Test("one message per read: one hand-over each, and on the connection's executor no other thread",
          arguments: Reader.allCases, Place.allCases)
    func streamAtOnePerRead(reader: Reader, place: Place) async throws {
        let server = try await SignalRTestServer.start()
        defer { Task { await server.stop() } }
        let (items, feed) = AsyncThrowingStream.makeStream(of: JSONValue.self)
        server.stream("Paced") { _ in items }
        let connection = HubConnectionBuilder().withUrl(url: server.url, transport: .webSockets).build()
        try await connection.start()
        let stream: HubStream<Int> = try await connection.stream(method: "Paced")
        let received = Recorder<Int>()
        let offLoop = NIOLockedValueBox(0)
        let loop = connection.eventLoop
        @Sendable func read() async throws {
            switch reader {
            case .hubStream:
                for try await item in stream {
                    if !loop.inEventLoop { offLoop.withLockedValue { $0 += 1 } }
                    received.append(item)
                }
            case .streamResult:
                for try await item in stream.stream {
                    if !loop.inEventLoop { offLoop.withLockedValue { $0 += 1 } }
                    received.append(item)
                }
            }
        }
        let consumer = Task.detached {
            switch place {
            case .defaultExecutor: try await read()
            case .connectionExecutor: try await withTaskExecutorPreference(connection.taskExecutor) { try await read() }
            }
        }
        // One item first: the loop has started and waits.
        feed.yield(.integer(0))
        _ = try await received.wait(count: 1, within: 30)
        let before = stream.consumerWakeUps
        for index in 1...Self.total {
            try await waitUntil("the loop waits", limit: .seconds(30)) { stream.isConsumerWaiting }
            feed.yield(.integer(Int64(index)))
            _ = try await received.wait(count: index + 1, within: 30)
        }
        feed.finish()
        try await consumer.value
        #expect(received.values == Array(0...Self.total))
        let handOvers = stream.consumerWakeUps - before
        #expect(handOvers == Self.total, "\(handOvers) hand-overs for \(Self.total) reads of one message each")
        if place == .connectionExecutor {
            #expect(offLoop.withLockedValue { $0 } == 0, "every item reached the loop on the connection's event loop")
        } else {
            #expect(offLoop.withLockedValue { $0 } == Self.total + 1, "on the default executor every item reached a pool thread")
        }
        await connection.stop()
    }

    @Test("one invocation per read: one hand-over each, to a handler on the connection's event loop")
    func invocationsAtOnePerRead() async throws {
        let server = try await SignalRTestServer.start()
        defer { Task { await server.stop() } }
        let connection = HubConnectionBuilder().withUrl(url: server.url, transport: .webSockets).build()
        let received = Recorder<Int>()
        let offLoop = NIOLockedValueBox(0)
        let loop = connection.eventLoop
        connection.on("tick") { (value: Int) in
            if !loop.inEventLoop { offLoop.withLockedValue { $0 += 1 } }
            received.append(value)
        }
        try await connection.start()
        await server.broadcast("tick", [.integer(0)])
        _ = try await received.wait(count: 1, within: 30)
        let before = connection.handlerWakeUps
        for index in 1...Self.total {
            await server.broadcast("tick", [.integer(Int64(index))])
            _ = try await received.wait(count: index + 1, within: 30)
        }
        #expect(received.values == Array(0...Self.total))
        let handOvers = connection.handlerWakeUps - before
        #expect(handOvers == Self.total, "\(handOvers) hand-overs for \(Self.total) reads of one invocation each")
        #expect(offLoop.withLockedValue { $0 } == 0, "every handler ran on the connection's event loop")
        await connection.stop()
    }
}
