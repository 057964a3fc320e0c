// The usage from the IKEventSource README (shared/seeds/ikeventsource-readme.zh.txt), unchanged (the
// callbacks on the main queue, which this test process runs), against a loopback server.
import IKEventSource
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import RealtimeTesting
import Testing

@Suite(.timeLimit(.minutes(1))) struct IKEventSourceCompatibilityTests {
    @Test func theSeedsUsageWorksUnchanged() async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        server.route("/sse") { request in
            let replay = request.headers["last-event-id"] ?? "none"
            let body = ":heartbeat\n\nid: event-id\nevent: event-name\ndata: event-data\n\n"
                + "id: event-id\ndata: event-data-1\ndata: event-data-2\ndata: event-data-3\n\n"
                + "data: replayed-from-\(replay)\n\n"
            return .init(headers: [("Content-Type", "text/event-stream")], body: .bytes(ByteBuffer(string: body)))
        }
        let log = NIOLockedValueBox<[String]>([])
        let completed = AsyncStream<Void>.makeStream()

        // --- seed usage ---
        let eventSource = EventSource(url: URL(string: server.baseURL + "/sse")!, headers: ["Authorization": "Bearer x"])
        eventSource.onOpen {
            log.withLockedValue { $0.append("open") }
        }
        eventSource.addEventListener("event-name") { (id, event, data) in
            // Here you get an event 'event-name'
            log.withLockedValue { $0.append("listener \(id ?? "-") \(event ?? "-") \(data ?? "-")") }
        }
        eventSource.onMessage { (id, event, data) in
            // Here you get an event without event name!
            log.withLockedValue { $0.append("message \(id ?? "-") \(event ?? "-") \(data ?? "-")") }
        }
        eventSource.onComplete { statusCode, reconnect, error in
            log.withLockedValue { $0.append("complete \(statusCode ?? 0) \(reconnect ?? false)") }
            completed.continuation.yield()
        }
        eventSource.connect(lastEventId: "resume-7")
        // --- end of seed usage ---

        var done = completed.stream.makeAsyncIterator()
        await done.next()
        #expect(eventSource.events() == ["event-name"])
        #expect(eventSource.lastEventId == "event-id")
        #expect(eventSource.readyState == .open, "IKEventSource leaves it as it was when the server ends the stream")
        #expect(eventSource.retryTime == 3000)
        #expect(log.withLockedValue { $0 } == [
            "open",
            "listener event-id event-name event-data",
            "message event-id message event-data-1\nevent-data-2\nevent-data-3",
            "message event-id message replayed-from-resume-7",
            "complete 200 false",  // IKEventSource: no reconnect advice after a 200
        ])
        #expect(server.requests(to: "/sse").first?.headers["authorization"] == "Bearer x")
        eventSource.removeEventListener("event-name")
        #expect(eventSource.events().isEmpty)
        eventSource.disconnect()
    }
}
