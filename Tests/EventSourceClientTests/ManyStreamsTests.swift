import EventSourceClient
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import RealtimeCore
import RealtimeTesting
import Testing

/// Long-lived streams each hold a connection: 200 streams to one host on the default runtime all
/// get their first event (async-http-client's shared client allows 8 per host, and the ninth
/// stream waited forever).
@Suite(.timeLimit(.minutes(2))) struct ManyStreamsTests {
    @Test func twoHundredStreamsToOneHostAllReceiveTheirFirstEvent() async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        let feeds = FeedList()
        server.route("/events") { _ in
            let feed = ChunkFeed()
            feeds.append(feed)
            feed.send("data: hello\n\n")
            return ScriptedResponse(headers: sseHeaders, body: .feed(feed))
        }
        let sources = (0..<200).map { _ in EventSource(url: URL(string: server.baseURL + "/events")!, configuration: fastConfiguration()) }
        defer {
            sources.forEach { $0.close() }
            feeds.finishAll()
        }
        let firsts = try await withThrowingTaskGroup(of: ServerSentEvent?.self) { group in
            for source in sources {
                group.addTask { try await collect(source, count: 1).first }
            }
            var events: [ServerSentEvent] = []
            for try await event in group { if let event { events.append(event) } }
            return events
        }
        #expect(firsts.count == 200)
        #expect(firsts.allSatisfy { $0.data == "hello" })
        #expect(server.requests(to: "/events").count == 200)
    }
}

/// The feeds of every open response, so the test can end them.
final class FeedList: Sendable {
    private let feeds = NIOLockedValueBox<[ChunkFeed]>([])
    func append(_ feed: ChunkFeed) { feeds.withLockedValue { $0.append(feed) } }
    func finishAll() { feeds.withLockedValue { $0 }.forEach { $0.finish() } }
}
