public import Foundation
import DequeModule
import Logging
import OrderedCollections
import Tracing
import NIOConcurrencyHelpers
@_spi(RealtimeEngine) public import RealtimeCore

/// One namespace on a ``SocketManager``'s connection: connect with auth, emit, acks both ways,
/// handlers, an offline queue, and connection state recovery.
///
/// Handlers run in order on the connection's reading task; keep them short (start a `Task` for
/// slow work), since the next packet is read after they return.
public final class SocketIOClient: Sendable {
    typealias Handler = @Sendable (SocketIOEvent) -> Void

    struct HandlerEntry: Sendable {
        let id: UUID
        let once: Bool
        let call: Handler
    }

    private struct AckEntry: Sendable {
        let deliver: @Sendable (Result<[JSONValue], RealtimeError>) -> Void
        let event: String
        let timeout: Duration?
    }

    private struct WeakClient: Sendable { weak var client: SocketIOClient? }

    /// An emit on the retry queue (``SocketIOConfiguration/retries``): sent when it is first in
    /// line and the namespace is connected, with an ack asked for, and sent again until acked or
    /// out of tries.
    private struct RetryEntry: Sendable {
        let sequence: Int
        let event: String
        let arguments: [JSONValue]
        /// Each try's ack timeout.
        let timeout: Duration
        /// The caller's ack (emitWithAck); nil for `emit`, whose failure is reported as a
        /// `dropped` event.
        let deliver: (@Sendable (Result<[JSONValue], RealtimeError>) -> Void)?
        var tries = 0
        /// The ack id of the try in flight.
        var inFlight: Int?
    }

    private typealias OutgoingHandler = (id: UUID, call: @Sendable (SocketAnyEvent) -> Void)

    private struct State {
        var lifecycle = SocketIONamespaceMachine<CheckedContinuation<Void, any Error>>()
        var auth: SocketIOAuth = .none
        var nextAckID = 0
        var acks: [Int: AckEntry] = [:]
        var handlers: [String: [HandlerEntry]] = [:] { didSet { lastFound = nil } }
        /// The last event name whose handlers were looked up, with them (and whether one is
        /// `once`): events of one name in a row find their handlers without hashing the name.
        /// Forgotten at every change of `handlers`.
        var lastFound: (name: String, entries: [HandlerEntry], once: Bool)?
        var anyHandlers: [(id: UUID, call: @Sendable (SocketAnyEvent) -> Void)] = []
        /// ``observeEvents(_:)``'s observers (the SocketIO module's bridge); not removed by
        /// ``removeAllHandlers()``.
        var observers: [(id: UUID, call: @Sendable (SocketIOEvent, Bool) -> Void)] = []
        /// ``onAnyOutgoing(_:)``'s handlers.
        var outgoingHandlers: [OutgoingHandler] = []
        /// Emits waiting for their turn and their ack, with ``SocketIOConfiguration/retries``.
        var retryQueue: Deque<RetryEntry> = []
        var nextRetrySequence = 0
        var streams: [UUID: EventStreamEntry] = [:]
        var delivery = SocketIODeliveryCounts()
        /// The offline queue: emits made while the namespace is not connected (or while the
        /// session's outbox is full), moved into the session's outbox in order once it can take
        /// them. Made when something must wait, and let go once it is empty: a connected namespace
        /// whose emits go straight out keeps none. Used under this state's lock, so an emit's choice
        /// between the two keeps the order of emits.
        var offline: Outbox<EngineIOFrame>?
        /// The number of the last emit given an id (``SocketIOConfiguration/emitIDs``).
        var lastEmitNumber: UInt64 = 0
    }

    /// The namespace (`/` by default).
    public let namespace: String
    package weak let manager: SocketManager?
    private let state: NIOLockedValueBox<State>
    /// The offline queue's capacity and what it does when full.
    private let offlineCapacity: Int
    private let offlineOverflow: OverflowPolicy
    private let statusBroadcaster = StateBroadcaster<SocketIOStatus>(.notConnected)
    private let runtime: RealtimeRuntime
    /// Every pending ack's timeout, on one timer task.
    private let ackTimeouts: TimeoutScheduler
    /// ``SocketIOConfiguration/emitIDs``'s key, and this socket's random part of each id (nil: no ids).
    private let emitIDs: (key: String, socket: UInt64)?

    init(manager: SocketManager, namespace: String) {
        self.manager = manager
        self.namespace = namespace
        self.runtime = manager.configuration.runtime
        self.state = NIOLockedValueBox(State())
        self.offlineCapacity = manager.configuration.offlineQueueCapacity
        self.offlineOverflow = manager.configuration.offlineQueueOverflow
        self.emitIDs = manager.configuration.emitIDs.map { ($0.key, UInt64.random(in: 1...UInt64.max)) }
        let owner = NIOLockedValueBox(WeakClient())
        self.ackTimeouts = TimeoutScheduler(timers: runtime.timers) { id in owner.withLockedValue { $0.client }?.expireAck(id) }
        owner.withLockedValue { $0.client = self }
    }

    // MARK: State

    /// Where the namespace is: not connected, connecting, connected, disconnected.
    public var status: SocketIOStatus { state.withLockedValue { $0.lifecycle.status } }
    /// Status changes as a sequence (the current value first).
    public var statusUpdates: AsyncStream<SocketIOStatus> { statusBroadcaster.updates() }
    /// The session id the server gave this namespace.
    public var sid: String? { state.withLockedValue { $0.lifecycle.sid } }
    /// Whether the last connect recovered the previous session (connection state recovery).
    public var recovered: Bool { state.withLockedValue { $0.lifecycle.recovered } }
    /// The recovery session id and the offset of the last event received, sent on reconnect.
    public var recoveryState: (pid: String?, offset: String?) { state.withLockedValue { ($0.lifecycle.pid, $0.lifecycle.lastOffset) } }
    /// Emits waiting in the offline queue.
    public var queuedEmitCount: Int { state.withLockedValue { $0.offline?.queuedCount ?? 0 } }
    /// Emits with `retries` waiting for their ack, the one in flight included (for tests that
    /// order emits by when each joined the queue).
    package var retryQueueCount: Int { state.withLockedValue { $0.retryQueue.count } }
    /// Whether the namespace holds an offline queue now (made when an emit must wait, let go once
    /// flushed).
    var holdsOfflineQueue: Bool { state.withLockedValue { $0.offline != nil } }

    /// The offline queue, made now if there is none.
    private func offlineQueue(_ state: inout State) -> Outbox<EngineIOFrame> {
        if let offline = state.offline { return offline }
        let offline = Outbox<EngineIOFrame>(capacity: offlineCapacity, overflow: offlineOverflow)
        state.offline = offline
        return offline
    }
    /// Emits dropped and reported (an ack failure, or an `error` client event): the offline queue
    /// overflowed while unsent frames were handed back after a drop, or a queued emit turned out
    /// larger than the server's `maxPayload` once the handshake told it. The sum of
    /// ``deliveryCounts``' `notSent` and `possiblySent`.
    public var droppedEmitCount: Int { state.withLockedValue { $0.delivery.notSent + $0.delivery.possiblySent } }
    /// What became of the emits a connection drop, a full queue or a server limit touched, since the
    /// socket was made: dropped and never sent, dropped after being written (possibly delivered),
    /// and sent again. Each is also named, emit by emit, by the ``SocketClientEvent/dropped`` and
    /// ``SocketClientEvent/resent`` client events.
    public var deliveryCounts: SocketIODeliveryCounts { state.withLockedValue { $0.delivery } }
    var isActive: Bool { state.withLockedValue { $0.lifecycle.wantsConnection } }

