public import Foundation
internal import NIOConcurrencyHelpers
internal import RealtimeCore
internal import SocketIOEngine

/// One socket per namespace, made by ``SocketManager/socket(forNamespace:)``.
///
/// Every handler, ack callback, timeout and completion runs on the manager's
/// ``SocketManager/handleQueue`` (`DispatchQueue.main` unless `.handleQueue(_:)` says otherwise),
/// never inside the call that caused it.
// @unchecked Sendable: the mutable state (handlers, the engine socket it is bound to) is read and
// written under `lock`; the handlers themselves (plain closures, as in the original) are only
// ever called on the manager's handleQueue, the one serial queue the user chose.
open class SocketIOClient: NSObject, SocketIOClientSpec, @unchecked Sendable {
    /// The namespace, starting with `/`.
    public let nsp: String

    private weak var owner: SocketManager?
    private let lock = NIOLock()
    private var storedHandlers: [SocketEventHandler] = []
    private var storedAnyHandler: ((SocketAnyEvent) -> ())?
    private var base: SocketIOEngine.SocketIOClient?
    private var observer: UUID?
    private var ownStatus: SocketIOStatus = .notConnected
    /// The reason the next "io client disconnect" of the engine stands for.
    private var leavingReason: String?
    /// Suppresses the engine's disconnect events while the manager reconnects by hand.
    private var reconnectingByHand = false
    /// The last status the engine's socket published.
    private var lastStatus: SocketIOStatus = .notConnected

    /// A socket of `manager` for `nsp` (normally made by ``SocketManager/socket(forNamespace:)``).
    public init(manager: any SocketManagerSpec, nsp: String) {
        self.owner = manager as? SocketManager
        self.nsp = nsp
        super.init()
    }

    /// The handler of every event set by ``onAny(_:)``.
    public private(set) var anyHandler: ((SocketAnyEvent) -> ())? {
        get { lock.withLock { storedAnyHandler } }
        set { lock.withLock { storedAnyHandler = newValue } }
    }

    /// The handlers, in the order they were added.
    public private(set) var handlers: [SocketEventHandler] {
        get { lock.withLock { storedHandlers } }
        set { lock.withLock { storedHandlers = newValue } }
    }

    /// The manager.
    public var manager: (any SocketManagerSpec)? { owner }

    /// Emits that skip binary scanning.
    public var rawEmitView: SocketRawView { SocketRawView(socket: self) }

    /// The session id the server gave this namespace (nil before the first connection).
    public var sid: String? { lock.withLock { base }?.sid }

    /// The status.
    public var status: SocketIOStatus {
        guard let base = lock.withLock({ base }) else { return lock.withLock { ownStatus } }
        return SocketIOStatus(rawValue: base.status.rawValue) ?? .notConnected
    }

    var handleQueue: DispatchQueue { owner?.handleQueue ?? .main }

    // MARK: Binding to the engine's socket

    /// The engine's socket of the current connection (made when connecting).
    func engineSocket() -> SocketIOEngine.SocketIOClient? {
        guard let owner else { return nil }
        let socket = owner.engineSocket(forNamespace: nsp)
        let (previous, previousObserver): (SocketIOEngine.SocketIOClient?, UUID?) = lock.withLock {
            guard base !== socket else { return (nil, nil) }
            defer { base = socket }
            return (base, observer)
        }
        if let previous, let previousObserver { previous.stopObserving(previousObserver) }
        if previous != nil || lock.withLock({ observer == nil }) {
            let id = socket.observeEvents { [weak self] event, fromServer in
                self?.engineEvent(event, fromServer: fromServer)
            }
            lock.withLock { observer = id }
        }
        return socket
    }

    private var boundSocket: SocketIOEngine.SocketIOClient? { lock.withLock { base } }

    /// What the original does for one of the engine's client events.
    private enum Action {
        case event(SocketClientEvent, [Any])
        case connected([String: Any]?)
        case disconnected(String)
        case reconnecting(String)
        /// The WebSocket is in use: `websocketUpgrade`, then the probe's answer (`pong` in socket.io 3+).
        case upgraded
    }

