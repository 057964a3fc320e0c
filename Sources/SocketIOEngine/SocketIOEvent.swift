public import Foundation
public import RealtimeCore
import OrderedCollections

/// An event from the server, as a handler sees it.
public struct SocketIOEvent: Sendable {
    /// The event name (numbers, which servers may use as names, come as their decimal text).
    public let name: String
    /// The arguments after the name (without the recovery offset; see ``offset``).
    public let arguments: [JSONValue]
    /// The ack id the server asked for, or nil.
    public let ackID: Int?
    /// With connection state recovery, the server's offset for this event (it travels as the last
    /// argument); sent back on reconnect so the server can replay what was missed.
    public let offset: String?
    /// The socket that answers the ack; nil when the server asked for none.
    let socket: SocketIOClient?

    init(name: String, arguments: [JSONValue], ackID: Int?, offset: String? = nil, socket: SocketIOClient?) {
        self.name = name
        self.arguments = arguments
        self.ackID = ackID
        self.offset = offset
        self.socket = socket
    }

    /// The arguments as the JavaScript client gives them: with the offset as the last one.
    public var argumentsWithOffset: [JSONValue] { arguments + (offset.map { [.string($0)] } ?? []) }

    /// Whether the server waits for an answer (call ``ack(_:)``).
    public var expectsAck: Bool { ackID != nil }

    /// Answers the server's ack with these values (once; later calls are ignored).
    public func ack(_ values: JSONValue...) { ack(arguments: values) }

    /// Answers the server's ack with these values (once; later calls are ignored).
    public func ack(arguments values: [JSONValue]) {
        guard let ackID, let socket else { return }
        socket.sendAck(id: ackID, values: values)
    }

    /// Decodes argument `index` as `T` (through `JSONDecoder`).
    public func decode<T: Decodable>(_ type: T.Type = T.self, at index: Int = 0) throws -> T {
        guard arguments.indices.contains(index) else {
            throw DecodingError.valueNotFound(T.self, .init(codingPath: [], debugDescription: "event \(name) has no argument \(index)"))
        }
        return try arguments[index].decode(T.self)
    }
}

/// What ``SocketIOClient/onAny(_:)`` handlers receive: every server event, plus the client events.
public struct SocketAnyEvent: Sendable, CustomStringConvertible {
    /// The event's name.
    public let event: String
    /// The event's arguments.
    public let arguments: [JSONValue]
    /// The arguments as Foundation values (`String`, `Int`, `Double`, `Bool`, `NSNull`, `Data`,
    /// arrays and `[String: Any]`), as socket.io-client-swift gave them.
    public var items: [Any]? { arguments.map(\.anyValue) }
    /// A readable summary, for logs and messages.
    public var description: String { "SocketAnyEvent: Event: \(event) items: \(arguments)" }
}

/// Values that can be emitted: the JSON types, `Data` for binary, arrays and dictionaries of them,
/// and `JSONValue` itself.
public protocol SocketData {
    /// The value as JSON; throws for values that have no JSON form.
    func socketRepresentation() throws -> JSONValue
}

extension JSONValue: SocketData { public func socketRepresentation() -> JSONValue { self } }
extension String: SocketData { public func socketRepresentation() -> JSONValue { .string(self) } }
extension Substring: SocketData { public func socketRepresentation() -> JSONValue { .string(String(self)) } }
extension Bool: SocketData { public func socketRepresentation() -> JSONValue { .bool(self) } }
extension Int: SocketData { public func socketRepresentation() -> JSONValue { .integer(Int64(self)) } }
extension Int64: SocketData { public func socketRepresentation() -> JSONValue { .integer(self) } }
extension Int32: SocketData { public func socketRepresentation() -> JSONValue { .integer(Int64(self)) } }
extension UInt: SocketData { public func socketRepresentation() -> JSONValue { UInt64(self).socketRepresentation() } }
extension UInt64: SocketData {
    /// The integer, exact (above `Int64.max`: `JSONValue.unsignedInteger`).
    public func socketRepresentation() -> JSONValue { Int64(exactly: self).map { .integer($0) } ?? .unsignedInteger(self) }
}
extension Double: SocketData { public func socketRepresentation() -> JSONValue { .number(self) } }
extension Float: SocketData { public func socketRepresentation() -> JSONValue { .number(Double(self)) } }
extension Data: SocketData { public func socketRepresentation() -> JSONValue { .binary(self) } }
extension NSNull: SocketData { public func socketRepresentation() -> JSONValue { .null } }
extension Array: SocketData { public func socketRepresentation() throws -> JSONValue { try JSONValue(any: self) } }
extension Dictionary: SocketData { public func socketRepresentation() throws -> JSONValue { try JSONValue(any: self) } }
extension Optional: SocketData where Wrapped: SocketData {
    /// The wrapped value's representation, or `null` for nil.
    public func socketRepresentation() throws -> JSONValue { try self?.socketRepresentation() ?? .null }
}

extension JSONValue {
    /// Converts Foundation-style values (what socket.io-client-swift accepted) into JSON.
    /// Throws ``SocketIOParseError/invalidPayload(_:)`` for anything else.
    public init(any value: Any) throws {
        switch value {
        case let value as JSONValue: self = value
        // Containers first: their SocketData conformance comes back here for each element.
        case let value as [Any]: self = .array(try value.map { try JSONValue(any: $0) })
        case let value as [String: Any]:
            var members = OrderedDictionary<String, JSONValue>()
            for key in value.keys.sorted() { members[key] = try JSONValue(any: value[key]!) }
            self = .object(members)
        case let value as NSArray: self = try JSONValue(any: value.map { $0 })
        case let value as NSDictionary:
            var dictionary: [String: Any] = [:]
            for (key, element) in value { dictionary[String(describing: key)] = element }
            self = try JSONValue(any: dictionary)
        case let value as any SocketData: self = try value.socketRepresentation()
        case let value as NSNumber: self = JSONValue(exactly: value)
        case let value as NSString: self = .string(String(describing: value))
        case Optional<Any>.none: self = .null
        default:
            throw SocketIOParseError.invalidPayload("\(type(of: value)) cannot be sent: use JSON types, Data, arrays or [String: Any]")
        }
    }

    /// An `NSNumber` as its exact JSON number: integer types as integers, floating-point ones as doubles.
    init(exactly number: NSNumber) {
        switch String(cString: number.objCType) {
        case "f", "d": self = .number(number.doubleValue)
        case "Q", "L", "I", "S", "C": self = number.uint64Value.socketRepresentation()
        default: self = .integer(number.int64Value)
        }
    }

    /// The value as Foundation types: `String`, `Int` (integral numbers; `Int64` or `UInt64` beyond
    /// `Int`'s range), `Double`, `Bool`, `NSNull`, `Data`, `[Any]`, `[String: Any]`.
    public var anyValue: Any {
        switch self {
        case .null: NSNull()
        case .bool(let value): value
        case .number(let value): Int(exactly: value).map { $0 as Any } ?? value
        case .integer(let value): Int(exactly: value).map { $0 as Any } ?? value
        case .unsignedInteger(let value): value
        case .string(let value): value
        case .array(let elements): elements.map(\.anyValue)
        case .object(let members): Dictionary(uniqueKeysWithValues: members.map { ($0.key, $0.value.anyValue) })
        case .binary(let data): data
        }
    }
}
