import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOHTTP1
public import RealtimeCore
public import ServiceLifecycle
import Tracing

/// Owns one Engine.IO connection and multiplexes namespace sockets over it; reconnects with backoff.
///
/// ```swift
/// let manager = SocketManager(url: "http://localhost:3000")
/// let chat = manager.socket(forNamespace: "/chat", auth: .value(["token": "t"]))
/// chat.on("message") { event in print(event.arguments) }
/// try await chat.connect(timeout: .seconds(10))
/// let reply = try await chat.emitWithAck("join", "room1", timeout: .seconds(5))
/// ```
public final class SocketManager: Service, Sendable {
    private struct State {
        var sockets: [String: SocketIOClient] = [:]
        var session: EngineIOSession?
        var handler: SessionHandler?
        var runTask: Task<Void, Never>?
        var closing = false
        var handshake: EngineIOHandshake?
    }

    /// The server's URL (`http(s)://host[:port]`).
    public let url: String
    /// The configuration the manager was made with.
    public let configuration: SocketIOConfiguration
    /// The cookie store sessions use: the configuration's, or this manager's own. (The engine
    /// options are made from the configuration per session, not kept twice per manager.)
    private let cookies: CookieStore
    let driver: ReconnectDriver
    let metrics: ClientMetrics
    private let state = NIOLockedValueBox(State())
    var runtime: RealtimeRuntime { configuration.runtime }
    var logger: Logger { configuration.runtime.logger }

    /// Makes a manager for the server at `url`; nothing connects until a socket does.
    public init(url: String, configuration: SocketIOConfiguration = SocketIOConfiguration()) {
        var configuration = configuration
        // Every connection of this manager, reconnects included, runs on one event loop (`eventLoop`).
        configuration.runtime = configuration.runtime.pinnedToOneLoop()
        self.url = url
        self.configuration = configuration
        self.cookies = configuration.engine.cookies ?? CookieStore()
        self.driver = ReconnectDriver(policy: configuration.reconnectPolicy, runtime: configuration.runtime)
        self.metrics = ClientMetrics.shared(protocol: "socketio", client: configuration.clientLabel, runtime: configuration.runtime)
        driver.report(to: metrics)
    }

    /// The Engine.IO connection state (connecting, connected, reconnecting(attempt), disconnected(error)).
    public var connectionState: StateBroadcaster<ConnectionState> { driver.state }

    /// The server's handshake from the last connection (its limits: `maxPayload`, `pingInterval`,
    /// `pingTimeout`); nil before the first. Emits larger than `maxPayload` fail with `messageTooLarge`.
    public var handshake: EngineIOHandshake? { state.withLockedValue { $0.handshake } }

    func opened(_ handshake: EngineIOHandshake) { state.withLockedValue { $0.handshake = handshake } }

    /// Whether frames may travel over polling (then a frame must fit one polling payload).
    var mayUsePolling: Bool { configuration.engine.transports.contains(.polling) }

    /// The engine options of a session: the configuration's, with the manager's cookie store.
    private var engineOptions: EngineIOOptions {
        var options = configuration.engine
        options.cookies = cookies
        options.revision = configuration.version.engineIORevision
        return options
    }

    /// The transport in use, when connected.
    public var transport: EngineIOOptions.Transport? {
        state.withLockedValue { $0.session?.handshake == nil ? nil : $0.session?.transport }
    }

    /// The socket for the main namespace `/`.
    public var defaultSocket: SocketIOClient { socket(forNamespace: "/") }

    /// The socket for `namespace` (created on first use; one per namespace).
    public func socket(forNamespace namespace: String, auth: SocketIOAuth? = nil) -> SocketIOClient {
        let name = namespace.hasPrefix("/") ? namespace : "/" + namespace
        let socket = state.withLockedValue { state -> SocketIOClient in
            if let existing = state.sockets[name] { return existing }
            let socket = SocketIOClient(manager: self, namespace: name)
            state.sockets[name] = socket
            return socket
        }
        if let auth { socket.setAuth(auth) }
        return socket
    }

    /// Disconnects every socket and closes the connection.
    public func disconnect() {
        for socket in state.withLockedValue({ Array($0.sockets.values) }) { socket.disconnect() }
        closeEngine()
    }

