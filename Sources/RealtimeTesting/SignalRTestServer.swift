import Hummingbird
import HummingbirdCore
import HummingbirdWebSocket
import HTTPTypes
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOWebSocket
public import NIOSSL
import HummingbirdTLS
public import OrderedCollections
@_spi(RealtimeEngine) public import RealtimeCore
public import SignalRHub

/// A SignalR server on loopback that follows HubProtocol.md and TransportProtocols.md: negotiate v1
/// (with an optional bearer-token check, redirect or error), the WebSockets transport with both hub
/// protocols, hub methods registered by tests, server-to-client streams, client results, Close
/// with and without `allowReconnect`, and fault hooks. WebSockets, Server-Sent Events (JSON only)
/// and Long Polling are all served.
///
/// Built-in hub methods (tests add more with ``method(_:concurrent:_:)`` and ``stream(_:_:)``):
/// - `echo(x)` returns `x`; `add(a, b)` returns `a + b`; `fail(message)` fails with `message`;
///   `void()` completes without a result; `broadcast(args...)` sends `receive(args...)` to every
///   connection; `echoHeaders()` returns the upgrade's Authorization header (or null);
///   `askClient(method, args...)` invokes `method` on the caller and returns the client's result;
///   `closeMe(error?, allowReconnect)` makes the server send a Close message.
/// - Streams: `countTo(n)` yields 1...n then completes; `countForever()` yields until cancelled.
/// - Upload streams: `collect(streams...)` returns every item of its upload streams, in order.
public final class SignalRTestServer: Sendable {
    /// How the server behaves.
    public struct Options: Sendable {
        /// The hub's path.
        public var path = "/hub"
        /// When set, negotiate and the WebSocket must carry `Authorization: Bearer <token>`.
        public var requiredToken: String?
        /// Negotiate answers with a redirect to this URL (and `redirectAccessToken`).
        public var redirectURL: String?
        /// The access token sent with ``redirectURL``.
        public var redirectAccessToken: String?
        /// Negotiate answers `{"error": ...}`.
        public var negotiateError: String?
        /// Transports negotiate offers (names as on the wire), all three by default.
        public var offeredTransports = ["WebSockets", "ServerSentEvents", "LongPolling"]
        /// Refuse these transports' requests (404 for polls and streams, no upgrade for WebSockets)
        /// while still offering them, to force a client's fallback.
        public var failingTransports: Set<String> = []
        /// Agree to stateful reconnect when a client asks for it (WebSockets, hub protocol version 2).
        public var statefulReconnect = false
        /// How long a stateful connection waits for its client's new WebSocket before it ends.
        public var statefulReconnectTimeout: Duration = .seconds(10)
        /// How long a long poll waits for data before answering 200 with an empty body.
        public var pollTimeout: Duration = .seconds(5)
        /// The highest `negotiateVersion` the server speaks (0: only `connectionId`).
        public var negotiateVersion = 1
        /// The server sends a Ping this often (nil: never).
        public var keepAliveInterval: Duration? = .seconds(15)
        /// Refuse the handshake with this error.
        public var handshakeError: String?
        /// The port to listen on; 0 picks an ephemeral one.
        public var port = 0
        /// Serve HTTPS and WSS with this configuration (nil: plain HTTP).
        public var tls: TLSConfiguration?
        /// Record this request header on every request (negotiate, upgrade, GET, POST, DELETE), for
        /// tests of what clients send (trace propagation).
        public var recordedHeader: String?

        /// Makes a value with every default.
        public init() {}
    }

    /// One client invocation as a hub method sees it.
    public struct Call: Sendable {
        /// The connection the invocation came on.
        public let connectionId: String
        /// The invocation's arguments.
        public let arguments: [JSONValue]
        /// The invocation's headers.
        public let headers: HubHeaders
        /// The invocation's upload streams, in `streamIds` order.
        public var streams: [AsyncThrowingStream<JSONValue, any Error>] = []
    }

    typealias Method = @Sendable (Call) async throws -> JSONValue?
    typealias StreamMethod = @Sendable (Call) -> AsyncThrowingStream<JSONValue, any Error>

    struct State {
        var methods: [String: (Method, concurrent: Bool)] = [:]
        var streams: [String: StreamMethod] = [:]
        var negotiated: [String: String] = [:]  // connectionToken -> connectionId
        var statefulTokens: [String: String] = [:]  // connectionToken -> connectionId, reusable for reattaching
        var connections: [String: ServerHubConnection] = [:]  // connectionId -> connection
        var httpConnections: [String: HTTPConnection] = [:]  // id on the URL -> SSE or long-polling connection
        var transportsUsed: [String] = []
        var reattachCount = 0
        var pingsReceived = 0
        var negotiateCount = 0
        var handshakeCount = 0
        var emptyPolls = 0
        var authorizations: [String?] = []
        var recordedHeaders: [(request: String, value: String?)] = []
        var received: [String] = []
        var acknowledgementsHeld = false
        var dropsReattachedSockets = false
        var dropsAfterHandshake = false
    }

    /// The options the server was started with.
    public let options: Options
    let state = NIOLockedValueBox(State())
    private let serverBox = NIOLockedValueBox<LoopbackServer?>(nil)

    init(options: Options) {
        self.options = options
        registerBuiltIns()
    }

