public import Foundation

/// Hub message types: SwiftSignalRClient's cases (capitalized) and the official client's names
/// for the same values (lowercase), plus its `ack` and `sequence`.
public enum MessageType: Int, Codable, Sendable {
    case Invocation = 1
    case StreamItem = 2
    case Completion = 3
    case StreamInvocation = 4
    case CancelInvocation = 5
    case Ping = 6
    case Close = 7
    case ack = 8
    case sequence = 9

    public static let invocation = MessageType.Invocation
    public static let streamItem = MessageType.StreamItem
    public static let completion = MessageType.Completion
    public static let streamInvocation = MessageType.StreamInvocation
    public static let cancelInvocation = MessageType.CancelInvocation
    public static let ping = MessageType.Ping
    public static let close = MessageType.Close
}

/// A transport's kind of payload in SwiftSignalRClient's hub protocols.
public enum ProtocolType: Int, Sendable {
    case Text = 1
    case Binary
}

/// One hub message of SwiftSignalRClient's hub protocols.
public protocol HubMessage {
    /// Its kind.
    var type: MessageType { get }
}

/// SwiftSignalRClient's hub protocol abstraction. This package speaks JSON or MessagePack itself;
/// a protocol given to ``HubConnectionBuilder/withHubProtocol(hubProtocolFactory:)`` chooses
/// between them by its ``name``.
public protocol HubProtocol {
    /// "json" or "messagepack".
    var name: String { get }
    /// The protocol version.
    var version: Int { get }
    /// Text or binary.
    var type: ProtocolType { get }
    /// Splits and decodes the messages in `input`.
    func parseMessages(input: Data) throws -> [any HubMessage]
    /// Encodes one message with its record separator.
    func writeMessage(message: any HubMessage) throws -> Data
}

struct AnyEncodable: Encodable {
    let value: any Encodable
    func encode(to encoder: any Encoder) throws { try value.encode(to: encoder) }
}

private enum InvocationKeys: String, CodingKey { case type, invocationId, target, arguments, streamIds }

/// The JSON fields of an invocation or a stream invocation.
private func encodeInvocation(
    type: MessageType, invocationId: String?, target: String, arguments: [any Encodable], streamIds: [String]?, to encoder: any Encoder
) throws {
    var container = encoder.container(keyedBy: InvocationKeys.self)
    try container.encode(type, forKey: .type)
    try container.encodeIfPresent(invocationId, forKey: .invocationId)
    try container.encode(target, forKey: .target)
    try container.encode(arguments.map(AnyEncodable.init), forKey: .arguments)
    try container.encodeIfPresent(streamIds, forKey: .streamIds)
}

/// An invocation the client sends.
public class ServerInvocationMessage: HubMessage, Encodable {
    public let type = MessageType.Invocation
    public let invocationId: String?
    public let target: String
    public let arguments: [any Encodable]
    public let streamIds: [String]?

    init(invocationId: String?, target: String, arguments: [any Encodable], streamIds: [String]?) {
        self.invocationId = invocationId
        self.target = target
        self.arguments = arguments
        self.streamIds = streamIds
    }

    /// Writes the message's JSON fields.
    public func encode(to encoder: any Encoder) throws {
        try encodeInvocation(type: type, invocationId: invocationId, target: target, arguments: arguments, streamIds: streamIds, to: encoder)
    }
}

/// JSON fragments of a received message, decoded on demand with the protocol's decoder.
struct RawJSON {
    let data: Data
    let decoder: JSONDecoder

    init(_ object: Any?, decoder: JSONDecoder) throws {
        self.data = try JSONSerialization.data(withJSONObject: object ?? NSNull(), options: .fragmentsAllowed)
        self.decoder = decoder
    }

    func decode<T: Decodable>(_ type: T.Type) throws -> T {
        do {
            return try decoder.decode(T.self, from: data)
        } catch {
            throw SignalRError.serializationError(underlyingError: error)
        }
    }
}

/// The JSON fields of a received message.
private func fields(_ decoder: any Decoder) throws -> ([String: Any], JSONDecoder) {
    guard let raw = decoder.userInfo[RawMessageKey.key] as? RawMessage else {
        throw SignalRError.invalidMessage
    }
    return (raw.fields, raw.decoder)
}

// @unchecked Sendable: immutable after init, and read only inside the one decode call that the
// protocol makes with it.
final class RawMessage: @unchecked Sendable {
    let fields: [String: Any]
    let decoder: JSONDecoder
    init(fields: [String: Any], decoder: JSONDecoder) {
        self.fields = fields
        self.decoder = decoder
    }
}