    /// Runs the manager as a `Service`: its sockets connect when they are asked to (``SocketIOClient/connect(auth:timeout:)``);
    /// at the service group's graceful shutdown every socket disconnects (queued emits stay queued
    /// and are reported by ``SocketIOClient/queuedEmitCount``) and this returns once the connection
    /// is closed.
    public func run() async throws {
        try? await gracefulShutdown()
        disconnect()
        await waitUntilStopped()
    }

    /// Waits until the manager's run loop has stopped (after ``disconnect()`` or when reconnection gave up).
    public func waitUntilStopped() async {
        let task = state.withLockedValue { $0.runTask }
        await task?.value
    }

    // MARK: Internals for the sockets

    /// Starts the connection if it is not running; sends the namespace CONNECT when it already is.
    /// Opens the connection without joining a namespace (SocketIO's `SocketManager.connect()`):
    /// namespaces join when their sockets connect.
    package func openConnection() {
        let start = state.withLockedValue { state -> Bool in
            state.closing = false
            return state.runTask == nil
        }
        if start { startRunLoop() }
    }

    /// Whether the connection runs and is not closing (SocketIO makes a new manager otherwise).
    package var isRunning: Bool { state.withLockedValue { $0.runTask != nil && !$0.closing } }

    func open(for socket: SocketIOClient) {
        let (start, session) = state.withLockedValue { state -> (Bool, EngineIOSession?) in
            state.closing = false
            if state.runTask == nil { return (true, nil) }
            return (false, state.handler?.isOpen == true ? state.session : nil)
        }
        if start {
            startRunLoop()
        } else if let session {
            // Short-lived: the CONNECT packet waits for the namespace's auth provider (async).
            Task { await socket.sendConnect(on: session) }
        }
    }

    private func startRunLoop() {
        // Unstructured: a socket's connect() (the API socket.io clients have) starts the shared
        // connection, which outlives that call; disconnect() and run() end it. Its own task: a
        // caller's graceful shutdown must not reach it.
        let task = ownTask { await self.runLoop() }
        state.withLockedValue { state in
            if state.runTask == nil { state.runTask = task } else { task.cancel() }
        }
    }

    /// Called when a socket stops being active: closes the connection when none is left.
    func socketBecameInactive() {
        // Never call into a socket while holding the manager's lock (sockets lock, then manager).
        if !sockets.contains(where: \.isActive) { closeEngine() }
    }

    private func closeEngine() {
        let (session, task) = state.withLockedValue { state -> (EngineIOSession?, Task<Void, Never>?) in
            state.closing = true
            return (state.session, state.runTask)
        }
        guard let task else { return }
        if let session, session.handshake != nil {
            session.close()
            // A transport that cannot deliver the close packet must not keep the loop alive.
            runtime.timers.schedule(after: .seconds(2)) { task.cancel() }
        } else {
            task.cancel()
        }
    }

    /// The session a socket sends on, if it is open.
    var openSession: EngineIOSession? {
        state.withLockedValue { $0.handler?.isOpen == true ? $0.session : nil }
    }

    var sockets: [SocketIOClient] { state.withLockedValue { Array($0.sockets.values) } }

    /// The emits waiting in every socket's offline queue, for the queue-depth metric.
    func reportQueueDepth() {
        metrics.queueDepth(sockets.reduce(0) { $0 + $1.queuedEmitCount })
    }

    /// The socket for a namespace, if one was made (a dictionary lookup: this runs per packet).
    func existingSocket(_ namespace: String) -> SocketIOClient? { state.withLockedValue { $0.sockets[namespace] } }

    private func runLoop() async {
        let finalError = await driver.run { context in
            try await self.runSession(context)
        }
        let sockets = state.withLockedValue { state -> [SocketIOClient] in
            state.runTask = nil
            state.session = nil
            state.handler = nil
            return Array(state.sockets.values)
        }
        for socket in sockets {
            socket.managerStopped(error: finalError)
        }
    }

    /// One Engine.IO session, from its start to what the reconnect loop does next.
    ///
    /// While the session runs, this frame is all the loop's task holds for it: the work before and
    /// after is in synchronous functions, whose locals live on the thread's stack for a moment
    /// instead of in the suspended task's frame for the connection's whole life: one reference to
    /// the session's parts (`SessionRun`).
    private func runSession(_ context: ReconnectDriver.SessionContext) async throws -> SessionEnd {
        guard let run = try await prepareSession(context) else { return .closed }
        let outcome = await run.run()
        return try endSession(run.handler, run.session, span: run.span, outcome: outcome)
    }