    /// Publishes a status change the lifecycle returned (nil: unchanged).
    private func publish(_ change: SocketIOStatus?) {
        guard let status = change else { return }
        statusBroadcaster.update(status)
        fire(.statusChange, [.number(Double(status.rawValue))])
    }

    func setAuth(_ auth: SocketIOAuth) { state.withLockedValue { $0.auth = auth } }

    // MARK: Connect and disconnect

    /// Starts connecting this namespace (and the manager's connection if needed) with `auth` as the
    /// CONNECT payload (kept for reconnects); returns at once. Emits made meanwhile are queued.
    /// (SocketIO's synchronous `connect()`; the API of this module is ``connect(auth:timeout:)``.)
    package func requestConnection(auth: SocketIOAuth?) {
        let change = state.withLockedValue { state -> SocketIOStatus? in
            if let auth { state.auth = auth }
            return state.lifecycle.requestConnection()
        }
        publish(change)
        manager?.open(for: self)
    }

    /// Connects and waits until the server accepted the namespace (at once when it already has).
    ///
    /// - Parameters:
    ///   - auth: the CONNECT payload, kept for reconnects; nil keeps the one set before.
    ///   - timeout: how long to wait (20 s by default, as the JavaScript client's `timeout`).
    /// - Throws: `RealtimeCore/RealtimeError` `refused` (CONNECT_ERROR, with the server's message in
    ///   `serverMessage`), `timeout`, `reconnectGaveUp`, or `notConnected` after ``disconnect()``.
    public func connect(auth: SocketIOAuth? = nil, timeout: Duration = .seconds(20)) async throws {
        let id = UUID()
        let namespace = namespace
        let timer = runtime.timers.schedule(after: timeout) { [weak self] in
            self?.resumeConnectWaiter(id, with: .failure(RealtimeError.timeout("namespace \(namespace) not connected within \(timeout)")))
        }
        defer { runtime.timers.cancel(timer) }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                switch state.withLockedValue({ $0.lifecycle.waitForConnection(id, continuation) }) {
                case .resume(let connected): connected.resume()
                case .waiting: requestConnection(auth: auth)
                }
            }
        } onCancel: {
            self.resumeConnectWaiter(id, with: .failure(CancellationError()))
        }
    }

    private func resumeConnectWaiter(_ id: UUID, with result: Result<Void, any Error>) {
        state.withLockedValue { $0.lifecycle.stopWaiting(id) }?.resume(with: result)
    }

    /// Leaves the namespace (sends DISCONNECT) and stops reconnecting it. Pending acks fail with
    /// `notConnected`; queued emits stay queued for the next `connect()`.
    public func disconnect() {
        let (ending, acks) = state.withLockedValue { state -> (SocketIONamespaceMachine<CheckedContinuation<Void, any Error>>.Ending, [Int: AckEntry]) in
            let ending = state.lifecycle.disconnect()
            // A socket that was never asked to connect keeps its acks: their emits stay queued
            // for the next connect, and each still has its timeout.
            guard ending.wasActive else { return (ending, [:]) }
            defer { state.acks = [:] }
            return (ending, state.acks)
        }
        guard ending.wasActive else { return }
        finishStreams()
        let error = RealtimeError(.notConnected, "the socket for \(namespace) was disconnected")
        for (id, entry) in acks {
            ackTimeouts.cancel(id)
            entry.deliver(.failure(error))
        }
        failWaitingRetries(with: error)
        for waiter in ending.waiters { waiter.resume(throwing: error) }
        if let session = manager?.openSession {
            session.send(frame(SocketIOPacket(type: .disconnect, namespace: namespace), requeue: false))
            if namespace == "/", manager?.configuration.version == .v2 { manager?.leftDefaultNamespace() }
        }
        publish(ending.published)
        fire(.disconnect, ["io client disconnect"])
        manager?.socketBecameInactive()
    }

    /// Sends this namespace's CONNECT packet on a freshly opened session.
    func sendConnect(on session: EngineIOSession) async {
        // Called on the connection's task, whose async frames stay at their high-water mark for
        // the connection's life: the waiting (the auth provider) is in a small function of its own
        // and the packet is built in synchronous ones.
        if speaksLegacyProtocol { return await sendLegacyConnect(on: session) }
        let payload = await resolvedAuthPayload()
        sendConnectPacket(payload, on: session)
    }

    /// Whether the manager speaks to a socket.io 2.x server (read without copying the whole
    /// configuration into the caller's async frame).
    private var speaksLegacyProtocol: Bool {
        @inline(never) get { manager?.configuration.version == .v2 }
    }

    /// The auth provider's payload, or nil (with an `error` event) when it fails or is not an object.
    @inline(never)
    private func resolvedAuthPayload() async -> JSONValue? {
        let auth = state.withLockedValue { $0.auth }
        let payload: JSONValue?
        do {
            payload = try await auth.resolve()
        } catch {
            return invalidAuthPayload("the auth provider failed: \(error)")
        }
        if let value = payload, value.objectValue == nil {
            return invalidAuthPayload("the auth payload must be a JSON object; sending none")
        }
        return payload
    }

    @inline(never)
    private func invalidAuthPayload(_ message: String) -> JSONValue? {
        fire(.error, [.string(message)])
        return nil
    }

    /// Sends CONNECT with `payload` and, when recovering, the session's pid and offset.
    @inline(never)
    private func sendConnectPacket(_ auth: JSONValue?, on session: EngineIOSession) {
        var payload = auth
        let (pid, offset) = state.withLockedValue { ($0.lifecycle.pid, $0.lifecycle.lastOffset) }
        if let pid {
            // Recovery fields first; the auth members win on a clash (as the JavaScript client does).
            var members: [(String, JSONValue)] = [("pid", .string(pid)), ("offset", offset.map(JSONValue.string) ?? .null)]
            if case .object(let auth)? = payload {
                members.removeAll { auth[$0.0] != nil }
                members += auth.map { ($0.key, $0.value) }
            }
            payload = .object(.init(members, uniquingKeysWith: { $1 }))
        }
        let packet = SocketIOPacket(type: .connect, namespace: namespace, data: payload)
        publish(state.withLockedValue { $0.lifecycle.sendingConnect() })
        session.send(frame(packet, requeue: false))
    }

    /// socket.io 2.x: the server joins `/` by itself at the handshake (its auth went in the
    /// handshake's query); another namespace is joined with `40/chat?<auth as a query>,`.
    @inline(never)
    private func sendLegacyConnect(on session: EngineIOSession) async {
        guard namespace == "/" else {
            sendLegacyNamespaceConnect(await legacyAuthQuery(), on: session)
            return
        }
        joinLegacyDefaultNamespace(on: session)
    }

    @inline(never)
    private func sendLegacyNamespaceConnect(_ query: [(String, String)], on session: EngineIOSession) {
        let name = query.isEmpty ? namespace : namespace + "?" + Self.encodeQuery(query)
        publish(state.withLockedValue { $0.lifecycle.sendingConnect() })
        session.send(frame(SocketIOPacket(type: .connect, namespace: name), requeue: false))
    }

    /// The default namespace of a socket.io 2.x server: joined by the server at the handshake.
    @inline(never)
    private func joinLegacyDefaultNamespace(on session: EngineIOSession) {
        publish(state.withLockedValue { $0.lifecycle.sendingConnect() })
        switch manager?.claimDefaultNamespace() ?? .wait {
        case .wait: break
        case .connected: didConnect(SocketIOPacket(type: .connect), session: session)
        case .sendConnect: session.send(frame(SocketIOPacket(type: .connect), requeue: false))
        }
    }

    /// socket.io 2.x: the auth payload as query items (strings as they are, other values as JSON
    /// text), in its order. A provider that fails, or a payload that is not an object, is reported
    /// (an `error` event) and nothing is sent, as with a CONNECT payload.
    @inline(never)
    func legacyAuthQuery() async -> [(String, String)] {
        let auth = state.withLockedValue { $0.auth }
        let payload: JSONValue?
        do {
            payload = try await auth.resolve()
        } catch {
            fire(.error, [.string("the auth provider failed: \(error)")])
            return []
        }
        guard let payload else { return [] }
        guard case .object(let members) = payload else {
            fire(.error, [.string("the auth payload must be a JSON object; sending none")])
            return []
        }
        return members.map { key, value in (key, value.stringValue ?? JSONWriter.string(value)) }
    }

    private static func encodeQuery(_ items: [(String, String)]) -> String {
        items.map { "\(EngineIOURLs.escape($0.0))=\(EngineIOURLs.escape($0.1))" }.joined(separator: "&")
    }

    // MARK: Emitting

    func frame(_ packet: SocketIOPacket, requeue: Bool) -> EngineIOFrame {
        let (text, attachments) = SocketIOCodec.encodeAsEngineIOMessage(packet)
        let frame = EngineIOFrame(
            first: .text(text), rest: attachments.map { .binary($0) }, requeueNamespace: requeue ? namespace : nil,
            ackID: packet.type == .event || packet.type == .binaryEvent ? packet.id : nil)
        return speaksLegacyProtocol ? frame.forRevision3() : frame
    }

    /// Why `frame` cannot be sent to this server: it is larger than the handshake's `maxPayload`
    /// (one polling payload when polling may carry it, else its largest WebSocket message).
    private func sizeError(_ frame: EngineIOFrame) -> RealtimeError? {
        guard let manager, let limit = manager.handshake?.maxPayload else { return nil }
        let size = manager.mayUsePolling ? frame.soloPollingSize : frame.largestWebSocketMessage
        guard size > limit else { return nil }
        return RealtimeError(
            .messageTooLarge,
            "the packet takes \(size) bytes encoded (with its attachments) and the server's maxPayload is \(limit)")
    }

    /// Sends now when connected, or queues. Frames keep their order either way.
    private func submit(_ packet: SocketIOPacket) throws {
        let frame = frame(packet, requeue: true)
        if let error = sizeError(frame) {
            manager?.metrics.dropped(reason: "too_large")
            throw error
        }
        let session = manager?.openSession
        let result = state.withLockedValue { state -> Outbox<EngineIOFrame>.CountedPush? in
            if state.lifecycle.status == .connected, state.offline?.isEmpty ?? true, let session, session.trySend(frame) == .queued { return nil }
            return offlineQueue(&state).pushCounted(frame)
        }
        switch result {
        case nil:
            notifyOutgoing(packet)
            return
        case .queued?:
            manager?.reportQueueDepth()
            return
        case .rejected?, .closed?:
            manager?.metrics.dropped(reason: "queue_full")
            throw RealtimeError.queueFull(capacity: manager?.configuration.offlineQueueCapacity ?? 0)
        case .droppedOldest(let oldest)?:
            manager?.metrics.dropped(reason: "queue_full")
            state.withLockedValue { $0.delivery.countDropped(oldest) }
            let full = RealtimeError(.queueFull, "the offline queue was full; the oldest queued emit was dropped")
            if let id = oldest.ackID { failAck(id, with: full) }
            runtime.logger.debug("offline queue full, dropped the oldest emit", metadata: ["realtime.namespace": "\(namespace)"])
            fire(.dropped, [oldest.droppedEmitDescription])
            fire(.error, [.string(full.description)])
        }
    }

    /// Emits an event with JSON arguments (`.binary` values anywhere become attachments).
    ///
    /// Sent at once when connected, otherwise queued (in order) until the namespace connects.
    /// - Throws: `RealtimeCore/RealtimeError` `queueFull` when the offline queue rejects it;
    ///   `messageTooLarge` when the encoded packet exceeds the server's `maxPayload` (nothing is sent).
    ///
    /// With ``SocketIOConfiguration/retries`` above 0 the emit goes through the retry queue
    /// instead: sent in turn with an ack asked for, and sent again until the server acks it or the
    /// tries run out (then the `dropped` and `error` events report it).
    public func emit(_ event: String, arguments: [JSONValue]) throws {
        let arguments = withEmitID(arguments)
        if retries > 0 {
            try enqueueRetry(event, arguments, timeout: defaultAckTimeout, deliver: nil)
            return
        }
        try submit(SocketIOPacket(type: .event, namespace: namespace, data: .array(Self.eventData(event, arguments))))
    }

    /// ``SocketIOConfiguration/retries``.
    private var retries: Int { manager?.configuration.retries ?? 0 }
    /// ``SocketIOConfiguration/ackTimeout``.
    private var defaultAckTimeout: Duration { manager?.configuration.ackTimeout ?? .seconds(10) }

    /// `arguments` with the emit's id as their last element, when ``SocketIOConfiguration/emitIDs``
    /// asks for one: given once, when the emit is made, so every copy of it carries the same id.
    private func withEmitID(_ arguments: [JSONValue]) -> [JSONValue] {
        guard let (key, socket) = emitIDs else { return arguments }
        let number = state.withLockedValue { state -> UInt64 in
            state.lastEmitNumber += 1
            return state.lastEmitNumber
        }
        var stamped = arguments
        stamped.append(.object([key: .string(String(socket, radix: 36) + "-" + String(number))]))
        return stamped
    }

    /// An event packet's data: the name, then the arguments (one array allocated).
    private static func eventData(_ event: String, _ arguments: [JSONValue]) -> [JSONValue] {
        var data: [JSONValue] = []
        data.reserveCapacity(arguments.count + 1)
        data.append(.string(event))
        data.append(contentsOf: arguments)
        return data
    }

    /// Emits and waits for the server's ack.
    ///
    /// The timeout (nil: ``SocketIOConfiguration/ackTimeout``, 10 s by default) always fires; an
    /// ack arriving after it is dropped. Emits made while offline wait in the queue, and their
    /// timeout runs from the call. When the connection drops after the emit was written, the call
    /// fails at once with `connectionClosed` (the server may or may not have handled it; the emit
    /// is not sent again).
    ///
    /// With ``SocketIOConfiguration/retries`` above 0 (the JavaScript client's `retries`): the
    /// emit waits its turn in the retry queue (one emit in flight per socket, in order), the timeout
    /// applies to each try, and a try that times out or is cut by a drop is sent again, until the
    /// server acks it or `retries` more tries have failed. The server may see it more than once.
    /// - Returns: the ack's arguments.
    /// - Throws: `RealtimeCore/RealtimeError` `timeout`, `queueFull`, `messageTooLarge`,
    ///   `connectionClosed`, `notConnected` (the socket was disconnected), or `CancellationError`.
    public func emitWithAck(_ event: String, arguments: [JSONValue], timeout: Duration? = nil) async throws -> [JSONValue] {
        let arguments = withEmitID(arguments)
        let timeout = timeout ?? defaultAckTimeout
        if retries > 0 { return try await emitWithRetries(event, arguments, timeout: timeout) }
        let id = reserveAckID()
        let started = ContinuousClock.now
        let metrics = manager?.metrics
        let span = runtime.startMessageSpan(
            "realtime.emit", protocol: "socketio", client: self.manager?.configuration.clientLabel ?? "default")
        span?.attributes["realtime.event"] = event
        span?.attributes["realtime.namespace"] = namespace
        return try await withTaskCancellationHandler {
            // Resumed exactly once: by whoever removes the ack's entry from the table (the ack,
            // its timeout, a cancellation, a drop), under the state's lock.
            try await withUnsafeThrowingContinuation { continuation in
                registerAck(id: id, timeout: timeout, event: event) { result in
                    switch result {
                    case .success: metrics?.recordCall(since: started)
                    case .failure(let error): span?.fail(error)
                    }
                    span?.end()
                    continuation.resume(with: result)
                }
                // Cancelled before the ack was registered: the handler below found nothing to fail.
                if Task.isCancelled { return failAck(id, with: Self.cancelledError) }
                do {
                    try submit(SocketIOPacket(type: .event, namespace: namespace, id: id, data: .array(Self.eventData(event, arguments))))
                } catch {
                    failAck(id, with: RealtimeError.wrap(error))
                }
            }
        } onCancel: {
            self.failAck(id, with: Self.cancelledError)
        }
    }

    private static var cancelledError: RealtimeError {
        RealtimeError(.cancelled, "emitWithAck was cancelled", underlying: CancellationError())
    }

    /// ``emitWithAck(_:arguments:timeout:)`` with the arguments listed (strings, numbers, `Data`,
    /// ``RealtimeCore/JSONValue``s...).
    public func emitWithAck(_ event: String, _ items: any SocketData..., timeout: Duration? = nil) async throws -> [JSONValue] {
        try await emitWithAck(event, arguments: items.map { try $0.socketRepresentation() }, timeout: timeout)
    }

    /// Registers an ack callback with a timeout; returns its id.
    func registerAck(
        timeout: Duration?, event: String, deliver: @escaping @Sendable (Result<[JSONValue], RealtimeError>) -> Void
    ) -> Int {
        let id = reserveAckID()
        registerAck(id: id, timeout: timeout, event: event, deliver: deliver)
        return id
    }

    /// The next ack id (ids wrap at `Int32.max`).
    private func reserveAckID() -> Int {
        state.withLockedValue { state -> Int in reserveAckIDLocked(&state) }
    }

    private func reserveAckIDLocked(_ state: inout State) -> Int {
        let id = state.nextAckID
        state.nextAckID = state.nextAckID == Int(Int32.max) ? 0 : state.nextAckID + 1
        return id
    }

    /// Registers the ack callback of a reserved id, with a timeout.
    private func registerAck(
        id: Int, timeout: Duration?, event: String, deliver: @escaping @Sendable (Result<[JSONValue], RealtimeError>) -> Void
    ) {
        // The timeout is scheduled under the same lock as the entry: a failAck (a cancellation)
        // that removes the entry right after always finds the timeout to cancel.
        state.withLockedValue {
            $0.acks[id] = AckEntry(deliver: deliver, event: event, timeout: timeout)
            if let timeout { ackTimeouts.schedule(id, after: timeout) }
        }
    }

    private func failAck(_ id: Int, with error: RealtimeError) {
        guard let entry = state.withLockedValue({ $0.acks.removeValue(forKey: id) }) else { return }
        ackTimeouts.cancel(id)
        entry.deliver(.failure(error))
    }

    private func expireAck(_ id: Int) {
        guard let entry = state.withLockedValue({ $0.acks.removeValue(forKey: id) }) else { return }
        let limit = entry.timeout.map { "\($0)" } ?? "its timeout"
        entry.deliver(.failure(RealtimeError.timeout("no ack for \(entry.event) on \(namespace) within \(limit)")))
    }

    /// Sends an ack for `id` (SocketIO's `SocketAckEmitter(socket:ackNum:)` and `emitAck`).
    package func sendAck(id: Int, values: [JSONValue]) {
        let packet = SocketIOPacket(type: .ack, namespace: namespace, id: id, data: .array(values))
        do { try submit(packet) } catch {
            fire(.error, [.string("could not send the ack \(id): \(error)")])
        }
    }

    /// Emits with an ack id whose answer goes to `deliver` (used by the compatibility layer).
    package func emitExpectingAck(
        _ event: String, arguments: [JSONValue], timeout: Duration?,
        deliver: @escaping @Sendable (Result<[JSONValue], RealtimeError>) -> Void
    ) {
        let arguments = withEmitID(arguments)
        let id = registerAck(timeout: timeout, event: event, deliver: deliver)
        do {
            try submit(SocketIOPacket(type: .event, namespace: namespace, id: id, data: .array(Self.eventData(event, arguments))))
        } catch {
            failAck(id, with: RealtimeError.wrap(error))
        }
    }

    // MARK: Handlers

    /// Calls `handler` for every `event` from the server (and for client events by their raw name).
    @discardableResult
    public func on(_ event: String, handler: @escaping @Sendable (SocketIOEvent) -> Void) -> UUID {
        addHandler(event, once: false, handler)
    }

    /// Like ``on(_:handler:)``, for the first occurrence only.
    @discardableResult
    public func once(_ event: String, handler: @escaping @Sendable (SocketIOEvent) -> Void) -> UUID {
        addHandler(event, once: true, handler)
    }

    /// Calls `handler` for a client event.
    @discardableResult
    public func on(clientEvent event: SocketClientEvent, handler: @escaping @Sendable (SocketIOEvent) -> Void) -> UUID {
        addHandler(event.rawValue, once: false, handler)
    }

    /// Calls `handler` for every event, server and client.
    @discardableResult
    public func onAny(_ handler: @escaping @Sendable (SocketAnyEvent) -> Void) -> UUID {
        let id = UUID()
        state.withLockedValue { $0.anyHandlers.append((id, handler)) }
        return id
    }

    /// Calls `handler` for every event this socket sends, as it goes to the connection (the
    /// JavaScript client's `onAnyOutgoing`): an emit made while connected at once, a queued one when
    /// it leaves the offline queue, and each try of an emit with retries. Acks are not events.
    /// It runs on the thread that sends (the emitting caller's, or the connection's when the
    /// queue is flushed): keep it short.
    @discardableResult
    public func onAnyOutgoing(_ handler: @escaping @Sendable (SocketAnyEvent) -> Void) -> UUID {
        let id = UUID()
        state.withLockedValue { $0.outgoingHandlers.append((id, handler)) }
        return id
    }

    package func addHandler(_ event: String, once: Bool, _ handler: @escaping @Sendable (SocketIOEvent) -> Void) -> UUID {
        let id = UUID()
        state.withLockedValue { $0.handlers[event, default: []].append(HandlerEntry(id: id, once: once, call: handler)) }
        return id
    }

    /// Calls `observer` with every event before the handlers, with whether it came from the server
    /// (false: a client event). For the SocketIO module, which runs its own handlers on its
    /// queue; kept by ``removeAllHandlers()``, removed by ``stopObserving(_:)``.
    package func observeEvents(_ observer: @escaping @Sendable (SocketIOEvent, Bool) -> Void) -> UUID {
        let id = UUID()
        state.withLockedValue { $0.observers.append((id, observer)) }
        return id
    }

    /// Removes an observer of ``observeEvents(_:)``.
    package func stopObserving(_ id: UUID) {
        state.withLockedValue { $0.observers.removeAll { $0.id == id } }
    }

    /// Removes every handler for `event`.
    public func off(_ event: String) { state.withLockedValue { _ = $0.handlers.removeValue(forKey: event) } }
    /// Removes every handler of the client event.
    public func off(clientEvent event: SocketClientEvent) { off(event.rawValue) }

    /// Removes the handler with this id.
    public func off(id: UUID) {
        state.withLockedValue { state in
            for key in state.handlers.keys { state.handlers[key]?.removeAll { $0.id == id } }
            state.anyHandlers.removeAll { $0.id == id }
            state.outgoingHandlers.removeAll { $0.id == id }
        }
    }

    /// Removes every handler.
    public func removeAllHandlers() {
        state.withLockedValue {
            $0.handlers = [:]
            $0.anyHandlers = []
            $0.outgoingHandlers = []
        }
    }

    /// Who an event goes to, taken under the state's lock (`once` handlers are removed as they are).
    private struct Recipients {
        var entries: [HandlerEntry]
        /// The catch-all handlers, sequences and observers; nil when there are none (as for most
        /// events), so that no arrays are made and let go for them.
        var others: Others?
    }

    private struct Others {
        var anyHandlers: [@Sendable (SocketAnyEvent) -> Void]
        var streams: [EventStreamEntry]
        var observers: [@Sendable (SocketIOEvent, Bool) -> Void]
    }

    private static func recipients(of name: String, fromServer: Bool, _ state: inout State) -> Recipients {
        let entries: [HandlerEntry]
        let once: Bool
        if let found = state.lastFound, found.name == name {
            (entries, once) = (found.entries, found.once)
        } else {
            entries = state.handlers[name] ?? []
            once = entries.contains(where: \.once)
            state.lastFound = (name, entries, once)
        }
        if once { state.handlers[name]?.removeAll { $0.once } }
        let streamsToTell = fromServer && !state.streams.isEmpty
        guard streamsToTell || !state.anyHandlers.isEmpty || !state.observers.isEmpty else { return Recipients(entries: entries) }
        let streams = streamsToTell ? state.streams.values.filter { $0.name == nil || $0.name == name } : []
        return Recipients(entries: entries, others: Others(anyHandlers: state.anyHandlers.map(\.call), streams: streams, observers: state.observers.map(\.call)))
    }

    private func dispatch(_ name: String, _ arguments: [JSONValue], ackID: Int?, offset: String? = nil, fromServer: Bool = true) {
        let recipients = state.withLockedValue { Self.recipients(of: name, fromServer: fromServer, &$0) }
        call(recipients, name, arguments, ackID: ackID, offset: offset, fromServer: fromServer)
    }

    /// `arguments` is consumed: the event takes them without a copy.
    private func call(_ recipients: Recipients, _ name: String, _ arguments: consuming [JSONValue], ackID: Int?, offset: String?, fromServer: Bool) {
        let event = SocketIOEvent(name: name, arguments: arguments, ackID: ackID, offset: offset, socket: ackID == nil ? nil : self)
        if let others = recipients.others {
            for observer in others.observers { observer(event, fromServer) }
            // Sequences first: once a handler has seen an event, every sequence has it too.
            for stream in others.streams { stream.yield(event) }
            if !others.anyHandlers.isEmpty {
                let any = SocketAnyEvent(event: name, arguments: event.arguments)
                for handler in others.anyHandlers { handler(any) }
            }
        }
        // By index: each entry is called in place, not copied out of the array.
        for index in recipients.entries.indices { recipients.entries[index].call(event) }
    }

    /// A handler for `event` (or for every event) is registered.
    func observes(_ event: SocketClientEvent) -> Bool {
        // An observer (the SocketIO module) sees every event, as its handlers may want any.
        state.withLockedValue { !($0.handlers[event.rawValue]?.isEmpty ?? true) || !$0.anyHandlers.isEmpty || !$0.observers.isEmpty }
    }

    package func fire(_ event: SocketClientEvent, _ arguments: [JSONValue]) {
        dispatch(event.rawValue, arguments, ackID: nil, fromServer: false)
    }

    // MARK: Inbound

    /// `session`: holds the session the packet came on, asked for only by the packets that need
    /// it. (A box, not a closure: a closure would hold its owner, a reference count per packet.)
    func handle(_ packet: consuming SocketIOPacket, session: NIOLockedValueBox<EngineIOSession?>) {
        switch packet.type {
        case .connect:
            didConnect(packet, session: session.withLockedValue { $0 })
        case .connectError:
            let message = packet.data?.stringValue ?? packet.data?["message"]?.stringValue ?? "connection refused"
            let ending = state.withLockedValue { $0.lifecycle.refused() }
            let error = RealtimeError(.refused, "the server refused namespace \(namespace)", serverMessage: message)
            // Handlers first, then the waiting `connect(timeout:)`: whoever awaited sees the events done.
            publish(ending.published)
            fire(.error, [packet.data ?? .string(message)])
            for waiter in ending.waiters { waiter.resume(throwing: error) }
            finishStreams()
            manager?.socketBecameInactive()
        case .disconnect:
            let (acks, change) = state.withLockedValue { state in
                defer { state.acks = [:] }
                return (state.acks, state.lifecycle.serverDisconnected())
            }
            let error = RealtimeError(.notConnected, "the server disconnected namespace \(namespace)")
            for (id, entry) in acks {
                ackTimeouts.cancel(id)
                entry.deliver(.failure(error))
            }
            publish(change)
            fire(.disconnect, ["io server disconnect"])
            finishStreams()
            manager?.socketBecameInactive()
        case .event, .binaryEvent:
            receiveEvent(consume packet)
        case .ack, .binaryAck:
            if let id = packet.id { session.withLockedValue { $0 }?.confirmDelivery(namespace: namespace, ackID: id) }
            guard let id = packet.id, let entry = state.withLockedValue({ $0.acks.removeValue(forKey: id) }) else {
                runtime.logger.trace("dropped an ack nobody waits for (late or unknown)", metadata: ["realtime.ack_id": "\(packet.id ?? -1)"])
                return
            }
            ackTimeouts.cancel(id)
            entry.deliver(.success(packet.data?.arrayValue ?? []))
        }
    }

    /// An event from the server: held while the namespace is not connected (`mayHold`; the held
    /// ones are delivered once it is, without another check), else its offset recorded and its
    /// recipients taken, under one lock, and delivered. With connection state recovery the server
    /// appends its offset to every event: it is taken off the arguments.
    private func receiveEvent(_ packet: consuming SocketIOPacket, mayHold: Bool = true) {
        let ackID = packet.id
        // The arguments are moved out of the packet, not copied, so that taking the name (and the
        // offset) off them moves them in place. The decoder lets no event through without a name
        // (SocketIOCodec.validate).
        guard case .array(var arguments)? = packet.data.take(), !arguments.isEmpty else { return }
        let name = Self.eventName(arguments[0])
        let taken = state.withLockedValue { state -> (offset: String?, recipients: Recipients)? in
            if mayHold, state.lifecycle.holdsEvent(SocketIOPacket(type: packet.type, namespace: packet.namespace, id: ackID, data: .array(arguments))) {
                return nil
            }
            return (state.lifecycle.recordOffset(arguments), Self.recipients(of: name, fromServer: true, &state))
        }
        guard let taken else { return }
        // `remove(at:)`, not `removeFirst()`, which goes through the generic `replaceSubrange`.
        _ = arguments.remove(at: 0)
        if taken.offset != nil { arguments.removeLast() }
        call(taken.recipients, name, consume arguments, ackID: ackID, offset: taken.offset, fromServer: true)
    }

    /// An event's name: its first argument, a string, or a number written as JSON.
    private static func eventName(_ first: JSONValue) -> String {
        switch first {
        case .string(let name): name
        case .number, .integer, .unsignedInteger: JSONWriter.string(first)
        default: ""
        }
    }

    private func didConnect(_ packet: SocketIOPacket, session: EngineIOSession?) {
        // socket.io 2.x sends no sid: the socket's id is the Engine.IO session's (prefixed with
        // the namespace outside `/`), as the JavaScript 2.x client makes it.
        let engineSID = manager?.configuration.version == .v2 ? session?.handshake?.sid : nil
        let sid = packet.data?["sid"]?.stringValue ?? engineSID.map { namespace == "/" ? $0 : namespace + "#" + $0 }
        let pid = packet.data?["pid"]?.stringValue
        var tooLarge: [(EngineIOFrame, RealtimeError)] = []
        var sent: [EngineIOFrame] = []
        var resent: [EngineIOFrame] = []
        let connected = state.withLockedValue { state in
            let connected = state.lifecycle.connected(sid: sid, pid: pid)
            // Flush the offline queue before anything else can be sent, in order. Frames queued
            // before this server's limits were known and too large for them are not sent.
            if let session { tooLarge = flush(into: session, state: &state, sent: &sent, resent: &resent) }
            return connected
        }
        for frame in sent { notifyOutgoing(frame) }
        reportResent(resent)
        publish(connected.published)
        manager?.reportQueueDepth()
        for (frame, error) in tooLarge { reportUnsendable(frame, error) }
        var details: [String: JSONValue] = [:]
        if let sid { details["sid"] = .string(sid) }
        if let pid { details["pid"] = .string(pid) }
        fire(.connect, [.string(namespace), .object(.init(uniqueKeysWithValues: details.sorted { $0.key < $1.key }))])
        for packet in connected.buffered { receiveEvent(packet, mayHold: false) }
        for waiter in connected.waiters { waiter.resume() }
        sendNextRetry()
    }

    /// The Engine.IO session ended (the manager will reconnect if this socket is still active).
    func engineClosed(reason: String, error: RealtimeError?) {
        let closed = state.withLockedValue { $0.lifecycle.sessionClosed() }
        publish(closed.published)
        if closed.wasConnected { fire(.disconnect, [.string(reason)]) }
        if let error, closed.wasConnected || isActive { fire(.error, [.string(error.description)]) }
    }

    /// The Engine.IO session ended. `written`: this namespace's frames written but not confirmed;
    /// `unwritten`: those never written; each oldest first.
    ///
    /// Every pending ack whose emit may have reached the server fails now with `connectionClosed`
    /// (its emit is not sent again). Everything else goes back to the front of the offline queue,
    /// in order, to be sent on the next connection; what does not fit is dropped by the queue's
    /// overflow policy and reported.
    /// `leftWindow`: emits written to this session that had left the resend window unconfirmed:
    /// not sent again and no longer held, so counted and reported, not named.
    func sessionEnded(written: [EngineIOFrame], unwritten: [EngineIOFrame], leftWindow: Int = 0) {
        // Volatile emits are not sent again.
        var unwritten = unwritten.contains(where: \.isVolatile) ? unwritten.filter { !$0.isVolatile } : unwritten
        let (failedAcks, dropped, withdrawn) = state.withLockedValue { state in
            // The retry queue's try in flight, never written: it did not count, and is not
            // queued (its ack timer must not run offline); the next connection sends the emit.
            var withdrawn: Int?
            if let id = state.retryQueue.first?.inFlight, let index = unwritten.firstIndex(where: { $0.ackID == id }) {
                unwritten.remove(at: index)
                state.retryQueue[0].inFlight = nil
                state.retryQueue[0].tries -= 1
                if state.acks.removeValue(forKey: id) != nil { withdrawn = id }
            }
            // Written emits that wait for an ack are reported through the ack, not sent again. The
            // others are marked: the server may have them.
            var resend: [EngineIOFrame] = []
            for var frame in written where frame.ackID == nil && !frame.isVolatile {
                frame.wasWritten = true
                resend.append(frame)
            }
            let dropped = resend.isEmpty && unwritten.isEmpty ? [] : offlineQueue(&state).takeBack(written: resend, unwritten: unwritten)
            var waiting = Set(dropped.compactMap(\.ackID))
            state.offline?.forEachQueued { frame in if let id = frame.ackID { waiting.insert(id) } }
            var failed: [(Int, AckEntry)] = []
            for (id, entry) in state.acks where !waiting.contains(id) { failed.append((id, entry)) }
            for (id, _) in failed { state.acks.removeValue(forKey: id) }
            for frame in dropped { state.delivery.countDropped(frame) }
            state.delivery.leftResendWindow += leftWindow
            return (failed, dropped, withdrawn)
        }
        if let withdrawn { ackTimeouts.cancel(withdrawn) }
        if leftWindow > 0 {
            let error = RealtimeError(
                .connectionClosed,
                "\(leftWindow) emits written before the connection dropped had left the resend window (engine.resendWindow) with no ack confirming them since: they are not sent again and the server may not have them")
            fire(.error, [.string(error.description)])
        }
        manager?.metrics.dropped(dropped.count, reason: "queue_full")
        manager?.reportQueueDepth()
        let error = RealtimeError(
            .connectionClosed, "the connection dropped before the ack arrived; the server may or may not have handled the emit")
        for (id, entry) in failedAcks {
            ackTimeouts.cancel(id)
            entry.deliver(.failure(error))
        }
        guard !dropped.isEmpty else { return }
        let which = offlineOverflow == .dropOldest ? "oldest" : "newest"
        let possiblySent = dropped.count { $0.wasWritten }
        let full = RealtimeError(
            .queueFull,
            "the offline queue (capacity \(offlineCapacity)) could not take back \(dropped.count) emits after the connection dropped: \(possiblySent) written before the cut (possibly delivered) went first, then \(dropped.count - possiblySent) never sent (the \(which)); the dropped event names each")
        for frame in dropped where frame.ackID != nil { failAck(frame.ackID!, with: full) }
        runtime.logger.debug(
            "emits dropped after a disconnect", metadata: ["realtime.namespace": "\(namespace)", "realtime.dropped": "\(dropped.count)"])
        fire(.dropped, dropped.map(\.droppedEmitDescription))
        fire(.error, [.string(full.description)])
    }

    /// Moves queued frames into the session's send queue, in order, while it has room. Returns the
    /// frames too large for the server, to report.
    /// `sent` collects the frames moved when someone listens to outgoing events; `resent` those
    /// written to an earlier connection (counted here, named by ``reportResent(_:)``).
    private func flush(
        into session: EngineIOSession, state: inout State, sent: inout [EngineIOFrame], resent: inout [EngineIOFrame]
    ) -> [(EngineIOFrame, RealtimeError)] {
        var tooLarge: [(EngineIOFrame, RealtimeError)] = []
        guard let queue = state.offline else { return [] }
        let frames = queue.takeQueued()
        let collect = !state.outgoingHandlers.isEmpty
        defer { if queue.isEmpty { state.offline = nil } }
        for (index, frame) in frames.enumerated() {
            if let error = sizeError(frame) {
                tooLarge.append((frame, error))
                continue
            }
            guard session.trySend(frame) == .queued else {
                queue.requeueFront(Array(frames[index...]))
                break
            }
            if frame.wasWritten {
                state.delivery.resent += 1
                resent.append(frame)
            }
            if collect { sent.append(frame) }
        }
        return tooLarge
    }

    /// The session's send queue has room again: move what waited in the offline queue.
    func sendQueueDrained(_ session: EngineIOSession) {
        var sent: [EngineIOFrame] = []
        var resent: [EngineIOFrame] = []
        let tooLarge = state.withLockedValue { state -> [(EngineIOFrame, RealtimeError)] in
            guard state.lifecycle.status == .connected else { return [] }
            return flush(into: session, state: &state, sent: &sent, resent: &resent)
        }
        reportResent(resent)
        for (frame, error) in tooLarge { reportUnsendable(frame, error) }
        for frame in sent { notifyOutgoing(frame) }
        // A try that found the send queue full goes now.
        sendNextRetry()
    }

    /// Names the emits sent again after a drop (the server may see them twice).
    private func reportResent(_ frames: [EngineIOFrame]) {
        guard !frames.isEmpty else { return }
        runtime.logger.debug(
            "emits written before a drop sent again", metadata: ["realtime.namespace": "\(namespace)", "realtime.resent": "\(frames.count)"])
        fire(.resent, frames.map(\.emitDescription))
    }

    func addStream(_ id: UUID, _ entry: EventStreamEntry) { state.withLockedValue { $0.streams[id] = entry } }

    func removeStream(_ id: UUID) { state.withLockedValue { _ = $0.streams.removeValue(forKey: id) } }

    /// Ends every event stream (the socket stopped being active).
    func finishStreams() {
        let streams = state.withLockedValue { state in
            defer { state.streams = [:] }
            return state.streams.values
        }
        for stream in streams { stream.finish() }
    }

    private func reportUnsendable(_ frame: EngineIOFrame, _ error: RealtimeError) {
        manager?.metrics.dropped(reason: "too_large")
        if let id = frame.ackID {
            failAck(id, with: error)
        } else {
            state.withLockedValue { $0.delivery.countDropped(frame) }
            fire(.dropped, [frame.droppedEmitDescription])
            fire(.error, [.string(error.description)])
        }
    }

    /// The server refused these emits (a polling POST refused again, or alone: see
    /// `EngineIOSession.PollingRefusal`; a WebSocket closed with 1009): they are not sent again.
    /// Each is named by a `dropped` event (possibly delivered) and its ack fails with `error`.
    func refusedByServer(_ frames: [EngineIOFrame], error: RealtimeError) {
        guard !frames.isEmpty else { return }
        manager?.metrics.dropped(frames.count, reason: "refused")
        state.withLockedValue { state in
            for frame in frames { state.delivery.countDropped(frame) }
        }
        for frame in frames { if let id = frame.ackID { failAck(id, with: error) } }
        runtime.logger.debug(
            "emits refused by the server dropped", metadata: ["realtime.namespace": "\(namespace)", "realtime.dropped": "\(frames.count)"])
        fire(.dropped, frames.map(\.droppedEmitDescription))
        fire(.error, [.string(error.description)])
    }

    /// The manager stopped for good (closed, or reconnection gave up).
    func managerStopped(error: RealtimeError?) {
        let ending = state.withLockedValue { $0.lifecycle.managerStopped() }
        let failure = error ?? RealtimeError(.notConnected, "the connection was closed")
        for waiter in ending.waiters { waiter.resume(throwing: failure) }
        failWaitingRetries(with: failure)
        finishStreams()
        publish(ending.published)
        if let error, ending.wasActive {
            fire(.reconnectFailed, [.string(error.description)])
        }
    }
}

