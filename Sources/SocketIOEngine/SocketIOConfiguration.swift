public import RealtimeCore

/// Everything a ``SocketManager`` needs: the Engine.IO transport options, reconnection, the offline
/// queue and the runtime.
public struct SocketIOConfiguration: Sendable {
    /// The server's protocol generation: ``SocketIOVersion/v3`` (socket.io 3.x and 4.x, the
    /// default) or ``SocketIOVersion/v2`` (socket.io 2.x servers).
    public var version: SocketIOVersion = .v3
    /// Transports, path, query, headers, TLS and timeouts.
    public var engine: EngineIOOptions = EngineIOOptions()
    /// Whether to reconnect after the connection drops. Default on, as in the JavaScript client.
    public var reconnection: Bool = true
    /// Reconnect attempts before giving up; nil retries forever (the default).
    public var reconnectionAttempts: Int? = nil
    /// The first reconnect delay (1 s), doubled per attempt up to `reconnectionDelayMax` (5 s).
    public var reconnectionDelay: Duration = .seconds(1)
    /// The longest delay between reconnect attempts (default 5 s).
    public var reconnectionDelayMax: Duration = .seconds(5)
    /// Spread of each delay, ±factor (0.5).
    public var randomizationFactor: Double = 0.5
    /// Consulted before each reconnect attempt; the manager waits until it reports the network up.
    public var reachability: any Reachability = PollingReachability()
    /// Capacity of each namespace's offline queue (emits made while not connected), and what to do
    /// when it is full.
    public var offlineQueueCapacity: Int = 100
    /// What an emit does when the offline queue is full: refused (the default) or the oldest
    /// queued emit dropped.
    public var offlineQueueOverflow: OverflowPolicy = .rejectNewest
    /// The ack timeout of an `emitWithAck` that names none, and of each try with ``retries``.
    /// Default 10 s. (The JavaScript client's `ackTimeout`.)
    public var ackTimeout: Duration = .seconds(10)
    /// Above 0, every emit of a socket goes through its retry queue, as with the JavaScript
    /// client's `retries` (socket.io-client 4.6): one emit in flight per socket, in order, each with
    /// an ack asked for; a try that gets no ack within ``ackTimeout`` (or is cut by a drop) is sent
    /// again, up to `retries` more times. Delivered at least once: the server may see an emit more
    /// than once. An `emitWithAck` gets the last try's outcome; an `emit` that runs out of tries is
    /// reported by the `dropped` and `error` events. Default 0: emits go out at once, no retry.
    public var retries: Int = 0
    /// Gives every emit an id that a server can check to handle each emit once, as the last
    /// argument: `{"emitId": "<socket>-<n>"}` with ``SocketIOEmitIDs/lastArgument(key:)``'s
    /// default key. The id is made when the emit is, so every copy the server may get (one
    /// re-sent after a drop, another try with ``retries``) carries the same one; `<socket>` is random
    /// per socket, `<n>` counts the socket's emits from 1. The `resent` and `dropped` events and
    /// `onAnyOutgoing` show it among the arguments. Default nil: no id, the arguments as given.
    public var emitIDs: SocketIOEmitIDs? = nil
    /// Threads, HTTP client, logger and clock.
    public var runtime: RealtimeRuntime = .shared
    /// The `client` dimension of this manager's metrics (Docs/Metrics.md). Default `default`.
    public var clientLabel = "default"

    /// Makes a value with every default.
    public init() {}

    package var reconnectPolicy: ReconnectPolicy {
        guard reconnection else { return .disabled }
        return ReconnectPolicy(
            backoff: .exponential(
                initial: reconnectionDelay, maximum: reconnectionDelayMax, multiplier: 2,
                randomizationFactor: randomizationFactor, maxAttempts: reconnectionAttempts),
            reachability: reachability)
    }
}

/// Where ``SocketIOConfiguration/emitIDs`` puts each emit's id. The Socket.IO protocol hands a
/// server's handler nothing but the event's arguments (not even the packet's ack id, which changes
/// with every try), so the id travels as one more argument, which the handler reads and checks.
public struct SocketIOEmitIDs: Sendable, Hashable {
    /// The key of the object added as each emit's last argument.
    public var key: String

    /// The id as the emit's last argument, an object with one member: `{"<key>": "<id>"}`.
    public static func lastArgument(key: String = "emitId") -> SocketIOEmitIDs { SocketIOEmitIDs(key: key) }
}

/// Which generation of Socket.IO servers a ``SocketManager`` speaks to. The two do not mix: a
/// socket.io 2.x server refuses `EIO=4`, and a 3.x/4.x server refuses `EIO=3` unless it was started
/// with `allowEIO3`.
public enum SocketIOVersion: Sendable, Hashable, CaseIterable {
    /// socket.io 2.x servers (Engine.IO protocol 3, Socket.IO protocol 4): `EIO=3`, the client
    /// pings and the server answers, length-prefixed polling payloads, the default namespace joined
    /// by the server at the handshake. Auth has no CONNECT payload there: the default namespace's
    /// goes in the handshake's query, another namespace's in its CONNECT's query
    /// (`40/chat?token=x,`). socket.io-client-swift's `.version(.two)`.
    case v2
    /// socket.io 3.x and 4.x servers (Engine.IO protocol 4, Socket.IO protocol 5). The default.
    case v3