enum RawMessageKey {
    static let key = CodingUserInfoKey(rawValue: "SignalRClient.rawMessage")!
}

/// An invocation the server sends.
public class ClientInvocationMessage: HubMessage, Decodable {
    public let type = MessageType.Invocation
    public let target: String
    private let arguments: [RawJSON]
    private var next = 0

    /// Reads the message (only through ``JSONHubProtocol``).
    public required init(from decoder: any Decoder) throws {
        let (fields, json) = try fields(decoder)
        guard let target = fields["target"] as? String else { throw SignalRError.invalidMessage }
        self.target = target
        self.arguments = try ((fields["arguments"] as? [Any]) ?? []).map { try RawJSON($0, decoder: json) }
    }

    /// The next argument as `type`.
    public func getArgument<T: Decodable>(type: T.Type) throws -> T {
        guard next < arguments.count else { throw SignalRError.invalidOperation(message: "No arguments left.") }
        defer { next += 1 }
        return try arguments[next].decode(T.self)
    }

    var hasMoreArgs: Bool { next < arguments.count }
}

/// A stream item, received or sent.
public class StreamItemMessage: HubMessage, Codable {
    public let type = MessageType.StreamItem
    public let invocationId: String
    private let item: RawJSON?
    private let encodable: (any Encodable)?

    /// Reads the message (only through ``JSONHubProtocol``).
    public required init(from decoder: any Decoder) throws {
        let (fields, json) = try fields(decoder)
        guard let id = fields["invocationId"] as? String else { throw SignalRError.invalidMessage }
        invocationId = id
        item = try RawJSON(fields["item"], decoder: json)
        encodable = nil
    }

    /// Makes an item to send.
    public init(invocationId: String, item: any Encodable) {
        self.invocationId = invocationId
        self.item = nil
        self.encodable = item
    }

    /// The item as `type`.
    public func getItem<T: Decodable>(_ type: T.Type) throws -> T {
        guard let item else { throw SignalRError.invalidOperation(message: "This item was made to be sent.") }
        return try item.decode(T.self)
    }

    private enum Keys: String, CodingKey { case type, invocationId, item }

    /// Writes the message's JSON fields.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: Keys.self)
        try container.encode(type, forKey: .type)
        try container.encode(invocationId, forKey: .invocationId)
        if let encodable { try container.encode(AnyEncodable(value: encodable), forKey: .item) }
    }
}

/// A completion, received or sent.
public class CompletionMessage: HubMessage, Codable {
    public let type = MessageType.Completion
    public let invocationId: String
    public let error: String?
    public let hasResult: Bool
    private let result: RawJSON?

    /// Reads the message (only through ``JSONHubProtocol``).
    public required init(from decoder: any Decoder) throws {
        let (fields, json) = try fields(decoder)
        guard let id = fields["invocationId"] as? String else { throw SignalRError.invalidMessage }
        invocationId = id
        error = fields["error"] as? String
        hasResult = fields.keys.contains("result")
        result = hasResult ? try RawJSON(fields["result"], decoder: json) : nil
    }

    /// Makes a completion to send.
    public init(invocationId: String, error: String?) {
        self.invocationId = invocationId
        self.error = error
        self.hasResult = false
        self.result = nil
    }

    /// The result as `type`, nil when there is none.
    public func getResult<T: Decodable>(_ type: T.Type) throws -> T? {
        try result?.decode(T.self)
    }

    private enum Keys: String, CodingKey { case type, invocationId, error }

    /// Writes the message's JSON fields.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: Keys.self)
        try container.encode(type, forKey: .type)
        try container.encode(invocationId, forKey: .invocationId)
        try container.encodeIfPresent(error, forKey: .error)
    }
}

/// A stream invocation the client sends.
public class StreamInvocationMessage: HubMessage, Encodable {
    public let type = MessageType.StreamInvocation
    public let invocationId: String
    public let target: String
    public let arguments: [any Encodable]
    public let streamIds: [String]?

    init(invocationId: String, target: String, arguments: [any Encodable], streamIds: [String]?) {
        self.invocationId = invocationId
        self.target = target
        self.arguments = arguments
        self.streamIds = streamIds
    }

    /// Writes the message's JSON fields.
    public func encode(to encoder: any Encoder) throws {
        try encodeInvocation(type: type, invocationId: invocationId, target: target, arguments: arguments, streamIds: streamIds, to: encoder)
    }
}