    /// `http://127.0.0.1:<port><path>`.
    public var url: String { (serverBox.withLockedValue { $0 }?.baseURL ?? "") + options.path }
    /// The port the server listens on, on 127.0.0.1 (0 before it started).
    public var port: Int { serverBox.withLockedValue { $0 }?.port ?? 0 }
    /// Negotiate requests served.
    public var negotiateCount: Int { state.withLockedValue { $0.negotiateCount } }
    /// Hub connections open now (past their handshake).
    public var connectionCount: Int { state.withLockedValue { $0.connections.count } }
    /// Ping messages received from clients.
    public var pingsReceived: Int { state.withLockedValue { $0.pingsReceived } }
    /// WebSockets that re-attached to a stateful connection.
    public var reattachCount: Int { state.withLockedValue { $0.reattachCount } }
    /// Handshakes accepted.
    public var handshakeCount: Int { state.withLockedValue { $0.handshakeCount } }
    /// Long polls answered 200 with an empty body because nothing came within ``Options/pollTimeout``.
    public var emptyPollCount: Int { state.withLockedValue { $0.emptyPolls } }
    /// The Authorization header of each negotiate and WebSocket request, in order.
    public var authorizations: [String?] { state.withLockedValue { $0.authorizations } }
    /// Each request's value of ``Options/recordedHeader``: "negotiate", "upgrade", "GET", "POST", "DELETE".
    public var recordedHeaders: [(request: String, value: String?)] { state.withLockedValue { $0.recordedHeaders } }

    private func record(_ request: String, _ fields: HTTPFields) {
        guard let header = options.recordedHeader, let name = HTTPField.Name(header) else { return }
        state.withLockedValue { $0.recordedHeaders.append((request, fields[name])) }
    }
    /// Connections open now.
    public var connectionIds: [String] { state.withLockedValue { Array($0.connections.keys) } }
    /// The transport of each connection opened, in order ("WebSockets", "ServerSentEvents", "LongPolling").
    public var transportsUsed: [String] { state.withLockedValue { $0.transportsUsed } }
    /// Targets of the invocations received, in order.
    public var receivedTargets: [String] { state.withLockedValue { $0.received } }

    /// Registers hub method `name`. Methods run in the connection's read loop, in order, unless
    /// `concurrent` (needed when the method waits for the client, as a client result does).
    public func method(_ name: String, concurrent: Bool = false, _ body: @escaping @Sendable (Call) async throws -> JSONValue?) {
        state.withLockedValue { $0.methods[name.lowercased()] = (body, concurrent) }
    }

    /// Registers server-to-client stream `name`.
    public func stream(_ name: String, _ body: @escaping @Sendable (Call) -> AsyncThrowingStream<JSONValue, any Error>) {
        state.withLockedValue { $0.streams[name.lowercased()] = body }
    }

    /// Sends `target(arguments)` to every connection.
    public func broadcast(_ target: String, _ arguments: [JSONValue]) async {
        for connection in state.withLockedValue({ Array($0.connections.values) }) {
            try? await connection.send(.invocation(HubInvocation(target: target, arguments: arguments)))
        }
    }

    /// Sends `target(arguments)` to one connection without waiting for a result.
    public func invokeClientSend(_ connectionId: String, _ target: String, _ arguments: [JSONValue]) async throws {
        guard let connection = state.withLockedValue({ $0.connections[connectionId] }) else {
            throw SignalRTestServerError(message: "no connection \(connectionId)")
        }
        try await connection.send(.invocation(HubInvocation(target: target, arguments: arguments)))
    }

    /// Invokes `target` on one connection and waits for the client's result.
    public func invokeClient(_ connectionId: String, _ target: String, _ arguments: [JSONValue]) async throws -> JSONValue? {
        guard let connection = state.withLockedValue({ $0.connections[connectionId] }) else {
            throw SignalRTestServerError(message: "no connection \(connectionId)")
        }
        return try await connection.invokeClient(target, arguments)
    }

    /// Sends a Close message to every connection, then closes them.
    public func closeAll(error: String? = nil, allowReconnect: Bool = false) async {
        for connection in state.withLockedValue({ Array($0.connections.values) }) {
            try? await connection.send(.close(HubClose(error: error, allowReconnect: allowReconnect)))
            await connection.closeFinally()
        }
        finishHTTPConnections()
    }

    /// Writes `bytes` as they are to every connection (a fault hook: malformed or oversized messages).
    public func sendRaw(_ bytes: [UInt8], binary: Bool) async {
        for connection in state.withLockedValue({ Array($0.connections.values) }) { try? await connection.sendRaw(bytes, binary: binary) }
    }

    /// Drops every connection without a Close message (the socket closes, the event stream ends,
    /// the pending poll answers 204).
    public func dropAll() async {
        for connection in state.withLockedValue({ Array($0.connections.values) }) { await connection.closeSocket() }
        finishHTTPConnections()
    }

    /// Closes every WebSocket with this close code and reason (1008 policy violation, 1009 message
    /// too big, 1011 internal error...). `lingering` (as ASP.NET Core does): the close frame, then the
    /// socket stays open until the client's close frame, which is the last thing the client sends,
    /// so the TCP connection ends cleanly. Without it (as swift-websocket's server does): the close
    /// frame, then the socket closes at once; a client still sending gets a TCP reset, which can
    /// reach it before it read the close frame. Connections on other transports are dropped.
    public func closeWebSockets(code: UInt16, reason: String? = nil, lingering: Bool = true) async {
        for connection in state.withLockedValue({ Array($0.connections.values) }) {
            await connection.closeSocket(code: code, reason: reason, lingering: lingering)
        }
        finishHTTPConnections()
    }

    private func finishHTTPConnections() {
        for entry in state.withLockedValue({ Array($0.httpConnections.values) }) { entry.inbound.finish() }
    }

    /// Stops answering and pinging on every connection (a stalled server), until ``resumeAll()``.
    public func stallAll() {
        for connection in state.withLockedValue({ Array($0.connections.values) }) { connection.stalled.withLockedValue { $0 = true } }
    }