    /// The Engine.IO protocol revision (`EIO` in the query).
    var engineIORevision: Int { self == .v2 ? 3 : 4 }
}

/// The auth payload a namespace sends with its CONNECT packet.
public enum SocketIOAuth: Sendable {
    /// No auth payload.
    case none
    /// A fixed JSON object.
    case value(JSONValue)
    /// Evaluated before every connection attempt (a fresh token after a reconnect).
    case provider(@Sendable () async throws -> JSONValue)

    func resolve() async throws -> JSONValue? {
        switch self {
        case .none: return nil
        case .value(let value): return value
        case .provider(let provider): return try await provider()
        }
    }
}

/// The state of one namespace socket, with the raw values socket.io-client-swift uses.
public enum SocketIOStatus: Int, Sendable, CustomStringConvertible {
    /// Never connected.
    case notConnected = 0
    /// Disconnected: by `disconnect()`, the server, or reconnection giving up.
    case disconnected = 1
    /// Connecting (or reconnecting).
    case connecting = 2
    /// Connected: emits go out at once.
    case connected = 3

    /// Connecting or connected.
    public var active: Bool { self == .connecting || self == .connected }

    /// A readable summary, for logs and messages.
    public var description: String {
        switch self {
        case .notConnected: "notConnected"
        case .disconnected: "disconnected"
        case .connecting: "connecting"
        case .connected: "connected"
        }
    }
}

/// Events the client itself raises, next to the server's events. Handlers registered by name with
/// the raw value (`socket.on("connect")`) see them too.
public enum SocketClientEvent: String, Sendable, CaseIterable {
    /// The namespace is connected; data: `[namespace, {"sid": ...}]`.
    case connect
    /// The namespace is disconnected; data: `[reason]`.
    case disconnect
    /// Something failed (CONNECT_ERROR, a protocol error, a full queue); data: `[message]`.
    case error
    /// The server pinged.
    case ping
    /// A reconnection succeeded; data: `[attempt]`.
    case reconnect
    /// A reconnect attempt starts; data: `[attempt]`.
    case reconnectAttempt
    /// Reconnection gave up; data: `[message]`.
    case reconnectFailed = "reconnect_failed"
    /// The status changed; data: `[status raw value]`.
    case statusChange
    /// The transport moved from polling to WebSocket.
    case websocketUpgrade
    /// Emits were dropped (the offline queue was full, a queued emit was over the server's
    /// `maxPayload`, or, with `retries`, its tries ran out); data: one object per emit,
    /// `{"event": name, "data": [arguments], "ackId": id, "delivery": "notSent" | "possiblySent"}`,
    /// oldest first (`ackId` only for an emit with an ack, whose ack also fails with `queueFull`;
    /// `tries` instead for a `retries` emit). `notSent`: no connection was ever given it, so the
    /// server does not have it. `possiblySent`: it was written to a connection that broke before
    /// the server confirmed it (or a try got no ack), so the server may have it.
    case dropped
    /// Emits written to a connection that broke before the server confirmed them were sent again
    /// (or, with `retries`, a try was sent again): the server may see them twice. Data: one object
    /// per emit, `{"event": name, "data": [arguments]}` (`tries` for a `retries` emit), in the
    /// order they went out again.
    case resent
}

/// What may have become of an emit that was dropped, as the ``SocketClientEvent/dropped`` event
/// names it.
public enum SocketIODelivery: String, Sendable, Hashable {
    /// No connection was ever given it: the server does not have it.
    case notSent
    /// Written to a connection that broke before the server confirmed it, or (with `retries`) sent
    /// and never acknowledged: the server may or may not have it.
    case possiblySent
}

/// Counts of what became of the emits a connection drop, a full queue or a server limit touched
/// (``SocketIOClient/deliveryCounts``).
public struct SocketIODeliveryCounts: Sendable, Hashable {
    /// Emits dropped that no connection was ever given.
    public var notSent: Int
    /// Emits dropped after being written to a connection that broke before the server confirmed
    /// them (or, with `retries`, after tries that got no ack).
    public var possiblySent: Int
    /// Sends of an emit again after it was written to a connection that broke (or, with `retries`,
    /// every try after the first): each one the server may see a second time.
    public var resent: Int
    /// Emits written to a connection that then broke, that had left the resend window
    /// (``EngineIOOptions/resendWindow``) before the break with no ack confirming them since: not
    /// sent again, and the server may not have them. They are counted and reported in an `error`
    /// event, not named (the window no longer held them). An ack of an emit that had itself left
    /// the window is not seen, so this can count emits that did arrive.
    public var leftResendWindow: Int

    public init(notSent: Int = 0, possiblySent: Int = 0, resent: Int = 0, leftResendWindow: Int = 0) {
        self.notSent = notSent
        self.possiblySent = possiblySent
        self.resent = resent
        self.leftResendWindow = leftResendWindow
    }

    mutating func count(_ delivery: SocketIODelivery) {
        switch delivery {
        case .notSent: notSent += 1
        case .possiblySent: possiblySent += 1
        }
    }

    mutating func countDropped(_ frame: EngineIOFrame) { count(frame.wasWritten ? .possiblySent : .notSent) }
}
