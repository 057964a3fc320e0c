import DequeModule
import Foundation
import Hummingbird
import HummingbirdCore
import HTTPTypes
import HummingbirdWebSocket
import NIOConcurrencyHelpers
import NIOCore
import NIOFoundationCompat
import HummingbirdTLS
public import NIOSSL
import NIOWebSocket
import RealtimeCore
public import SocketIOEngine

/// An Engine.IO v4 / Socket.IO v5 server on loopback, written from the protocol documents
/// (not from our client): polling (one GET held until there is something to send, POST batches),
/// WebSocket (direct, or by upgrade with the probe), heartbeat, namespaces with auth, acks both ways,
/// binary attachments, connection state recovery, and fault hooks.
///
/// Built-in behaviour, the same as the python-socketio peer of the interop tests:
/// - Namespace `/`: on connect emits `welcome` `{"sid"}` after the CONNECT reply. Events: `echo`
///   (acks its arguments), `echo_event` (emits `echoed` with them), `ask` (asks the client's
///   `question` with an ack, emits `answer` with the reply), `count n` (emits `tick` 1...n),
///   `disconnect_me`, `record` (kept in ``recorded``), `broadcast` (broadcasts `news` with its
///   arguments to the namespace), `late_ack ms` (acks after a delay), `size` (acks the byte length
///   of its string or binary argument), `flaky key n` (counts its arrivals per key and acks with
///   the count only from the n-th on: the tries before go unanswered), `flaky_count key` (acks
///   that count).
/// - Limits as engine.io enforces them: a POST body over `maxPayload` is answered 413; a WebSocket
///   message over it closes the connection (1009).
/// - Namespace `/chat`: refuses unless the auth is `{"token": "secret"}`; `echo`, `whoami` (acks the auth).
/// - Any other namespace: CONNECT_ERROR `{"message": "Invalid namespace"}`, as the Node server does.
public final class SocketIOTestServer: Sendable {
    /// How the server behaves.
    public struct Options: Sendable {
        /// The `pingInterval` announced in the handshake; the server pings this often.
        public var pingInterval: Duration = .seconds(25)
        /// The `pingTimeout` announced in the handshake; a client silent for longer is dropped.
        public var pingTimeout: Duration = .seconds(20)
        /// The `maxPayload` announced in the handshake, in bytes.
        public var maxPayload: Int = 1_000_000
        /// Offer the WebSocket upgrade to polling clients.
        public var allowUpgrade = true
        /// Connection state recovery (socket.io 4.6+): pids, offsets on broadcasts, replay on reconnect.
        public var connectionStateRecovery = false
        /// How long a disconnected session can be recovered (connection state recovery).
        public var maxDisconnectionDuration: Duration = .seconds(120)
        /// The port to listen on; 0 picks an ephemeral one (pass the old port to simulate a restart).
        public var port = 0
        /// Serve HTTPS and WSS with this configuration (nil: plain HTTP and WS).
        public var tls: TLSConfiguration?
        /// A `Set-Cookie` value sent with the polling handshake, as a load balancer with sticky
        /// sessions does (``upgradeCookies`` records what the WebSocket upgrades sent back).
        public var handshakeCookie: String?
        /// How the WebSocket probe (`2probe`) of an upgrading polling client is answered.
        public var probeAnswer: ProbeAnswer = .immediately
        /// Where Engine.IO is mounted (a server behind a prefix: `/prefix/socket.io/`).
        public var path = "/socket.io/"
        /// Polling POST bodies larger than this many bytes are refused (``postRefusal``) while the
        /// handshake still announces `maxPayload`: a server behind a proxy with a lower body limit
        /// (nginx's `client_max_body_size` answering 413), or a socket.io 2.x server configured
        /// below what the client assumes (it resets the connection). Refused bodies are recorded in
        /// ``SocketIOTestServer/refusedPostBodies``. Nil (the default): only `maxPayload` applies.
        public var postBodyLimit: Int?
        /// How a POST over ``postBodyLimit`` is refused.
        public var postRefusal: PostRefusal = .status413
        /// A WebSocket message larger than this many bytes closes the connection (1009) while the
        /// handshake still announces `maxPayload`. Nil (the default): `maxPayload`.
        public var webSocketMessageLimit: Int?
        /// Makes a value with every default.
        public init() {}
    }

