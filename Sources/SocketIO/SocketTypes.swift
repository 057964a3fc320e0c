public import Foundation
internal import RealtimeCore
internal import SocketIOEngine

// socket.io-client-swift's value types, protocols and typealiases, declared by this module with
// the original's names and shapes. The engine underneath is SocketIOEngine, which this module
// imports without re-exporting: `import SocketIO` shows only socket.io-client-swift's API.

/// The type of a handler of ``SocketIOClient/on(_:callback:)``: the event's items and the emitter
/// that answers the server's ack.
public typealias NormalCallback = ([Any], SocketAckEmitter) -> ()

/// The type of ``OnAckCallback/timingOut(after:callback:)``'s callback: the ack's items, or
/// `["NO ACK"]` when the time ran out.
public typealias AckCallback = ([Any]) -> ()

/// A message waiting to be posted by a polling engine, with its completion.
public typealias Post = (msg: String, completion: (() -> ())?)

/// The state of a socket or a manager.
@frozen
public enum SocketIOStatus: Int, CustomStringConvertible, Sendable {
    /// Never connected, or reset.
    case notConnected = 0
    /// Was connected and will not reconnect.
    case disconnected = 1
    /// Connecting or reconnecting.
    case connecting = 2
    /// Connected.
    case connected = 3

    /// Connected or connecting.
    public var active: Bool { self == .connected || self == .connecting }

    /// The case's name.
    public var description: String {
        switch self {
        case .connected: "connected"
        case .connecting: "connecting"
        case .disconnected: "disconnected"
        case .notConnected: "notConnected"
        }
    }
}

/// The events the client raises itself. Handlers registered with the raw value
/// (`socket.on("connect")`) see them too.
public enum SocketClientEvent: String, Sendable {
    /// The namespace is connected; data `[namespace]` or `[namespace, payload]`.
    case connect
    /// The socket stopped for good (not on a drop that will be reconnected); data `[reason]`.
    case disconnect
    /// Something failed; data `[reason]` (or the server's CONNECT_ERROR data).
    case error
    /// A ping; data `[]`.
    case ping
    /// A pong (socket.io 3+: the answer to the WebSocket probe); data `[]`.
    case pong
    /// Reconnecting began; data `[reason]`.
    case reconnect
    /// A reconnect attempt starts; data `[attempts remaining]` (negative without a limit).
    case reconnectAttempt
    /// The status changed; data `[SocketIOStatus, rawValue]`.
    case statusChange
    /// The WebSocket is in use; data `[headers]`.
    case websocketUpgrade
}

/// The marker an ack callback gets when the time ran out.
public enum SocketAckStatus: String, Sendable {
    /// `"NO ACK"`: the ack did not come in time.
    case noAck = "NO ACK"

    /// Whether `lhs` is this status's raw value.
    public static func == (lhs: String, rhs: SocketAckStatus) -> Bool { lhs == rhs.rawValue }

    /// Whether `rhs` is this status's raw value.
    public static func == (lhs: SocketAckStatus, rhs: String) -> Bool { lhs.rawValue == rhs }
}

/// Which servers the client speaks to.
public enum SocketIOVersion: Int, Sendable {
    /// socket.io 2.x servers (Engine.IO 3).
    case two = 2
    /// socket.io 3.x and 4.x servers (Engine.IO 4); the default.
    case three = 3
}

/// Values that can be emitted. A custom type conforms by returning another `SocketData` (a
/// dictionary, an array, a string...); the JSON types, `Data`, arrays and dictionaries conform.
public protocol SocketData {
    /// The value to send in place of this one.
    func socketRepresentation() throws -> any SocketData
}

extension SocketData {
    /// The value itself.
    public func socketRepresentation() -> any SocketData { self }
}

extension Array: SocketData {}
extension Bool: SocketData {}
extension Dictionary: SocketData {}
extension Double: SocketData {}
extension Int: SocketData {}
extension NSArray: SocketData {}
extension Data: SocketData {}
extension NSData: SocketData {}
extension NSDictionary: SocketData {}
extension NSString: SocketData {}
extension NSNull: SocketData {}
extension String: SocketData {}

/// The JSON form of emitted values.
enum SocketValues {
    /// `value` as JSON: a custom `SocketData` is replaced by its representation until a JSON type
    /// remains.
    static func json(_ value: Any) throws -> JSONValue {
        switch value {
        case let value as [Any]: return .array(try value.map(json))
        case let value as [String: Any]:
            var members: [String: JSONValue] = [:]
            for (key, element) in value { members[key] = try json(element) }
            return try JSONValue(any: members)
        case is String, is Bool, is Int, is Double, is Data, is NSNull, is NSNumber, is NSString, is NSArray, is NSDictionary:
            return try JSONValue(any: value)
        case let value as any SocketData:
            let next = try value.socketRepresentation()
            if type(of: next) == type(of: value), !(next is [Any]), !(next is [String: Any]) {
                return try JSONValue(any: next)
            }
            return try json(next)
        default:
            return try JSONValue(any: value)
        }
    }

    /// Received JSON as the original's Foundation values: numbers as `NSNumber` (so `as? Double`
    /// and `as? Int` both work for whole numbers), strings, `Bool`, `NSNull`, `Data`, `[Any]` and
    /// `[String: Any]`.
    static func foundation(_ value: JSONValue) -> Any {
        switch value {
        case .null: NSNull()
        case .bool(let flag): flag
        case .number(let number): NSNumber(value: number)
        case .integer(let number): NSNumber(value: number)
        case .unsignedInteger(let number): NSNumber(value: number)
        case .string(let text): text
        case .array(let elements): elements.map(foundation)
        case .object(let members): Dictionary(uniqueKeysWithValues: members.map { ($0.key, foundation($0.value)) })
        case .binary(let data): data
        }
    }
}