/// A stream cancellation the client sends.
public class CancelInvocationMessage: HubMessage, Encodable {
    public let type = MessageType.CancelInvocation
    public let invocationId: String

    init(invocationId: String) { self.invocationId = invocationId }
}

/// A keep-alive ping.
public class PingMessage: HubMessage, Encodable {
    public let type = MessageType.Ping
    private init() {}
    static var instance: PingMessage { PingMessage() }
}

/// The server's close message.
public class CloseMessage: HubMessage, Decodable {
    public private(set) var type = MessageType.Close
    public let error: String?

    /// Reads the message (only through ``JSONHubProtocol``).
    public required init(from decoder: any Decoder) throws {
        let (fields, _) = try fields(decoder)
        error = fields["error"] as? String
    }
}

/// SwiftSignalRClient's JSON hub protocol: records separated by 0x1E. Its encoder and decoder
/// are used for the messages it reads and writes itself; the connection's own arguments and
/// results go through this package's JSON coding (dates as ISO 8601).
public class JSONHubProtocol: HubProtocol {
    private static let separator: UInt8 = 0x1E
    private let encoder: JSONEncoder
    private let decoder: JSONDecoder
    public let name = "json"
    public let version = 1
    public let type = ProtocolType.Text

    /// Makes the protocol.
    public init(logger: any Logger, encoder: JSONEncoder = JSONEncoder(), decoder: JSONDecoder = JSONDecoder()) {
        self.encoder = encoder
        self.decoder = decoder
    }

    /// Splits `input` at the record separators and decodes each message.
    public func parseMessages(input: Data) throws -> [any HubMessage] {
        try input.split(separator: Self.separator).map { try createHubMessage(payload: Data($0)) }
    }

    /// Decodes one message (without its separator).
    public func createHubMessage(payload: Data) throws -> any HubMessage {
        guard let fields = try JSONSerialization.jsonObject(with: payload) as? [String: Any],
              let raw = fields["type"] as? Int else { throw SignalRError.invalidMessage }
        let reader = JSONDecoder()
        reader.userInfo[RawMessageKey.key] = RawMessage(fields: fields, decoder: decoder)
        let empty = Data("{}".utf8)
        switch MessageType(rawValue: raw) {
        case .Invocation?: return try reader.decode(ClientInvocationMessage.self, from: empty)
        case .StreamItem?: return try reader.decode(StreamItemMessage.self, from: empty)
        case .Completion?: return try reader.decode(CompletionMessage.self, from: empty)
        case .Ping?: return PingMessage.instance
        case .Close?: return try reader.decode(CloseMessage.self, from: empty)
        default: throw SignalRError.unknownMessageType
        }
    }

    /// Encodes `message` and appends the separator.
    public func writeMessage(message: any HubMessage) throws -> Data {
        guard let encodable = message as? any Encodable else { throw SignalRError.invalidMessage }
        do {
            var data = try encoder.encode(AnyEncodable(value: encodable))
            data.append(Self.separator)
            return data
        } catch {
            throw SignalRError.serializationError(underlyingError: error)
        }
    }
}

/// The official client's MessagePack timestamp (extension type -1). This package's MessagePack
/// coding reads timestamps as dates; this type is for apps' own values.
public struct MsgpackTimestamp: Equatable, Codable, Sendable {
    public var seconds: Int64
    public var nanoseconds: UInt32

    public init(seconds: Int64, nanoseconds: UInt32) {
        self.seconds = seconds
        self.nanoseconds = nanoseconds
    }
}

extension Encoder {
    /// Whether this is the official client's MessagePack encoder: never, here (this package
    /// encodes arguments through its own coder).
    public func isMsgpackEncoder() -> Bool { false }

    /// Writes a MessagePack extension: fails here (see ``isMsgpackEncoder()``).
    public func encodeMsgpackExt(extType: Int8, extData: Data) throws {
        throw SignalRError.invalidOperation(message: "not a MessagePack encoder")
    }
}

extension Decoder {
    /// Whether this is the official client's MessagePack decoder: never, here.
    public func isMsgpackDecoder() -> Bool { false }

    /// A MessagePack extension's type: fails here (see ``isMsgpackDecoder()``).
    public func getMsgpackExtType() throws -> Int8 {
        throw SignalRError.invalidOperation(message: "not a MessagePack decoder")
    }

    /// A MessagePack extension's bytes: fails here (see ``isMsgpackDecoder()``).
    public func getMsgpackExtData() throws -> Data {
        throw SignalRError.invalidOperation(message: "not a MessagePack decoder")
    }
}
