import EventSourceClient
import Foundation
import Logging
import NIOCore
import RealtimeCore
import RealtimeTesting
import ServiceLifecycle
import Testing

/// EventSource as a Service: the graceful shutdown closes it; run() returns and events ends.
@Suite(.timeLimit(.minutes(1))) struct EventSourceServiceTests {
    @Test func gracefulShutdownClosesTheSource() async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        let feed = ChunkFeed()
        server.route("/events") { _ in .init(headers: sseHeaders, body: .feed(feed)) }
        feed.send("data: one\n\n")
        let source = EventSource(url: URL(string: server.baseURL + "/events")!, configuration: fastConfiguration())
        let group = ServiceGroup(services: [source], logger: Logger(label: "test"))
        let running = Task { try await group.run() }
        var iterator = source.events.makeAsyncIterator()
        #expect(try await iterator.next()?.data == "one")
        await group.triggerGracefulShutdown()
        try await running.value
        #expect(try await iterator.next() == nil)
        #expect(source.readyState == .closed)
        feed.finish()
    }
}
