import Foundation
import Hummingbird
import HummingbirdCore
import HummingbirdTLS
public import NIOSSL
import HummingbirdWebSocket
import HTTPTypes
import NIOConcurrencyHelpers
import NIOCore
import NIOWebSocket
import OrderedCollections
import RealtimeCore

/// A Spreadbot server on loopback implementing Sources/SpreadbotClient/SpreadbotClient.docc/SpreadbotGuide.md: the stream over WebSocket, SSE
/// and polling on any path, POST sends, REST resources, and OAuth token refresh at ``authPath``,
/// with switches to refuse transports, expire tokens, fail with 5xx and stall. Put a
/// ``FaultProxy`` in front of it for cuts.
///
/// Messages a test ``publish(_:to:)``es get ids 1, 2, 3... per path; SSE honours `Last-Event-ID`
/// and polling `since`. POSTed sends with a `Spreadbot-Message-Id` already seen are answered 200 and
/// not recorded again.
public final class SpreadbotTestServer: Sendable {
    /// How the server behaves.
    public struct Options: Sendable {
        /// The client credentials the token endpoint accepts, as `base64(id:secret)`.
        public var base64Credentials = "Y2xpZW50OnNlY3JldA=="  // client:secret
        /// The access token the server accepts first.
        public var accessToken = "access-0"
        /// The refresh token the server accepts first.
        public var refreshToken = "refresh-0"
        /// Where the token endpoint listens.
        public var authPath = "/oauth/token"
        /// Refuse every request whose bearer token is not the current one (default true).
        public var requireToken = true
        /// The port to listen on; 0 picks an ephemeral one.
        public var port = 0
        /// Serve HTTPS and WSS with this configuration.
        public var tls: TLSConfiguration?
        /// A POSTed send whose body is larger is answered 502, as a proxy in front of a server that
        /// cannot take it answers (nil: no limit).
        public var postBodyLimit: Int?
        /// Makes a value with every default.
        public init() {}
    }

    /// What the server received on a path.
    public enum Received: Sendable, Hashable, CustomStringConvertible {
        /// A text message.
        case text(String)
        /// A binary message.
        case binary([UInt8])

        /// A readable summary, for logs and messages.
        public var description: String {
            switch self {
            case .text(let text): "\"\(text)\""
            case .binary(let bytes): "<\(bytes.count) bytes>"
            }
        }
    }

    struct Published: Sendable {
        let id: Int
        let data: Received
        /// Sent to WebSocket streams exactly as it is, not in an envelope (for bad-input tests).
        var raw = false
    }

    private struct State {
        var accessToken: String?
        var refreshToken: String
        var tokenSerial = 0
        var refreshCount = 0
        var failRefresh = false
        var refuseWebSocket = false
        var refuseEventStream = false
        var failures: [(status: Int, remaining: Int)] = []
        var stalled = false
        var holdRefresh = false
        var refreshWaiters: [CheckedContinuation<Void, Never>] = []
        var stallWaiters: [CheckedContinuation<Void, Never>] = []
        var history: [String: [Published]] = [:]
        var subscribers: [Int: (path: String, sink: AsyncStream<Published?>.Continuation)] = [:]
        /// The open WebSockets' ways to close with a code, by subscriber.
        var webSocketClosers: [Int: @Sendable (UInt16, String?) -> Void] = [:]
        var nextSubscriber = 0
        /// Messages written to WebSockets (handed to the socket, one frame each).
        var webSocketMessagesWritten = 0
        var received: [String: [Received]] = [:]
        /// What each WebSocket carried, by subscriber id (in the order the connections came), and
        /// whether its handler has ended.
        var webSocketReceived: [Int: (path: String, messages: [Received], ended: Bool)] = [:]
        var seenMessageIds: Set<String> = []
        var resources: [String: String] = [:]
        var log: [String] = []
    }

    private let state: NIOLockedValueBox<State>
    /// The options the server was started with.
    public let options: Options
    private let serverBox = NIOLockedValueBox<LoopbackServer?>(nil)