    /// Answers and pings again after ``stallAll()``.
    public func resumeAll() {
        for connection in state.withLockedValue({ Array($0.connections.values) }) { connection.stalled.withLockedValue { $0 = false } }
    }

    /// A stateful peer that processes every message but holds back its Acks (while `held`), so a
    /// client's replay buffer fills: the Ack due is sent when they are released.
    public func holdAcknowledgements(_ held: Bool) {
        state.withLockedValue { $0.acknowledgementsHeld = held }
    }

    var acknowledgementsHeld: Bool { state.withLockedValue { $0.acknowledgementsHeld } }

    /// A stateful peer (or a network) that takes each re-attached WebSocket and loses it at once
    /// (while `drop`): the socket is closed right after the server's Sequence and replay.
    public func dropReattachedSockets(_ drop: Bool) {
        state.withLockedValue { $0.dropsReattachedSockets = drop }
    }

    /// A server (or a proxy in front of it) that answers each handshake and then loses the
    /// connection at once (while `drop`): the socket closes right after the handshake response,
    /// with no Close message.
    public func dropAfterHandshake(_ drop: Bool) {
        state.withLockedValue { $0.dropsAfterHandshake = drop }
    }

    /// Starts a server on 127.0.0.1 (an ephemeral port unless `options.port` is set).
    public static func start(options: Options = Options()) async throws -> SignalRTestServer {
        let server = SignalRTestServer(options: options)
        let router = Router()
        router.post("\(options.path)/negotiate") { [weak server] request, _ in
            guard let server else { return Response(status: .serviceUnavailable) }
            return server.negotiate(request)
        }
        router.get(RouterPath(options.path)) { [weak server] request, _ in
            guard let server else { return Response(status: .serviceUnavailable) }
            return await server.handleGet(request)
        }
        router.post(RouterPath(options.path)) { [weak server] request, _ in
            guard let server else { return Response(status: .serviceUnavailable) }
            return try await server.handlePost(request)
        }
        router.delete(RouterPath(options.path)) { [weak server] request, _ in
            guard let server else { return Response(status: .serviceUnavailable) }
            return await server.handleDelete(request)
        }
        let webSocket = WebSocketServerConfiguration(maxFrameSize: 64 << 20, autoPing: .disabled)
        let builder = HTTPServerBuilder.http1WebSocketUpgrade(configuration: .init(ws: webSocket)) { [weak server] request, channel, _ in
            guard let server, let path = request.path, path.hasPrefix(options.path) else { return .dontUpgrade }
            let query = SocketIOTestServer.query(path)
            server.record("upgrade", request.headerFields)
            let authorization = request.headerFields[.authorization]
            server.state.withLockedValue { $0.authorizations.append(authorization) }
            if let token = options.requiredToken, authorization != "Bearer \(token)" { return .dontUpgrade }
            if options.failingTransports.contains("WebSockets") { return .dontUpgrade }
            // Without negotiate (skipNegotiation) there is no id: the server makes one.
            let connectionId: String
            var stateful = false
            var detached: ServerHubConnection?
            if let id = query["id"] {
                enum Lookup { case new(String, Bool), reattach(ServerHubConnection), unknown }
                let lookup = server.state.withLockedValue { state -> Lookup in
                    if let known = state.negotiated.removeValue(forKey: id) { return .new(known, state.statefulTokens[id] != nil) }
                    // A stateful connection accepts its client's new socket even before it noticed that
                    // the old one died (as ASP.NET Core does): the old socket is closed first.
                    if let known = state.statefulTokens[id], let existing = state.connections[known], existing.stateful {
                        return .reattach(existing)
                    }
                    return .unknown
                }
                switch lookup {
                case .new(let known, let isStateful):
                    connectionId = known
                    stateful = isStateful
                case .reattach(let existing):
                    connectionId = existing.id
                    detached = existing
                case .unknown:
                    return .dontUpgrade
                }
            } else {
                connectionId = Self.randomId()
            }
            return .upgrade([:]) { [stateful, detached] inbound, outbound, _ in
                try await withEventLoopPreference(channel.eventLoop) {
                    if let detached {
                        if !detached.isDetached {
                            await detached.closeSocket()
                            for _ in 0..<200 where !detached.isDetached { try await Task.sleep(for: .milliseconds(5)) }
                        }
                        server.state.withLockedValue { $0.reattachCount += 1 }
                        try await detached.reattach(outbound)
                        if server.state.withLockedValue({ $0.dropsReattachedSockets }) { await detached.closeSocket() }
                        try await detached.run(inbound: inbound)
                        return
                    }
                    let connection = ServerHubConnection(
                        server: server, id: connectionId, sink: .webSocket(outbound), authorization: authorization, stateful: stateful)
                    server.state.withLockedValue { $0.transportsUsed.append("WebSockets") }
                    try await connection.run(inbound: inbound)
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
        for connection in state.withLockedValue({ Array($0.connections.values) }) { await connection.closeFinally() }
        await dropAll()
        await serverBox.withLockedValue { $0 }?.stop()
    }

    // MARK: Server-Sent Events and Long Polling

    struct HTTPConnection: Sendable {
        let connection: ServerHubConnection
        let inbound: AsyncStream<[UInt8]>.Continuation
    }

    /// The connection for `id`: the negotiated one (opened by its first GET) or nil (404).
    private func httpConnection(_ request: Request, opening sink: ServerOutbox.Sink?) -> HTTPConnection? {
        guard let id = SocketIOTestServer.query(request.uri.description)["id"] else { return nil }
        return state.withLockedValue { state -> HTTPConnection? in
            if let existing = state.httpConnections[id] { return existing }
            guard let sink, let connectionId = state.negotiated.removeValue(forKey: id) else { return nil }
            let connection = ServerHubConnection(server: self, id: connectionId, sink: sink, authorization: request.headers[.authorization])
            let (stream, continuation) = AsyncStream<[UInt8]>.makeStream()
            let entry = HTTPConnection(connection: connection, inbound: continuation)
            state.httpConnections[id] = entry
            state.authorizations.append(request.headers[.authorization])
            // Recorded where the connection opens: a long-polling client's POST may come before its poll.
            if case .eventStream = sink { state.transportsUsed.append("ServerSentEvents") } else { state.transportsUsed.append("LongPolling") }
            Task {
                try? await connection.run(payloads: stream)
                await connection.closeSocket()
                _ = self.state.withLockedValue { $0.httpConnections.removeValue(forKey: id) }
            }
            return entry
        }
    }

    private func authorized(_ request: Request) -> Bool {
        guard let token = options.requiredToken else { return true }
        return request.headers[.authorization] == "Bearer \(token)"
    }

    func handleGet(_ request: Request) async -> Response {
        record("GET", request.headers)
        guard authorized(request) else { return Response(status: .unauthorized) }
        if request.headers[.accept]?.contains("text/event-stream") == true {
            guard !options.failingTransports.contains("ServerSentEvents") else { return Response(status: .notFound) }
            let (body, continuation) = AsyncStream<ByteBuffer>.makeStream()
            guard let entry = httpConnection(request, opening: .eventStream(continuation)) else { return Response(status: .notFound) }
            // The client going away ends the connection.
            continuation.onTermination = { _ in entry.inbound.finish() }
            continuation.yield(ByteBuffer(string: ":\r\n"))
            var headers = HTTPFields()
            headers[.contentType] = "text/event-stream"
            headers[.cacheControl] = "no-cache"
            return Response(status: .ok, headers: headers, body: ResponseBody(asyncSequence: body))
        }
        guard !options.failingTransports.contains("LongPolling") else { return Response(status: .notFound) }
        guard let entry = httpConnection(request, opening: .poll) else { return Response(status: .notFound) }
        guard case .poll = entry.connection.outbox.sink else { return Response(status: .badRequest) }
        guard let bytes = await entry.connection.outbox.poll(timeout: options.pollTimeout) else { return Response(status: .noContent) }
        if bytes.isEmpty { state.withLockedValue { $0.emptyPolls += 1 } }
        var headers = HTTPFields()
        headers[.contentType] = "application/octet-stream"
        return Response(status: .ok, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(bytes: bytes)))
    }

    func handlePost(_ request: Request) async throws -> Response {
        record("POST", request.headers)
        guard authorized(request) else { return Response(status: .unauthorized) }
        // A long-polling client may POST its handshake before its first poll arrives: the
        // negotiated connection opens on whichever comes first (an event stream opens on its GET
        // before the client sends anything).
        guard let entry = httpConnection(request, opening: .poll) else { return Response(status: .notFound) }
        let body = try await request.body.collect(upTo: 64 << 20)
        entry.inbound.yield(Array(buffer: body))
        return Response(status: .ok)
    }

    func handleDelete(_ request: Request) async -> Response {
        record("DELETE", request.headers)
        guard let entry = httpConnection(request, opening: nil) else { return Response(status: .notFound) }
        entry.inbound.finish()
        await entry.connection.closeSocket()
        return Response(status: .accepted)
    }

    private func negotiate(_ request: Request) -> Response {
        record("negotiate", request.headers)
        let authorization = request.headers[.authorization]
        state.withLockedValue {
            $0.negotiateCount += 1
            $0.authorizations.append(authorization)
        }
        if let token = options.requiredToken, authorization != "Bearer \(token)" {
            return Response(status: .unauthorized)
        }
        var reply: JSONValue
        if let error = options.negotiateError {
            reply = ["error": .string(error)]
        } else if let redirect = options.redirectURL {
            reply = ["url": .string(redirect)]
            if let token = options.redirectAccessToken { reply = ["url": .string(redirect), "accessToken": .string(token)] }
        } else {
            let connectionId = Self.randomId()
            let token = Self.randomId() + Self.randomId()
            // The reply's version is the lower of the client's and the server's (a client that sends
            // none speaks version 0 and uses the connectionId as its id).
            let requested = SocketIOTestServer.query(request.uri.description)["negotiateVersion"].flatMap(Int.init) ?? 0
            let version = min(requested, options.negotiateVersion)
            let wantsStateful = options.statefulReconnect
                && SocketIOTestServer.query(request.uri.description)["useStatefulReconnect"]?.lowercased() == "true"
            state.withLockedValue {
                $0.negotiated[version >= 1 ? token : connectionId] = connectionId
                if wantsStateful { $0.statefulTokens[version >= 1 ? token : connectionId] = connectionId }
            }
            let transports: [JSONValue] = options.offeredTransports.map { name in
                ["transport": .string(name), "transferFormats": name == "ServerSentEvents" ? ["Text"] : ["Text", "Binary"]]
            }
            reply = version >= 1
                ? ["negotiateVersion": .number(Double(version)), "connectionId": .string(connectionId), "connectionToken": .string(token),
                   "availableTransports": .array(transports)]
                : ["negotiateVersion": 0, "connectionId": .string(connectionId), "availableTransports": .array(transports)]
            if wantsStateful, case .object(var members) = reply {
                members["useStatefulReconnect"] = true
                reply = .object(members)
            }
        }
        var headers = HTTPFields()
        headers[.contentType] = "application/json"
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(string: reply.jsonString)))
    }

