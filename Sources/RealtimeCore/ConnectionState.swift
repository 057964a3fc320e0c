/// Where a realtime connection is in its life.
public enum ConnectionState: Sendable, CustomStringConvertible {
    /// Opening the first connection.
    case connecting
    /// A connection is open.
    case connected
    /// Waiting for, or making, reconnect attempt `attempt` (1-based) after a drop.
    case reconnecting(attempt: Int)
    /// Stopped. `error` is nil when the user closed the connection, else what ended it.
    case disconnected(RealtimeError?)

    /// Whether a connection is open.
    public var isConnected: Bool {
        if case .connected = self { return true }
        return false
    }

    /// Whether no connection is open or being made.
    public var isDisconnected: Bool {
        if case .disconnected = self { return true }
        return false
    }

    /// A readable summary, for logs and messages.
    public var description: String {
        switch self {
        case .connecting: "connecting"
        case .connected: "connected"
        case .reconnecting(let attempt): "reconnecting(attempt: \(attempt))"
        case .disconnected(let error): error.map { "disconnected(\($0.code))" } ?? "disconnected"
        }
    }
}

extension ConnectionState: Equatable {
    /// Two states are equal when their cases, attempts and error codes are.
    public static func == (lhs: ConnectionState, rhs: ConnectionState) -> Bool {
        switch (lhs, rhs) {
        case (.connecting, .connecting), (.connected, .connected): true
        case (.reconnecting(let a), .reconnecting(let b)): a == b
        case (.disconnected(let a), .disconnected(let b)): a?.code == b?.code
        default: false
        }
    }
}