    private init(options: Options) {
        self.options = options
        state = NIOLockedValueBox(State(accessToken: options.accessToken, refreshToken: options.refreshToken))
    }

    /// The port the server listens on, on 127.0.0.1 (0 before it started).
    public var port: Int { serverBox.withLockedValue { $0?.port ?? 0 } }
    /// The base URL of the stream and REST paths.
    public var baseURL: String { "\(options.tls == nil ? "http" : "https")://127.0.0.1:\(port)" }
    /// The token endpoint's URL.
    public var authURL: String { baseURL + options.authPath }
    /// The token endpoint's path.
    public var authPath: String { options.authPath }

    // MARK: Switches

    /// WebSocket upgrades are refused (400) until switched back. (Hummingbird answers every refused
    /// upgrade with 400, also an unauthorized one: a client then falls back and meets the 401 on SSE.)
    public func refuseWebSocket(_ refuse: Bool = true) { state.withLockedValue { $0.refuseWebSocket = refuse } }
    /// Event-stream requests are refused (406) until switched back.
    public func refuseEventStream(_ refuse: Bool = true) { state.withLockedValue { $0.refuseEventStream = refuse } }
    /// The current access token stops working: every request gets 401 until the client refreshes.
    public func expireTokens() { state.withLockedValue { $0.accessToken = "expired-\($0.tokenSerial)-never-issued" } }
    /// The token endpoint rotates the tokens as usual but holds its answers until
    /// ``releaseRefreshReplies()``: the server has a new refresh token the client has not seen yet.
    public func holdRefreshReplies() { state.withLockedValue { $0.holdRefresh = true } }
    /// Sends the refresh answers held since ``holdRefreshReplies()``.
    public func releaseRefreshReplies() {
        let waiters = state.withLockedValue { state -> [CheckedContinuation<Void, Never>] in
            state.holdRefresh = false
            defer { state.refreshWaiters.removeAll() }
            return state.refreshWaiters
        }
        for waiter in waiters { waiter.resume() }
    }
    /// Refresh requests received (answered or held).
    public var refreshRequests: Int { state.withLockedValue { $0.refreshCount } }
    /// The token endpoint answers 400 `invalid_grant` until switched back.
    public func failRefresh(_ fail: Bool = true) { state.withLockedValue { $0.failRefresh = fail } }
    /// The next `count` stream and REST requests (not the token endpoint) answer `status`.
    public func fail(next count: Int, status: Int = 503) { state.withLockedValue { $0.failures.append((status, count)) } }
    /// Every new request (and WebSocket upgrade) waits, unanswered, until ``resume()``.
    public func stall() { state.withLockedValue { $0.stalled = true } }
    /// Answers the requests held since ``stall()``, and new ones at once.
    public func resume() {
        let waiters = state.withLockedValue { state -> [CheckedContinuation<Void, Never>] in
            state.stalled = false
            defer { state.stallWaiters.removeAll() }
            return state.stallWaiters
        }
        for waiter in waiters { waiter.resume() }
    }
    /// Ends every open WebSocket (close frame) and event stream.
    public func dropStreams() {
        let sinks = state.withLockedValue { state -> [AsyncStream<Published?>.Continuation] in
            defer { state.subscribers.removeAll() }
            return state.subscribers.values.map(\.sink)
        }
        for sink in sinks { sink.finish() }
    }
    /// Closes every open WebSocket stream with a close frame of this code and reason (1008, 1009,
    /// 1011: a server that ends a session on purpose); event streams are not touched.
    public func closeWebSockets(code: UInt16, reason: String? = nil) {
        let sinks = state.withLockedValue { state in state.webSocketClosers.values.map { $0 } }
        for close in sinks { close(code, reason) }
    }
    /// What `GET <path>` answers (JSON), for REST tests.
    public func setResource(_ path: String, json: String) { state.withLockedValue { $0.resources[path] = json } }

    // MARK: Observing