/// What an ``SocketIOClient/onAny(_:)`` handler gets: the event's name and items.
public final class SocketAnyEvent: NSObject {
    /// The event's name.
    public let event: String
    /// The event's items.
    public let items: [Any]?

    init(event: String, items: [Any]?) {
        self.event = event
        self.items = items
    }

    /// `SocketAnyEvent: Event: <event> items: <items>`.
    override public var description: String { "SocketAnyEvent: Event: \(event) items: \(String(describing: items ?? []))" }
}

/// One handler registered on a socket.
public struct SocketEventHandler {
    /// The event it handles.
    public let event: String
    /// Its id (for ``SocketIOClient/off(id:)``).
    public let id: UUID
    /// The handler.
    public let callback: NormalCallback

    /// Calls the handler with the items and an emitter for `ack` (-1: no ack asked).
    public func executeCallback(with items: [Any], withAck ack: Int, withSocket socket: SocketIOClient) {
        callback(items, SocketAckEmitter(socket: socket, ackNum: ack))
    }
}

/// Errors of packet parsing.
public enum SocketParsableError: Error {
    /// The packet's data is not an array.
    case invalidDataArray
    /// The packet could not be read.
    case invalidPacket
    /// The packet's type is unknown.
    case invalidPacketType
}

/// Engine.IO packet types.
public enum SocketEnginePacketType: Int, Sendable {
    /// open
    case open = 0
    /// close
    case close = 1
    /// ping
    case ping = 2
    /// pong
    case pong = 3
    /// message
    case message = 4
    /// upgrade
    case upgrade = 5
    /// noop
    case noop = 6
}

/// A Socket.IO packet, as the parser reads it.
public struct SocketPacket: CustomStringConvertible {
    /// Socket.IO packet types.
    public enum PacketType: Int, Sendable {
        /// CONNECT
        case connect = 0
        /// DISCONNECT
        case disconnect = 1
        /// CONNECT_ERROR (ERROR in socket.io 2)
        case error = 2
        /// EVENT
        case event = 3
        /// ACK
        case ack = 4
        /// BINARY_EVENT
        case binaryEvent = 5
        /// BINARY_ACK
        case binaryAck = 6

        /// Binary event or binary ack.
        public var isBinary: Bool { self == .binaryEvent || self == .binaryAck }
    }

    /// The namespace.
    public let nsp: String
    /// The ack id; -1 when none.
    public let id: Int
    /// The type.
    public let type: PacketType
    /// The binary attachments.
    public internal(set) var binary: [Data]
    /// The data, with the event's name first for events.
    public internal(set) var data: [Any]

    /// The data without the event's name.
    public var args: [Any] { type == .event || type == .binaryEvent ? Array(data.dropFirst()) : data }

    /// The event's name (the first item).
    public var event: String { data.first.map { String(describing: $0) } ?? "" }

    /// The packet as text (binary attachments as placeholders).
    public var packetString: String {
        var text = "\(type.rawValue)"
        if type.isBinary { text += "\(binary.count)-" }
        if nsp != "/" { text += nsp + "," }
        if id >= 0 { text += "\(id)" }
        if let json = try? SocketValues.json(data.map(Self.placeholders)), !data.isEmpty || type.rawValue >= 2 {
            text += JSONWriter.string(json)
        }
        return text
    }

    private static func placeholders(_ value: Any) -> Any { value }

    /// A summary for logs.
    public var description: String { "SocketPacket {type: \(type.rawValue); data: \(data); id: \(id); placeholders: \(binary.count); nsp: \(nsp)}" }

    init(type: PacketType, nsp: String, id: Int = -1, data: [Any] = [], binary: [Data] = []) {
        self.type = type
        self.nsp = nsp
        self.id = id
        self.data = data
        self.binary = binary
    }

    /// Reads a packet's text (without binary attachments); nil when it is not a valid packet.
    static func parse(_ message: String) -> SocketPacket? {
        guard let first = message.first, let typeNumber = Int(String(first)), let type = PacketType(rawValue: typeNumber) else { return nil }
        var rest = Substring(message.dropFirst())
        var attachments = 0
        if type.isBinary {
            guard let dash = rest.firstIndex(of: "-"), let count = Int(rest[..<dash]) else { return nil }
            attachments = count
            rest = rest[rest.index(after: dash)...]
        }
        var nsp = "/"
        if rest.first == "/" {
            let end = rest.firstIndex(of: ",") ?? rest.endIndex
            nsp = String(rest[..<end])
            rest = end == rest.endIndex ? "" : rest[rest.index(after: end)...]
        }
        let digits = rest.prefix { $0.isNumber }
        let id = Int(digits) ?? -1
        rest = rest.dropFirst(digits.count)
        var data: [Any] = []
        if !rest.isEmpty {
            guard let json = try? JSONSerialization.jsonObject(with: Data(rest.utf8), options: [.fragmentsAllowed]) else { return nil }
            data = json as? [Any] ?? [json]
        }
        _ = attachments
        return SocketPacket(type: type, nsp: nsp, id: id, data: data)
    }
}