    static func randomId() -> String {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
        return String((0..<22).map { _ in alphabet.randomElement()! })
    }

    private func registerBuiltIns() {
        method("echo") { $0.arguments.first ?? .null }
        method("void") { _ in nil }
        method("add") { call in
            .number((call.arguments.first?.doubleValue ?? 0) + (call.arguments.dropFirst().first?.doubleValue ?? 0))
        }
        method("fail") { call in throw SignalRTestServerError(message: call.arguments.first?.stringValue ?? "failed") }
        method("broadcast") { [weak self] call in
            await self?.broadcast("receive", call.arguments)
            return nil
        }
        method("echoHeaders") { [weak self] call in
            guard let self, let connection = self.state.withLockedValue({ $0.connections[call.connectionId] }) else { return .null }
            return connection.authorization.map { .string($0) } ?? .null
        }
        method("askClient", concurrent: true) { [weak self] call in
            guard let self, let target = call.arguments.first?.stringValue else { return .null }
            return try await self.invokeClient(call.connectionId, target, Array(call.arguments.dropFirst())) ?? .null
        }
        method("closeMe", concurrent: true) { [weak self] call in
            guard let self, let connection = self.state.withLockedValue({ $0.connections[call.connectionId] }) else { return nil }
            let error = call.arguments.first?.stringValue
            let allow = call.arguments.dropFirst().first?.boolValue ?? false
            try? await connection.send(.close(HubClose(error: error, allowReconnect: allow)))
            await connection.closeFinally()
            return nil
        }
        method("collect", concurrent: true) { call in
            var items: [JSONValue] = []
            for stream in call.streams {
                for try await item in stream { items.append(item) }
            }
            return .array(items)
        }
        stream("countTo") { call in
            let count = call.arguments.first?.intValue ?? 0
            return AsyncThrowingStream { continuation in
                for value in 1...max(1, count) where count > 0 { continuation.yield(.number(Double(value))) }
                continuation.finish()
            }
        }
        stream("countForever") { _ in
            let (stream, continuation) = AsyncThrowingStream<JSONValue, any Error>.makeStream()
            // Produces until the client cancels the stream (onTermination cancels this task).
            let task = Task {
                var value = 0
                while !Task.isCancelled {
                    value += 1
                    continuation.yield(.number(Double(value)))
                    try? await Task.sleep(for: .milliseconds(10))
                }
                continuation.finish()
            }
            continuation.onTermination = { _ in task.cancel() }
            return stream
        }
    }
}