    /// An event of the engine's socket, on the thread that raised it: translated into the
    /// original's client events (through the overridable hooks ``didConnect(toNamespace:payload:)``,
    /// ``didDisconnect(reason:)`` and ``setReconnecting(reason:)``) and run on the handle queue.
    private func engineEvent(_ event: SocketIOEvent, fromServer: Bool) {
        let queue = handleQueue
        if fromServer {
            let items = HandOff(event.arguments.map(SocketValues.foundation))
            let ack = event.ackID ?? -1
            queue.async { self.handleEvent(event.name, data: items.value, isInternalMessage: false, withAck: ack) }
            return
        }
        guard let action = translate(event) else { return }
        let box = ActionOnQueue(action)
        queue.async {
            switch box.action {
            case .event(let clientEvent, let items): self.handleClientEvent(clientEvent, data: items)
            case .connected(let payload): self.didConnect(toNamespace: self.nsp, payload: payload)
            case .disconnected(let reason): self.didDisconnect(reason: reason)
            case .reconnecting(let reason): self.setReconnecting(reason: reason)
            case .upgraded:
                self.handleClientEvent(.websocketUpgrade, data: [[String: String]()])
                self.handleClientEvent(.pong, data: [])
            }
        }
    }

    // @unchecked Sendable: the action's items are only read on the handle queue, after this hand-over.
    private final class ActionOnQueue: @unchecked Sendable {
        let action: Action
        init(_ action: Action) { self.action = action }
    }

    /// The original's action for one of the engine's client events, or nil for none.
    private func translate(_ event: SocketIOEvent) -> Action? {
        let first = event.arguments.first
        switch event.name {
        case "statusChange":
            let status = SocketIOStatus(rawValue: first?.intValue ?? 0) ?? .notConnected
            let previous = lock.withLock { () -> SocketIOStatus in
                defer { lastStatus = status }
                return lastStatus
            }
            // connected and disconnected are raised by didConnect and didDisconnect; connecting
            // after connected (a drop) by setReconnecting.
            if status == .connected || status == .disconnected { return nil }
            if status == .connecting, previous == .connected { return nil }
            return .event(.statusChange, [status, status.rawValue])
        case "connect":
            lock.withLock { reconnectingByHand = false }
            if owner?.version == .three, let details = event.arguments.dropFirst().first,
               let payload = SocketValues.foundation(details) as? [String: Any], !payload.isEmpty {
                return .connected(payload)
            }
            return .connected(nil)
        case "disconnect":
            let reason = first?.stringValue ?? ""
            switch reason {
            case "io client disconnect":
                let (byHand, leaving) = lock.withLock { () -> (Bool, String?) in
                    defer { leavingReason = nil }
                    return (reconnectingByHand, leavingReason)
                }
                if byHand { return nil }
                return .disconnected(leaving ?? "Namespace leave")
            case "io server disconnect":
                return .disconnected("Got Disconnect")
            default:
                // A drop: reconnecting begins unless the socket stopped.
                if boundSocket?.status == .connecting { return .reconnecting(reason) }
                return .disconnected(reason)
            }
        case "reconnectAttempt":
            let attempt = first?.intValue ?? 1
            let limit = owner?.reconnectAttempts ?? -1
            return .event(.reconnectAttempt, [limit - (attempt - 1)])
        case "reconnect_failed":
            return .disconnected("Reconnect Failed")
        case "error":
            return .event(.error, event.arguments.map(SocketValues.foundation))
        case "ping":
            return .event(.ping, [])
        case "websocketUpgrade":
            return .upgraded
        default:
            // reconnect (ours: after it succeeded; the original raises connect), dropped, resent.
            return nil
        }
    }

    // MARK: Connect and disconnect

    /// Connects the namespace (and the manager's connection if needed) and returns at once; the
    /// `statusChange` and `connect` handlers run later on the handle queue. `payload` is the
    /// namespace's auth object, kept for reconnects.
    open func connect(withPayload payload: [String: Any]? = nil) {
        guard let socket = engineSocket() else { return }
        let auth: SocketIOAuth?
        if let payload {
            do {
                auth = .value(try SocketValues.json(payload))
            } catch {
                handleQueue.async { self.handleClientEvent(.error, data: ["the connect payload has no JSON form: \(error)"]) }
                return
            }
        } else {
            auth = nil
        }
        socket.requestConnection(auth: auth)
    }

    /// Connects; if the namespace is not connected within `timeoutAfter` seconds, leaves it
    /// (`disconnect` `["Namespace leave"]`) and calls `handler` on the handle queue. 0: no timeout.
    open func connect(withPayload payload: [String: Any]? = nil, timeoutAfter: Double, withHandler handler: (() -> ())?) {
        connect(withPayload: payload)
        guard timeoutAfter > 0 else { return }
        let call = CallOnQueue(handler)
        let queue = handleQueue
        queue.asyncAfter(deadline: .now() + timeoutAfter) { [weak self] in
            guard let self, self.status == .connecting || self.status == .notConnected else { return }
            self.disconnect()
            // After the disconnect handlers, which leaving the namespace queued just now.
            queue.async { call.run() }
        }
    }

