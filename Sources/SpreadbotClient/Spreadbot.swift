public import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
@_spi(RealtimeEngine) public import RealtimeCore
public import ServiceLifecycle
import Tracing

/// The seed's `Spreadbot`: one stream per client, WebSocket first, then Server-Sent Events, then
/// polling, with sends over the WebSocket (or `POST`), an offline queue, reconnects and token refresh.
///
/// ```swift
/// let spreadbot = Spreadbot(config: ["baseURL": "https://example.com", "accessToken": token])
/// spreadbot.onMessage { id, event, data in print(id, event, data) }
/// spreadbot.establishConnection(path: "prices")
/// try await spreadbot.send("hello")      // returns once it went out
/// spreadbot.closeConnection()
/// ```
///
/// Sources/SpreadbotClient/SpreadbotClient.docc/SpreadbotGuide.md has the protocol and the rules; the short form:
/// - every (re)connect tries ``SpreadbotConfiguration/transports`` in order and uses the first that
///   opens; ``transport`` says which one is in use;
/// - sends are delivered in order, each exactly once as far as the transport can tell (see
///   ``send(_:)-(String)``): queued while not connected (at most 100, the next is refused with
///   `queueFull`), written after reconnecting; one whose write failed is written again;
/// - after an unexpected drop, up to ``SpreadbotConfiguration/maxReconnectAttempts`` attempts with
///   backoff, waiting for reachability without counting;
/// - a 401 anywhere refreshes the token once (shared with ``rest``) and retries once.
public final class Spreadbot: Service, Sendable {
    /// The configuration the client was made with.
    public let configuration: SpreadbotConfiguration
    /// A REST client sharing this stream's tokens (one refresh serves both).
    public let rest: SpreadbotREST

    let http: SpreadbotHTTP
    let outbox: SpreadbotOutbox
    let metrics: ClientMetrics
    private let driver: ReconnectDriver
    private let stateBox = StateBroadcaster<SpreadbotState>(.disconnected)
    private let transportBox = StateBroadcaster<SpreadbotTransport?>(nil)
    private let handlers = NIOLockedValueBox(Handlers())
    private let run = NIOLockedValueBox(Run())
    /// Holds reading while an iterator of ``messages()`` is behind.
    private let readGate = ReadGate()

    private struct Handlers {
        var open: [@Sendable () -> Void] = []
        var error: [@Sendable (any Error) -> Void] = []
        var message: [@Sendable (String, String, SpreadbotData) -> Void] = []
        /// Weak: an iterator that is dropped unsubscribes (and stops holding reading back).
        var subscribers: [ObjectIdentifier: WeakSubscription] = [:]
    }

    private struct Run {
        var task: Task<Void, Never>?
        var generation = 0
        var lastEventId = ""
        /// The SSE stream's `retry:` (the least wait before reconnecting after it ends).
        var retryHint: Duration?
        /// The connection being run, told once when it carries its first message (stability).
        var context: ReconnectDriver.SessionContext?
        var progressed = false
        var lastError: RealtimeError?
    }

    /// Makes a client; nothing connects until ``establishConnection(path:)``.
    public init(configuration: SpreadbotConfiguration) {
        var configuration = configuration
        // Every connection of this client, reconnects included, runs on one event loop (`eventLoop`).
        configuration.runtime = configuration.runtime.pinnedToOneLoop()
        self.configuration = configuration
        let auth = SpreadbotAuth(configuration: configuration)
        self.http = SpreadbotHTTP(auth: auth)
        self.rest = SpreadbotREST(auth: auth)
        self.outbox = SpreadbotOutbox(offlineCapacity: configuration.offlineQueueCapacity, connectedCapacity: configuration.maxPendingSends)
        self.metrics = ClientMetrics.shared(protocol: "spreadbot", client: configuration.clientLabel, runtime: configuration.runtime)
        self.driver = Self.makeDriver(configuration, metrics: metrics)
    }

    /// The seed's form (see ``SpreadbotConfiguration/init(dictionary:runtime:)``).
    public convenience init(config: [String: Any]) {
        self.init(configuration: SpreadbotConfiguration(dictionary: config))
    }

    // MARK: Observing

    /// connecting, connected or disconnected.
    public var state: SpreadbotState { stateBox.current }
    /// The reconnect loop's state, current and as a sequence of changes: `connecting`, `connected`,
    /// `reconnecting(attempt:)` (failed attempts so far, counting a first connection that failed)
    /// and `disconnected` with the error that ended it, as every client of this package reports it.
    public var connectionState: StateBroadcaster<ConnectionState> { driver.state }
    /// The current state, then every change.
    public func stateUpdates() -> AsyncStream<SpreadbotState> { stateBox.updates() }
    /// The transport in use, nil while not connected.
    public var transport: SpreadbotTransport? { transportBox.current }
    /// The transport in use, then every change (nil while not connected).
    public func transportUpdates() -> AsyncStream<SpreadbotTransport?> { transportBox.updates() }
    /// The tokens in use.
    public var tokens: SpreadbotTokens { http.auth.tokens }
    /// Sends not yet delivered (queued offline or waiting for the connection).
    public var pendingSendCount: Int { outbox.count }
    /// The error that ended the last connection for good (nil after a ``closeConnection()``).
    public var lastError: RealtimeError? { run.withLockedValue { $0.lastError } }