/// A test server's check failed (no such connection, a sequence with a gap).
public struct SignalRTestServerError: Error, CustomStringConvertible, Sendable {
    /// What went wrong.
    public let message: String
    /// Makes the error with its message.
    public init(message: String) { self.message = message }
    /// A readable summary, for logs and messages.
    public var description: String { message }
}

/// One client connection on the server side.
final class ServerHubConnection: Sendable {
    let server: SignalRTestServer
    let id: String
    let authorization: String?
    private let writerBox: NIOLockedValueBox<ServerOutbox>
    private var writer: ServerOutbox { writerBox.withLockedValue { $0 } }
    let stateful: Bool
    let stalled = NIOLockedValueBox(false)
    private let shared = NIOLockedValueBox(Shared())

    struct Shared {
        /// Stateful reconnect's numbering, acknowledgements and replay (independent of the client's code).
        var replay: ServerStatefulLog?
        /// Closed for good (Close message, DELETE, server stop): no re-attach.
        var closing = false
        var reattachWatch: Task<Void, Never>?
        /// Replies gathered while one inbound frame is handled (not with stateful reconnect, whose
        /// numbering needs every write in order).
        var batch: [UInt8]?
        var codec: HubProtocolCodec?
        var nextId = 1
        var clientCalls: [String: CheckedContinuation<JSONValue?, any Error>] = [:]
        var streams: [String: Task<Void, Never>] = [:]
        var uploads: [String: AsyncThrowingStream<JSONValue, any Error>.Continuation] = [:]
        /// The handshake response is written (or the connection is over): messages may follow.
        var handshakeWritten = false
        var handshakeWaiters: [CheckedContinuation<Void, Never>] = []
    }

    init(server: SignalRTestServer, id: String, sink: ServerOutbox.Sink, authorization: String?, stateful: Bool = false) {
        self.server = server
        self.id = id
        self.authorization = authorization
        self.stateful = stateful
        writerBox = NIOLockedValueBox(ServerOutbox(sink))
    }

    var outbox: ServerOutbox { writer }
    /// The socket is gone but the stateful connection waits for its client's next one.
    var isDetached: Bool { shared.withLockedValue { $0.replay }?.isDetached ?? false }

    func send(_ message: HubMessage) async throws {
        guard let codec = shared.withLockedValue({ $0.codec }) else { return }
        // The connection is known to the server before its handshake response is written (so a
        // test's broadcast or drop right after the client's start() reaches it); nothing may reach
        // the socket before that response.
        await handshakeWritten()
        let bytes = codec.encode(message)
        let binary = codec.kind == .messagePack
        guard let replay = shared.withLockedValue({ $0.replay }) else {
            // While the read loop handles one inbound frame, replies are gathered into one frame.
            let gathered = shared.withLockedValue { shared -> Bool in
                guard shared.batch != nil else { return false }
                shared.batch! += bytes
                return true
            }
            if !gathered { try await writer.write(bytes, binary: binary) }
            return
        }
        if message.isSequenced {
            // Kept until the client acknowledges it; written now unless the socket is being replaced.
            await replay.writeOrder.withLock {
                if replay.recordOutgoing(bytes) { try? await writer.write(bytes, binary: binary) }
            }
        } else if !replay.isDetached {
            try await writer.write(bytes, binary: binary)
        }
    }

