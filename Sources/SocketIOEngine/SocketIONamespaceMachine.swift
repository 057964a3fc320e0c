#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import RealtimeCore

/// The lifecycle of one namespace (``SocketIOClient``) as a value: each input is a `mutating func`
/// that returns what its owner does next (the status to publish, the `connect(timeout:)` calls to
/// resume, the events to deliver). No sockets, no tasks: the owner holds it under its lock, with the
/// offline queue and the pending acks, and does the I/O; the rules are tested directly
/// (`SocketIONamespaceMachineTests`). `Waiter` is the owner's continuation (a plain value in the tests).
///
/// Statuses: notConnected → connecting → connected → connecting (the connection dropped and the
/// app still wants the namespace) → connected …, and disconnected when the app disconnects, the
/// server refuses or disconnects the namespace, or the manager stops for good.
///
/// Connection state recovery: the server's `pid` and the offset of the last event received are
/// kept across connections and sent with the next CONNECT; a CONNECT answer with the same `pid`
/// means the session was recovered (the server replays what was missed), and a server DISCONNECT
/// forgets them (nothing to recover).
struct SocketIONamespaceMachine<Waiter> {
    private(set) var status: SocketIOStatus = .notConnected
    /// The app wants the namespace connected: from a connect until a disconnect, a refusal, a
    /// server DISCONNECT or the manager's end. The manager reconnects while it is set.
    private(set) var wantsConnection = false
    private(set) var sid: String?
    private(set) var pid: String?
    private(set) var lastOffset: String?
    /// Whether the last CONNECT answer recovered the previous session.
    private(set) var recovered = false
    /// Events that arrived before the CONNECT answer, delivered right after it.
    private var receiveBuffer: [SocketIOPacket] = []
    private var waiters: [UUID: Waiter] = [:]

    /// What ends the wait of every `connect(timeout:)` call, and the status to publish.
    struct Ending {
        /// The namespace was wanted or connected before.
        var wasActive: Bool
        var waiters: [Waiter]
        /// The new status, when it changed.
        var published: SocketIOStatus?
    }

    /// What the CONNECT answer changes.
    struct Connected {
        /// Events that arrived before it, to deliver now, in order.
        var buffered: [SocketIOPacket]
        /// The `connect(timeout:)` calls to resume.
        var waiters: [Waiter]
        var published: SocketIOStatus?
    }

    /// What the end of the Engine.IO session changes.
    struct SessionClosed {
        /// The namespace was connected on it (the app is told of the disconnect).
        var wasConnected: Bool
        /// connecting when the app still wants the namespace (the manager reconnects), else disconnected.
        var status: SocketIOStatus
        var published: SocketIOStatus?
    }

    enum WaitAction {
        /// Connected already: resume it now.
        case resume(Waiter)
        /// It waits for the CONNECT answer; the owner starts the connection.
        case waiting
    }

    private mutating func move(to new: SocketIOStatus) -> SocketIOStatus? {
        guard status != new else { return nil }
        status = new
        return new
    }

    private mutating func takeWaiters() -> [Waiter] {
        defer { waiters = [:] }
        return Array(waiters.values)
    }

    // MARK: The app

    /// The app asks for the namespace (connect). Returns the status to publish.
    mutating func requestConnection() -> SocketIOStatus? {
        wantsConnection = true
        if status == .connected { return nil }
        return move(to: .connecting)
    }

    /// A `connect(timeout:)` call waits for the CONNECT answer.
    mutating func waitForConnection(_ id: UUID, _ waiter: Waiter) -> WaitAction {
        if status == .connected { return .resume(waiter) }
        waiters[id] = waiter
        return .waiting
    }

    /// That call gave up (its timeout, its task's cancellation): returns it, to be resumed once.
    mutating func stopWaiting(_ id: UUID) -> Waiter? {
        waiters.removeValue(forKey: id)
    }

    /// The app disconnects the namespace: no reconnect, every waiting connect fails.
    mutating func disconnect() -> Ending {
        let wasActive = wantsConnection || status == .connected
        wantsConnection = false
        receiveBuffer = []
        let published = move(to: .disconnected)
        return Ending(wasActive: wasActive, waiters: takeWaiters(), published: published)
    }

    // MARK: The server

    /// The CONNECT packet goes out on a new session.
    mutating func sendingConnect() -> SocketIOStatus? {
        move(to: .connecting)
    }

    /// The server accepted the namespace with this `sid` (and `pid`, with connection state recovery).
    mutating func connected(sid: String?, pid: String?) -> Connected {
        recovered = pid != nil && pid == self.pid
        self.pid = pid
        if !recovered { lastOffset = nil }
        self.sid = sid
        let published = move(to: .connected)
        defer { receiveBuffer = [] }
        return Connected(buffered: receiveBuffer, waiters: takeWaiters(), published: published)
    }

    /// The server refused the namespace (CONNECT_ERROR): no reconnect, every waiting connect fails.
    mutating func refused() -> Ending {
        let wasActive = wantsConnection
        wantsConnection = false
        return Ending(wasActive: wasActive, waiters: takeWaiters(), published: move(to: .disconnected))
    }

    /// The server disconnected the namespace: no reconnect, and nothing to recover.
    mutating func serverDisconnected() -> SocketIOStatus? {
        wantsConnection = false
        pid = nil
        lastOffset = nil
        return move(to: .disconnected)
    }

    /// An event arrived: true when it is held until the CONNECT answer (it was sent before it).
    mutating func holdsEvent(_ packet: @autoclosure () -> SocketIOPacket) -> Bool {
        guard status != .connected else { return false }
        receiveBuffer.append(packet())
        return true
    }

    /// An event's arguments: with connection state recovery the server appends its offset, which is
    /// recorded (sent on the next CONNECT) and returned, to be taken off the arguments.
    mutating func recordOffset(_ arguments: [JSONValue]) -> String? {
        guard pid != nil, arguments.count > 1, case .string(let offset) = arguments.last else { return nil }
        lastOffset = offset
        return offset
    }

    // MARK: The connection

    /// The Engine.IO session ended; the manager reconnects while the app wants the namespace.
    mutating func sessionClosed() -> SessionClosed {
        let wasConnected = status == .connected
        receiveBuffer = []
        let status: SocketIOStatus = wantsConnection ? .connecting : .disconnected
        return SessionClosed(wasConnected: wasConnected, status: status, published: move(to: status))
    }

    /// The manager stopped for good (closed, or reconnection gave up): every waiting connect fails.
    mutating func managerStopped() -> Ending {
        let wasActive = wantsConnection
        wantsConnection = false
        return Ending(wasActive: wasActive, waiters: takeWaiters(), published: move(to: .disconnected))
    }
}

extension SocketIONamespaceMachine: Sendable where Waiter: Sendable {}