    /// How a POST over ``Options/postBodyLimit`` is refused.
    public enum PostRefusal: Sendable {
        /// Answered 413 Content Too Large (the session goes on, as behind nginx).
        case status413
        /// The connection is reset once the body is read (no answer).
        case reset
    }

    /// The server's side of the upgrade probe. The spec has it answer `3probe` and end the pending
    /// GET with a noop; a client sees these on two connections, in either order.
    public enum ProbeAnswer: Sendable {
        /// `3probe` first, then the noop for the pending GET.
        case immediately
        /// The noop for the pending GET first, `3probe` after this delay: what a client sees when the
        /// network delivers the poll answer first. Every later GET of the upgrade is answered with a
        /// noop at once, as python-engineio answers them (engine.io repeats a noop every 100 ms), and
        /// those before `3probe` are counted (``SocketIOTestServer/pollsBeforeProbeAnswer``): a
        /// client should hold polling while its probe is out, so a count above zero means it polled
        /// again at once (against a server that sent only the one noop the spec describes, it would
        /// then wait for that GET until the next ping) or its hold ran out first.
        case afterPollAnswered(Duration)
        /// The noop only; the probe is never answered and nothing more is read from that WebSocket,
        /// not even the client's close frame, until the session ends (a proxy that passes the
        /// upgrade but not the data: the client's closing handshake runs into its own timeout).
        case never
    }

    struct Recovery {
        var sid: String
        var namespace: String
        var disconnectedAt: ContinuousClock.Instant
    }

    struct State {
        var sessions: [String: ServerEngineSession] = [:]
        var recorded: [[JSONValue]] = []
        /// Broadcasts with their offset, per namespace (recovery on).
        var log: [String: [(offset: String, arguments: [JSONValue])]] = [:]
        var nextOffset = 0
        var recoverable: [String: Recovery] = [:]
        var pingsPaused = false
        /// Engine.IO packets written to WebSockets (handed to the socket, one frame each).
        var webSocketPacketsWritten = 0
        var events: [(namespace: String, name: String, arguments: [JSONValue])] = []
        var handshakeQueries: [[String: String]] = []
        var upgradeCookies: [String?] = []
        var authorizations: [String?] = []
        var requiredAuthorization: String?
        var connectCount = 0
        var pongsReceived = 0
        var pollsBeforeProbeAnswer = 0
        /// `flaky`'s arrivals per key.
        var flakyArrivals: [String: Int] = [:]
        var postBodies: [String] = []
        var refusedPostBodies: [String] = []
    }

    /// The options the server was started with.
    public let options: Options
    let state = NIOLockedValueBox(State())
    private let serverBox = NIOLockedValueBox<LoopbackServer?>(nil)

    private init(options: Options) {
        self.options = options
    }

    /// The port the server listens on, on 127.0.0.1 (0 before it started).
    public var port: Int { serverBox.withLockedValue { $0?.port ?? 0 } }
    /// `http://127.0.0.1:<port>`, or `https://localhost:<port>` with TLS (the test certificates name localhost).
    public var url: String { options.tls == nil ? "http://127.0.0.1:\(port)" : "https://localhost:\(port)" }
    /// The arguments of every `record` event, in arrival order.
    public var recorded: [[JSONValue]] { state.withLockedValue { $0.recorded } }
    /// Every event the server received: namespace, name, arguments.
    public var receivedEvents: [(namespace: String, name: String, arguments: [JSONValue])] { state.withLockedValue { $0.events } }
    /// The query parameters of each Engine.IO handshake.
    public var handshakeQueries: [[String: String]] { state.withLockedValue { $0.handshakeQueries } }
    /// The `Cookie` header of every WebSocket upgrade request, in order (nil: none was sent).
    public var upgradeCookies: [String?] { state.withLockedValue { $0.upgradeCookies } }
    /// The `Authorization` header of every polling handshake and WebSocket upgrade, in order.
    public var authorizations: [String?] { state.withLockedValue { $0.authorizations } }