    private func handshakeWritten() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let written = shared.withLockedValue { shared -> Bool in
                if shared.handshakeWritten { return true }
                shared.handshakeWaiters.append(continuation)
                return false
            }
            if written { continuation.resume() }
        }
    }

    private func openHandshakeGate() {
        let waiters = shared.withLockedValue { shared -> [CheckedContinuation<Void, Never>] in
            shared.handshakeWritten = true
            defer { shared.handshakeWaiters = [] }
            return shared.handshakeWaiters
        }
        for waiter in waiters { waiter.resume() }
    }

    /// Ends this connection for good (no stateful re-attach), then closes its socket.
    func closeFinally() async {
        shared.withLockedValue { $0.closing = true }
        await writer.close()
    }

    func closeSocket(code: UInt16 = 1000, reason: String? = nil, lingering: Bool = false) async {
        await writer.close(code: code, reason: reason, lingering: lingering)
    }

    /// A stateful connection's new WebSocket: Sequence, then the unacknowledged messages.
    func reattach(_ outbound: WebSocketOutboundWriter) async throws {
        let outbox = ServerOutbox(.webSocket(outbound))
        let (replay, codec) = shared.withLockedValue { shared -> (ServerStatefulLog?, HubProtocolCodec?) in
            shared.reattachWatch?.cancel()
            shared.reattachWatch = nil
            return (shared.replay, shared.codec)
        }
        guard let replay, let codec else {
            writerBox.withLockedValue { $0 = outbox }
            return
        }
        let binary = codec.kind == .messagePack
        try await replay.writeOrder.withLock {
            writerBox.withLockedValue { $0 = outbox }
            let plan = replay.reattach()
            try await outbox.write(codec.encode(.sequence(sequenceId: plan.sequenceId)), binary: binary)
            for message in plan.messages { try await outbox.write(message, binary: binary) }
            // What arrived before the drop may not have been acknowledged yet (an Ack due while the
            // socket was gone is not sent): acknowledge it now, so the client's buffer drains.
            if let ack = plan.ack { try await outbox.write(codec.encode(.ack(sequenceId: ack)), binary: binary) }
        }
    }

    func sendRaw(_ bytes: [UInt8], binary: Bool) async throws { try await writer.writeRaw(bytes, binary: binary) }

    func invokeClient(_ target: String, _ arguments: [JSONValue]) async throws -> JSONValue? {
        let callId = shared.withLockedValue { shared -> String in
            defer { shared.nextId += 1 }
            return "s\(shared.nextId)"
        }
        return try await withCheckedThrowingContinuation { continuation in
            shared.withLockedValue { $0.clientCalls[callId] = continuation }
            // Sending is async and a continuation's body is not; the reply resumes the caller.
            Task {
                do { try await self.send(.invocation(HubInvocation(invocationId: callId, target: target, arguments: arguments))) } catch {
                    if let waiting = self.shared.withLockedValue({ $0.clientCalls.removeValue(forKey: callId) }) { waiting.resume(throwing: error) }
                }
            }
        }
    }

    func run(inbound: WebSocketInboundStream) async throws {
        try await run(payloads: inbound.messages(maxSize: 64 << 20).map { message -> [UInt8] in
            switch message {
            case .text(let text): Array(text.utf8)
            case .binary(let buffer): Array(buffer: buffer)
            }
        })
    }

    /// Runs the connection over any sequence of inbound payloads (WebSocket messages, POST bodies).
    func run<Payloads: AsyncSequence>(payloads: Payloads) async throws where Payloads.Element == [UInt8] {
        var handshakeBuffer: [UInt8] = []
        // A re-attached stateful connection has had its handshake.
        var framer: HubMessageFramer? = shared.withLockedValue { $0.codec }.map { HubMessageFramer($0.kind) }
        var pinger: Task<Void, Never>?
        defer {
            pinger?.cancel()
            // Whatever ended the connection, nothing waits for a handshake response any more.
            openHandshakeGate()
            let keep = shared.withLockedValue { shared -> Bool in
                guard let replay = shared.replay, !shared.closing else { return false }
                replay.detach()
                return true
            }
            if keep {
                // Wait for the client's next WebSocket, for a while.
                let timeout = server.options.statefulReconnectTimeout
                let watch = Task { [weak self] in
                    try? await Task.sleep(for: timeout)
                    guard !Task.isCancelled, let self else { return }
                    self.shared.withLockedValue { $0.closing = true }
                    self.teardown()
                }
                shared.withLockedValue { $0.reattachWatch = watch }
            } else {
                teardown()
            }
        }
        if framer != nil, let interval = server.options.keepAliveInterval {
            pinger = startPinger(interval)
        }
        for try await payload in payloads {
            var bytes = payload
            while stalled.withLockedValue({ $0 }) { try await Task.sleep(for: .milliseconds(10)) }
            if framer == nil {
                handshakeBuffer += bytes
                guard let (name, version, consumed) = try HubHandshake.parseRequest(handshakeBuffer) else { continue }
                bytes = Array(handshakeBuffer[consumed...])
                // ASP.NET Core accepts any version up to the protocol's own (2 since .NET 8) for both
                // protocols; version 2 with a stateful token turns stateful reconnect on.
                guard let kind = HubProtocolType(rawValue: name), (0...2).contains(version) else {
                    try await writer.write(Array("{\"error\":\"Requested protocol '\(name)' version \(version) is not available.\"}\u{1E}".utf8), binary: false)
                    await closeFinally()
                    return
                }
                if let error = server.options.handshakeError {
                    try await writer.write(Array("{\"error\":\(JSONValue.string(error).jsonString)}\u{1E}".utf8), binary: false)
                    await closeFinally()
                    return
                }
                let stateful = stateful && version >= 2
                shared.withLockedValue {
                    $0.codec = HubProtocolCodec(kind)
                    if stateful { $0.replay = ServerStatefulLog() }
                }
                framer = HubMessageFramer(kind)
                server.state.withLockedValue {
                    $0.handshakeCount += 1
                    $0.connections[id] = self
                }
                // The handshake response goes first: send() holds anything else until it is written.
                try await writer.write(Array("{}\u{1E}".utf8), binary: kind == .messagePack)
                if server.state.withLockedValue({ $0.dropsAfterHandshake }) {
                    await closeSocket()
                    return
                }
                openHandshakeGate()
                if let interval = server.options.keepAliveInterval { pinger = startPinger(interval) }
            }
            guard var current = framer, let codec = shared.withLockedValue({ $0.codec }) else { continue }
            var messages: [HubMessage] = []
            try endsForGood { try current.consume(bytes) { (body) throws(HubProtocolError) in messages.append(try codec.decode(body: body)) } }
            framer = current
            guard let replay = shared.withLockedValue({ $0.replay }) else {
                if messages.count > 1 { shared.withLockedValue { $0.batch = [] } }
                do {
                    for message in messages { try await handle(message) }
                } catch {
                    shared.withLockedValue { $0.batch = nil }
                    throw error
                }
                if let gathered = shared.withLockedValue({ shared -> [UInt8]? in
                    defer { shared.batch = nil }
                    return shared.batch
                }), !gathered.isEmpty {
                    try await writer.write(gathered, binary: codec.kind == .messagePack)
                }
                continue
            }
            for message in messages {
                switch message {
                case .ack(let sequenceId):
                    replay.acknowledged(sequenceId)
                case .sequence(let sequenceId):
                    try endsForGood { try replay.sequence(sequenceId) }
                case let message where message.isSequenced:
                    let (process, scheduleAck) = replay.incoming()
                    if scheduleAck {
                        // The Ack goes a second later, as ASP.NET Core batches them, beside reading.
                        Task { [weak self] in
                            try? await Task.sleep(for: .seconds(1))
                            while self?.server.acknowledgementsHeld == true { try? await Task.sleep(for: .milliseconds(20)) }
                            guard let self, let sequenceId = replay.takeAck() else { return }
                            try? await self.send(.ack(sequenceId: sequenceId))
                        }
                    }
                    if process { try await handle(message) }
                default:
                    // Ping and Close are not numbered.
                    try await handle(message)
                }
            }
        }
    }

    /// A protocol error (an invalid message, a Sequence that skips messages) ends the connection
    /// for good, as in ASP.NET Core: it does not wait for a stateful client's next socket.
    private func endsForGood(_ body: () throws -> Void) throws {
        do { try body() } catch {
            shared.withLockedValue { $0.closing = true }
            throw error
        }
    }

    /// The connection's keep-alive, cancelled when the connection ends (the caller keeps the task).
    private func startPinger(_ interval: Duration) -> Task<Void, Never> {
        Task { [weak self] in
            while !Task.isCancelled {
                try? await Task.sleep(for: interval)
                guard let self, !self.stalled.withLockedValue({ $0 }) else { continue }
                try? await self.send(.ping)
            }
        }
    }

    /// The connection is over: pending client calls fail, streams stop, the server forgets it.
    private func teardown() {
        let (calls, streams) = shared.withLockedValue { shared in
            defer {
                shared.clientCalls = [:]
                shared.streams = [:]
            }
            return (shared.clientCalls, shared.streams)
        }
        for (_, call) in calls { call.resume(throwing: SignalRTestServerError(message: "the connection closed")) }
        for (_, task) in streams { task.cancel() }
        server.state.withLockedValue { _ = $0.connections.removeValue(forKey: id) }
    }

    private func handle(_ message: HubMessage) async throws {
        switch message {
        case .invocation(let invocation):
            server.state.withLockedValue { $0.received.append(invocation.target) }
            guard let (method, concurrent) = server.state.withLockedValue({ $0.methods[invocation.target.lowercased()] }) else {
                if let id = invocation.invocationId {
                    try await send(.completion(HubCompletion(invocationId: id, outcome: .error("Unknown hub method '\(invocation.target)'"))))
                }
                return
            }
            var call = SignalRTestServer.Call(connectionId: id, arguments: invocation.arguments, headers: invocation.headers)
            for streamId in invocation.streamIds {
                let (stream, continuation) = AsyncThrowingStream<JSONValue, any Error>.makeStream()
                shared.withLockedValue { $0.uploads[streamId] = continuation }
                call.streams.append(stream)
            }
            let finalCall = call
            let work: @Sendable () async -> Void = {
                let outcome: HubCompletion.Outcome
                do {
                    let value = try await method(finalCall)
                    outcome = value.map { .result($0) } ?? .void
                } catch {
                    outcome = .error("An unexpected error occurred invoking '\(invocation.target)' on the server. \(error)")
                }
                if let id = invocation.invocationId {
                    try? await self.send(.completion(HubCompletion(invocationId: id, outcome: outcome)))
                }
            }
            // A concurrent hub method runs beside reading (the server takes the next message at once).
            if concurrent { Task { await work() } } else { await work() }
        case .streamInvocation(let invocation):
            guard let invocationId = invocation.invocationId,
                  let body = server.state.withLockedValue({ $0.streams[invocation.target.lowercased()] })
            else {
                if let id = invocation.invocationId {
                    try await send(.completion(HubCompletion(invocationId: id, outcome: .error("Unknown hub method '\(invocation.target)'"))))
                }
                return
            }
            let stream = body(SignalRTestServer.Call(connectionId: id, arguments: invocation.arguments, headers: invocation.headers))
            // Streams beside reading; a CancelInvocation cancels it.
            let task = Task {
                var outcome: HubCompletion.Outcome = .void
                do {
                    for try await item in stream {
                        try Task.checkCancellation()
                        try await self.send(.streamItem(HubStreamItem(invocationId: invocationId, item: item)))
                    }
                } catch is CancellationError {
                    return
                } catch {
                    outcome = .error("\(error)")
                }
                _ = self.shared.withLockedValue { $0.streams.removeValue(forKey: invocationId) }
                try? await self.send(.completion(HubCompletion(invocationId: invocationId, outcome: outcome)))
            }
            shared.withLockedValue { $0.streams[invocationId] = task }
        case .cancelInvocation(let cancel):
            shared.withLockedValue { $0.streams.removeValue(forKey: cancel.invocationId) }?.cancel()
        case .streamItem(let item):
            _ = shared.withLockedValue { $0.uploads[item.invocationId] }?.yield(item.item)
        case .completion(let completion):
            if let upload = shared.withLockedValue({ $0.uploads.removeValue(forKey: completion.invocationId) }) {
                if case .error(let text) = completion.outcome {
                    upload.finish(throwing: SignalRTestServerError(message: text))
                } else {
                    upload.finish()
                }
                return
            }
            guard let waiting = shared.withLockedValue({ $0.clientCalls.removeValue(forKey: completion.invocationId) }) else { return }
            switch completion.outcome {
            case .void: waiting.resume(returning: nil)
            case .result(let value): waiting.resume(returning: value)
            case .error(let text): waiting.resume(throwing: SignalRTestServerError(message: text))
            }
        case .close:
            await closeFinally()
        case .ping:
            server.state.withLockedValue { $0.pingsReceived += 1 }
        case .ack, .sequence:
            break
        }
    }
}

