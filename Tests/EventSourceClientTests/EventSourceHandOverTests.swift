import EventSourceClient
import Foundation
import NIOCore
import RealtimeCore
import RealtimeTesting
import Testing

/// EventSourceGuide.md, performance: the events one socket read brings reach the `events` or
/// `updates` loop in one hand-over. The server writes 1,000 events, one write (one chunk) each;
/// the network holds them and lets them through together, so they arrive in a few reads. The count
/// is the pipeline's own (hand-overs to the loop), not a timing: one per event would be 1,000.
@Suite(.timeLimit(.minutes(2)))
struct EventSourceHandOverTests {
    enum Reader: String, CaseIterable, Sendable { case events, updates }

    @Test("a read's events reach the loop in one hand-over", arguments: Reader.allCases)
    func oneHandOverPerRead(reader: Reader) async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        let feed = ChunkFeed()
        server.route("/events") { _ in .init(headers: sseHeaders, body: .feed(feed)) }
        let proxy = try await FaultProxy.start(targetPort: server.port)
        defer { Task { await proxy.stop() } }
        let total = 1_000
        let source = EventSource(url: URL(string: proxy.url() + "/events")!, configuration: fastConfiguration { $0.bufferSize = 2_000 })
        let consumer = Task {
            var seen: [String] = []
            switch reader {
            case .events:
                for try await event in source.events {
                    seen.append(event.data)
                    if seen.count == total + 1 { break }
                }
            case .updates:
                for try await update in source.updates {
                    if case .event(let event) = update { seen.append(event.data) }
                    if seen.count == total + 1 { break }
                }
            }
            return seen
        }
        // One event first: the stream is open and the loop waits before the burst.
        feed.send("data: 0\n\n")
        try await waitUntil("the first event was read", limit: .seconds(30)) { source.consumerWakeUps >= 1 && source.bytesReceived > 0 }
        proxy.hold(.targetToClient)
        var bytes = 0
        for index in 1...total {
            let event = "data: \(index)\n\n"
            // On the wire each write is an HTTP chunk: its size in hex, CRLF, the bytes, CRLF.
            bytes += String(event.utf8.count, radix: 16).count + 2 + event.utf8.count + 2
            feed.send(event)
        }
        try await waitUntil("the proxy holds the server's writes", limit: .seconds(30)) { proxy.statistics.bytesHeldForClients >= bytes }
        let before = source.consumerWakeUps
        proxy.resume()
        #expect(try await consumer.value == (0...total).map(String.init))
        let handOvers = source.consumerWakeUps - before
        #expect(handOvers >= 1)
        #expect(handOvers <= total / 10, "\(handOvers) hand-overs for \(total) events")
        source.close()
        feed.finish()
    }
}