    /// From now on, polling handshakes and WebSocket upgrades without this exact `Authorization`
    /// value are refused (401, or a refused upgrade), as a server whose credentials rotate; nil
    /// accepts any.
    public func requireAuthorization(_ value: String?) {
        state.withLockedValue { $0.requiredAuthorization = value }
    }

    /// Records a request's `Authorization` and says whether it is accepted.
    func admits(authorization: String?) -> Bool {
        state.withLockedValue { state in
            state.authorizations.append(authorization)
            return state.requiredAuthorization == nil || state.requiredAuthorization == authorization
        }
    }
    /// Namespace connections accepted so far.
    public var connectCount: Int { state.withLockedValue { $0.connectCount } }
    /// Engine.IO pongs received, over every session: each answers one of the server's pings.
    public var pongsReceived: Int { state.withLockedValue { $0.pongsReceived } }
    /// GETs that came during an upgrade before `3probe` went out (``ProbeAnswer/afterPollAnswered(_:)``).
    public var pollsBeforeProbeAnswer: Int { state.withLockedValue { $0.pollsBeforeProbeAnswer } }
    /// The body of every polling POST to a session, in arrival order (UTF-8 text; Engine.IO 4
    /// payloads are text).
    public var postBodies: [String] { state.withLockedValue { $0.postBodies } }
    /// The body of every polling POST refused for ``Options/postBodyLimit``, in arrival order.
    public var refusedPostBodies: [String] { state.withLockedValue { $0.refusedPostBodies } }
    /// Open Engine.IO sessions.
    public var sessionCount: Int { state.withLockedValue { $0.sessions.count } }

    /// Starts a server on 127.0.0.1 (an ephemeral port unless `options.port` is set).
    public static func start(options: Options = Options()) async throws -> SocketIOTestServer {
        let server = SocketIOTestServer(options: options)
        let router = Router(context: SocketIOTestRequestContext.self)
        let path = RouterPath(options.path)
        router.on(path, method: .get) { [weak server] request, context in
            guard let server else { return Response(status: .serviceUnavailable) }
            return try await server.handlePolling(request, channel: context.channel)
        }
        router.on(path, method: .post) { [weak server] request, context in
            guard let server else { return Response(status: .serviceUnavailable) }
            return try await server.handlePolling(request, channel: context.channel)
        }
        let webSocket = WebSocketServerConfiguration(maxFrameSize: 64 << 20, autoPing: .disabled)
        let builder = HTTPServerBuilder.http1WebSocketUpgrade(configuration: .init(ws: webSocket)) { [weak server] request, channel, _ in
            guard let server, request.path?.hasPrefix(options.path) == true else { return .dontUpgrade }
            let query = Self.query(request.path ?? "")
            guard query["EIO"] == "4", query["transport"] == "websocket" else { return .dontUpgrade }
            let existing = query["sid"].flatMap { sid in server.state.withLockedValue { $0.sessions[sid] } }
            if query["sid"] != nil && existing == nil { return .dontUpgrade }
            let cookie = request.headerFields[.cookie]
            server.state.withLockedValue { $0.upgradeCookies.append(cookie) }
            guard server.admits(authorization: request.headerFields[.authorization]) else { return .dontUpgrade }
            return .upgrade([:]) { inbound, outbound, _ in
                // Read and write on the connection's event loop, as a NIO server would (no thread hop per packet).
                try await withEventLoopPreference(channel.eventLoop) {
                    try await server.runWebSocket(inbound: inbound, outbound: outbound, upgrading: existing, query: query)
                }
            }
        }
        let loopback = try await LoopbackServer.start(
            responder: router,
            server: try options.tls.map { try HTTPServerBuilder.tls(builder, tlsConfiguration: $0) } ?? builder,
            secure: options.tls != nil,
            port: options.port)
        server.serverBox.withLockedValue { $0 = loopback }
        return server
    }