    /// Overridable hook: the namespace connected. Raises `statusChange` and `connect`.
    open func didConnect(toNamespace namespace: String, payload: [String: Any]?) {
        lock.withLock { ownStatus = .connected }
        handleClientEvent(.statusChange, data: [SocketIOStatus.connected, SocketIOStatus.connected.rawValue])
        handleClientEvent(.connect, data: payload.map { [namespace, $0] } ?? [namespace])
    }

    /// Overridable hook: the namespace disconnected for good. Raises `statusChange` and `disconnect`.
    open func didDisconnect(reason: String) {
        lock.withLock { ownStatus = .disconnected }
        handleClientEvent(.statusChange, data: [SocketIOStatus.disconnected, SocketIOStatus.disconnected.rawValue])
        handleClientEvent(.disconnect, data: [reason])
    }

    /// Leaves the namespace (`disconnect` `["Namespace leave"]`); the connection closes when no
    /// other namespace is connected.
    open func disconnect() { leave(reason: "Namespace leave") }

    func leave(reason: String) {
        guard let socket = boundSocket else { return }
        lock.withLock { leavingReason = reason }
        socket.disconnect()
        lock.withLock { leavingReason = nil }
    }

    /// The manager reconnects by hand: the engine's disconnect is not the app's.
    func beginManualReconnect() -> Bool {
        guard status.active else { return false }
        lock.withLock { reconnectingByHand = true }
        return true
    }

    /// Leaves the namespace.
    open func leaveNamespace() { owner?.disconnectSocket(self) }

    /// Joins the namespace.
    open func joinNamespace(withPayload payload: [String: Any]? = nil) { owner?.connectSocket(self, withPayload: payload) }

    /// Reconnecting began: raises `statusChange` (connecting) and `reconnect` with `reason`.
    open func setReconnecting(reason: String) {
        lock.withLock { ownStatus = .connecting }
        handleClientEvent(.statusChange, data: [SocketIOStatus.connecting, SocketIOStatus.connecting.rawValue])
        handleClientEvent(.reconnect, data: [reason])
    }

    /// Use the manager's ``SocketManager/reconnect()``.
    @available(*, unavailable, message: "Call the manager's reconnect method")
    open func reconnect() {}

    // MARK: Emitting

    /// Emits `event`. When not connected nothing is sent: `error`
    /// `["Tried emitting when not connected"]` is raised and `completion` still runs. `completion`
    /// runs on the handle queue once the event went to the connection.
    open func emit(_ event: String, _ items: any SocketData..., completion: (() -> ())? = nil) {
        emit(event, with: items, completion: completion)
    }

    /// Emits `event` with an array of items (see ``emit(_:_:completion:)``).
    open func emit(_ event: String, with items: [any SocketData], completion: (() -> ())?) {
        send(event, items: items, completion: CallOnQueue(completion))
    }

    private func send(_ event: String, items: [Any], completion: CallOnQueue) {
        let queue = handleQueue
        guard let socket = boundSocket, socket.status == .connected else {
            queue.async {
                self.handleClientEvent(.error, data: ["Tried emitting when not connected"])
                completion.run()
            }
            return
        }
        do {
            try socket.emit(event, arguments: items.map(SocketValues.json))
        } catch {
            let data = HandOff([event, items, error] as [Any])
            queue.async { self.handleClientEvent(.error, data: data.value) }
            return
        }
        queue.async { completion.run() }
    }

    /// Emits `event` asking for an ack: nothing is sent until
    /// ``OnAckCallback/timingOut(after:callback:)`` is called on the result.
    open func emitWithAck(_ event: String, _ items: any SocketData...) -> OnAckCallback {
        emitWithAck(event, with: items)
    }

    /// Emits `event` with an array of items, asking for an ack (see ``emitWithAck(_:_:)``).
    open func emitWithAck(_ event: String, with items: [any SocketData]) -> OnAckCallback {
        do {
            return OnAckCallback(socket: self, event: event, items: try items.map(SocketValues.json))
        } catch {
            let data = HandOff([event, items, error] as [Any])
            handleQueue.async { self.handleClientEvent(.error, data: data.value) }
            return OnAckCallback(socket: nil, event: event, items: [])
        }
    }