    /// Called each time a transport opens (first connect and every reconnect).
    public func onOpen(_ handler: @escaping @Sendable () -> Void) {
        handlers.withLockedValue { $0.open.append(handler) }
    }

    /// Called with every failure: a transport that could not be opened, a dropped connection, a
    /// malformed message, a send that will not be delivered, the reconnect attempts running out.
    /// The errors are `RealtimeError`s.
    public func onError(_ handler: @escaping @Sendable (any Error) -> Void) {
        handlers.withLockedValue { $0.error.append(handler) }
    }

    /// Called with every message, in order, on the connection's task (keep it short; use
    /// ``messages()`` for work that may wait).
    public func onMessage(_ handler: @escaping @Sendable (_ id: String, _ event: String, _ data: SpreadbotData) -> Void) {
        handlers.withLockedValue { $0.message.append(handler) }
    }

    /// Called with the new tokens after every refresh, so the app can store them.
    public func onTokensRefreshed(_ handler: @escaping @Sendable (SpreadbotTokens) -> Void) {
        http.auth.onTokensRefreshed(handler)
    }

    /// The messages that arrive from the moment iteration starts. Each iterator buffers up to
    /// ``SpreadbotConfiguration/messageBufferCapacity`` messages; when it is that far behind, the
    /// stream stops reading (the server and the socket buffers hold the rest) until it catches up.
    public func messages() -> SpreadbotMessages { SpreadbotMessages(client: self) }

    func subscribe(_ subscription: MessageSubscription) {
        readGate.attach(subscription.buffer)
        handlers.withLockedValue { $0.subscribers[ObjectIdentifier(subscription)] = WeakSubscription(value: subscription) }
    }

    /// The connection is over for good: every iterator of ``messages()`` ends after what it holds.
    private func finishSubscribers() {
        let subscribers = handlers.withLockedValue { $0.subscribers.values.compactMap(\.value) }
        for subscriber in subscribers { subscriber.buffer.finish() }
    }

    func unsubscribe(_ subscription: MessageSubscription) {
        handlers.withLockedValue { _ = $0.subscribers.removeValue(forKey: ObjectIdentifier(subscription)) }
    }

    // MARK: Sending

    /// Queues `message` (a text frame, or a `text/plain` POST) and returns at once; a failure is
    /// reported to ``onError(_:)``. Use ``send(_:)-(String)`` to wait for delivery.
    public func sendMessageString(message: String) {
        submit(.text(message))
    }

    /// Queues `message` (a binary frame, or an `application/octet-stream` POST) and returns at once.
    public func sendMessageBinary(message: Data) {
        submit(.binary(message))
    }

    /// Queues a message and returns its delivery handle; throws `RealtimeError/Code/queueFull`
    /// when the offline queue (or the pending limit while connected) is full, and
    /// `RealtimeError/Code/notConnected` after ``closeConnection()``.
    @discardableResult
    public func enqueue(_ data: SpreadbotData) throws -> SpreadbotDelivery {
        try accept(data)
    }

    /// Queues a send, counting it in the metrics (and a refusal as dropped).
    private func accept(_ data: SpreadbotData) throws -> SpreadbotDelivery {
        do {
            let delivery = try outbox.enqueue(data)
            metrics.queueDepth(outbox.count)
            return delivery
        } catch let error as RealtimeError {
            metrics.dropped(reason: error.code == .queueFull ? "queue_full" : "closed")
            throw error
        }
    }

    /// Sends text and returns once it went out: written to the WebSocket, or answered 2xx by the
    /// POST. While not connected it waits in the queue. Throws what ``enqueue(_:)`` throws, and
    /// why it will not be delivered (closed, reconnects exhausted, refused by the server).
    public func send(_ text: String) async throws {
        try await accept(.text(text)).delivered()
    }

    /// Sends bytes; see ``send(_:)-(String)``.
    public func send(_ data: Data) async throws {
        try await accept(.binary(data)).delivered()
    }

    private func submit(_ data: SpreadbotData) {
        do {
            let delivery = try accept(data)
            delivery.done.whenComplete { result in
                if case .failure(let error) = result { self.report(error) }
            }
        } catch {
            report(error)
        }
    }

    // MARK: Connecting

    /// Connects to `path` and keeps connected until ``closeConnection()``: each (re)connect tries
    /// the transports in order. Returns at once; watch ``state``, ``onOpen(_:)`` and ``onError(_:)``.
    /// Calling it again replaces the previous connection.
    public func establishConnection(path: String) {
        let previous = run.withLockedValue { run -> Task<Void, Never>? in
            run.generation += 1
            run.lastError = nil
            defer { run.task = nil }
            return run.task
        }
        previous?.cancel()
        outbox.reopen()
        stateBox.update(.connecting)
        let generation = run.withLockedValue { $0.generation }
        // Unstructured: establishConnection(path:) (the seed's API) returns at once; closeConnection()
        // and run() (as a Service) end it. Its own task: a caller's graceful shutdown must not reach it.
        let task = ownTask {
            if let previous { await Self.waitFor(previous) }
            await self.runConnection(path: path, generation: generation)
        }
        run.withLockedValue { run in
            if run.generation == generation { run.task = task } else { task.cancel() }
        }
    }