    /// One session's parts, behind one reference in the frame that waits for the session.
    private final class SessionRun: Sendable {
        let handler: SessionHandler
        let session: EngineIOSession
        let span: any Span

        init(handler: SessionHandler, session: EngineIOSession, span: any Span) {
            self.handler = handler
            self.session = session
            self.span = span
        }

        @inline(never)
        func run() async -> Result<EngineIOSessionEnd, any Error> {
            do {
                return .success(try await span.withContextBound { try await session.run() })
            } catch {
                return .failure(error)
            }
        }
    }

    @inline(never)
    private func prepareSession(_ context: ReconnectDriver.SessionContext) async throws -> SessionRun? {
        let headers = try await attemptHeaders()
        let query = await defaultNamespaceQuery()
        return try beginSession(context, headers: headers, query: query)
    }

    /// The attempt's headers from ``EngineIOOptions/headersProvider``, nil without one.
    private func attemptHeaders() async throws -> HTTPHeaders? {
        guard let provider = configuration.engine.headersProvider else { return nil }
        do {
            return try await provider()
        } catch {
            throw RealtimeError(.authenticationFailed, "the headers provider failed", underlying: error)
        }
    }

    /// socket.io 2.x: the default namespace's auth, which travels in the handshake's query (the
    /// server joins `/` at the handshake; there is no CONNECT payload). Empty otherwise.
    private func defaultNamespaceQuery() async -> [(String, String)] {
        guard configuration.version == .v2, let socket = existingSocket("/"), socket.isActive else { return [] }
        return await socket.legacyAuthQuery()
    }

    /// socket.io 2.x: where the default namespace stands on the current session.
    func claimDefaultNamespace() -> SessionHandler.DefaultNamespaceClaim {
        state.withLockedValue { $0.handler }?.claimDefaultNamespace() ?? .wait
    }

    /// socket.io 2.x: the app left the default namespace on the current session (sent its DISCONNECT).
    func leftDefaultNamespace() {
        state.withLockedValue { $0.handler }?.leftDefaultNamespace()
    }

    private func beginSession(
        _ context: ReconnectDriver.SessionContext, headers: HTTPHeaders?, query: [(String, String)]
    ) throws -> SessionRun? {
        if state.withLockedValue({ $0.closing }) { return nil }
        if context.attempt > 0 {
            for socket in sockets where socket.isActive {
                socket.fire(.reconnectAttempt, [.number(Double(context.attempt))])
            }
        }
        let handler = SessionHandler(manager: self, context: context)
        var options = engineOptions
        for (name, value) in headers ?? [:] { options.headers.replaceOrAdd(name: name, value: value) }
        for (name, value) in query { options.query[name] = value }
        let session = try EngineIOSession(url: url, options: options, runtime: runtime, delegate: handler, metrics: metrics)
        handler.session = session
        session.onSendQueueDrained { [weak self, weak session] in
            guard let self, let session else { return }
            for socket in self.sockets { socket.sendQueueDrained(session) }
        }
        state.withLockedValue {
            $0.session = session
            $0.handler = handler
        }
        // The connect span ends when the session opens (or fails first); the session's requests
        // carry its propagation headers.
        let span = runtime.startClientSpan("realtime.connect", protocol: "socketio", client: configuration.clientLabel)
        handler.connectSpan = span
        return SessionRun(handler: handler, session: session, span: span)
    }