// MARK: Volatile emits, outgoing events, retries

/// Emits that are dropped, not queued, when they cannot go out at once: ``SocketIOClient/volatile``.
public struct SocketIOVolatileEmitter: Sendable {
    let socket: SocketIOClient

    /// Sends the event if the namespace is connected and the connection's send queue has room;
    /// otherwise drops it (counted in the `dropped` metric, reason `volatile`). Never queued, never
    /// sent again after a drop.
    /// - Returns: whether it went to the connection.
    /// - Throws: `messageTooLarge` when the encoded packet exceeds the server's `maxPayload`.
    @discardableResult
    public func emit(_ event: String, arguments: [JSONValue]) throws -> Bool {
        try socket.emitVolatile(event, arguments)
    }

    /// ``emit(_:arguments:)`` with the arguments listed.
    @discardableResult
    public func emit(_ event: String, _ items: any SocketData...) throws -> Bool {
        try socket.emitVolatile(event, items.map { try $0.socketRepresentation() })
    }
}

extension SocketIOClient {
    /// Emits that may be lost: sent at once when connected, dropped otherwise (the JavaScript
    /// client's `socket.volatile.emit`), for values that are stale by the time a connection comes
    /// back (a cursor position, a level meter). `socket.volatile.emit("cursor", x, y)`.
    public var volatile: SocketIOVolatileEmitter { SocketIOVolatileEmitter(socket: self) }