    /// Refresh requests received (the same count as ``refreshRequests``).
    public var refreshCount: Int { state.withLockedValue { $0.refreshCount } }
    /// The access token the server accepts now.
    public var currentAccessToken: String? { state.withLockedValue { $0.accessToken } }
    /// Everything sent to `path` (WebSocket frames and POSTs), in arrival order, without duplicates.
    public func received(on path: String) -> [Received] { state.withLockedValue { $0.received[Self.normalize(path)] ?? [] } }

    /// What each WebSocket to `path` carried, one array per connection in the order they came, and
    /// whether the server is done with it (its handler ended: nothing more will be added). Messages
    /// of two connections are stored as each connection's handler reads them, so ``received(on:)``
    /// can interleave an old connection's last messages, read late, with a new connection's.
    public func receivedPerWebSocket(on path: String) -> [(messages: [Received], ended: Bool)] {
        let path = Self.normalize(path)
        return state.withLockedValue { state in
            state.webSocketReceived.sorted { $0.key < $1.key }.filter { $0.value.path == path }.map { ($0.value.messages, $0.value.ended) }
        }
    }
    /// One line per request: "GET /p ws", "GET /p sse", "GET /p poll", "POST /p", "POST /oauth/token", with " 401" etc. when refused.
    public var requestLog: [String] { state.withLockedValue { $0.log } }
    /// Messages written to WebSockets so far, each as a frame of its own: a test that holds the
    /// network back waits for this before letting a burst through.
    public var webSocketMessagesWritten: Int { state.withLockedValue { $0.webSocketMessagesWritten } }
    /// Open WebSocket and event-stream subscribers.
    public var streamCount: Int { state.withLockedValue { $0.subscribers.count } }

    // MARK: Publishing

    /// Sends `text` to every stream on `path` (and keeps it for SSE replay and polling). Returns its id.
    @discardableResult
    public func publish(_ text: String, to path: String) -> Int { publish(.text(text), to: path) }

    /// Sends bytes to WebSocket streams on `path` (SSE and polling carry text only and skip them).
    @discardableResult
    public func publish(bytes: [UInt8], to path: String) -> Int { publish(.binary(bytes), to: path) }

    /// Sends `text` as it is (no envelope) in a text frame to WebSocket streams on `path`, for
    /// malformed-input tests. Not kept for SSE or polling.
    public func publishRaw(_ text: String, to path: String) {
        let sinks = state.withLockedValue { state in state.subscribers.values.filter { $0.path == Self.normalize(path) }.map(\.sink) }
        for sink in sinks { sink.yield(Published(id: 0, data: .text(text), raw: true)) }
    }

    private func publish(_ data: Received, to rawPath: String) -> Int {
        let path = Self.normalize(rawPath)
        let (message, sinks) = state.withLockedValue { state -> (Published, [AsyncStream<Published?>.Continuation]) in
            let id = (state.history[path]?.last?.id ?? 0) + 1
            let message = Published(id: id, data: data)
            state.history[path, default: []].append(message)
            return (message, state.subscribers.values.filter { $0.path == path }.map(\.sink))
        }
        for sink in sinks { sink.yield(message) }
        return message.id
    }

    // MARK: Running

