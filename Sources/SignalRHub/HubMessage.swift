public import OrderedCollections
public import RealtimeCore

/// Headers a hub message may carry (string to string, in wire order).
public typealias HubHeaders = OrderedDictionary<String, String>

/// A SignalR hub message (HubProtocol.md, "Message Types"). Arguments, items and results are
/// `JSONValue`s for both protocols: MessagePack integers and floats become numbers, `bin` values
/// `.binary`, timestamps ISO 8601 strings.
public enum HubMessage: Sendable, Equatable {
    /// Type 1: call `target`; a reply is expected when `invocationId` is set.
    case invocation(HubInvocation)
    /// Type 2: one item of a stream.
    case streamItem(HubStreamItem)
    /// Type 3: the end of an invocation or a stream.
    case completion(HubCompletion)
    /// Type 4: start a server-to-client stream.
    case streamInvocation(HubInvocation)
    /// Type 5: stop a stream.
    case cancelInvocation(HubCancelInvocation)
    /// Type 6: keep-alive.
    case ping
    /// Type 7: the peer closes the connection.
    case close(HubClose)
    /// Type 8: stateful reconnect, the highest sequence id processed.
    case ack(sequenceId: Int64)
    /// Type 9: stateful reconnect, the sequence id of the next message.
    case sequence(sequenceId: Int64)

    /// An invocation, a stream item, a completion or a cancellation: not one of the protocol's own
    /// messages (Ping, Close, Ack, Sequence).
    var isApplicationMessage: Bool {
        switch self {
        case .invocation, .streamItem, .completion, .streamInvocation, .cancelInvocation: true
        case .ping, .close, .ack, .sequence: false
        }
    }

    /// The wire type number.
    public var type: Int {
        switch self {
        case .invocation: 1
        case .streamItem: 2
        case .completion: 3
        case .streamInvocation: 4
        case .cancelInvocation: 5
        case .ping: 6
        case .close: 7
        case .ack: 8
        case .sequence: 9
        }
    }

    /// Whether stateful reconnect numbers this message (types 1 to 5).
    public var isSequenced: Bool { (1...5).contains(type) }
}

/// A call of a method: the server's call of a client method, or the client's of a hub method.
public struct HubInvocation: Sendable, Equatable {
    /// The message's headers.
    public var headers: HubHeaders
    /// Absent for a fire-and-forget invocation (`send`).
    public var invocationId: String?
    /// The method's name.
    public var target: String
    /// The arguments.
    public var arguments: [JSONValue]
    /// Ids of the upload streams that follow this invocation.
    public var streamIds: [String]

    /// Makes an invocation; every parameter is the property of the same name.
    public init(
        invocationId: String? = nil, target: String, arguments: [JSONValue] = [], streamIds: [String] = [],
        headers: HubHeaders = [:]
    ) {
        self.headers = headers
        self.invocationId = invocationId
        self.target = target
        self.arguments = arguments
        self.streamIds = streamIds
    }
}

/// One item of a stream.
public struct HubStreamItem: Sendable, Equatable {
    /// The message's headers.
    public var headers: HubHeaders
    /// The stream's invocation ID.
    public var invocationId: String
    /// The item.
    public var item: JSONValue

    /// Makes a stream item; every parameter is the property of the same name.
    public init(invocationId: String, item: JSONValue, headers: HubHeaders = [:]) {
        self.headers = headers
        self.invocationId = invocationId
        self.item = item
    }
}

/// The end of an invocation or a stream: a result, an error, or nothing.
public struct HubCompletion: Sendable, Equatable {
    /// How the invocation ended.
    public enum Outcome: Sendable, Equatable {
        /// No result (a `void` hub method, or the end of a stream).
        case void
        /// A result, possibly `null`.
        case result(JSONValue)
        /// The hub method failed with this message.
        case error(String)
    }

    /// The message's headers.
    public var headers: HubHeaders
    /// The invocation it completes.
    public var invocationId: String
    /// How it ended.
    public var outcome: Outcome

    /// Makes a completion; every parameter is the property of the same name.
    public init(invocationId: String, outcome: Outcome, headers: HubHeaders = [:]) {
        self.headers = headers
        self.invocationId = invocationId
        self.outcome = outcome
    }
}

/// Asks the other side to stop a stream.
public struct HubCancelInvocation: Sendable, Equatable {
    /// The message's headers.
    public var headers: HubHeaders
    /// The stream's invocation ID.
    public var invocationId: String

    /// Makes a cancellation; every parameter is the property of the same name.
    public init(invocationId: String, headers: HubHeaders = [:]) {
        self.headers = headers
        self.invocationId = invocationId
    }
}

/// The server is closing the connection.
public struct HubClose: Sendable, Equatable {
    /// Why, if the close is an error.
    public var error: String?
    /// Whether the server allows the client to reconnect.
    public var allowReconnect: Bool

    /// Makes a close message; every parameter is the property of the same name.
    public init(error: String? = nil, allowReconnect: Bool = false) {
        self.error = error
        self.allowReconnect = allowReconnect
    }
}

/// Why bytes from the server are not a valid hub message. The connection ends with
/// `SignalRError/Code/protocolViolation` carrying this error.
public struct HubProtocolError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What is wrong with the message.
    public let reason: String

    /// Makes the error with its reason.
    public init(_ reason: String) { self.reason = reason }

    /// A readable summary, for logs and messages.
    public var description: String { reason }
}