    private func endSession(
        _ handler: SessionHandler, _ session: EngineIOSession, span: any Span, outcome: Result<EngineIOSessionEnd, any Error>
    ) throws -> SessionEnd {
        let end = try? outcome.get()
        let failure: RealtimeError? = if case .failure(let error) = outcome { RealtimeError.wrap(error) } else { nil }
        if handler.takeConnectSpan() != nil {
            if let failure { span.fail(failure) }
            span.end()
        }
        let unsent = session.collectUnsent()
        let evicted = session.evictedUnconfirmed
        let (closing, wasOpen) = state.withLockedValue { state -> (Bool, Bool) in
            state.session = nil
            state.handler = nil
            return (state.closing, handler.isOpen)
        }
        handler.markClosed()
        // A WebSocket that closed or broke under an open session is "transport close" with no
        // error event, as the JavaScript client reports it; the reconnect still sees the error.
        let transportClosed = wasOpen && failure != nil && session.webSocketWasLost
        let reason: String = switch end {
        case .closedByClient: "io client disconnect"
        case .closedByServer: "transport close"
        case nil where transportClosed: "transport close"
        case nil: failure?.code == .timeout && wasOpen ? "ping timeout" : "transport error"
        }
        let sockets = self.sockets
        let (writtenFrames, refused) = Self.refusedAsTooLarge(unsent.written, failure: failure)
        if !refused.isEmpty, let failure { handler.engineIORefused(refused, error: failure) }
        let written = Dictionary(grouping: writtenFrames.filter { $0.requeueNamespace != nil }, by: { $0.requeueNamespace! })
        let unwritten = Dictionary(grouping: unsent.unwritten.filter { $0.requeueNamespace != nil }, by: { $0.requeueNamespace! })
        // Hand every frame back before telling the sockets: a disconnect handler that emits queues
        // behind them.
        // A session the client closed delivered what it wrote before its close packet.
        let leftWindow = end == .closedByClient ? [:] : evicted
        for socket in sockets {
            socket.sessionEnded(
                written: written[socket.namespace] ?? [], unwritten: unwritten[socket.namespace] ?? [],
                leftWindow: leftWindow[socket.namespace] ?? 0)
        }
        for socket in sockets { socket.engineClosed(reason: reason, error: transportClosed ? nil : failure) }
        if closing || end == .closedByClient { return .closed }
        if failure?.code == .cancelled { throw CancellationError() }
        return .dropped(failure)
    }
}

extension SocketManager {
    /// The server closed the WebSocket with 1009 (message too big): of the application frames
    /// written and not confirmed, those with the largest WebSocket message are refused (returned
    /// second, marked possibly delivered), the others kept (returned first). The server reads in
    /// order and closes at the first message over its limit, which it never handles: that message
    /// is unconfirmed, so the largest unconfirmed one is over the limit too, and sending it again
    /// would only be refused again. Any other end refuses nothing.
    static func refusedAsTooLarge(
        _ written: [EngineIOFrame], failure: RealtimeError?
    ) -> (kept: [EngineIOFrame], refused: [EngineIOFrame]) {
        // Our own 1009 (the server sent us a message over maxMessageSize) says nothing about
        // what we sent: only the server's close frame counts.
        guard let failure, failure.closeCode == 1009, failure.detail.hasPrefix("the server closed"),
            let largest = written.lazy.filter(\.isApplicationData).map(\.largestWebSocketMessage).max()
        else { return (written, []) }
        var kept: [EngineIOFrame] = []
        var refused: [EngineIOFrame] = []
        for var frame in written {
            if frame.isApplicationData && frame.largestWebSocketMessage == largest {
                frame.wasWritten = true
                frame.refusals = frame.refusals == .max ? .max : frame.refusals + 1
                if !frame.isVolatile { refused.append(frame) }
            } else {
                kept.append(frame)
            }
        }
        return (kept, refused)
    }
}

/// Receives one session's Engine.IO events and routes Socket.IO packets to the namespace sockets.
final class SessionHandler: EngineIODelegate {
    private struct State {
        var decoder: SocketIOPacketDecoder
        var open = false
        var closed = false
        /// A Socket.IO packet from the server was decoded on this session (told to the reconnect
        /// context once).
        var progressed = false
        /// socket.io 2.x: the server's own CONNECT for `/` (sent at the handshake), and whether the
        /// `/` socket took it.
        var defaultNamespace: DefaultNamespace = .notJoined
        /// The manager's `/` socket, once a packet was for it (``rootSocket()``). Not retained
        /// here: the manager holds each of its sockets for its whole life, and this handler holds
        /// the manager. (A socket is weakly referenced, so each retain and release of it takes
        /// the runtime's slow path: two of them per packet cost more than decoding a small one.)
        var root: Unmanaged<SocketIOClient>?
    }

