import EventSourceClient
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import RealtimeCore
import RealtimeTesting

/// The EventSource client's part of the demo.
enum EventSourceDemo {
    static let steps: [(String, @Sendable () async throws -> Void)] = [
        ("EventSource: events, server drop, reconnect with Last-Event-ID, retry:, then 204 stops it", eventSource),
    ]

    static func eventSource() async throws {
        let server = try await ScriptedHTTPServer.start()
        DemoCleanup.after { await server.stop() }
        let connections = NIOLockedValueBox(0)
        server.route("/events") { request in
            let number = connections.withLockedValue { $0 += 1; return $0 }
            let last = request.headers["last-event-id"] ?? "none"
            say("   server: connection \(number), Last-Event-ID: \(last)")
            switch number {
            case 1:
                return ScriptedResponse(
                    headers: [("Content-Type", "text/event-stream")],
                    body: .bytes(ByteBuffer(string: "retry: 100\nid: 1\nevent: price\ndata: 101.5\n\nid: 2\nevent: price\ndata: 101.7\n\n")))
            case 2:
                return ScriptedResponse(
                    headers: [("Content-Type", "text/event-stream")],
                    body: .bytes(ByteBuffer(string: ": resumed\nid: 3\ndata: after reconnect\n\n")))
            default:
                return ScriptedResponse(status: 204)
            }
        }
        let source = EventSource(
            url: URL(string: server.baseURL + "/events")!,
            configuration: EventSourceConfiguration(randomizationFactor: 0, reachability: AlwaysReachable()))
        var count = 0
        for try await event in source.events {
            count += 1
            say("   event type=\(event.type) id=\(event.lastEventId) data=\"\(event.data)\"")
        }
        say("   stream ended after \(count) events; readyState=\(source.readyState), reconnection time \(source.reconnectionTime)")
    }
}