    /// Sends the event and waits for its ack: `callback` gets the ack's items, or `["NO ACK"]`
    /// when `seconds` pass first (0: no timeout). A drop does not end the wait; an ack can only
    /// come on the connection the event went out on.
    func sendExpectingAck(_ event: String, items: [JSONValue], seconds: Double, callback: AckOnce) {
        let queue = handleQueue
        if seconds > 0 {
            queue.asyncAfter(deadline: .now() + seconds) { callback.run([SocketAckStatus.noAck.rawValue]) }
        }
        guard let socket = boundSocket, socket.status == .connected else {
            queue.async { self.handleClientEvent(.error, data: ["Tried emitting when not connected"]) }
            return
        }
        socket.emitExpectingAck(event, arguments: items, timeout: nil) { result in
            // Only an answer calls back; a failure (the connection dropped, the socket left)
            // leaves the timeout to answer, as the original's pending acks do.
            guard case .success(let values) = result else { return }
            let items = HandOff(values.map(SocketValues.foundation))
            queue.async { callback.run(items.value) }
        }
    }

    /// Answers the server's ack `ack` with `items`.
    open func emitAck(_ ack: Int, with items: [Any]) {
        guard ack >= 0, let socket = boundSocket else { return }
        do {
            socket.sendAck(id: ack, values: try items.map(SocketValues.json))
        } catch {
            let data = HandOff([ack, items, error] as [Any])
            handleQueue.async { self.handleClientEvent(.error, data: data.value) }
        }
    }

    // MARK: Handlers

    /// Runs the ack handler of `ack` (acks arrive through the connection; this does nothing else).
    open func handleAck(_ ack: Int, data: [Any]) {}

    /// Runs the handlers of a client event, here and now (call it on the handle queue).
    open func handleClientEvent(_ event: SocketClientEvent, data: [Any]) {
        handleEvent(event.rawValue, data: data, isInternalMessage: true)
    }

    /// Runs the any-handler, then the handlers of `event`, here and now (call it on the handle
    /// queue). Server events are dropped unless the socket is connected.
    open func handleEvent(_ event: String, data: [Any], isInternalMessage: Bool, withAck ack: Int = -1) {
        guard isInternalMessage || status == .connected else { return }
        let (any, matching) = lock.withLock { (storedAnyHandler, storedHandlers.filter { $0.event == event }) }
        any?(SocketAnyEvent(event: event, items: data))
        for handler in matching { handler.executeCallback(with: data, withAck: ack, withSocket: self) }
    }

    /// Runs a packet's handlers (an event or an ack).
    open func handlePacket(_ packet: SocketPacket) {
        guard packet.nsp == nsp else { return }
        switch packet.type {
        case .event, .binaryEvent: handleEvent(packet.event, data: packet.args, isInternalMessage: false, withAck: packet.id)
        case .ack, .binaryAck: handleAck(packet.id, data: packet.data)
        case .connect: didConnect(toNamespace: nsp, payload: packet.data.first as? [String: Any])
        case .disconnect: didDisconnect(reason: "Got Disconnect")
        case .error: handleClientEvent(.error, data: packet.data)
        }
    }

    /// Removes the handlers of a client event.
    open func off(clientEvent event: SocketClientEvent) { off(event.rawValue) }

    /// Removes the handlers of `event`.
    open func off(_ event: String) { lock.withLock { storedHandlers.removeAll { $0.event == event } } }

    /// Removes the handler with this id.
    open func off(id: UUID) { lock.withLock { storedHandlers.removeAll { $0.id == id } } }

    /// Adds a handler of `event`; it runs on the handle queue.
    @discardableResult
    open func on(_ event: String, callback: @escaping NormalCallback) -> UUID {
        let handler = SocketEventHandler(event: event, id: UUID(), callback: callback)
        lock.withLock { storedHandlers.append(handler) }
        return handler.id
    }

    /// Adds a handler of a client event; it runs on the handle queue.
    @discardableResult
    open func on(clientEvent event: SocketClientEvent, callback: @escaping NormalCallback) -> UUID {
        on(event.rawValue, callback: callback)
    }

    /// Adds a handler of the next client event only.
    @discardableResult
    open func once(clientEvent event: SocketClientEvent, callback: @escaping NormalCallback) -> UUID {
        once(event.rawValue, callback: callback)
    }

    /// Adds a handler of the next `event` only.
    @discardableResult
    open func once(_ event: String, callback: @escaping NormalCallback) -> UUID {
        let id = UUID()
        let handler = SocketEventHandler(event: event, id: id, callback: { [weak self] data, ack in
            self?.off(id: id)
            callback(data, ack)
        })
        lock.withLock { storedHandlers.append(handler) }
        return id
    }

    /// Sets the handler of every event (client events too), run before the named handlers; a new
    /// call replaces the previous one.
    open func onAny(_ handler: @escaping (SocketAnyEvent) -> ()) { anyHandler = handler }