/// Serialises writes to one connection's transport from several tasks.
actor ServerOutbox {
    enum Sink: Sendable {
        case webSocket(WebSocketOutboundWriter)
        /// Server-Sent Events: each payload becomes one `data:` event on the stream.
        case eventStream(AsyncStream<ByteBuffer>.Continuation)
        /// Long polling: payloads wait for the next poll.
        case poll
    }

    let sink: Sink
    var closed = false
    /// Long polling: bytes waiting for a poll, and the poll waiting for bytes.
    private var queued: [UInt8] = []
    private var waitingPoll: CheckedContinuation<[UInt8]?, Never>?

    init(_ sink: Sink) { self.sink = sink }

    func write(_ bytes: [UInt8], binary: Bool) async throws {
        guard !closed else { return }
        switch sink {
        case .webSocket(let outbound):
            if binary {
                try await outbound.write(.binary(ByteBuffer(bytes: bytes)))
            } else {
                try await outbound.write(.text(String(decoding: bytes, as: UTF8.self)))
            }
        case .eventStream(let continuation):
            continuation.yield(ByteBuffer(string: "data: " + String(decoding: bytes, as: UTF8.self) + "\r\n\r\n"))
        case .poll:
            queued += bytes
            if let poll = waitingPoll {
                waitingPoll = nil
                poll.resume(returning: takeQueued())
            }
        }
    }

    /// Writes the bytes in one frame as they are, even a text frame that is not UTF-8.
    func writeRaw(_ bytes: [UInt8], binary: Bool) async throws {
        guard !closed else { return }
        if case .webSocket(let outbound) = sink {
            try await outbound.write(.custom(WebSocketFrame(fin: true, opcode: binary ? .binary : .text, data: ByteBuffer(bytes: bytes))))
        } else {
            try await write(bytes, binary: binary)
        }
    }

    private func takeQueued() -> [UInt8] {
        defer { queued = [] }
        return queued
    }

    /// Long polling: what is queued, or what arrives within `timeout` (empty: nothing), or nil
    /// when the connection is closed (the poll answers 204).
    func poll(timeout: Duration) async -> [UInt8]? {
        if closed { return nil }
        if !queued.isEmpty { return takeQueued() }
        if let previous = waitingPoll {
            waitingPoll = nil
            previous.resume(returning: [])
        }
        // The long poll's hold time, cancelled when a message answers the poll first.
        let timer = Task { [weak self] in
            try? await Task.sleep(for: timeout)
            await self?.expirePoll()
        }
        defer { timer.cancel() }
        return await withCheckedContinuation { waitingPoll = $0 }
    }

    private func expirePoll() {
        waitingPoll?.resume(returning: [])
        waitingPoll = nil
    }

    /// Closes the transport. On a WebSocket: `lingering` sends the close frame and leaves the socket
    /// open until the client answers it (the WebSocket layer then closes), as an RFC 6455 server
    /// does; without it, the close frame is sent and the socket closed at once, and a client still
    /// sending then gets a TCP reset.
    func close(code: UInt16 = 1000, reason: String? = nil, lingering: Bool = false) async {
        guard !closed else { return }
        closed = true
        switch sink {
        case .webSocket(let outbound) where lingering:
            var payload = ByteBuffer()
            payload.writeInteger(code)
            if let reason { payload.writeString(reason) }
            try? await outbound.write(.custom(WebSocketFrame(fin: true, opcode: .connectionClose, data: payload)))
        case .webSocket(let outbound): try? await outbound.close(WebSocketErrorCode(codeNumber: Int(code)), reason: reason)
        case .eventStream(let continuation): continuation.finish()
        case .poll:
            waitingPoll?.resume(returning: nil)
            waitingPoll = nil
        }
    }
}