    fileprivate func emitVolatile(_ event: String, _ arguments: [JSONValue]) throws -> Bool {
        let arguments = withEmitID(arguments)
        let packet = SocketIOPacket(type: .event, namespace: namespace, data: .array(Self.eventData(event, arguments)))
        var frame = frame(packet, requeue: true)
        frame.isVolatile = true
        if let error = sizeError(frame) {
            manager?.metrics.dropped(reason: "too_large")
            throw error
        }
        let session = manager?.openSession
        let sent = state.withLockedValue { state -> Bool in
            guard state.lifecycle.status == .connected, state.offline?.isEmpty ?? true, let session else { return false }
            return session.trySend(frame) == .queued
        }
        if sent {
            notifyOutgoing(packet)
        } else {
            manager?.metrics.dropped(reason: "volatile")
        }
        return sent
    }

    /// Tells the outgoing handlers about an event packet going to the connection.
    private func notifyOutgoing(_ packet: SocketIOPacket) {
        guard packet.isEvent else { return }
        let handlers = state.withLockedValue { $0.outgoingHandlers }
        guard !handlers.isEmpty, let data = packet.data?.arrayValue, let first = data.first else { return }
        let name = first.stringValue ?? JSONWriter.string(first)
        let event = SocketAnyEvent(event: name, arguments: Array(data.dropFirst()))
        for handler in handlers { handler.call(event) }
    }