    /// socket.io 2.x: the default namespace on this session.
    enum DefaultNamespace {
        /// The server has not joined it yet (its CONNECT comes after the open packet).
        case notJoined
        /// Joined by the server; `claimed` once the `/` socket was told.
        case joined(claimed: Bool)
        /// The app left it (sent DISCONNECT): joining again takes a CONNECT packet.
        case left
    }

    /// What the `/` socket does to connect on a socket.io 2.x session.
    enum DefaultNamespaceClaim {
        /// Nothing: the server's CONNECT is on its way (or was already delivered).
        case wait
        /// The server joined it before the socket asked: the socket is connected now.
        case connected
        /// Send a CONNECT packet for `/` (the app left it on this session).
        case sendConnect
    }

    private let manager: SocketManager
    /// The manager's, held here: every packet counts, and reaching it through the manager costs
    /// a reference count on each.
    private let metrics: ClientMetrics
    private let context: ReconnectDriver.SessionContext
    private let state: NIOLockedValueBox<State>
    private let sessionBox = NIOLockedValueBox<EngineIOSession?>(nil)
    private let spanBox = NIOLockedValueBox<(any Span)?>(nil)

    /// The session's connect span, until the session opens.
    var connectSpan: (any Span)? {
        get { spanBox.withLockedValue { $0 } }
        set { spanBox.withLockedValue { $0 = newValue } }
    }

    /// Takes the connect span (once).
    func takeConnectSpan() -> (any Span)? {
        spanBox.withLockedValue { span in
            defer { span = nil }
            return span
        }
    }

    init(manager: SocketManager, context: ReconnectDriver.SessionContext) {
        self.manager = manager
        self.metrics = manager.metrics
        self.context = context
        self.legacy = manager.configuration.version == .v2
        self.state = NIOLockedValueBox(State(decoder: SocketIOPacketDecoder(version: manager.configuration.version)))
    }

    /// Speaking to a socket.io 2.x server.
    private let legacy: Bool

    func claimDefaultNamespace() -> DefaultNamespaceClaim {
        state.withLockedValue { state in
            switch state.defaultNamespace {
            case .notJoined: return .wait
            case .joined(claimed: true): return .wait
            case .joined(claimed: false):
                state.defaultNamespace = .joined(claimed: true)
                return .connected
            case .left: return .sendConnect
            }
        }
    }

    func leftDefaultNamespace() {
        state.withLockedValue { $0.defaultNamespace = .left }
    }

    var session: EngineIOSession? {
        get { sessionBox.withLockedValue { $0 } }
        set { sessionBox.withLockedValue { $0 = newValue } }
    }

    var isOpen: Bool { state.withLockedValue { $0.open && !$0.closed } }

    func markClosed() { state.withLockedValue { $0.closed = true } }

    func engineIOOpened(_ handshake: EngineIOHandshake, transport: EngineIOOptions.Transport) async throws {
        // On the connection's task (its frames stay at their high-water mark for the connection's
        // life): the bookkeeping is synchronous, only the namespaces' CONNECTs are awaited.
        guard let opened = opened(handshake, transport: transport) else { return }
        await Self.sendConnects(opened.sockets, on: opened.session)
    }

    private static func sendConnects(_ sockets: [SocketIOClient], on session: EngineIOSession) async {
        for socket in sockets { await socket.sendConnect(on: session) }
    }

    /// The session is open: the span ends, the manager and the reconnect context learn it; the
    /// session and the namespaces to join on it (after a reconnect each is told first).
    @inline(never)
    private func opened(_ handshake: EngineIOHandshake, transport: EngineIOOptions.Transport) -> (session: EngineIOSession, sockets: [SocketIOClient])? {
        state.withLockedValue { $0.open = true }
        if let span = takeConnectSpan() {
            span.addEvent(SpanEvent(name: "opened", attributes: ["realtime.transport": .string(transport.rawValue)]))
            span.end()
        }
        manager.opened(handshake)
        context.connected()
        guard let session else { return nil }
        let sockets = manager.sockets.filter(\.isActive)
        if context.attempt > 0 {
            for socket in sockets { socket.fire(.reconnect, [.number(Double(context.attempt))]) }
        }
        return (session, sockets)
    }

    func engineIOReceived(_ payload: EngineIOPacket.Payload) throws {
        switch payload {
        case .text(var text):
            try text.withUTF8 { try engineIOReceived(text: UnsafeRawBufferPointer($0)) }
        case .binary(let data):
            try received(bytes: data.count) { decoder throws(SocketIOParseError) in try decoder.receive(binary: data) }
        case .none:
            try received(bytes: 0) { _ throws(SocketIOParseError) in throw .invalidPayload("an empty message packet") }
        }
    }