    /// Starts a server on 127.0.0.1 (an ephemeral port unless `options.port` is set).
    public static func start(options: Options = Options()) async throws -> SpreadbotTestServer {
        let server = SpreadbotTestServer(options: options)
        let router = Router()
        for method in [HTTPRequest.Method.get, .post] {
            router.on("**", method: method) { [weak server] request, _ in
                guard let server else { return Response(status: .serviceUnavailable) }
                return try await server.handle(request)
            }
        }
        let webSocket = WebSocketServerConfiguration(maxFrameSize: 16 << 20, autoPing: .disabled)
        let builder = HTTPServerBuilder.http1WebSocketUpgrade(configuration: .init(ws: webSocket)) { [weak server] request, _, _ in
            guard let server, let target = request.path else { return .dontUpgrade }
            await server.waitWhileStalled()
            let path = Self.normalize(String(target.split(separator: "?", maxSplits: 1).first ?? ""))
            // Hummingbird answers every refused upgrade with 400 (it cannot send a 401 there), so the
            // log says why: "GET /p ws 400 (unauthorized)", "GET /p ws 400 (503)", "GET /p ws 400".
            let refusal = server.state.withLockedValue { state -> String? in
                if !server.authorized(request.headerFields[.authorization], state: state) { return " (unauthorized)" }
                if let first = state.failures.first {
                    state.failures[0].remaining -= 1
                    if state.failures[0].remaining <= 0 { state.failures.removeFirst() }
                    return " (\(first.status))"
                }
                return state.refuseWebSocket ? "" : nil
            }
            if let refusal {
                server.record("GET \(path) ws 400\(refusal)")
                return .dontUpgrade
            }
            server.record("GET \(path) ws")
            // Subscribed before the 101 goes out: a client that saw the upgrade complete must not
            // miss a message published right after (the handler below starts later).
            let (stream, sink) = AsyncStream<Published?>.makeStream()
            // A reconnect asks for what it missed: `?since=<last id>` replays the text messages after it.
            // The replay and the subscription are taken under one lock: a message published
            // between the two would be in neither.
            let since = SocketIOTestServer.query(target)["since"].flatMap { Int($0) }
            let (id, replay) = server.subscribe(path: path, sink: sink, replayingAfter: since)
            server.state.withLockedValue { $0.webSocketReceived[id] = (path, [], false) }
            return .upgrade([:]) { inbound, outbound, _ in
                defer {
                    server.unsubscribe(id)
                    server.state.withLockedValue { $0.webSocketReceived[id]?.ended = true }
                }
                // closeWebSockets(code:reason:): the writer, in order after what it was writing,
                // sends the close frame with that code.
                let closeCode = NIOLockedValueBox<(UInt16, String?)?>(nil)
                server.state.withLockedValue {
                    $0.webSocketClosers[id] = { code, reason in
                        closeCode.withLockedValue { $0 = (code, reason) }
                        sink.yield(nil)
                    }
                }
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask {
                        for message in replay { try await outbound.write(.text(Self.envelope(message, path: path))) }
                        for await message in stream {
                            guard let message else {
                                guard let (code, reason) = closeCode.withLockedValue({ $0 }) else { continue }
                                // The handler's end waits for the client's close frame.
                                try await outbound.close(WebSocketErrorCode(codeNumber: Int(code)), reason: reason)
                                return
                            }
                            switch message.data {
                            case .text(let text) where message.raw: try await outbound.write(.text(text))
                            case .text: try await outbound.write(.text(Self.envelope(message, path: path)))
                            case .binary(let bytes): try await outbound.write(.binary(ByteBuffer(bytes: bytes)))
                            }
                            server.state.withLockedValue { $0.webSocketMessagesWritten += 1 }
                        }
                    }
                    group.addTask {
                        for try await message in inbound.messages(maxSize: 16 << 20) {
                            switch message {
                            case .text(let text): server.store(.text(text), path: path, messageId: nil, webSocket: id)
                            case .binary(let buffer): server.store(.binary(Array(buffer: buffer)), path: path, messageId: nil, webSocket: id)
                            }
                        }
                    }
                    defer { group.cancelAll() }
                    try await group.next()
                }
            }
        }
        let loopback = try await LoopbackServer.start(
            responder: router, server: try options.tls.map { try HTTPServerBuilder.tls(builder, tlsConfiguration: $0) } ?? builder,
            secure: options.tls != nil, port: options.port)
        server.serverBox.withLockedValue { $0 = loopback }
        return server
    }

    /// Stops the server and closes its connections; waits until they are closed.
    public func stop() async {
        dropStreams()
        resume()
        await serverBox.withLockedValue { $0 }?.stop()
    }

    // MARK: Handling

    static func normalize(_ path: String) -> String { path.hasPrefix("/") ? path : "/" + path }

    private func record(_ line: String) { state.withLockedValue { $0.log.append(line) } }

    private func authorized(_ header: String?, state: State) -> Bool {
        guard options.requireToken else { return true }
        guard let token = state.accessToken else { return false }
        return header == "Bearer \(token)"
    }

    private func waitWhileStalled() async {
        await withCheckedContinuation { continuation in
            let wait = state.withLockedValue { state -> Bool in
                guard state.stalled else { return false }
                state.stallWaiters.append(continuation)
                return true
            }
            if !wait { continuation.resume() }
        }
    }

    private func subscribe(path: String, sink: AsyncStream<Published?>.Continuation) -> Int {
        subscribe(path: path, sink: sink, replayingAfter: nil).id
    }

    /// Subscribes `sink` to `path` and, with `since`, returns the text messages published after it,
    /// both under one lock.
    private func subscribe(path: String, sink: AsyncStream<Published?>.Continuation, replayingAfter since: Int?) -> (id: Int, replay: [Published]) {
        state.withLockedValue { state in
            state.nextSubscriber += 1
            state.subscribers[state.nextSubscriber] = (path, sink)
            let replay = since.map { since in
                (state.history[path] ?? []).filter { message in
                    guard case .text = message.data, !message.raw else { return false }
                    return message.id > since
                }
            } ?? []
            return (state.nextSubscriber, replay)
        }
    }

    private func unsubscribe(_ id: Int) {
        state.withLockedValue {
            $0.subscribers.removeValue(forKey: id)
            $0.webSocketClosers.removeValue(forKey: id)
        }
    }

    /// Records a send; false when its message id was seen before (a resend).
    @discardableResult
    private func store(_ data: Received, path: String, messageId: String?, webSocket: Int? = nil) -> Bool {
        state.withLockedValue { state in
            if let messageId, !state.seenMessageIds.insert(messageId).inserted { return false }
            state.received[path, default: []].append(data)
            if let webSocket { state.webSocketReceived[webSocket]?.messages.append(data) }
            return true
        }
    }

    static func envelope(_ message: Published, path: String) -> String {
        guard case .text(let text) = message.data else { return "" }
        return JSONValue.object(["id": .string(String(message.id)), "event": .string(path), "data": .string(text)]).jsonString
    }

    private func handle(_ request: Request) async throws -> Response {
        await waitWhileStalled()
        let path = request.uri.path
        let method = request.method
        if method == .post && path == options.authPath { return try await token(request) }
        let accept = request.headers[.accept] ?? ""
        let kind = request.headers[.upgrade]?.lowercased() == "websocket" ? " ws" : accept.contains("text/event-stream") ? " sse" : ""
        enum Verdict { case go, status(Int) }
        let verdict = state.withLockedValue { state -> Verdict in
            if !authorized(request.headers[.authorization], state: state) { return .status(401) }
            if let first = state.failures.first {
                state.failures[0].remaining -= 1
                if state.failures[0].remaining <= 0 { state.failures.removeFirst() }
                return .status(first.status)
            }
            if kind == " sse" && state.refuseEventStream { return .status(406) }
            return .go
        }
        let line = "\(method) \(path)\(kind)\(kind.isEmpty && method == .get && state.withLockedValue({ $0.resources[path] == nil }) ? " poll" : "")"
        if case .status(let status) = verdict {
            record("\(line) \(status)")
            return Response(status: .init(code: status), body: .init(byteBuffer: ByteBuffer(string: "refused (\(status))")))
        }
        record(line)
        if method == .post {
            let body = try await request.body.collect(upTo: 16 << 20)
            if let limit = options.postBodyLimit, body.readableBytes > limit {
                record("\(line) 502")
                return Response(status: .badGateway, body: .init(byteBuffer: ByteBuffer(string: "the body is over \(limit) bytes")))
            }
            let contentType = request.headers[.contentType] ?? ""
            let data: Received = contentType.hasPrefix("text/") ? .text(String(buffer: body)) : .binary(Array(buffer: body))
            let stored = store(data, path: path, messageId: request.headers[HTTPField.Name("Spreadbot-Message-Id")!])
            return Self.json(#"{"received":\#(body.readableBytes),"duplicate":\#(!stored)}"#)
        }
        if kind == " sse" { return eventStream(path: path, lastEventId: request.headers[HTTPField.Name("Last-Event-ID")!]) }
        if let resource = state.withLockedValue({ $0.resources[path] }) { return Self.json(resource) }
        // Polling: the text messages after `since`.
        let since = request.uri.queryParameters.get("since").flatMap { Int($0) } ?? 0
        let messages = state.withLockedValue { $0.history[path] ?? [] }.filter { $0.id > since }
        let envelopes = messages.compactMap { message -> String? in
            guard case .text = message.data else { return nil }
            return Self.envelope(message, path: path)
        }
        return Self.json("[" + envelopes.joined(separator: ",") + "]")
    }

    private func eventStream(path: String, lastEventId: String?) -> Response {
        let (stream, sink) = AsyncStream<Published?>.makeStream()
        let (id, replay) = subscribe(path: path, sink: sink, replayingAfter: lastEventId.flatMap { Int($0) })
        sink.onTermination = { [weak self] _ in self?.unsubscribe(id) }
        let body = AsyncStream<ByteBuffer> { continuation in
            continuation.yield(ByteBuffer(string: ": open\n\n"))
            // Feeds the response body; the body's termination (the client went) cancels it.
            let task = Task {
                for message in replay { continuation.yield(Self.event(message, path: path)) }
                for await message in stream {
                    guard let message, !message.raw, case .text = message.data else { continue }
                    continuation.yield(Self.event(message, path: path))
                }
                continuation.finish()
            }
            continuation.onTermination = { _ in
                task.cancel()
                sink.finish()
            }
        }
        var headers = HTTPFields()
        headers[.contentType] = "text/event-stream"
        headers[.cacheControl] = "no-cache"
        return Response(status: .ok, headers: headers, body: ResponseBody(asyncSequence: body))
    }

    static func event(_ message: Published, path: String) -> ByteBuffer {
        guard case .text(let text) = message.data else { return ByteBuffer() }
        var lines = "id: \(message.id)\nevent: \(path)\n"
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) { lines += "data: \(line)\n" }
        return ByteBuffer(string: lines + "\n")
    }

    static func json(_ text: String) -> Response {
        var headers = HTTPFields()
        headers[.contentType] = "application/json"
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(string: text)))
    }

    /// The token endpoint (RFC 6749 section 6).
    private func token(_ request: Request) async throws -> Response {
        let body = String(buffer: try await request.body.collect(upTo: 1 << 16))
        var form: [String: String] = [:]
        for pair in body.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1).map { String($0).removingPercentEncoding ?? String($0) }
            if parts.count == 2 { form[parts[0]] = parts[1] }
        }
        let basic = request.headers[.authorization] == "Basic \(options.base64Credentials)"
        let form_ok = request.headers[.contentType]?.hasPrefix("application/x-www-form-urlencoded") == true && form["grant_type"] == "refresh_token"
        let reply = state.withLockedValue { state -> (Int, String) in
            state.refreshCount += 1
            guard basic else { return (401, #"{"error":"invalid_client"}"#) }
            guard form_ok, form["refresh_token"] == state.refreshToken, !state.failRefresh else { return (400, #"{"error":"invalid_grant"}"#) }
            state.tokenSerial += 1
            state.accessToken = "access-\(state.tokenSerial)"
            state.refreshToken = "refresh-\(state.tokenSerial)"
            return (200, #"{"access_token":"\#(state.accessToken!)","refresh_token":"\#(state.refreshToken)","token_type":"Bearer","expires_in":3600}"#)
        }
        record("POST \(options.authPath)\(reply.0 == 200 ? "" : " \(reply.0)")")
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let hold = state.withLockedValue { state -> Bool in
                guard state.holdRefresh else { return false }
                state.refreshWaiters.append(continuation)
                return true
            }
            if !hold { continuation.resume() }
        }
        var headers = HTTPFields()
        headers[.contentType] = "application/json"
        headers[.cacheControl] = "no-store"
        return Response(status: .init(code: reply.0), headers: headers, body: .init(byteBuffer: ByteBuffer(string: reply.1)))
    }
}