    /// ``notifyOutgoing(_:)`` for a frame that waited in the offline queue (decoded again: only
    /// when someone listens).
    private func notifyOutgoing(_ frame: EngineIOFrame) {
        guard case .text(let encoded) = frame.first, encoded.utf8.first == EngineIOPacketType.message.character,
            let (packet, _) = try? SocketIOCodec.decode(text: String(encoded.dropFirst()))
        else { return }
        var attachments: [Data] = []
        for part in frame.rest { if case .binary(let data) = part { attachments.append(data) } }
        var complete = packet
        if let data = packet.data, !attachments.isEmpty { complete.data = (try? SocketIOCodec.reconstruct(data, attachments: attachments)) ?? data }
        notifyOutgoing(complete)
    }

    /// Puts an emit on the retry queue (bounded by `offlineQueueCapacity`) and sends it if it is
    /// first in line. Returns its place.
    @discardableResult
    fileprivate func enqueueRetry(
        _ event: String, _ arguments: [JSONValue], timeout: Duration,
        deliver: (@Sendable (Result<[JSONValue], RealtimeError>) -> Void)?
    ) throws -> Int {
        let capacity = offlineCapacity
        let sequence = state.withLockedValue { state -> Int? in
            guard state.retryQueue.count < capacity else { return nil }
            let sequence = state.nextRetrySequence
            state.retryQueue.append(RetryEntry(sequence: sequence, event: event, arguments: arguments, timeout: timeout, deliver: deliver))
            state.nextRetrySequence &+= 1
            return sequence
        }
        guard let sequence else {
            manager?.metrics.dropped(reason: "queue_full")
            throw RealtimeError.queueFull(capacity: capacity)
        }
        sendNextRetry()
        return sequence
    }