    func engineIOReceived(text: UnsafeRawBufferPointer) throws {
        try received(bytes: text.count) { decoder throws(SocketIOParseError) in try decoder.receive(bytes: text) }
    }

    /// A message packet's payload (`bytes` long), fed to the session's decoder by `decode`: the
    /// packet it completes goes to its namespace's socket.
    private func received(bytes: Int, _ decode: (inout SocketIOPacketDecoder) throws(SocketIOParseError) -> SocketIOPacket?) throws {
        let decoded: SocketIOPacket?
        // Whether this is the session's first Socket.IO packet from the server.
        var first = false
        var root: Unmanaged<SocketIOClient>?
        do {
            decoded = try state.withLockedValue { state in
                let packet = try decode(&state.decoder)
                // Not `packet != nil`: on an Equatable optional that compares two optionals,
                // copying the packet.
                if case .some = packet { first = Self.firstPacket(&state) }
                root = state.root
                return packet
            }
        } catch {
            metrics.received(messages: 0, bytes: bytes)
            throw RealtimeError(.protocolViolation, "the server sent an invalid Socket.IO packet", underlying: error)
        }
        let complete = if case .some = decoded { true } else { false }
        metrics.received(messages: complete ? 1 : 0, bytes: bytes)
        // Consumed: the socket takes the packet's only reference, so that the arguments it hands
        // on are not copied.
        guard let packet = consume decoded else { return }
        // The session carried a packet: the backoff starts over at the next drop, however short
        // the session was (the JavaScript client resets it at every reconnect).
        if first { context.progressed() }
        if legacy, packet.type == .connect, packet.namespace == "/" {
            return serverJoinedDefaultNamespace(packet)
        }
        if packet.namespace == "/", let root {
            root._withUnsafeGuaranteedRef { $0.handle(consume packet, session: sessionBox) }
            return
        }
        guard let socket = packet.namespace == "/" ? rootSocket() : manager.existingSocket(packet.namespace) else {
            manager.logger.debug("Socket.IO packet for a namespace with no socket", metadata: ["realtime.namespace": "\(packet.namespace)"])
            return
        }
        socket.handle(consume packet, session: sessionBox)
    }

    /// The manager's `/` socket, kept for the session's next packets once it exists (a manager
    /// never lets a socket go): most packets are for it, and it is then found under the lock the
    /// decoding takes anyway.
    private func rootSocket() -> SocketIOClient? {
        guard let socket = manager.existingSocket("/") else { return nil }
        state.withLockedValue { $0.root = Unmanaged.passUnretained(socket) }
        return socket
    }

    /// Marks the session as having carried a packet; true the first time.
    private static func firstPacket(_ state: inout State) -> Bool {
        defer { state.progressed = true }
        return !state.progressed
    }

    /// socket.io 2.x: the server joined `/` (at the handshake, or answering our CONNECT). The `/`
    /// socket takes it if the app wants it now; else it is kept for when it does.
    private func serverJoinedDefaultNamespace(_ packet: SocketIOPacket) {
        let socket = manager.existingSocket("/")
        let deliver = state.withLockedValue { state -> Bool in
            let wanted = socket?.isActive ?? false
            state.defaultNamespace = .joined(claimed: wanted)
            return wanted
        }
        if deliver, let socket { socket.handle(packet, session: sessionBox) }
    }

    func engineIOUpgraded() async {
        for socket in manager.sockets where socket.isActive { socket.fire(.websocketUpgrade, []) }
    }

    func engineIOPinged() {
        for socket in manager.sockets where socket.isActive { socket.fire(.ping, []) }
    }

    var observesPings: Bool {
        manager.sockets.contains { $0.isActive && $0.observes(.ping) }
    }

    func engineIORefused(_ frames: [EngineIOFrame], error: RealtimeError) {
        for (namespace, refused) in Dictionary(grouping: frames.filter { $0.requeueNamespace != nil }, by: { $0.requeueNamespace! }) {
            manager.existingSocket(namespace)?.refusedByServer(refused, error: error)
        }
    }
}