    /// Stops the server and closes its connections; waits until they are closed.
    public func stop() async {
        let sessions = state.withLockedValue { state -> [ServerEngineSession] in
            defer { state.sessions = [:] }
            return Array(state.sessions.values)
        }
        for session in sessions { session.terminate() }
        await serverBox.withLockedValue { $0 }?.stop()
    }

    // MARK: Fault hooks and server-side actions

    /// Cuts every connection without a close packet (a crash or a network drop).
    public func dropAllConnections() {
        let sessions = state.withLockedValue { Array($0.sessions.values) }
        for session in sessions { session.terminate(dropped: true) }
    }

    /// Ends every session; a WebSocket closes with this close code and reason (1008 policy violation,
    /// 1009 message too big, 1011 internal error...), without an Engine.IO close packet.
    public func closeWebSockets(code: UInt16, reason: String? = nil) {
        let sessions = state.withLockedValue { Array($0.sessions.values) }
        for session in sessions { session.terminate(dropped: true, closeCode: (code, reason)) }
    }

    /// Sends a raw Engine.IO message packet (`4<text>`) to every session: for malformed-input tests.
    public func injectRawMessage(_ text: String) {
        let sessions = state.withLockedValue { Array($0.sessions.values) }
        for session in sessions { session.send(.message(text)) }
    }

    /// Engine.IO packets written to WebSockets so far, each as a frame of its own: a test that holds
    /// the network back waits for this before letting a burst through.
    public var webSocketPacketsWritten: Int { state.withLockedValue { $0.webSocketPacketsWritten } }

    /// Stops (or resumes) sending pings, so clients see a heartbeat timeout.
    public func pausePings(_ paused: Bool) { state.withLockedValue { $0.pingsPaused = paused } }

    /// Emits `event` to every socket connected to `namespace` (with an offset when recovery is on).
    public func broadcast(_ event: String, _ arguments: [JSONValue], namespace: String = "/") {
        broadcastLock.withLock { broadcastLocked(event, arguments, namespace: namespace) }
    }

    /// Orders broadcasts among themselves and against a socket joining with its replay.
    let broadcastLock = NIOLock()

    private func broadcastLocked(_ event: String, _ arguments: [JSONValue], namespace: String) {
        var arguments = arguments
        let sessions = state.withLockedValue { state -> [ServerEngineSession] in
            if options.connectionStateRecovery {
                state.nextOffset += 1
                let offset = "\(state.nextOffset)"
                arguments.append(.string(offset))
                state.log[namespace, default: []].append((offset, arguments))
            }
            return Array(state.sessions.values)
        }
        for session in sessions {
            session.emitIfConnected(namespace: namespace, event: event, arguments: arguments)
        }
    }

    // MARK: Engine.IO