    /// Stops everything: the connection closes, reconnects stop, and every send not yet delivered
    /// fails with `RealtimeError/Code/notConnected` (reported to its caller or to ``onError(_:)``).
    public func closeConnection() {
        let task = run.withLockedValue { run -> Task<Void, Never>? in
            run.generation += 1
            defer { run.task = nil }
            return run.task
        }
        task?.cancel()
        let failed = outbox.close(RealtimeError(.notConnected, "closeConnection() was called before the message was sent"))
        metrics.dropped(failed.count, reason: "closed")
        metrics.queueDepth(0)
        transportBox.update(nil)
        stateBox.update(.disconnected)
        finishSubscribers()
    }

    /// Runs the client as a `Service`: the stream runs as ``establishConnection(path:)`` started it;
    /// at the service group's graceful shutdown the sends still queued get until the stream has
    /// written them (at most ``SpreadbotConfiguration/requestTimeout``), then the connection closes
    /// and what is left fails with `notConnected` (reported to its caller or to ``onError(_:)``).
    public func run() async throws {
        try? await gracefulShutdown()
        await drainSends(within: configuration.requestTimeout)
        closeConnection()
        await waitUntilClosed()
    }

    /// Waits until every queued send went out, at most `limit` (nothing waits while not connected).
    private func drainSends(within limit: Duration) async {
        guard state == .connected, outbox.count > 0 else { return }
        let timers = configuration.runtime.timers
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.outbox.waitUntilEmpty() }
            group.addTask { try? await timers.wait(for: limit) }
            await group.next()
            group.cancelAll()
        }
    }

    /// Waits until the connection task started by ``establishConnection(path:)`` has ended.
    public func waitUntilClosed() async {
        await run.withLockedValue { $0.task }?.value
    }

    private var level: Logger.Level { configuration.log ? .info : .debug }
    private var logger: Logger { configuration.runtime.logger }

    private func isCurrent(_ generation: Int) -> Bool { run.withLockedValue { $0.generation == generation } }

    /// Waits for the previous run to end (apart: its frame is gone once it has).
    @inline(never)
    private static func waitFor(_ task: Task<Void, Never>) async { await task.value }

    /// The connection's life: its frame lives as long as the connection, so the driver is made and
    /// the end handled in synchronous functions. Not inlined into the task's closure, whose frame
    /// would then hold this one's for the connection's life.
    @inline(never)
    private func runConnection(path: String, generation: Int) async {
        let finalError = await driver.run({ context in
            try await self.session(path: path, context: context, generation: generation)
        }, onFailure: { error, willRetry in
            self.failed(error, willRetry: willRetry)
        })
        connectionEnded(generation: generation, finalError: finalError)
    }

    private func failed(_ error: RealtimeError, willRetry: Bool) {
        logger.log(
            level: level, willRetry ? "stream failed, reconnecting" : "stream failed, giving up",
            metadata: ["realtime.error_code": "\(error.code)"])
        report(error)
    }

    /// Whether the stream reconnects after `error`: everything but what another attempt cannot
    /// change (refused credentials, an invalid URL, a rejected certificate or pin, a cancellation).
    /// A message over maxMessageSize would come again after a reconnect (SSE replays it after
    /// Last-Event-ID, a poll asks `since` it): the stream stops with the error instead of looping.
    package static let shouldReconnect: @Sendable (RealtimeError) -> Bool = { error in
        switch error.code {
        case .authenticationFailed, .invalidURL, .tlsFailure, .certificatePinMismatch, .cancelled, .messageTooLarge: false
        default: true
        }
    }

    /// One driver for the client's life: the runs of successive ``establishConnection(path:)``
    /// calls follow each other (each waits for the previous one to end).
    private static func makeDriver(_ configuration: SpreadbotConfiguration, metrics: ClientMetrics) -> ReconnectDriver {
        let policy = ReconnectPolicy(
            backoff: .exponential(
                initial: configuration.reconnectDelay, maximum: configuration.maxReconnectDelay,
                maxAttempts: max(0, configuration.maxReconnectAttempts)),
            reachability: configuration.reachability,
            shouldRetry: shouldReconnect)
        let driver = ReconnectDriver(policy: policy, runtime: configuration.runtime)
        driver.report(to: metrics)
        return driver
    }

    private func connectionEnded(generation: Int, finalError: RealtimeError?) {
        guard isCurrent(generation) else { return }
        transportBox.update(nil)
        let error = finalError ?? RealtimeError(.notConnected, "the connection ended")
        run.withLockedValue { $0.lastError = finalError }
        let failed = outbox.close(RealtimeError(.notConnected, "the message was not sent: the connection ended for good", underlying: error))
        metrics.dropped(failed.count, reason: "closed")
        metrics.queueDepth(0)
        if let finalError, finalError.code == .reconnectGaveUp { report(finalError) }
        if !failed.isEmpty { logger.log(level: level, "queued messages were not sent", metadata: ["realtime.dropped": "\(failed.count)"]) }
        stateBox.update(.disconnected)
        finishSubscribers()
    }

    /// One connection: the transports in order until one opens, then its life. Throws the last
    /// transport's error when none opens.
    private func session(path: String, context: ReconnectDriver.SessionContext, generation: Int) async throws -> SessionEnd {
        let connect = ConnectSpan(connectSpan(path: path))
        do {
            let end: SessionEnd
            if connect.span.bindsContext {
                end = try await connect.span.withContextBound {
                    try await self.session(path: path, context: context, generation: generation, span: connect.span, opened: { connect.end() })
                }
            } else {
                // Without a tracer nothing is bound: no closure frame for the connection's life.
                end = try await session(path: path, context: context, generation: generation, span: connect.span, opened: { connect.end() })
            }
            connect.end()
            return end
        } catch {
            connect.end(error)
            throw error
        }
    }

    /// The connect span of one connection: each transport tried is an event; it ends once, when one
    /// opens or all failed. One reference in the frame that lives as long as the connection.
    private final class ConnectSpan: Sendable {
        let span: any Span
        private let open = NIOLockedValueBox(true)

        init(_ span: any Span) { self.span = span }

        func end(_ error: (any Error)? = nil) {
            guard open.withLockedValue({ open in defer { open = false }; return open }) else { return }
            if let error { span.fail(error) }
            span.end()
        }
    }

    private func connectSpan(path: String) -> any Span {
        let span = configuration.runtime.startClientSpan("realtime.connect", protocol: "spreadbot", client: configuration.clientLabel)
        span.attributes["realtime.path"] = path
        return span
    }

    @inline(never)
    private func session(
        path: String, context: ReconnectDriver.SessionContext, generation: Int, span: any Span, opened onOpened: @escaping @Sendable () -> Void
    ) async throws -> SessionEnd {
        // Which transport to open and what its end means is SpreadbotFallback's; this loop does the I/O.
        // Its frame lives as long as the connection: it keeps the fallback, the transport and a
        // flag across the one wait; the actions and errors are handled in synchronous functions.
        var fallback = SpreadbotFallback(transports: configuration.transports)
        var transport = try firstTransport(&fallback, span: span)
        while true {
            let opened = NIOLockedValueBox(false)
            let open = opener(transport, context: context, span: span, opened: opened, onOpened)
            let outcome = await runTransport(transport, path: path, open: open)
            if let end = try transportEnded(transport, outcome, opened: opened, &fallback, span: span, generation: generation) {
                return end
            }
            transport = fallback.current ?? transport
        }
    }

    /// How one transport's run ended.
    private enum TransportOutcome {
        case ended(RealtimeError?)
        case cancelled
    }

    @inline(never)
    private func runTransport(_ transport: SpreadbotTransport, path: String, open: @escaping @Sendable () -> Void) async -> TransportOutcome {
        do {
            try Task.checkCancellation()
            try await withAuthRetry {
                switch transport {
                case .webSocket: try await self.runWebSocket(path: path, open: open)
                case .serverSentEvents: try await self.runEventStream(path: path, open: open)
                case .polling: try await self.runPolling(path: path, open: open)
                }
            }
            return .ended(nil)
        } catch {
            return transportFailed(error)
        }
    }

    @inline(never)
    private func transportFailed(_ error: any Error) -> TransportOutcome {
        if error is CancellationError || Task.isCancelled { return .cancelled }
        return .ended(RealtimeError.wrap(error))
    }

    /// The first transport to try (the fallback's first action).
    @inline(never)
    private func firstTransport(_ fallback: inout SpreadbotFallback, span: any Span) throws -> SpreadbotTransport {
        switch fallback.start() {
        case .open(let first): return first
        case .fallBack(let failed, let error, let next):
            fellBack(from: failed, error, span: span)
            return next
        case .failed(let error), .dropped(let error, _): throw error
        }
    }

    /// A transport ended: the session's end, or nil when the next transport (`fallback.current`)
    /// is to be tried.
    @inline(never)
    private func transportEnded(
        _ transport: SpreadbotTransport, _ outcome: TransportOutcome, opened: NIOLockedValueBox<Bool>, _ fallback: inout SpreadbotFallback,
        span: any Span, generation: Int
    ) throws -> SessionEnd? {
        if opened.withLockedValue({ $0 }) {
            fallback.didOpen()
            outbox.setConnected(false)
            transportBox.update(nil)
            if isCurrent(generation) { stateBox.update(.connecting) }
        }
        guard case .ended(let failure) = outcome else { throw CancellationError() }
        switch fallback.ended(failure, retryHint: retryHint(transport)) {
        case .failed(let error): throw error
        case .dropped(let error, let minimumDelay): return .dropped(error, minimumDelay: minimumDelay)
        case .fallBack(let failed, let error, _):
            fellBack(from: failed, error, span: span)
            return nil
        case .open:
            return nil
        }
    }

    private func fellBack(from failed: SpreadbotTransport, _ error: RealtimeError, span: any Span) {
        span.addEvent(SpanEvent(
            name: "fallback", attributes: ["realtime.transport": .string(failed.rawValue), "realtime.error_code": .string("\(error.code)")]))
        logger.log(
            level: level, "transport could not be opened, trying the next",
            metadata: ["realtime.transport": "\(failed)", "realtime.error_code": "\(error.code)"])
        report(error)
    }

    /// What a transport calls when it is open. Synchronous, so an event stream can open on its
    /// event loop before its first event.
    private func opener(
        _ transport: SpreadbotTransport, context: ReconnectDriver.SessionContext, span: any Span, opened: NIOLockedValueBox<Bool>,
        _ onOpened: @escaping @Sendable () -> Void
    ) -> @Sendable () -> Void {
        span.addEvent(SpanEvent(name: "transport", attributes: ["realtime.transport": .string(transport.rawValue)]))
        return {
            opened.withLockedValue { $0 = true }
            onOpened()
            self.run.withLockedValue {
                $0.context = context
                $0.progressed = false
            }
            context.connected()
            self.outbox.setConnected(true)
            self.transportBox.update(transport)
            self.stateBox.update(.connected)
            self.logger.log(level: self.level, "stream open", metadata: ["realtime.transport": "\(transport)"])
            for handler in self.handlers.withLockedValue({ $0.open }) { handler() }
        }
    }

    /// The server's `retry:` after an SSE stream; nothing for the other transports.
    private func retryHint(_ transport: SpreadbotTransport) -> Duration? {
        transport == .serverSentEvents ? run.withLockedValue { $0.retryHint } : nil
    }

    /// Runs `body`; if it fails with a 401 before opening, refreshes the token once and runs it again.
    @inline(never)
    private func withAuthRetry(_ body: @Sendable () async throws -> Void) async throws {
        let token = http.auth.tokens.accessToken
        do {
            try await body()
        } catch {
            // Apart: this frame lives as long as the connection, the retry's locals need not.
            try await retryAfterRefresh(error, replacing: token, body)
        }
    }

    @inline(never)
    private func retryAfterRefresh(_ error: any Error, replacing token: String?, _ body: @Sendable () async throws -> Void) async throws {
        guard let error = error as? RealtimeError, error.code == .badStatus, error.status == .unauthorized else { throw error }
        _ = try await http.auth.refresh(replacing: token)
        do {
            try await body()
        } catch let again as RealtimeError where again.code == .badStatus && again.status == .unauthorized {
            throw RealtimeError(.authenticationFailed, "the stream was refused with 401 again after the token refresh", status: .unauthorized)
        }
    }

    // MARK: Transports

    @inline(never)
    private func runWebSocket(path: String, open: @escaping @Sendable () -> Void) async throws {
        let acknowledged = configuration.acknowledgedSends
        // The configuration is made inside the call: this frame lives as long as the connection.
        try await WebSocketTransport.connect(to: webSocketURL(path: path), runtime: configuration.runtime, configuration: webSocketConfiguration) {
            connection in
            open()
            if !acknowledged, let writer = self.startLoopWriter(connection) {
                // Sends are written from the event loop as they are queued: no task waits for them.
                defer { writer.stop() }
                try await self.readWebSocket(connection, path: path)
                return
            }
            try await self.readAndWriteWithTasks(connection, path: path, acknowledged: acknowledged)
        }
    }

    private func webSocketURL(path: String) -> String {
        var url = configuration.webSocketURL(for: path)
        // A reconnect asks for what it missed while down, as polling does (`since`).
        let lastId = run.withLockedValue { $0.lastEventId }
        if !lastId.isEmpty { url += (url.contains("?") ? "&" : "?") + "since=" + SpreadbotAuth.formEncode(lastId) }
        logger.log(level: level, "opening the WebSocket", metadata: ["realtime.url": "\(Redaction.url(url))"])
        return url
    }

    private func webSocketConfiguration() -> WebSocketConfiguration {
        var headers = HTTPHeaders()
        _ = http.auth.authorize(&headers)
        return WebSocketConfiguration(
            headers: headers, maxMessageSize: configuration.maxMessageSize, autoPing: configuration.webSocketPingInterval,
            connectTimeout: configuration.requestTimeout, tls: configuration.tls)
    }

    private func startLoopWriter(_ connection: WebSocketConnection) -> OutboxWebSocketWriter<SpreadbotOutbox.Item>? {
        guard let loopWriter = connection.loopWriter else { return nil }
        let writer = outbox.webSocketWriter(loopWriter) { written in
            for item in written { self.metrics.sent(messages: 1, bytes: item.data.byteCount) }
            self.metrics.queueDepth(self.outbox.count)
        }
        writer.start()
        return writer
    }

    /// Acknowledged sends (POSTs) or a compressed connection: a writer task beside the reader.
    @inline(never)
    private func readAndWriteWithTasks(_ connection: WebSocketConnection, path: String, acknowledged: Bool) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                try await self.writeLoop(path: path) { item in
                    if acknowledged { return try await self.post(item, path: path) }
                    try await connection.send(item.data.webSocketMessage)
                    return nil
                }
            }
            group.addTask { try await self.readWebSocket(connection, path: path) }
            // Whichever ends first (the server closed, a write failed) ends the connection.
            defer { group.cancelAll() }
            try await group.next()
        }
    }

    /// Delivers the WebSocket's messages until the server closes it.
    @inline(never)
    private func readWebSocket(_ connection: WebSocketConnection, path: String) async throws {
        var inbound = connection.inbound.makeAsyncIterator()
        while let messages = try await inbound.nextRead() {
            // By index: each message is lent to `receive`, not copied out of the batch.
            for index in messages.indices where !receive(messages[index], path: path) { await readGate.waitUntilOpen() }
        }
    }

    /// Delivers one WebSocket message; false when the app's buffers are full (wait for the gate).
    @inline(never)
    private func receive(_ message: WebSocketInbound, path: String) -> Bool {
        switch message {
        case .text(let bytes): return receiveEnvelope(String(buffer: bytes), path: path, transport: .webSocket)
        case .binary(let buffer):
            let id = run.withLockedValue { $0.lastEventId }
            return deliver(SpreadbotMessage(id: id, event: path, data: .binary(Data(buffer.readableBytesView)), transport: .webSocket))
        }
    }

    @inline(never)
    private func runEventStream(path: String, open: @escaping @Sendable () -> Void) async throws {
        var headers = HTTPHeaders()
        headers.add(name: "Accept", value: "text/event-stream")
        headers.add(name: "Cache-Control", value: "no-cache")
        _ = http.auth.authorize(&headers)
        let lastId = run.withLockedValue { $0.lastEventId }
        if !lastId.isEmpty { headers.add(name: "Last-Event-ID", value: lastId) }
        let url = configuration.url(for: path)
        let request = HTTPRequestSpec(url: url, headers: headers, tls: configuration.tls, headTimeout: configuration.requestTimeout)
        let maximum = configuration.maxMessageSize
        logger.log(level: level, "opening the event stream", metadata: ["realtime.url": "\(Redaction.url(url))"])
        let stream = try EventStream.open(
            request, runtime: configuration.runtime, options: EventStreamOptions(maxEventSize: maximum, lastEventId: lastId, idleTimeout: configuration.eventStreamIdleTimeout),
            onHead: { head in
                guard head.status == .ok else {
                    let status = head.status
                    return .refuse { _ in RealtimeError.badStatus(status, url: url) }
                }
                guard head.mediaType == "text/event-stream" else {
                    let error = RealtimeError(
                        .badContentType, "\(Redaction.url(url)) answered with content type \(head.mediaType ?? "none"), not text/event-stream",
                        status: head.status)
                    return .refuse { _ in error }
                }
                // Open on the event loop, before this response's first event is delivered.
                open()
                return .accept
            },
            onOutputs: { outputs in
                var goOn = true
                for output in outputs {
                    switch output {
                    case .event(let event):
                        if !event.lastEventId.isEmpty { self.run.withLockedValue { $0.lastEventId = event.lastEventId } }
                        let message = SpreadbotMessage(id: event.lastEventId, event: event.type, data: .text(event.data), transport: .serverSentEvents)
                        if !self.deliver(message) { goOn = false }
                    case .retry(let milliseconds): self.run.withLockedValue { $0.retryHint = .milliseconds(milliseconds) }
                    case .comment: break
                    }
                }
                return goOn
            })
        readGate.setOnOpen { stream.resume() }
        defer { readGate.setOnOpen(nil) }
        do {
            try await withTaskCancellationHandler {
                try await stream.accepted()
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask { try await self.writeLoop(path: path) { try await self.post($0, path: path) } }
                    group.addTask { _ = try await stream.finished() }
                    defer { group.cancelAll() }
                    try await group.next()
                }
            } onCancel: {
                stream.cancel()
            }
        } catch let error as RealtimeError where error.code == .messageTooLarge {
            throw RealtimeError(.messageTooLarge, "a Server-Sent Event exceeds maxMessageSize (\(maximum) bytes)", underlying: error)
        }
    }

    @inline(never)
    private func runPolling(path: String, open: @escaping @Sendable () -> Void) async throws {
        // The first poll opens the transport; after it, polls (the core's poll loop, one GET in
        // flight, pollInterval apart) and POST sends run side by side and whichever fails first
        // ends the session.
        let first = try pollEnvelopes(try await execute(pollRequest(path: path)), path: path)
        open()
        for envelope in first { _ = receiveEnvelope(envelope, path: path, transport: .polling) }
        let poller = LongPoller(
            runtime: configuration.runtime,
            makeRequest: {
                // The next poll waits for the iterators that are behind, then for the interval.
                await self.readGate.waitUntilOpen()
                try await self.configuration.runtime.sleep(for: self.configuration.pollInterval)
                return self.pollRequest(path: path)
            },
            execute: { try await self.execute($0) },
            handleResponse: { head, body in
                for envelope in try self.pollEnvelopes((head, body), path: path) {
                    _ = self.receiveEnvelope(envelope, path: path, transport: .polling)
                }
                return .next
            })
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await self.writeLoop(path: path) { try await self.post($0, path: path) } }
            group.addTask { try await poller.run() }
            defer { group.cancelAll() }
            try await group.next()
        }
    }

    /// `GET <path>?since=<last id>`.
    private func pollRequest(path: String) -> HTTPRequestSpec {
        let lastId = run.withLockedValue { $0.lastEventId }
        var url = configuration.url(for: path)
        if !lastId.isEmpty { url += "?since=" + SpreadbotAuth.formEncode(lastId) }
        var headers = HTTPHeaders()
        headers.add(name: "Accept", value: "application/json")
        return HTTPRequestSpec(url: url, headers: headers)
    }

    /// Sends a poll with the tokens (and the refresh on a 401).
    private func execute(_ poll: HTTPRequestSpec) async throws -> LongPoller.Response {
        try await http.send(method: .GET, url: poll.url, headers: poll.headers)
    }

    /// The envelopes a poll returned.
    private func pollEnvelopes(_ response: LongPoller.Response, path: String) throws -> [JSONValue] {
        let (head, body) = response
        guard head.status == .ok else {
            throw RealtimeError.badStatus(head.status, url: head.url, body: String(decoding: body.readableBytesView.prefix(512), as: UTF8.self))
        }
        do {
            guard let array = try JSONValue(parsing: String(buffer: body)).arrayValue else { throw JSONParseError(reason: "not an array", offset: 0) }
            return array
        } catch {
            throw RealtimeError(.protocolViolation, "a poll of \(Redaction.url(head.url)) answered something other than a JSON array of envelopes", underlying: error)
        }
    }

    /// Writes the outbox in order while the session lives. `write` sends one message (throws when
    /// the connection is gone: the message stays first in line for the next connection); a POST the
    /// server refuses with a 4xx fails only that message, and so does one that every attempt of
    /// ``SpreadbotOutbox/refusalsBeforeDropping`` connections in a row answered with a 5xx or a reset.
    private func writeLoop(path: String, _ write: @escaping @Sendable (SpreadbotOutbox.Item) async throws -> RealtimeError?) async throws {
        while let next = await outbox.next() {
            var item = next
            var refused: RealtimeError?
            do {
                try Task.checkCancellation()
                refused = try await write(item)
            } catch let refusal as PostRefusal {
                let error = refusal.error
                item.refusals += 1
                guard item.refusals >= SpreadbotOutbox.refusalsBeforeDropping else {
                    outbox.writeFailed(item)
                    throw error
                }
                refused = RealtimeError(
                    error.code,
                    "message \(item.sequence) was refused on \(item.refusals) connections in a row (\(error.detail)): dropped, so the messages after it can go",
                    status: error.status, serverMessage: error.serverMessage, stage: error.stage, underlying: error.underlying)
            } catch {
                outbox.writeFailed(item)
                throw error
            }
            if let refused {
                outbox.failed(item, refused)
                metrics.dropped(reason: "refused")
                report(refused)
            } else {
                outbox.delivered(item)
                metrics.sent(messages: 1, bytes: item.data.byteCount)
            }
            metrics.queueDepth(outbox.count)
        }
        throw CancellationError()
    }

    /// POSTs one message with the retry rules. Returns the error for a refused message (4xx), nil
    /// when delivered; throws when the server cannot be reached (the session ends, the message stays).
    private func post(_ item: SpreadbotOutbox.Item, path: String) async throws -> RealtimeError? {
        var headers = HTTPHeaders()
        switch item.data {
        case .text: headers.add(name: "Content-Type", value: "text/plain; charset=utf-8")
        case .binary: headers.add(name: "Content-Type", value: "application/octet-stream")
        }
        headers.add(name: "Spreadbot-Message-Id", value: "\(clientId)-\(item.sequence)")
        do {
            _ = try await http.sendRetrying(
                method: .POST, url: configuration.url(for: path), headers: headers, body: ByteBuffer(bytes: item.data.data),
                offline: OfflineGate(capacity: 1))
            return nil
        } catch let error as RealtimeError where error.code == .badStatus && (error.status?.code ?? 0) < 500 {
            return error
        } catch let error as RealtimeError where PostRefusal.isRefusal(error) {
            throw PostRefusal(error: error)
        }
    }

    /// A send's POST failed on every attempt in a way the server (or a proxy before it) gave this
    /// message: a 5xx, or the connection reset or closed under it (as against a server that cannot
    /// be reached at all, which says nothing of the message).
    struct PostRefusal: Error {
        let error: RealtimeError

        static func isRefusal(_ error: RealtimeError) -> Bool {
            switch error.code {
            case .badStatus: (error.status?.code ?? 0) >= 500
            case .connectionClosed: true
            default: false
            }
        }
    }

    /// Identifies this client's messages for the server's duplicate check.
    private let clientId = String(UInt64.random(in: 1...UInt64.max), radix: 36)

    // MARK: Receiving

    /// Hands one envelope to the callbacks and iterators; false when an iterator is behind (reading
    /// must wait on the read gate).
    private func receiveEnvelope(_ text: String, path: String, transport: SpreadbotTransport) -> Bool {
        do {
            return receiveEnvelope(try JSONValue(parsing: text), path: path, transport: transport)
        } catch {
            report(RealtimeError(.protocolViolation, "a \(transport) message is not JSON: skipped", underlying: error))
            return true
        }
    }

    private func receiveEnvelope(_ envelope: JSONValue, path: String, transport: SpreadbotTransport) -> Bool {
        guard envelope.objectValue != nil, envelope["id"] != nil || envelope["event"] != nil || envelope["data"] != nil else {
            report(RealtimeError(.protocolViolation, "a \(transport) message is not a JSON object with id, event and data: skipped"))
            return true
        }
        let id: String
        switch envelope["id"] {
        case .string(let text)?: id = text
        case .integer(let number)?: id = String(number)
        case .unsignedInteger(let number)?: id = String(number)
        case .number(let number)?: id = Int64(exactly: number).map { String($0) } ?? String(number)
        default: id = ""
        }
        let event = envelope["event"]?.stringValue ?? path
        let data: String
        switch envelope["data"] {
        case .string(let text)?: data = text
        case nil, .null?: data = ""
        case let other?: data = other.jsonString
        }
        if !id.isEmpty { run.withLockedValue { $0.lastEventId = id } }
        return deliver(SpreadbotMessage(id: id, event: event, data: .text(data), transport: transport))
    }

    /// Callbacks first, then every iterator's buffer (on the connection's reading side, an event loop
    /// for the WebSocket and the event stream). False when an iterator is full: reading pauses on the
    /// read gate until it caught up.
    private func deliver(_ message: SpreadbotMessage) -> Bool {
        metrics.received(messages: 1, bytes: message.data.byteCount)
        let first = run.withLockedValue { run -> ReconnectDriver.SessionContext? in
            guard !run.progressed else { return nil }
            run.progressed = true
            return run.context
        }
        first?.progressed()
        let (callbacks, subscribers) = handlers.withLockedValue { ($0.message, $0.subscribers.values.compactMap(\.value)) }
        for callback in callbacks { callback(message.id, message.event, message.data) }
        var goOn = true
        for subscriber in subscribers where !subscriber.buffer.append(message) {
            readGate.pause(for: subscriber.buffer)
            goOn = false
        }
        return goOn
    }

    private func report(_ error: any Error) {
        for handler in handlers.withLockedValue({ $0.error }) { handler(error) }
    }
}

