import Foundation
import NIOConcurrencyHelpers
import NIOCore
public import NIOSSL

/// A Server-Sent Events server on loopback that does what the HTML standard asks of the server
/// side: `text/event-stream`, an `id:` on every event, and a reconnect with `Last-Event-ID` gets
/// every event after that id which the history still holds, before anything new.
///
/// Events are published to every open stream. A test can end all streams at once (the client
/// reconnects), answer the next connections with a status, and see the `Last-Event-ID` of every
/// connection.
public final class SSETestServer: Sendable {
    private struct State {
        var events: [(id: Int, text: String)] = []
        var nextID = 1
        var subscribers: [Int: ChunkFeed] = [:]
        var nextSubscriber = 0
        var lastEventIDs: [String?] = []
        var refusals: [Int] = []
    }

    private let server: ScriptedHTTPServer
    private let state = NIOLockedValueBox(State())
    /// The path streams are served on.
    public let path: String
    private let history: Int
    private let retry: Duration?

    private init(server: ScriptedHTTPServer, path: String, history: Int, retry: Duration?) {
        self.server = server
        self.path = path
        self.history = history
        self.retry = retry
    }

    /// Starts on 127.0.0.1 with an ephemeral port. `history`: how many past events a reconnect can
    /// get back; `retry`: sent as the `retry:` field at the start of every stream; `tls`: serve
    /// HTTPS with this configuration.
    public static func start(
        path: String = "/events", history: Int = 100_000, retry: Duration? = nil, tls: TLSConfiguration? = nil
    ) async throws -> SSETestServer {
        let sse = SSETestServer(server: try await ScriptedHTTPServer.start(tls: tls), path: path, history: history, retry: retry)
        sse.server.route(path) { [weak sse] request in
            guard let sse else { return ScriptedResponse(status: 503) }
            return sse.open(lastEventID: request.headers["last-event-id"])
        }
        return sse
    }

    /// The stream's URL.
    public var url: String { server.baseURL + path }
    /// The port the server listens on, on 127.0.0.1 (0 before it started).
    public var port: Int { server.port }

    /// Streams open now.
    public var openStreams: Int { state.withLockedValue { $0.subscribers.count } }
    /// The `Last-Event-ID` of every connection, oldest first (nil: none sent).
    public var lastEventIDs: [String?] { state.withLockedValue { $0.lastEventIDs } }
    /// The id the next event gets.
    public var nextID: Int { state.withLockedValue { $0.nextID } }

    /// Publishes one event to every open stream and keeps it for reconnects; returns its id.
    @discardableResult
    public func publish(_ data: String, event: String? = nil) -> Int {
        state.withLockedValue { state in
            let id = state.nextID
            state.nextID += 1
            var text = ""
            if let event { text += "event: \(event)\n" }
            text += "id: \(id)\n"
            for line in data.split(separator: "\n", omittingEmptySubsequences: false) { text += "data: \(line)\n" }
            text += "\n"
            state.events.append((id, text))
            if state.events.count > history { state.events.removeFirst(state.events.count - history) }
            for feed in state.subscribers.values { feed.send(text) }
            return id
        }
    }

    /// Ends every open stream cleanly (the client reconnects after its retry delay).
    public func dropAll() {
        let feeds = state.withLockedValue { state in
            defer { state.subscribers = [:] }
            return Array(state.subscribers.values)
        }
        for feed in feeds { feed.finish() }
    }

    /// Answers the next `count` connections with `status` and no stream.
    public func refuse(next count: Int, status: Int = 503) {
        state.withLockedValue { $0.refusals += Array(repeating: status, count: count) }
    }

    /// Stops the server and closes its connections; waits until they are closed.
    public func stop() async {
        dropAll()
        await server.stop()
    }

    private func open(lastEventID: String?) -> ScriptedResponse {
        let feed = ChunkFeed()
        let subscriber: Int? = state.withLockedValue { state in
            state.lastEventIDs.append(lastEventID)
            if !state.refusals.isEmpty { return nil }
            var opening = ": ok\n"
            if let retry { opening += "retry: \(retry.components.seconds * 1000 + retry.components.attoseconds / 1_000_000_000_000_000)\n" }
            feed.send(opening + "\n")
            if let lastEventID, let last = Int(lastEventID) {
                for event in state.events where event.id > last { feed.send(event.text) }
            }
            let number = state.nextSubscriber
            state.nextSubscriber += 1
            state.subscribers[number] = feed
            return number
        }
        guard let subscriber else {
            let status = state.withLockedValue { $0.refusals.removeFirst() }
            return ScriptedResponse(status: status)
        }
        feed.onTermination { [weak self] in self?.state.withLockedValue { _ = $0.subscribers.removeValue(forKey: subscriber) } }
        return ScriptedResponse(
            headers: [("Content-Type", "text/event-stream"), ("Cache-Control", "no-cache")], body: .feed(feed))
    }
}