    /// Removes every named handler (the any-handler stays).
    open func removeAllHandlers() { lock.withLock { storedHandlers.removeAll() } }
}

/// A closure called once, on the handle queue.
// @unchecked Sendable: the closure (plain, as the original's API takes it) is only called on the
// manager's handleQueue, the one serial queue the user chose; `done` is guarded by the lock.
final class AckOnce: @unchecked Sendable {
    private let lock = NIOLock()
    private var callback: AckCallback?

    init(_ callback: @escaping AckCallback) { self.callback = callback }

    func run(_ items: [Any]) {
        guard let callback = lock.withLock({ () -> AckCallback? in defer { self.callback = nil }; return self.callback }) else { return }
        callback(items)
    }
}

/// A completion or timeout handler carried to the handle queue.
// @unchecked Sendable: the closure (plain, as the original's API takes it) is only called on the
// manager's handleQueue, the one serial queue the user chose.
final class CallOnQueue: @unchecked Sendable {
    private let call: (() -> ())?

    init(_ call: (() -> ())?) { self.call = call }

    func run() { call?() }
}

/// Answers the server's ack request; handed to every handler.
public final class SocketAckEmitter: NSObject {
    private weak var socket: SocketIOClient?
    private let ackNum: Int

    /// An emitter answering ack `ackNum` (-1: the server asked for none) on `socket`.
    public init(socket: SocketIOClient, ackNum: Int) {
        self.socket = socket
        self.ackNum = ackNum
    }

    /// Answers without binary scanning.
    public var rawEmitView: SocketRawAckView { SocketRawAckView(socket: socket, ackNum: ackNum) }

    /// Whether the server asked for an ack.
    public var expected: Bool { ackNum != -1 }

    /// Answers the ack with `items` (nothing when none was asked).
    public func with(_ items: any SocketData...) { with(items as [Any]) }

    /// Answers the ack with an array of items (nothing when none was asked).
    public func with(_ items: [Any]) {
        guard expected else { return }
        socket?.emitAck(ackNum, with: items)
    }
}

/// Returned by ``SocketIOClient/emitWithAck(_:_:)``: the event is sent when
/// ``timingOut(after:callback:)`` is called.
public final class OnAckCallback: NSObject {
    private weak var socket: SocketIOClient?
    private let event: String
    private let items: [JSONValue]

    init(socket: SocketIOClient?, event: String, items: [JSONValue]) {
        self.socket = socket
        self.event = event
        self.items = items
    }

    /// Sends the event; `callback` runs on the handle queue with the ack's items, or with
    /// `["NO ACK"]` once `seconds` passed without one (0: it waits as long as it takes; a drop
    /// does not end the wait).
    public func timingOut(after seconds: Double, callback: @escaping AckCallback) {
        guard let socket else { return }
        socket.sendExpectingAck(event, items: items, seconds: seconds, callback: AckOnce(callback))
    }
}

/// Emits without binary scanning (`socket.rawEmitView`); here the same as the socket's emits.
public final class SocketRawView: NSObject {
    private weak var socket: SocketIOClient?

    init(socket: SocketIOClient) { self.socket = socket }

    /// Emits `event`.
    public func emit(_ event: String, _ items: any SocketData...) { socket?.emit(event, with: items, completion: nil) }

    /// Emits `event` with an array of items.
    public func emit(_ event: String, with items: [Any]) { socket?.emit(event, with: items.compactMap { $0 as? any SocketData }, completion: nil) }

    /// Emits `event` asking for an ack.
    public func emitWithAck(_ event: String, _ items: any SocketData...) -> OnAckCallback {
        socket?.emitWithAck(event, with: items) ?? OnAckCallback(socket: nil, event: event, items: [])
    }

    /// Emits `event` with an array of items, asking for an ack.
    public func emitWithAck(_ event: String, with items: [Any]) -> OnAckCallback {
        socket?.emitWithAck(event, with: items.compactMap { $0 as? any SocketData }) ?? OnAckCallback(socket: nil, event: event, items: [])
    }
}

/// Answers an ack without binary scanning (`ack.rawEmitView`); here the same as the emitter.
public final class SocketRawAckView: NSObject {
    private weak var socket: SocketIOClient?
    private let ackNum: Int

    init(socket: SocketIOClient?, ackNum: Int) {
        self.socket = socket
        self.ackNum = ackNum
    }

    /// Answers the ack with `items`.
    public func with(_ items: any SocketData...) { with(items as [Any]) }

    /// Answers the ack with an array of items.
    public func with(_ items: [Any]) {
        guard ackNum != -1 else { return }
        socket?.emitAck(ackNum, with: items)
    }
}