/// The stream's messages as an `AsyncSequence` (see ``Spreadbot/messages()``). Ends when the
/// connection is closed for good.
public struct SpreadbotMessages: AsyncSequence, Sendable {
    /// The type of the sequence's elements.
    public typealias Element = SpreadbotMessage
    let client: Spreadbot

    /// The sequence's iterator.
    public struct AsyncIterator: AsyncIteratorProtocol, Sendable {
        let subscription: MessageSubscription
        var base: InboundBuffer<SpreadbotMessage>.Iterator

        /// The next element, or `nil` once the sequence has ended.
        public mutating func next() async throws -> SpreadbotMessage? {
            try await base.next(isolation: nil)
        }

        /// The next message, in the caller's isolation (no hop off the caller's actor per message).
        public mutating func next(isolation actor: isolated (any Actor)?) async throws -> SpreadbotMessage? {
            try await base.next(isolation: actor)
        }

        /// How many times this iterator was handed messages (once per batch a read brought), for
        /// tests of the hand-over.
        package var consumerWakeUps: Int { subscription.buffer.consumerWakeUps }
        /// Whether this iterator's loop waits for messages now (for the same tests).
        package var isWaiting: Bool { subscription.buffer.hasWaitingConsumer }
    }

    /// Makes an iterator over the sequence.
    public func makeAsyncIterator() -> AsyncIterator {
        let subscription = MessageSubscription(client: client, capacity: client.configuration.messageBufferCapacity)
        client.subscribe(subscription)
        return AsyncIterator(subscription: subscription, base: InboundBuffer.Iterator(subscription.buffer))
    }
}

/// One iterator's bounded buffer; it leaves the client when the iterator is gone.
struct WeakSubscription: Sendable {
    weak var value: MessageSubscription?
}

/// One `messages()` iterator's bounded buffer; it leaves the client when the iterator is gone.
public final class MessageSubscription: Sendable {
    let buffer: InboundBuffer<SpreadbotMessage>
    private weak let client: Spreadbot?

    init(client: Spreadbot, capacity: Int) {
        buffer = InboundBuffer<SpreadbotMessage>(limit: capacity)
        self.client = client
    }

    deinit {
        buffer.finish()
        client?.unsubscribe(self)
    }
}