    static func query(_ path: String) -> [String: String] {
        guard let index = path.firstIndex(of: "?") else { return [:] }
        var result: [String: String] = [:]
        for pair in path[path.index(after: index)...].split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1)
            let key = String(parts[0]).removingPercentEncoding ?? String(parts[0])
            result[key] = parts.count > 1 ? (String(parts[1]).removingPercentEncoding ?? String(parts[1])) : ""
        }
        return result
    }

    static func text(_ body: String, status: HTTPResponse.Status = .ok) -> Response {
        Response(
            status: status, headers: [.contentType: "text/plain; charset=UTF-8"],
            body: .init(byteBuffer: ByteBuffer(string: body)))
    }

    static func badRequest(_ code: Int, _ message: String) -> Response {
        Response(
            status: .badRequest, headers: [.contentType: "application/json"],
            body: .init(byteBuffer: ByteBuffer(string: #"{"code":\#(code),"message":"\#(message)"}"#)))
    }

    func openPacket(sid: String, upgrades: [String]) -> EngineIOPacket {
        let json: JSONValue = [
            "sid": .string(sid), "upgrades": .array(upgrades.map(JSONValue.string)),
            "pingInterval": .number(Self.milliseconds(options.pingInterval)),
            "pingTimeout": .number(Self.milliseconds(options.pingTimeout)),
            "maxPayload": .number(Double(options.maxPayload)),
        ]
        return EngineIOPacket(.open, .text(json.description))
    }

    static func milliseconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) * 1000 + Double(duration.components.attoseconds) / 1e15
    }

    func newSession() -> ServerEngineSession {
        let session = ServerEngineSession(server: self, sid: Self.makeID())
        state.withLockedValue { $0.sessions[session.sid] = session }
        session.startHeartbeat()
        return session
    }

    func sessionEnded(_ session: ServerEngineSession) {
        let recoverable = session.recoverableSockets()
        state.withLockedValue { state in
            state.sessions.removeValue(forKey: session.sid)
            guard options.connectionStateRecovery else { return }
            for (pid, namespace, sid) in recoverable {
                state.recoverable[pid] = Recovery(sid: sid, namespace: namespace, disconnectedAt: .now)
            }
        }
    }

    static func makeID() -> String {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
        return String((0..<20).map { _ in alphabet.randomElement()! })
    }

    private func handlePolling(_ request: Request, channel: any Channel) async throws -> Response {
        let query = Self.query(request.uri.description)
        guard query["EIO"] == "4" else { return Self.badRequest(5, "Unsupported protocol version") }
        guard query["transport"] == "polling" else { return Self.badRequest(0, "Transport unknown") }
        guard let sid = query["sid"] else {
            guard request.method == .get else { return Self.badRequest(2, "Bad handshake method") }
            guard admits(authorization: request.headers[.authorization]) else { return Response(status: .unauthorized) }
            state.withLockedValue { $0.handshakeQueries.append(query) }
            let session = newSession()
            var response = Self.text(EngineIOCodec.encodePayload([openPacket(sid: session.sid, upgrades: options.allowUpgrade ? ["websocket"] : [])]))
            if let cookie = options.handshakeCookie { response.headers[.setCookie] = cookie }
            return response
        }
        guard let session = state.withLockedValue({ $0.sessions[sid] }) else { return Self.badRequest(1, "Session ID unknown") }
        if request.method == .post {
            var request = request
            // engine.io answers a body over maxHttpBufferSize with 413.
            guard let body = try? await request.collectBody(upTo: options.maxPayload) else {
                return Response(status: .contentTooLarge)
            }
            if let limit = options.postBodyLimit, body.readableBytes > limit {
                state.withLockedValue { $0.refusedPostBodies.append(String(buffer: body)) }
                switch options.postRefusal {
                case .status413:
                    return Response(status: .contentTooLarge)
                case .reset:
                    // SO_LINGER 0: the close sends a reset, as a server that destroys the request's socket.
                    if let provider = channel as? any SocketOptionProvider {
                        try? await provider.setSoLinger(linger(l_onoff: 1, l_linger: 0)).get()
                    }
                    try? await channel.close().get()
                    throw CancellationError()
                }
            }
            state.withLockedValue { $0.postBodies.append(String(buffer: body)) }
            let packets: [EngineIOPacket]
            do {
                packets = try body.withUnsafeReadableBytes { try EngineIOCodec.decodePayload($0) }
            } catch {
                session.terminate()
                return Self.badRequest(3, "Bad request")
            }
            for packet in packets { await session.received(packet) }
            return Self.text("ok")
        }
        guard let payload = await session.poll() else { return Self.badRequest(3, "Bad request") }
        return Self.text(payload)
    }

    private func runWebSocket(
        inbound: WebSocketInboundStream, outbound: WebSocketOutboundWriter, upgrading existing: ServerEngineSession?,
        query: [String: String]
    ) async throws {
        // A message over maxPayload closes the connection (1009), as engine.io does.
        var iterator = inbound.messages(maxSize: options.webSocketMessageLimit ?? options.maxPayload).makeAsyncIterator()
        let session: ServerEngineSession
        if let existing {
            // Upgrade: probe, then wait for the upgrade packet.
            guard case .text("2probe")? = try await iterator.next() else { return }
            switch options.probeAnswer {
            case .immediately:
                try await outbound.write(.text("3probe"))
                existing.flushPollWithNoop()
            case .afterPollAnswered(let delay):
                existing.flushPollWithNoop(everyPoll: true)
                try await Task.sleep(for: delay)
                existing.probeAnswerSent()
                try await outbound.write(.text("3probe"))
            case .never:
                existing.flushPollWithNoop()
                // Not reading is what keeps the close frame unanswered.
                while !existing.isClosed && !Task.isCancelled {
                    try? await Task.sleep(for: .milliseconds(20))
                }
                return
            }
            guard case .text("5")? = try await iterator.next() else { return }
            session = existing
        } else {
            state.withLockedValue { $0.handshakeQueries.append(query) }
            session = newSession()
            try await outbound.write(.text(text(openPacket(sid: session.sid, upgrades: []))))
        }
        let stream = session.attachWebSocket()
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                for await packet in stream {
                    switch EngineIOCodec.encode(packet, supportsBinary: true) {
                    case .text(let text): try await outbound.write(.text(text))
                    case .binary(let data): try await outbound.write(.binary(ByteBuffer(data: data)))
                    }
                    self.state.withLockedValue { $0.webSocketPacketsWritten += 1 }
                }
                // The session ended: close the socket with its close code (1000 unless one was named).
                let (code, reason) = session.closeCode
                try? await outbound.close(WebSocketErrorCode(codeNumber: Int(code)), reason: reason)
            }
            while let message = try await iterator.next() {
                // A single-frame message is not held to `messages(maxSize:)`: the limit is checked here.
                if let limit = options.webSocketMessageLimit, message.size > limit {
                    // The writer task sends the close frame once the session's stream ends.
                    session.terminate(dropped: true, closeCode: (1009, "message too big"))
                    try await group.waitForAll()
                    return
                }
                switch message {
                case .text(let text):
                    guard let packet = try? EngineIOCodec.decode(text: text) else {
                        session.terminate()
                        break
                    }
                    await session.received(packet)
                case .binary(let buffer):
                    await session.received(EngineIOCodec.decode(binary: Data(buffer: buffer)))
                }
            }
            session.terminate()
            group.cancelAll()
        }
    }

    private func text(_ packet: EngineIOPacket) -> String {
        if case .text(let text) = EngineIOCodec.encode(packet, supportsBinary: true) { return text }
        return ""
    }

    func takeRecovery(pid: String, namespace: String) -> Recovery? {
        state.withLockedValue { state in
            guard let recovery = state.recoverable[pid], recovery.namespace == namespace,
                ContinuousClock.now - recovery.disconnectedAt < options.maxDisconnectionDuration
            else { return nil }
            state.recoverable.removeValue(forKey: pid)
            return recovery
        }
    }

    func missedBroadcasts(namespace: String, after offset: String?) -> [[JSONValue]]? {
        state.withLockedValue { state in
            let log = state.log[namespace] ?? []
            // As socket.io's in-memory adapter: an offset it does not know (or none) recovers nothing
            // (the whole log would replay what earlier sessions already delivered).
            guard let offset, let index = log.firstIndex(where: { $0.offset == offset }) else { return nil }
            return log[(index + 1)...].map(\.arguments)
        }
    }
}


/// The request context of ``SocketIOTestServer``: the connection's channel, to reset it
/// (``SocketIOTestServer/PostRefusal/reset``).
struct SocketIOTestRequestContext: RequestContext {
    var coreContext: CoreRequestContextStorage
    let channel: any Channel

    init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        channel = source.channel
    }
}

extension WebSocketMessage {
    /// Its bytes (a text message's UTF-8).
    fileprivate var size: Int {
        switch self {
        case .text(let text): text.utf8.count
        case .binary(let buffer): buffer.readableBytes
        }
    }
}
