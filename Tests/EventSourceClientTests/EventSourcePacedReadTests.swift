import EventSourceClient
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import RealtimeCore
import RealtimeTesting
import Testing

/// EventSourceGuide.md, performance: at the pace of a server slower than its client, where each read
/// carries one event, an event costs one hand-over to the `events` loop, and a loop on the source's
/// executor (`withTaskExecutorPreference(source.taskExecutor)`) runs on the thread that read it: no
/// other thread is woken for it. The server sends an event only once the loop has had the one
/// before, so every read holds exactly one. Counted, not timed.
@Suite(.timeLimit(.minutes(2)))
struct EventSourcePacedReadTests {
    static let total = 200

    @Test("one event per read: one hand-over each, and on the source's executor no other thread", arguments: [false, true])
    func eventsAtOnePerRead(onConnectionExecutor: Bool) async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        let feed = ChunkFeed()
        server.route("/events") { _ in .init(headers: sseHeaders, body: .feed(feed)) }
        let source = EventSource(url: URL(string: server.baseURL + "/events")!, configuration: fastConfiguration())
        let received = Recorder<String>()
        let offLoop = NIOLockedValueBox(0)
        let loop = source.eventLoop
        let executor = source.taskExecutor
        @Sendable func read() async throws {
            for try await event in source.events {
                if !loop.inEventLoop { offLoop.withLockedValue { $0 += 1 } }
                received.append(event.data)
                if received.values.count == Self.total + 1 { break }
            }
        }
        let consumer = Task.detached {
            if onConnectionExecutor {
                try await withTaskExecutorPreference(executor) { try await read() }
            } else {
                try await read()
            }
        }
        // One event first: the stream is open and the loop waits.
        feed.send("data: 0\n\n")
        _ = try await received.wait(count: 1, within: 30)
        let before = source.consumerWakeUps
        for index in 1...Self.total {
            try await waitUntil("the loop waits", limit: .seconds(30)) { source.isConsumerWaiting }
            feed.send("data: \(index)\n\n")
            _ = try await received.wait(count: index + 1, within: 30)
        }
        try await consumer.value
        #expect(received.values == (0...Self.total).map(String.init))
        let handOvers = source.consumerWakeUps - before
        #expect(handOvers == Self.total, "\(handOvers) hand-overs for \(Self.total) reads of one event each")
        #expect(offLoop.withLockedValue { $0 } == (onConnectionExecutor ? 0 : Self.total + 1))
        source.close()
    }
}