    /// `emitWithAck` with retries: the caller waits for the last try's outcome.
    fileprivate func emitWithRetries(_ event: String, _ arguments: [JSONValue], timeout: Duration) async throws -> [JSONValue] {
        let place = NIOLockedValueBox<Int?>(nil)
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<[JSONValue], any Error>) in
                do {
                    let sequence = try enqueueRetry(event, arguments, timeout: timeout) { continuation.resume(with: $0.mapError { $0 }) }
                    place.withLockedValue { $0 = sequence }
                    if Task.isCancelled { cancelRetry(sequence) }
                } catch {
                    continuation.resume(throwing: error)
                }
            }
        } onCancel: {
            if let sequence = place.withLockedValue({ $0 }) { self.cancelRetry(sequence) }
        }
    }

    /// A cancelled `emitWithAck`: its entry leaves the queue (its try in flight, if any, fails).
    private func cancelRetry(_ sequence: Int) {
        let error = RealtimeError(.cancelled, "emitWithAck was cancelled", underlying: CancellationError())
        let (inFlight, removed) = state.withLockedValue { state -> (Int?, RetryEntry?) in
            guard let index = state.retryQueue.firstIndex(where: { $0.sequence == sequence }) else { return (nil, nil) }
            if let id = state.retryQueue[index].inFlight { return (id, nil) }
            return (nil, state.retryQueue.remove(at: index))
        }
        if let inFlight { failAck(inFlight, with: error) }
        removed?.deliver?(.failure(error))
    }

    /// Sends the first emit of the retry queue when the namespace is connected on an open session
    /// and it has no try in flight. A try counts (and is named by a `resent` event after the first)
    /// only once it went to the connection: while offline no try starts and no ack timer runs; the
    /// next connection sends the emit once (from ``didConnect(_:session:)``). Tries never wait in
    /// the offline queue.
    private func sendNextRetry() {
        guard let session = manager?.openSession else { return }
        let next = state.withLockedValue { state -> RetryEntry? in
            guard state.lifecycle.status == .connected, var first = state.retryQueue.first, first.inFlight == nil else { return nil }
            first.inFlight = reserveAckIDLocked(&state)
            state.retryQueue[0] = first
            return first
        }
        guard let next, let id = next.inFlight else { return }
        let sequence = next.sequence
        let packet = SocketIOPacket(type: .event, namespace: namespace, id: id, data: .array(Self.eventData(next.event, next.arguments)))
        let frame = frame(packet, requeue: true)
        // Registered before the frame is queued: the ack may come back before this returns.
        registerAck(id: id, timeout: next.timeout, event: next.event) { [weak self] result in
            self?.retryAnswered(sequence, result)
        }
        if let error = sizeError(frame) {
            manager?.metrics.dropped(reason: "too_large")
            return failAck(id, with: error)
        }
        let tries = state.withLockedValue { state -> Int? in
            // A cancellation or the session's end may have taken the try back meanwhile.
            guard state.lifecycle.status == .connected, state.retryQueue.first?.inFlight == id, session.trySend(frame) == .queued else {
                return nil
            }
            state.retryQueue[0].tries += 1
            if state.retryQueue[0].tries > 1 { state.delivery.resent += 1 }
            return state.retryQueue[0].tries
        }
        guard let tries else {
            // Not sent (the session ended, or its send queue is full: sendQueueDrained tries
            // again): nothing counted, no timer left.
            withdrawRetryTry(id)
            return
        }
        if tries > 1 {
            fire(.resent, [["event": .string(next.event), "data": .array(next.arguments), "tries": .integer(Int64(tries))]])
        }
        notifyOutgoing(packet)
    }

    /// Takes back a try that did not go out: its ack entry and timer go, silently, and the emit
    /// waits for its next turn.
    private func withdrawRetryTry(_ id: Int) {
        let removed = state.withLockedValue { state -> Bool in
            if state.retryQueue.first?.inFlight == id { state.retryQueue[0].inFlight = nil }
            return state.acks.removeValue(forKey: id) != nil
        }
        if removed { ackTimeouts.cancel(id) }
    }

    /// The outcome of a try: the ack ends the entry; a timeout or a drop sends it again while tries
    /// are left; anything else ends it with that error.
    private func retryAnswered(_ sequence: Int, _ result: Result<[JSONValue], RealtimeError>) {
        let limit = retries
        let finished = state.withLockedValue { state -> (RetryEntry, Result<[JSONValue], RealtimeError>)? in
            guard var first = state.retryQueue.first, first.sequence == sequence else { return nil }
            first.inFlight = nil
            switch result {
            case .failure(let error) where (error.code == .timeout || error.code == .connectionClosed) && first.tries <= limit:
                state.retryQueue[0] = first
                return nil
            case .failure(let error) where error.code == .notConnected && first.deliver == nil:
                // The app disconnected: a plain emit waits for the next connect, as queued emits do.
                state.retryQueue[0] = first
                return nil
            default:
                state.retryQueue.removeFirst()
                return (first, result)
            }
        }
        if let (entry, result) = finished { finishRetry(entry, result) }
        sendNextRetry()
    }

    private func finishRetry(_ entry: RetryEntry, _ result: Result<[JSONValue], RealtimeError>) {
        if let deliver = entry.deliver { return deliver(result) }
        guard case .failure(let error) = result else { return }
        // A try that went out and got no ack may have been handled.
        let delivery: SocketIODelivery = entry.tries > 0 ? .possiblySent : .notSent
        state.withLockedValue { $0.delivery.count(delivery) }
        manager?.metrics.dropped(reason: "retries")
        let description: JSONValue = [
            "event": .string(entry.event), "data": .array(entry.arguments), "tries": .integer(Int64(entry.tries)),
            "delivery": .string(delivery.rawValue),
        ]
        fire(.dropped, [description])
        fire(.error, [.string("\(entry.event) was not acknowledged after \(entry.tries) tries: \(error)")])
    }

    /// The app disconnected or the manager stopped: every emitWithAck waiting on the retry queue
    /// ends with `error` (plain emits stay for the next connect).
    private func failWaitingRetries(with error: RealtimeError) {
        let (waiting, inFlight) = state.withLockedValue { state -> ([RetryEntry], [Int]) in
            var waiting: [RetryEntry] = []
            var inFlight: [Int] = []
            var kept: Deque<RetryEntry> = []
            for entry in state.retryQueue {
                if entry.deliver == nil { kept.append(entry); continue }
                if let id = entry.inFlight { inFlight.append(id); kept.append(entry) } else { waiting.append(entry) }
            }
            state.retryQueue = kept
            return (waiting, inFlight)
        }
        for id in inFlight { failAck(id, with: error) }
        for entry in waiting { entry.deliver?(.failure(error)) }
    }
}
